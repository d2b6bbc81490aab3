package profile

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sglmock/sglmock/compat"
)

// HiCache is SGLang's hierarchical cache (--enable-hierarchical-cache and
// the --hicache-* flags) and what its transfers cost on this deployment:
// the model's KV size, the device-host link and the storage backend. A
// profile may carry the costs with enable false, so that the flag switches
// HiCache on.
type HiCache struct {
	Enable bool `yaml:"enable" json:"enable"`
	// Ratio and SizeGB size the host pool: SizeGB gigabytes (1e9 bytes)
	// of KV when set, else Ratio times the device pool (SGLang's
	// --hicache-ratio 2.0, --hicache-size 0).
	Ratio  float64 `yaml:"ratio,omitempty" json:"ratio"`
	SizeGB int     `yaml:"size_gb,omitempty" json:"size_gb"`
	// WritePolicy, IOBackend, MemLayout, StorageBackend, PrefetchPolicy and
	// StorageExtraConfig are the flags of the same names; empty is
	// SGLang's default.
	WritePolicy        string `yaml:"write_policy,omitempty" json:"write_policy"`
	IOBackend          string `yaml:"io_backend,omitempty" json:"io_backend"`
	MemLayout          string `yaml:"mem_layout,omitempty" json:"mem_layout"`
	StorageBackend     string `yaml:"storage_backend,omitempty" json:"storage_backend"`
	PrefetchPolicy     string `yaml:"storage_prefetch_policy,omitempty" json:"storage_prefetch_policy"`
	StorageExtraConfig string `yaml:"storage_backend_extra_config,omitempty" json:"storage_backend_extra_config"`

	// KV is the model's KV cache shape, for its bytes per token.
	KV KVShape `yaml:"kv" json:"kv"`
	// HostGBps is the device-host link's bandwidth in GB/s (1e9 bytes)
	// each way, TransferOverheadS what each transfer costs besides.
	HostGBps          float64 `yaml:"host_gbps" json:"host_gbps"`
	TransferOverheadS float64 `yaml:"transfer_overhead_s" json:"transfer_overhead_s"`
	// StorageReadGBps and StorageWriteGBps are the storage backend's
	// bandwidths, StoragePageOverheadS what each page read or written costs
	// besides (the file backend opens a file per page).
	StorageReadGBps      float64 `yaml:"storage_read_gbps" json:"storage_read_gbps"`
	StorageWriteGBps     float64 `yaml:"storage_write_gbps" json:"storage_write_gbps"`
	StoragePageOverheadS float64 `yaml:"storage_page_overhead_s" json:"storage_page_overhead_s"`
}

// KVShape is a model's KV cache per token: layers x kv_heads x head_dim x
// 2 (K and V) x dtype_bytes, or for an MLA model (mla_dim > 0: SGLang's
// kv_lora_rank + qk_rope_head_dim) layers x mla_dim x dtype_bytes, as
// SGLang's host pools size a token (MHATokenToKVPoolHost,
// MLATokenToKVPoolHost.get_size_per_token).
type KVShape struct {
	Layers     int `yaml:"layers" json:"layers"`
	KVHeads    int `yaml:"kv_heads,omitempty" json:"kv_heads"`
	HeadDim    int `yaml:"head_dim,omitempty" json:"head_dim"`
	DTypeBytes int `yaml:"dtype_bytes" json:"dtype_bytes"`
	MLADim     int `yaml:"mla_dim,omitempty" json:"mla_dim"`
}

// MLA reports whether the model's KV is MLA's: one latent vector a token
// and layer, the same on every rank.
func (k KVShape) MLA() bool { return k.MLADim > 0 }

// BytesPerToken is a token's KV over every layer.
func (k KVShape) BytesPerToken() int64 {
	if k.MLA() {
		return int64(k.Layers) * int64(k.MLADim) * int64(k.DTypeBytes)
	}
	return int64(k.Layers) * int64(k.KVHeads) * int64(k.HeadDim) * 2 * int64(k.DTypeBytes)
}

// SGLang's choices and defaults for the HiCache flags (server_args.py).
var (
	WritePolicies    = []string{"write_back", "write_through", "write_through_selective"}
	IOBackends       = []string{"direct", "kernel", "kernel_ascend"}
	MemLayouts       = []string{"layer_first", "page_first", "page_first_direct", "page_first_kv_split", "page_head"}
	PrefetchPolicies = []string{"best_effort", "wait_complete", "timeout"}
	// StorageBackends are SGLang's --hicache-storage-backend choices and the
	// mock's memory, which stands in for the distributed ones.
	StorageBackends = []string{"file", "mooncake", "hf3fs", "nixl", "aibrix", "dynamic", "eic", "simm", "memory"}
)

const (
	defaultHiCacheRatio = 2.0
	defaultWritePolicy  = "write_through"
	defaultIOBackend    = "kernel"
	defaultMemLayout    = "layer_first"
)

// DefaultPrefetchPolicy is --hicache-storage-prefetch-policy's default in
// a release: timeout with the prefetch-timeout rule (PR #23309),
// best_effort before it.
func DefaultPrefetchPolicy(r compat.Rules) string {
	if r.PrefetchTimeout {
		return "timeout"
	}
	return "best_effort"
}

// withDefaults fills what SGLang defaults in a release with rules r, then
// normalizes the layout and I/O backend as SGLang's _handle_hicache does:
// page_first_direct needs the direct I/O backend, page_first under direct
// I/O becomes page_first_direct, and mooncake does not take layer_first.
func (h HiCache) withDefaults(r compat.Rules) HiCache {
	if h.Ratio == 0 {
		h.Ratio = defaultHiCacheRatio
	}
	h.WritePolicy = cmp.Or(h.WritePolicy, defaultWritePolicy)
	h.IOBackend = cmp.Or(h.IOBackend, defaultIOBackend)
	h.MemLayout = cmp.Or(h.MemLayout, defaultMemLayout)
	h.PrefetchPolicy = cmp.Or(h.PrefetchPolicy, DefaultPrefetchPolicy(r))
	if h.MemLayout == "page_first_direct" && h.IOBackend == "kernel" {
		h.IOBackend = "direct"
	}
	if h.MemLayout == "page_first" && h.IOBackend == "direct" {
		h.MemLayout = "page_first_direct"
	}
	if h.StorageBackend == "mooncake" && h.MemLayout == "layer_first" {
		switch h.IOBackend {
		case "direct":
			h.MemLayout = "page_first_direct"
		case "kernel":
			h.MemLayout = "page_first"
		}
	}
	return h
}

// HiCacheConfig is the HiCache a profile runs, defaults filled and the
// layout normalized, or nil when it is off.
func (p *Profile) HiCacheConfig() *HiCache {
	if p.HiCache == nil || !p.HiCache.Enable {
		return nil
	}
	h := p.HiCache.withDefaults(p.Rules())
	return &h
}

// HostPoolTokens is the host pool's size in tokens, as SGLang's
// HostKVCache sizes it: --hicache-size gigabytes of KV when set, else the
// device pool times --hicache-ratio, then one page more than a whole number
// of pages.
func (h *HiCache) HostPoolTokens(devicePool, pageSize int) int {
	var size int
	if h.SizeGB > 0 {
		size = int(float64(h.SizeGB) * 1e9 / float64(h.KV.BytesPerToken()))
	} else {
		size = int(float64(devicePool) * h.Ratio)
	}
	return (size/pageSize + 1) * pageSize
}

// WriteThreshold is the hit count at which a node is backed up to the host
// (HiRadixCache's write_through_threshold): 1 under write_through, 2 under
// write_through_selective, and 0 under write_back, which backs up on
// eviction only.
func (h *HiCache) WriteThreshold() int {
	switch h.WritePolicy {
	case "write_through":
		return 1
	case "write_back":
		return 0
	}
	return 2
}

// HostTransferSeconds is one transfer of n tokens over the device-host
// link, either way.
func (h *HiCache) HostTransferSeconds(n int) float64 {
	if n <= 0 {
		return 0
	}
	return h.TransferOverheadS + float64(n)*float64(h.KV.BytesPerToken())/(h.HostGBps*1e9)
}

// LoadBackSeconds is a prefill batch that computes for compute seconds
// while n tokens load back from the host, layer by layer: SGLang's forward
// waits for each layer's KV (LayerDoneCounter) while the next layer loads,
// so over L layers the batch takes the transfer's overhead, then
// max(L x load + compute, load + L x compute) per layer.
func (h *HiCache) LoadBackSeconds(compute float64, n int) float64 {
	if n <= 0 {
		return compute
	}
	layers := float64(max(h.KV.Layers, 1))
	load := (h.HostTransferSeconds(n) - h.TransferOverheadS) / layers
	c := compute / layers
	return h.TransferOverheadS + max(layers*load+c, load+layers*c)
}

// PageBytes is one page's KV.
func (h *HiCache) PageBytes(pageSize int) float64 {
	return float64(pageSize) * float64(h.KV.BytesPerToken())
}

// StorageReadSeconds and StorageWriteSeconds are n pages read from or
// written to the storage backend.
func (h *HiCache) StorageReadSeconds(pages, pageSize int) float64 {
	return float64(pages) * (h.StoragePageOverheadS + h.PageBytes(pageSize)/(h.StorageReadGBps*1e9))
}

func (h *HiCache) StorageWriteSeconds(pages, pageSize int) float64 {
	return float64(pages) * (h.StoragePageOverheadS + h.PageBytes(pageSize)/(h.StorageWriteGBps*1e9))
}

// StorageExtra is what HiRadixCache takes out of
// --hicache-storage-backend-extra-config (_parse_storage_backend_extra_config),
// with its defaults; the rest goes to the backend, which the mock has no
// use for.
type StorageExtra struct {
	PrefetchThreshold  int     // tokens: a prefetch of fewer is not tried
	TimeoutBaseS       float64 // the timeout policy's base
	TimeoutPerKiTokenS float64 // ... and its seconds per 1024 tokens
	TimeoutMaxS        float64 // ... and its cap (+Inf: none)
	PassPrefixKeys     bool
}

// storageExtraDefaults are SGLang's defaults in a release with rules r:
// with the prefetch-timeout rule (PR #23309) PrefetchTimeoutConfig's 2 s
// plus 0.1 s per 1024 tokens, at most 30 s; before it 1 s plus 0.25 s,
// with no cap. The threshold is 256 tokens in both.
func storageExtraDefaults(r compat.Rules) StorageExtra {
	if r.PrefetchTimeout {
		return StorageExtra{PrefetchThreshold: 256, TimeoutBaseS: 2.0, TimeoutPerKiTokenS: 0.1, TimeoutMaxS: 30.0}
	}
	return StorageExtra{PrefetchThreshold: 256, TimeoutBaseS: 1.0, TimeoutPerKiTokenS: 0.25, TimeoutMaxS: math.Inf(1)}
}

// ParseStorageExtra reads the extra config as a release with rules r
// does: a JSON object, or @FILE with a JSON or YAML object (SGLang also
// reads TOML). The known keys must have their types; the others are the
// backend's, prefetch_timeout_max among them before the prefetch-timeout
// rule.
func ParseStorageExtra(text string, r compat.Rules) (StorageExtra, error) {
	out := storageExtraDefaults(r)
	if text == "" {
		return out, nil
	}
	var raw map[string]any
	if path, ok := strings.CutPrefix(text, "@"); ok {
		b, err := os.ReadFile(path)
		if err != nil {
			return out, err
		}
		switch ext := strings.ToLower(filepath.Ext(path)); ext {
		case ".json":
			err = decodeJSONNumbers(b, &raw)
		case ".yaml", ".yml":
			err = yaml.Unmarshal(b, &raw)
		default:
			return out, fmt.Errorf("Unsupported config file %s (config format: %s); the mock reads .json, .yaml and .yml", path, ext)
		}
		if err != nil {
			return out, err
		}
	} else if err := decodeJSONNumbers([]byte(text), &raw); err != nil {
		return out, fmt.Errorf("Invalid backend extra config JSON: %w", err)
	}
	number := func(key string, dst *float64) error {
		v, ok := raw[key]
		if !ok {
			return nil
		}
		f, ok := asNumber(v)
		if !ok {
			return fmt.Errorf("%s must be number, got %s", key, pyType(v))
		}
		*dst = f
		return nil
	}
	if v, ok := raw["prefetch_threshold"]; ok {
		f, isNum := asNumber(v)
		if !isNum || f != math.Trunc(f) || isFloatLiteral(v) {
			return out, fmt.Errorf("prefetch_threshold must be int, got %s", pyType(v))
		}
		out.PrefetchThreshold = int(f)
	}
	keys := []struct {
		key string
		dst *float64
	}{{"prefetch_timeout_base", &out.TimeoutBaseS}, {"prefetch_timeout_per_ki_token", &out.TimeoutPerKiTokenS}}
	if r.PrefetchTimeout {
		keys = append(keys, struct {
			key string
			dst *float64
		}{"prefetch_timeout_max", &out.TimeoutMaxS})
	}
	for _, k := range keys {
		if err := number(k.key, k.dst); err != nil {
			return out, err
		}
	}
	if v, ok := raw["hicache_storage_pass_prefix_keys"]; ok {
		b, isBool := v.(bool)
		if !isBool {
			return out, fmt.Errorf("hicache_storage_pass_prefix_keys must be bool, got %s", pyType(v))
		}
		out.PassPrefixKeys = b
	}
	return out, nil
}

func decodeJSONNumbers(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	return d.Decode(v)
}

func asNumber(v any) (float64, bool) {
	switch x := v.(type) {
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	case int:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

// isFloatLiteral tells a JSON number written as a float (256.0), which
// Python reads as a float, not an int.
func isFloatLiteral(v any) bool {
	switch x := v.(type) {
	case json.Number:
		return strings.ContainsAny(string(x), ".eE")
	case float64:
		return true
	}
	return false
}

// pyType names v's type as Python's type(v).__name__ would.
func pyType(v any) string {
	switch v.(type) {
	case nil:
		return "NoneType"
	case bool:
		return "bool"
	case string:
		return "str"
	case []any:
		return "list"
	case map[string]any:
		return "dict"
	}
	if isFloatLiteral(v) {
		return "float"
	}
	return "int"
}

// PrefetchTimeoutSeconds is the timeout policy's limit for a prefetch of n
// tokens (HiRadixCache._prefetch_timeout_check_linear_func).
func (e StorageExtra) PrefetchTimeoutSeconds(n int) float64 {
	return min(e.TimeoutMaxS, e.TimeoutBaseS+e.TimeoutPerKiTokenS*float64(n)/1024)
}

// validateHiCache checks a profile's HiCache section: the flags' choices,
// SGLang's refusals, and the costs the engine charges.
func (v *validator) hicache(p *Profile) {
	h := p.HiCache
	if h == nil {
		return
	}
	v.choice("hicache.write_policy", h.WritePolicy, WritePolicies)
	v.choice("hicache.io_backend", h.IOBackend, IOBackends)
	v.choice("hicache.mem_layout", h.MemLayout, MemLayouts)
	v.choice("hicache.storage_prefetch_policy", h.PrefetchPolicy, PrefetchPolicies)
	v.choice("hicache.storage_backend", h.StorageBackend, StorageBackends)
	v.check(h.Ratio >= 0 && !math.IsInf(h.Ratio, 0) && !math.IsNaN(h.Ratio), "hicache.ratio", h.Ratio, "must be a finite number >= 0 (0: 2.0)")
	v.check(h.SizeGB >= 0, "hicache.size_gb", h.SizeGB, "must be >= 0 (0: the ratio sizes the host pool)")
	rules, err := compat.For(p.SGLangVersion)
	if err != nil {
		rules, _ = compat.For("") // the release's own check reports it
	}
	if _, err := ParseStorageExtra(h.StorageExtraConfig, rules); err != nil {
		v.check(false, "hicache.storage_backend_extra_config", h.StorageExtraConfig, err.Error())
	}
	if !h.Enable {
		return
	}
	k := h.KV
	v.check(k.Layers >= 1, "hicache.kv.layers", k.Layers, "must be >= 1: HiCache needs the model's KV shape")
	v.check(k.DTypeBytes >= 1, "hicache.kv.dtype_bytes", k.DTypeBytes, "must be >= 1")
	if !k.MLA() {
		v.check(k.KVHeads >= 1 && k.HeadDim >= 1, "hicache.kv", fmt.Sprintf("kv_heads %d, head_dim %d", k.KVHeads, k.HeadDim),
			"need kv_heads and head_dim >= 1 (or mla_dim for an MLA model)")
	}
	v.check(h.HostGBps > 0 && !math.IsInf(h.HostGBps, 0), "hicache.host_gbps", h.HostGBps, "must be > 0: HiCache moves KV over it")
	v.cost("hicache.transfer_overhead_s", h.TransferOverheadS)
	if h.StorageBackend != "" {
		v.check(h.StorageReadGBps > 0 && !math.IsInf(h.StorageReadGBps, 0), "hicache.storage_read_gbps", h.StorageReadGBps, "must be > 0 with a storage backend")
		v.check(h.StorageWriteGBps > 0 && !math.IsInf(h.StorageWriteGBps, 0), "hicache.storage_write_gbps", h.StorageWriteGBps, "must be > 0 with a storage backend")
		v.cost("hicache.storage_page_overhead_s", h.StoragePageOverheadS)
	}
	if v.err != nil {
		return
	}
	c := h.withDefaults(rules)
	if host := c.HostPoolTokens(p.MaxTotalTokens, max(p.PageSize, 1)); host <= p.MaxTotalTokens {
		v.check(false, "hicache", fmt.Sprintf("a host pool of %d tokens", host),
			fmt.Sprintf("The host memory should be larger than the device memory with the current protocol (device pool %d tokens): raise ratio or size_gb", p.MaxTotalTokens))
	}
	if secs := c.LoadBackSeconds(p.worstPrefillSeconds(), p.ContextLength); !(secs <= MaxIterationSeconds) {
		v.check(false, "hicache.host_gbps", h.HostGBps, fmt.Sprintf("a load back of context_length tokens would take %.4g s; one iteration may cost at most %d s", secs, MaxIterationSeconds))
	}
}

// ErrHiCacheWithoutRadixCache is SGLang's refusal of
// --enable-hierarchical-cache with --disable-radix-cache.
var ErrHiCacheWithoutRadixCache = errors.New("The arguments enable-hierarchical-cache and disable-radix-cache are mutually exclusive " +
	"and cannot be used at the same time. Please use only one of them.")

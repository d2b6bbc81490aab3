package profile

import (
	"flag"
	"math"
	"strings"
	"testing"

	"github.com/sglmock/sglmock/compat"
)

// SGLang's _handle_hicache normalizes the layout and the I/O backend.
func TestHiCacheNormalization(t *testing.T) {
	for _, tc := range []struct {
		layout, io, storage string
		wantLayout, wantIO  string
	}{
		{"", "", "", "layer_first", "kernel"},
		{"page_first_direct", "kernel", "", "page_first_direct", "direct"},
		{"page_first", "direct", "", "page_first_direct", "direct"},
		{"layer_first", "kernel", "mooncake", "page_first", "kernel"},
		{"layer_first", "direct", "mooncake", "page_first_direct", "direct"},
		{"layer_first", "kernel", "file", "layer_first", "kernel"},
	} {
		h := HiCache{MemLayout: tc.layout, IOBackend: tc.io, StorageBackend: tc.storage}.withDefaults(compat.Rules{})
		if h.MemLayout != tc.wantLayout || h.IOBackend != tc.wantIO {
			t.Errorf("%s/%s/%s: got %s/%s, want %s/%s", tc.layout, tc.io, tc.storage, h.MemLayout, h.IOBackend, tc.wantLayout, tc.wantIO)
		}
	}
}

// The host pool: --hicache-size GB of KV, else ratio x the device pool,
// then one page more than whole pages (HostKVCache.__init__).
func TestHostPoolTokens(t *testing.T) {
	kv := KVShape{Layers: 32, KVHeads: 8, HeadDim: 128, DTypeBytes: 2} // 131072 bytes
	for _, tc := range []struct {
		h         HiCache
		dev, page int
		want      int
	}{
		{HiCache{Ratio: 2, KV: kv}, 1000, 1, 2001},
		{HiCache{Ratio: 2, KV: kv}, 1000, 64, 2048},
		{HiCache{Ratio: 2, SizeGB: 10, KV: kv}, 1000, 64, (76293/64 + 1) * 64},
	} {
		if got := tc.h.HostPoolTokens(tc.dev, tc.page); got != tc.want {
			t.Errorf("%+v over %d, page %d: got %d, want %d", tc.h, tc.dev, tc.page, got, tc.want)
		}
	}
	if got := (KVShape{Layers: 61, MLADim: 576, DTypeBytes: 2}).BytesPerToken(); got != 70272 {
		t.Errorf("Kimi's MLA KV: %d bytes a token, want 70272", got)
	}
}

// A load back overlaps compute layer by layer: the slower of the two sets
// the pace, plus one layer of the other and the transfer's overhead.
func TestLoadBackSeconds(t *testing.T) {
	h := HiCache{KV: KVShape{Layers: 4, KVHeads: 1, HeadDim: 1, DTypeBytes: 1}, HostGBps: 8e-4, TransferOverheadS: 0.001}
	for _, tc := range []struct {
		compute float64
		n       int
		want    float64
	}{
		{0.5, 0, 0.5}, // nothing to load
		{1e-4, 999, 0.001 + 4*0.0024975 + 0.000025}, // the load is slower
		{1.0, 1000, 0.001 + 0.0025 + 1.0},           // the compute is
	} {
		if got := h.LoadBackSeconds(tc.compute, tc.n); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("compute %g, %d tokens: got %.9f, want %.9f", tc.compute, tc.n, got, tc.want)
		}
	}
}

// The extra config is HiRadixCache's: its known keys must have their
// types, with SGLang's messages, and default as SGLang does.
func TestParseStorageExtra(t *testing.T) {
	newer, _ := compat.For("0.5.12")
	got, err := ParseStorageExtra(`{"prefetch_threshold": 512, "prefetch_timeout_base": 1, "backend_key": "x"}`, newer)
	if err != nil || got.PrefetchThreshold != 512 || got.TimeoutBaseS != 1 || got.TimeoutPerKiTokenS != 0.1 || got.TimeoutMaxS != 30 {
		t.Fatalf("got %+v, %v", got, err)
	}
	if got := got.PrefetchTimeoutSeconds(45504); math.Abs(got-5.44375) > 1e-12 {
		t.Fatalf("timeout for 45504 tokens: %g, want 1 + 0.1 x 45504/1024 = 5.44375", got)
	}
	for _, tc := range []struct{ text, want string }{
		{`{"prefetch_threshold": 256.0}`, "prefetch_threshold must be int, got float"},
		{`{"prefetch_timeout_base": "2"}`, "prefetch_timeout_base must be number, got str"},
		{`{"hicache_storage_pass_prefix_keys": 1}`, "hicache_storage_pass_prefix_keys must be bool, got int"},
		{`{nope`, "Invalid backend extra config JSON"},
		{`@conf.toml`, "no such file"},
	} {
		if _, err := ParseStorageExtra(tc.text, newer); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.text, err, tc.want)
		}
	}
}

// The prefetch timeout's defaults are the release's: from 0.5.12 (PR
// #23309) 2 s plus 0.1 s per 1024 tokens, at most 30 s (prefetch_timeout_max
// moves the cap), and the timeout policy is the default; in 0.5.11 1 s plus
// 0.25 s, with no cap (prefetch_timeout_max is the backend's: no number
// needed), and best_effort is the default.
func TestPrefetchTimeoutByRelease(t *testing.T) {
	for _, tc := range []struct {
		release, extra string
		tokens         int
		want           float64
		policy         string
	}{
		{"0.5.12", "", 2048, 2.2, "timeout"},
		{"0.5.12", "", 1 << 20, 30, "timeout"},
		{"0.5.12", `{"prefetch_timeout_max": 5}`, 1 << 20, 5, "timeout"},
		{"0.5.18", "", 2048, 2.2, "timeout"},
		{"0.5.11", "", 2048, 1.5, "best_effort"},
		{"0.5.11", "", 1 << 20, 257, "best_effort"},
		{"0.5.11", `{"prefetch_timeout_max": "5"}`, 1 << 20, 257, "best_effort"},
	} {
		r, err := compat.For(tc.release)
		if err != nil {
			t.Fatal(err)
		}
		e, err := ParseStorageExtra(tc.extra, r)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.release, tc.extra, err)
		}
		if got := e.PrefetchTimeoutSeconds(tc.tokens); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s %s, %d tokens: got %g s, want %g s", tc.release, tc.extra, tc.tokens, got, tc.want)
		}
		p, err := Load("kimi-k2.6-rtx6000-hicache")
		if err != nil {
			t.Fatal(err)
		}
		p.SGLangVersion = tc.release
		if got := p.HiCacheConfig().PrefetchPolicy; got != tc.policy {
			t.Errorf("%s: default policy %s, want %s", tc.release, got, tc.policy)
		}
	}
	r, _ := compat.For("0.5.12")
	if _, err := ParseStorageExtra(`{"prefetch_timeout_max": "5"}`, r); err == nil || err.Error() != "prefetch_timeout_max must be number, got str" {
		t.Errorf("0.5.12, a string cap: got %v, want SGLang's type error", err)
	}
}

// The flags act on a profile that has HiCache's costs, and say what is
// missing on one that has none; SGLang's refusals are errors.
func TestHiCacheFlags(t *testing.T) {
	apply := func(name string, args ...string) (*Profile, error) {
		p, err := Load(name)
		if err != nil {
			t.Fatal(err)
		}
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		f := RegisterFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return p, f.Apply(p)
	}
	p, err := apply("llama-8b-eagle3-h100", "--enable-hierarchical-cache", "--hicache-write-policy", "write_back",
		"--hicache-storage-backend", "mooncake", "--hicache-storage-prefetch-policy", "wait_complete")
	if err != nil {
		t.Fatal(err)
	}
	h := p.HiCacheConfig()
	if h == nil || h.WriteThreshold() != 0 || h.StorageBackend != "mooncake" || h.PrefetchPolicy != "wait_complete" || h.MemLayout != "page_first" {
		t.Fatalf("got %+v", h)
	}
	p.HiCache = nil
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	f := RegisterFlags(fs)
	fs.Parse([]string{"--enable-hierarchical-cache"})
	if err := f.Apply(p); err == nil || !strings.Contains(err.Error(), "no hicache section") {
		t.Fatalf("no costs: got %v", err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--enable-hierarchical-cache", "--hicache-ratio", "0.5"}, "The host memory should be larger than the device memory"},
		{[]string{"--enable-hierarchical-cache", "--hicache-write-policy", "write_sometimes"}, "hicache.write_policy = write_sometimes: must be one of"},
		{[]string{"--hicache-storage-prefetch-policy", "eager"}, "hicache.storage_prefetch_policy = eager"},
	} {
		if _, err := apply("default", tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want %q", tc.args, err, tc.want)
		}
	}
}

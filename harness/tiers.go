package harness

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/sglmock/sglmock/sim"
)

// HiCache's tiers, as the harness sees them: SGLang's
// cached_tokens_details says where each cached token came from (device,
// host, storage), and /server_info whether the server keeps a storage tier,
// which /flush_cache leaves as it was: a flush alone then keeps nothing
// cold.

// Tiers is where a request's cached tokens came from, as SGLang's
// cached_tokens_details says under HiCache: device (the GPU's radix
// cache), host (loaded back from host memory) and storage (prefetched from
// the storage backend, StorageBackend its class).
type Tiers struct {
	Device         int    `json:"device"`
	Host           int    `json:"host"`
	Storage        int    `json:"storage"`
	StorageBackend string `json:"storage_backend,omitempty"`
}

// hicache reports whether t shows a tier besides the device: a server
// without HiCache reports every cached token on the device.
func (t *Tiers) hicache() bool {
	return t != nil && (t.Host > 0 || t.Storage > 0 || t.StorageBackend != "")
}

// simTiers is a mock's record of the tiers, as a client would have seen
// them.
func simTiers(t *sim.CacheTiers) *Tiers {
	if t == nil {
		return nil
	}
	return &Tiers{Device: t.Device, Host: t.Host, Storage: t.Storage, StorageBackend: t.StorageBackend}
}

// cachedDetails is cached_tokens_details as a server reports it, in
// meta_info or in OpenAI's sglext.
type cachedDetails struct {
	Device         count  `json:"device"`
	Host           count  `json:"host"`
	Storage        *count `json:"storage"`
	StorageBackend string `json:"storage_backend"`
}

// tiers is the breakdown, the counts checked as every count is.
func (d *cachedDetails) tiers(g *Generation) *Tiers {
	if d == nil {
		return nil
	}
	t := &Tiers{Device: d.Device.take("cached_tokens_details.device", g), Host: d.Host.take("cached_tokens_details.host", g),
		StorageBackend: clip(d.StorageBackend, 64)}
	if d.Storage != nil {
		t.Storage = d.Storage.take("cached_tokens_details.storage", g)
	}
	return t
}

// storageCause is why a flush keeps nothing cold on a server with a
// storage tier.
const storageCause = "/flush_cache does not clear it; call /clear_hicache_storage_backend or keep the nonce"

// tierClause says which tiers a reuse came from, when any but the device
// did: ", all from the storage tier: /flush_cache does not clear it; ...",
// or the split. Tokens from the host came back from host memory after the
// GPU evicted them (a GPU-only reasoning calls them cold).
func tierClause(t *Tiers) string {
	if t == nil || t.Host == 0 && t.Storage == 0 {
		return ""
	}
	var parts []string
	for _, p := range []struct {
		n    int
		tier string
	}{{t.Device, "device"}, {t.Host, "host"}, {t.Storage, "storage"}} {
		if p.n > 0 {
			parts = append(parts, fmt.Sprintf("%d from the %s tier", p.n, p.tier))
		}
	}
	text := ", " + strings.Join(parts, ", ")
	switch {
	case len(parts) == 1 && t.Storage > 0:
		return ", all from the storage tier: " + storageCause
	case t.Storage > 0:
		return text + ": /flush_cache does not clear the storage tier; call /clear_hicache_storage_backend or keep the nonce"
	case len(parts) == 1:
		return ", all from the host tier (HiCache kept them in host memory when the GPU evicted them)"
	}
	return text + " (HiCache kept the host's in host memory when the GPU evicted them)"
}

// storageCheck makes a row of the flush method SUSPECT on a server that
// keeps a storage tier: the flush empties the GPU and host tiers only, so
// a leg can reuse a prompt from storage whatever the flush said. The nonce
// methods keep their prompts out of every tier.
func storageCheck(v *Verdict, m Method, server Server) {
	if m == FlushMethod && server.HiCacheStorage != "" {
		v.add(Suspect, fmt.Sprintf("the server keeps a HiCache storage tier (hicache_storage_backend %s): %s",
			server.HiCacheStorage, storageCause))
	}
}

// hicacheStorage asks an SGLang server whether it keeps a HiCache storage
// tier (/server_info's hicache_storage_backend, /get_server_info on older
// servers); "" when it keeps none or does not say.
func (c *Client) hicacheStorage(ctx context.Context) string {
	var info struct {
		Backend *string `json:"hicache_storage_backend"`
	}
	code, err := c.get(ctx, "/server_info", &info)
	if code == http.StatusNotFound {
		_, err = c.get(ctx, "/get_server_info", &info)
	}
	if err != nil || info.Backend == nil {
		return ""
	}
	return clip(*info.Backend, 64)
}

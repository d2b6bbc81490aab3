package api_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
	"github.com/sglmock/sglmock/mockserver/profile"
)

// hiProfile is "default" with HiCache and round figures: a 3000-token
// pool, 0.1 ms a prefill token, 1e-5 s a token over the host link, 1 ms a
// page of one token to or from storage.
func hiProfile(t *testing.T, storage string) *profile.Profile {
	t.Helper()
	p := mocktest.Profile(t, "default")
	p.ContextLength, p.MaxTotalTokens, p.FlushBusyAfterFinishS = 3000, 3000, 0
	p.Prefill = profile.PrefillCost{PerTokenS: 1e-4}
	p.HiCache = &profile.HiCache{Enable: true, StorageBackend: storage,
		KV:       profile.KVShape{Layers: 4, KVHeads: 1, HeadDim: 1, DTypeBytes: 1},
		HostGBps: 8e-4, TransferOverheadS: 0.001, StorageReadGBps: 8e-6, StorageWriteGBps: 8e-6}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustContain(t *testing.T, what, body string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(body, w) {
			t.Errorf("%s lacks %s:\n%s", what, w, body)
		}
	}
}

// What a client sees of HiCache's tiers, as SGLang shows it: the storage
// tier survives /flush_cache, meta_info's cached_tokens_details and
// OpenAI's sglext name it with the backend's class, the metrics count
// cached tokens by cache_source and the host pool's use, /server_info has
// the flags, /sim/requests each request's tiers, and
// /clear_hicache_storage_backend empties the directory.
func TestHiCacheOverHTTP(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{Profile: hiProfile(t, "file"), HiCacheStorageDir: dir, EnableMetrics: true})
		gen := fmt.Sprintf(`{"input_ids": %s, "sampling_params": {"max_new_tokens": 1}, "rid": "%%s"}`, jsonOf(ids(40, 1000)))
		flush := func() {
			if code, body, _ := m.Do(t, "POST", "/flush_cache?timeout=60", ""); code != 200 {
				t.Fatalf("flush: %d %s", code, body)
			}
		}
		_, body, _ := m.Do(t, "POST", "/generate", fmt.Sprintf(gen, "a"))
		mustContain(t, "cold meta_info", body, `"cached_tokens":0,"cached_tokens_details":null`)
		flush()
		_, body, _ = m.Do(t, "POST", "/generate", fmt.Sprintf(gen, "b"))
		mustContain(t, "meta_info after a flush", body,
			`"cached_tokens":999,"cached_tokens_details":{"device":0,"host":0,"storage":999,"storage_backend":"HiCacheFile"}`)
		_, body, _ = m.Do(t, "POST", "/v1/completions", fmt.Sprintf(`{"prompt": %s, "max_tokens": 1, "return_cached_tokens_details": true}`, jsonOf(ids(40, 1000))))
		mustContain(t, "sglext on a device hit", body, `"sglext":{"cached_tokens_details":{"device":999,"host":0,"storage":0,"storage_backend":"HiCacheFile"}}`)
		_, body, _ = m.Do(t, "GET", "/metrics", "")
		mustContain(t, "metrics", body,
			`sglang:cached_tokens_total{cache_source="device",engine_type="unified",model_name="sglmock/small-1b"} 999`,
			`sglang:cached_tokens_total{cache_source="storage_HiCacheFile",engine_type="unified",model_name="sglmock/small-1b"} 999`,
			`sglang:hicache_host_total_tokens{engine_type="unified",model_name="sglmock/small-1b",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 6001`,
			`sglang:prefetched_tokens_total{attn_cp_rank="0",attn_cp_size="1",dp_rank="0",pp_rank="0",pp_size="1",storage_backend="file",tp_rank="0"} 1000`,
			`sglang:load_back_tokens_total{cache_type="HiRadixCache"} 999`)
		if strings.Contains(body, `cache_source="host"`) {
			t.Errorf("metrics show a host source before any host hit:\n%s", body)
		}
		_, body, _ = m.Do(t, "GET", "/server_info", "")
		mustContain(t, "server_info", body, `"enable_hierarchical_cache":true,`, `"hicache_ratio":2,`, `"hicache_size":0,`,
			`"hicache_write_policy":"write_through",`, `"hicache_io_backend":"kernel",`, `"hicache_mem_layout":"layer_first",`,
			`"hicache_storage_backend":"file",`, `"hicache_storage_prefetch_policy":"timeout",`, `"hicache_storage_backend_extra_config":null,`)
		_, body, _ = m.Do(t, "GET", "/sim/requests", "")
		mustContain(t, "sim/requests", body,
			`"cached_tiers":{"device":0,"host":0,"storage":999,"storage_backend":"HiCacheFile","load_back_tokens":999}`)
		_, body, _ = m.Do(t, "GET", "/sim/requests/b", "")
		mustContain(t, "sim/requests/b", body, `"prefetch":{"issued_s":`, `"pages":1000,"fetched_pages":1000,"tokens":1000,"terminated":false}`,
			`"load_back_tokens":999}`)

		code, body, resp := m.Do(t, "GET", "/clear_hicache_storage_backend", "")
		if code != 200 || body != "Deprecated endpoint. Use POST /hicache/storage-backend/clear.\nHierarchical cache storage backend cleared.\n" ||
			resp.Header.Get("Content-Type") != "" {
			t.Fatalf("deprecated clear: %d %q %q", code, body, resp.Header.Get("Content-Type"))
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Fatalf("after the clear: %d page files", len(entries))
		}
		code, body, _ = m.Do(t, "POST", "/hicache/storage-backend/clear", "")
		if code != 200 || body != "Hierarchical cache storage backend cleared.\n" {
			t.Fatalf("clear: %d %q", code, body)
		}
	})
}

// Without HiCache the clear routes answer 400 with the same text, as
// SGLang does; /server_info reports HiCache off with SGLang's defaults.
func TestClearWithoutHiCache(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{})
		for _, tc := range []struct{ method, path, body string }{
			{"POST", "/hicache/storage-backend/clear", "Hierarchical cache storage backend cleared.\n"},
			{"POST", "/clear_hicache_storage_backend", "Deprecated endpoint. Use POST /hicache/storage-backend/clear.\nHierarchical cache storage backend cleared.\n"},
		} {
			if code, body, _ := m.Do(t, tc.method, tc.path, ""); code != 400 || body != tc.body {
				t.Errorf("%s %s: %d %q, want 400 %q", tc.method, tc.path, code, body, tc.body)
			}
		}
		_, body, _ := m.Do(t, "GET", "/server_info", "")
		mustContain(t, "server_info", body, `"enable_hierarchical_cache":false,`, `"hicache_ratio":2,`, `"hicache_write_policy":"write_through",`,
			`"hicache_storage_backend":null,`, `"hicache_storage_prefetch_policy":"timeout",`)
	})
}

package harness_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/sglmock/sglmock/harness"
	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
)

// On a server with a HiCache storage tier (kimi-k2.6-rtx6000-hicache: file
// storage, page 64) the flush method is poisoned from the storage tier,
// which /flush_cache leaves, and is SUSPECT for that whatever it measures;
// flush+nonce stays clean. The harness reads the tiers from the answers'
// cached_tokens_details and the storage tier from /server_info, as it
// would a real SGLang's: so it does with the mock's /sim/ routes hidden.
func TestFlushUnderHiCacheStorage(t *testing.T) {
	for _, hideSim := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			var wrap func(http.Handler) http.Handler
			if hideSim {
				wrap = withoutSim
			}
			m := mocktest.StartBehind(t, api.Config{Profile: mocktest.Profile(t, "kimi-k2.6-rtx6000-hicache")}, wrap)
			tp := twoPoint(m, []harness.Point{{CtxReq: 1024, Tokens: 1407}}, harness.FlushMethod, harness.FlushNonce)
			// Each flush waits on the server for HiCache's transfers to end.
			tp.Flush = harness.FlushPolicy{Timeout: 60}
			rep := run(t, tp)
			if rep.Server.HiCacheStorage != "file" || (rep.Server.Mock == "") != hideSim {
				t.Fatalf("server: got %+v, want hicache_storage_backend file", rep.Server)
			}
			flush, fix := rep.Rows[0], rep.Rows[1]
			got := flush.Verdict.String()
			for _, want := range []string{
				"POISONED: leg b reused 1344 of 1407 prompt tokens (cached_tokens) although the flush before it was accepted, " +
					"all from the storage tier: /flush_cache does not clear it; call /clear_hicache_storage_backend or keep the nonce",
				"the server keeps a HiCache storage tier (hicache_storage_backend file): /flush_cache does not clear it; " +
					"call /clear_hicache_storage_backend or keep the nonce",
			} {
				if !strings.Contains(got, want) {
					t.Errorf("hide /sim/ %v: flush's verdict\n%s\nlacks\n%s", hideSim, got, want)
				}
			}
			if b := flush.Runs[0].B; b.Tiers == nil || *b.Tiers != (harness.Tiers{Storage: 1344, StorageBackend: "HiCacheFile"}) {
				t.Errorf("flush: leg b tiers %+v, want 1344 from HiCacheFile", b.Tiers)
			}
			if got := fix.Verdict.String(); strings.Contains(got, "storage") || *fix.CachedB != 0 {
				t.Errorf("flush+nonce: verdict %q, cached_b %d; want clean", got, *fix.CachedB)
			}
		})
	}
}

// withoutSim hides the mock's /sim/ routes: the harness then sees an
// SGLang server.
func withoutSim(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/sim/") {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"detail":"Not Found"}`))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// audit counts reuse from every tier: a load whose warm-up is flushed away
// still repeats it from the storage tier, and the cause names the tier.
func TestAuditNamesTheStorageTier(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{Profile: mocktest.Profile(t, "kimi-k2.6-rtx6000-hicache")})
		l := load{route: "/generate", prompts: prompts(1, 3, 1000, 1000), output: 8}
		if code, body, _ := m.Do(t, "POST", "/generate", l.body(l.prompts[0], "warmup", 8)); code != 200 {
			t.Fatal(body)
		}
		if code, body, _ := m.Do(t, "POST", "/flush_cache?timeout=60", ""); code != 200 {
			t.Fatal(body)
		}
		l.run(t, m)
		rep := audit(t, m, harness.AuditOptions{})
		wantPoisoned(t, rep, "req-00")
		r := request(t, rep, "req-00")
		if r.Tiers == nil || r.Tiers.Storage != r.CachedTokens || r.CachedTokens == 0 {
			t.Fatalf("req-00: cached %d, tiers %+v; want all from storage", r.CachedTokens, r.Tiers)
		}
		// The cause wraps in the table: compare it with its words joined.
		want := fmt.Sprintf("reused %d of %d tokens, all from the storage tier: /flush_cache does not clear it; "+
			"call /clear_hicache_storage_backend or keep the nonce, TTFT %.1f %% shorter; after the flush at %.3f s, which it survived",
			r.CachedTokens, r.PromptTokens, r.Impact, rep.Flushes[0].At)
		if out := text(t, rep); !strings.Contains(strings.Join(strings.Fields(out), " "), want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	})
}

// Through the recording proxy, in front of a real server, the tiers come
// from the answers' cached_tokens_details: the same as the mock's truth.
func TestProxyNamesTheStorageTier(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, rec, ps := proxied(t, api.Config{Profile: mocktest.Profile(t, "kimi-k2.6-rtx6000-hicache")})
		l := load{route: "/generate", prompts: prompts(1, 3, 1000, 1000), output: 8}
		if code, body, _ := ps.Do(t, "POST", "/generate", l.body(l.prompts[0], "warmup", 8)); code != 200 {
			t.Fatal(body)
		}
		if code, body, _ := ps.Do(t, "POST", "/flush_cache?timeout=60", ""); code != 200 {
			t.Fatal(body)
		}
		l.run(t, ps)
		through := auditUpstream(t, rec, m, harness.AuditOptions{})
		r := request(t, through, "req-00")
		if r.Tiers == nil || r.Tiers.Storage != r.CachedTokens || r.Tiers.StorageBackend != "HiCacheFile" || r.CachedTokens == 0 {
			t.Fatalf("through the proxy: cached %d, tiers %+v; want all from HiCacheFile storage", r.CachedTokens, r.Tiers)
		}
		if out := text(t, through); !strings.Contains(out, "all from the storage tier: /flush_cache does not clear it") {
			t.Errorf("the report does not name the tier:\n%s", out)
		}
	})
}

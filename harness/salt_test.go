package harness_test

import (
	"fmt"
	"io"
	"net/http"
	"testing"
	"testing/synctest"

	"github.com/sglmock/sglmock/harness"
	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
)

// The salt method sends the same prompt with a fresh cache_salt on each
// leg, to /generate. SGLang keys its cache on the salt from PR #30827
// (0.5.17) on, and the legs are cold; a server that reports an older
// release ignores the salt, so leg b reuses leg a's prompt, and the row
// says why. A server that reports no version, or one the table cannot
// place, is not trusted to honour the salt.
func TestSaltMethodAgainstTheServersRelease(t *testing.T) {
	const tokens = 1100
	poisoned := fmt.Sprintf("leg b reused %d of %d prompt tokens (cached_tokens)", tokens-1, tokens)
	fix := "keep the legs apart with nonce or flush+nonce"
	for _, tc := range []struct {
		name, release string
		wrap          func(http.Handler) http.Handler
		version       string
		want          string
	}{
		{"0.5.18", "", nil, "0.5.18", "ok"},
		{"0.5.17", "0.5.17", nil, "0.5.17", "ok"},
		{"0.5.12", "0.5.12", nil, "0.5.12", "POISONED: " + poisoned +
			"; the server reports SGLang 0.5.12, older than PR #30827 (first in 0.5.17): its /generate ignores cache_salt, so the salt keeps no leg cold; " + fix},
		{"no /server_info", "", mocktest.Without("/server_info"), "",
			"SUSPECT: the server reports no SGLang version (/server_info), so whether its /generate takes cache_salt (PR #30827, SGLang 0.5.17 and later) is unknown; " + fix},
		{"a release between the known ones", "", reportVersion("0.5.15"), "0.5.15",
			"SUSPECT: the server reports SGLang 0.5.15, which is not known to have PR #30827 (first known in 0.5.17): its /generate may ignore cache_salt; " + fix},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := mocktest.Profile(t, "default")
				p.FlushBusyAfterFinishS = 0
				p.SGLangVersion = tc.release
				m := mocktest.StartBehind(t, api.Config{Profile: p}, tc.wrap)
				rep := run(t, twoPoint(m, []harness.Point{{CtxReq: tokens, Tokens: tokens}}, harness.SaltMethod))
				if rep.Server.SGLangVersion != tc.version {
					t.Errorf("server version: got %q, want %q", rep.Server.SGLangVersion, tc.version)
				}
				if got := rep.Rows[0].Verdict.String(); got != tc.want {
					t.Errorf("verdict:\n got %q\nwant %q", got, tc.want)
				}
			})
		})
	}
}

// The salt goes to the OpenAI routes on the other backends, where SGLang
// takes it in every release: only /generate's is judged by the release.
func TestSaltMethodOnTheOpenAIRoutes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mocktest.Profile(t, "default")
		p.FlushBusyAfterFinishS = 0
		p.SGLangVersion = "0.5.12"
		m := mocktest.Start(t, api.Config{Profile: p, EnableCacheReport: true})
		tp := twoPoint(m, []harness.Point{{CtxReq: 1100, Tokens: 1100}}, harness.SaltMethod)
		tp.Client.Backend = harness.VLLM
		rep := run(t, tp)
		if got := rep.Rows[0].Verdict.String(); got != "ok" {
			t.Errorf("verdict: got %q, want ok (the salt keeps the legs apart on /v1/completions)", got)
		}
	})
}

// reportVersion answers /server_info with a server that reports version.
func reportVersion(version string) func(http.Handler) http.Handler {
	return func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/server_info" {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `{"version": "`+version+`"}`)
				return
			}
			h.ServeHTTP(w, r)
		})
	}
}

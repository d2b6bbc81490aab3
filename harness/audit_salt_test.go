package harness_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/sglmock/sglmock/harness"
	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
)

// A command that keeps two requests of one prompt apart with a fresh
// cache_salt each, on /generate: from PR #30827 (0.5.17) SGLang keys its
// cache on the salt and the second request is cold; 0.5.12 ignores the
// salt, so the second reuses the first, and the audit names the release as
// its cause, as bench's salt method does. A repeat without a salt is
// poisoned with no such clause; a server the table cannot place may have
// ignored the salt; through the recording proxy the cause is the same.
func TestAuditSaltOnGenerate(t *testing.T) {
	prompt := prompts(1, 5, 300, 300)[0]
	body := func(rid, salt string) string {
		b := fmt.Sprintf(`{"rid": %q, "text": %q, "sampling_params": {"max_new_tokens": 8}`, rid, prompt)
		if salt != "" {
			b += fmt.Sprintf(`, "cache_salt": %q`, salt)
		}
		return b + "}"
	}
	const older = "it sent cache_salt to keep its prompt cold, but the server reports SGLang 0.5.12, older than PR #30827 (first in 0.5.17): " +
		"its /generate ignores cache_salt"
	const unplaced = "it sent cache_salt to keep its prompt cold, but the server reports SGLang 0.5.15, which is not known to have PR #30827 " +
		"(first known in 0.5.17): its /generate may ignore cache_salt"
	for _, tc := range []struct {
		name, release string
		wrap          func(http.Handler) http.Handler
		proxy         bool
		salts         [2]string
		poisoned      bool
		cause         string // a cause of the second request's verdict, "" for none about the salt
	}{
		{"0.5.18 keeps salted requests apart", "0.5.18", nil, false, [2]string{"leg-a", "leg-b"}, false, ""},
		{"0.5.12 ignores the salt", "0.5.12", nil, false, [2]string{"leg-a", "leg-b"}, true, "POISONED|" + older},
		{"0.5.12, no salt sent", "0.5.12", nil, false, [2]string{"", ""}, true, ""},
		{"0.5.12 through the proxy", "0.5.12", nil, true, [2]string{"leg-a", "leg-b"}, true, "POISONED|" + older},
		{"a release the table cannot place", "0.5.12", reportVersion("0.5.15"), false, [2]string{"leg-a", "leg-b"}, true, "SUSPECT|" + unplaced},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := mocktest.Profile(t, "default")
				p.SGLangVersion = tc.release
				var rep *harness.AuditReport
				if tc.proxy {
					m, rec, ps := proxied(t, api.Config{Profile: p})
					generateOK(t, ps, body("req-a", tc.salts[0]))
					generateOK(t, ps, body("req-b", tc.salts[1]))
					rep = auditUpstream(t, rec, m, harness.AuditOptions{})
				} else {
					m := mocktest.StartBehind(t, api.Config{Profile: p}, tc.wrap)
					generateOK(t, m, body("req-a", tc.salts[0]))
					generateOK(t, m, body("req-b", tc.salts[1]))
					rep = audit(t, m, harness.AuditOptions{})
				}
				b := request(t, rep, "req-b")
				if got := b.Verdict.Level() == harness.Poisoned; got != tc.poisoned {
					t.Fatalf("req-b poisoned %v, want %v\n%s", got, tc.poisoned, text(t, rep))
				}
				if b.CacheSalt != (tc.salts[1] != "") {
					t.Errorf("req-b cache_salt %v, want %v", b.CacheSalt, tc.salts[1] != "")
				}
				var saltCauses []string
				for _, c := range b.Verdict.Causes {
					if strings.Contains(c.Text, "cache_salt") {
						saltCauses = append(saltCauses, c.Level.String()+"|"+c.Text)
					}
				}
				want := []string{}
				if tc.cause != "" {
					want = append(want, tc.cause)
				}
				if fmt.Sprint(saltCauses) != fmt.Sprint(want) {
					t.Errorf("req-b's causes about the salt:\n got %q\nwant %q", saltCauses, want)
				}
				run := strings.Contains(rep.Verdict.String(), "1 request sent cache_salt to /generate and reused an earlier prompt")
				if run != (tc.cause != "") {
					t.Errorf("the run's verdict names the salted request: %v, want %v\n%s", run, tc.cause != "", rep.Verdict)
				}
			})
		})
	}
}

// Through the proxy, a server that cannot be asked its version (the
// connection to /server_info fails) leaves the salted repeat POISONED and
// the run unchecked, saying why, instead of ending the audit without a
// report.
func TestAuditUpstreamSaltVersionUnasked(t *testing.T) {
	prompt := prompts(1, 5, 300, 300)[0]
	synctest.Test(t, func(t *testing.T) {
		p := mocktest.Profile(t, "default")
		p.SGLangVersion = "0.5.12"
		m, rec, ps := proxied(t, api.Config{Profile: p})
		for _, rid := range []string{"req-a", "req-b"} {
			generateOK(t, ps, fmt.Sprintf(`{"rid": %q, "text": %q, "sampling_params": {"max_new_tokens": 8}, "cache_salt": %q}`, rid, prompt, rid))
		}
		c := client(m)
		c.HTTP = &http.Client{Transport: failPath{"/server_info", m.Client.Transport}}
		rep, err := harness.AuditUpstream(context.Background(), rec, c, harness.AuditOptions{NewID: counter()})
		if err != nil {
			t.Fatalf("audit ended without a report: %v", err)
		}
		const want = "audit could not ask the server its SGLang version ("
		if b := request(t, rep, "req-b"); b.Verdict.Level() != harness.Poisoned || rep.Checked || !strings.Contains(rep.Verdict.String(), want) {
			t.Errorf("req-b %s, run checked %v, verdict %q; want req-b POISONED and the run unchecked with %q...", b.Verdict.Level(), rep.Checked, rep.Verdict, want)
		}
	})
}

// failPath fails every request to path as a refused connection would,
// and sends the rest on.
type failPath struct {
	path string
	next http.RoundTripper
}

func (f failPath) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Path == f.path {
		return nil, errors.New("connection refused")
	}
	return f.next.RoundTrip(r)
}

// A salted repeat whose reuse moved no figure of the run past
// --min-run-impact keeps the salt's cause on the request, and the run's
// verdict names it without failing the run: the reuse it explains was let
// through, and --strict fails it again.
func TestAuditSaltBelowMinRunImpact(t *testing.T) {
	prompt := prompts(1, 5, 300, 300)[0]
	for _, tc := range []struct {
		name   string
		opt    harness.AuditOptions
		failed bool
	}{
		{"below --min-run-impact", harness.AuditOptions{MinRunImpact: 1e6}, false},
		{"below it, --strict", harness.AuditOptions{MinRunImpact: 1e6, Strict: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := mocktest.Profile(t, "default")
				p.SGLangVersion = "0.5.12"
				m := mocktest.StartBehind(t, api.Config{Profile: p}, nil)
				for _, rid := range []string{"req-a", "req-b"} {
					generateOK(t, m, fmt.Sprintf(`{"rid": %q, "text": %q, "sampling_params": {"max_new_tokens": 8}, "cache_salt": %q}`, rid, prompt, rid))
				}
				rep := audit(t, m, tc.opt)
				if rep.RunImpact == nil {
					t.Fatalf("no run impact\n%s", text(t, rep))
				}
				if b := request(t, rep, "req-b"); b.Verdict.Level() != harness.Poisoned || !strings.Contains(b.Verdict.String(), "its /generate ignores cache_salt") {
					t.Errorf("req-b %s %q, want POISONED with the salt's cause", b.Verdict.Level(), b.Verdict)
				}
				const named = "1 request sent cache_salt to /generate and reused an earlier prompt"
				if got := rep.Verdict.Level() == harness.Poisoned; got != tc.failed || !strings.Contains(rep.Verdict.String(), named) {
					t.Errorf("run POISONED %v, want %v, naming %q\n%s", got, tc.failed, named, rep.Verdict)
				}
			})
		})
	}
}

// generateOK sends body to /generate and fails the test unless it is
// answered 200.
func generateOK(t *testing.T, s server, body string) {
	t.Helper()
	if code, resp, _ := s.Do(t, "POST", "/generate", body); code != http.StatusOK {
		t.Fatalf("/generate: %d %s", code, resp)
	}
}

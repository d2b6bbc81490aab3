package scenarios_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/sglmock/sglmock/internal/norace"
	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
	"github.com/sglmock/sglmock/scenarios"
)

// play runs a scenario on virtual time against a fresh in-memory mock of
// its profile and returns what it printed and its result.
func play(t *testing.T, sc *scenarios.Scenario) (string, *scenarios.Result) {
	t.Helper()
	var out bytes.Buffer
	var res *scenarios.Result
	synctest.Test(t, func(t *testing.T) {
		// A restart keeps the storage directory, as a restarted SGLang
		// keeps its file backend's.
		cfg := api.Config{Profile: sc.Profile, HiCacheStorageDir: t.TempDir()}
		m := mocktest.Start(t, cfg)
		var restart func(context.Context) (scenarios.Target, error)
		restart = func(context.Context) (scenarios.Target, error) {
			m.Close()
			m = mocktest.Start(t, cfg)
			return scenarios.Target{HTTP: m.Client, URL: m.URL, Restart: restart}, nil
		}
		var err error
		res, err = sc.Run(context.Background(), scenarios.Target{HTTP: m.Client, URL: m.URL, Restart: restart}, scenarios.RunOptions{Out: &out})
		if err != nil {
			t.Fatalf("%s: %v\n%s", sc.Name, err, out.String())
		}
		// Every request has ended by now, loads included: the engine
		// holds nothing but the cache.
		synctest.Wait()
		mocktest.CheckIdle(t, m.Engine())
	})
	return out.String(), res
}

// Every built-in scenario plays on virtual time with every expectation
// met, and prints exactly its golden output: the figures are exact, so a
// change in the model or the harness shows up here.
func TestBuiltins(t *testing.T) {
	norace.Skip(t, "checks every scenario's output and expectations")
	for _, name := range scenarios.Names() {
		t.Run(name, func(t *testing.T) {
			sc, err := scenarios.Builtin(name)
			if err != nil {
				t.Fatal(err)
			}
			out, res := play(t, sc)
			if n := res.Failed(); n > 0 {
				t.Errorf("%d expectations failed:\n%s", n, out)
			}
			mocktest.Golden(t, name+".txt", []byte(out))
		})
	}
}

// A scenario whose expectations do not hold says FAIL for each, with the
// file and line, keeps going, and counts them; the others still PASS. An
// undefined figure (a nan) meets no bound.
func TestFailingExpectation(t *testing.T) {
	text := strings.Replace(good, "      - verdict: POISONED\n", "      - verdict: ok\n", 1)
	sc, err := scenarios.Parse([]byte(text), "wrong.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out, res := play(t, sc)
	if got := res.Failed(); got != 2 {
		t.Fatalf("failed: got %d, want 2\n%s", got, out)
	}
	want := `  FAIL  verdict ok, cause "leg b reused": POISONED: leg b reused 1023 of 1024 prompt tokens (cached_tokens) (1024), ` +
		`POISONED: leg b reused 8999 of 9000 prompt tokens (cached_tokens); t_b < t_a, so decode is undefined (8192)  (wrong.yaml:11)`
	if !strings.Contains(out, want+"\n") {
		t.Errorf("output lacks\n%s\ngot\n%s", want, out)
	}
	for _, line := range []string{
		"  FAIL  decode_err in [-0.01, 0.01]: 0 (1024), undefined (8192)  (wrong.yaml:13)",
		"  PASS  HTTP 200: HTTP 200",
		"scenario sample: FAIL, 1 of 3 expectations hold",
	} {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("output lacks %q:\n%s", line, out)
		}
	}
	if o := res.Outcomes[0]; o.Pass || o.Step != "naive" || o.Line != 11 {
		t.Errorf("first outcome: got %+v", o)
	}
}

// TestLPMScenarioUnderFCFS: the same batch on an fcfs server reads as the
// scenario's note says: the second prompt sharing the prefix computes it
// (0 cached), the third reuses it, the server computes 600 tokens more,
// and the prompts run in the order sent.
func TestLPMScenarioUnderFCFS(t *testing.T) {
	sc, err := scenarios.Builtin("lpm-shared-prefix")
	if err != nil {
		t.Fatal(err)
	}
	sc.Profile = sc.Profile.Clone()
	sc.Profile.SchedulePolicy = "fcfs"
	out, res := play(t, sc)
	for _, line := range []string{
		"  PASS  HTTP 200: HTTP 200 (every prompt)",
		"  FAIL  cached_tokens = 600: 0 (prompt 3), 600 (prompt 4)  (builtin/lpm-shared-prefix.yaml:42)",
		"  FAIL  computed_tokens = 6992: 7592 (every prompt)  (builtin/lpm-shared-prefix.yaml:45)",
		"  FAIL  ttft_s <= 0.1: 0.09755 (prompt 2), 0.1537 (prompt 5)  (builtin/lpm-shared-prefix.yaml:47)",
		"  FAIL  ttft_s >= 0.15: 0.09755 (prompt 3), 0.1537 (prompt 4), 0.1929 (prompt 6)  (builtin/lpm-shared-prefix.yaml:51)",
	} {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("output lacks\n%s\ngot\n%s", line, out)
		}
	}
	if got := res.Failed(); got != 4 {
		t.Errorf("failed: got %d, want 4", got)
	}
}

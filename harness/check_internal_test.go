package harness

import (
	"fmt"
	"go/build"
	"math"
	"slices"
	"strings"
	"testing"
)

func ip(n int) *int { return &n }

// On a server that prepends BOS every prompt shares one cached token: with
// a measured floor of 1 that reuse is fine, one token more is poison.
func TestCheckSharedFloor(t *testing.T) {
	leg := func(name string, cached, maxNew int, secs float64) Leg {
		return Leg{Name: name, MaxNewTokens: maxNew, PromptTokens: 1407, CompletionTokens: maxNew, CachedTokens: ip(cached), Seconds: secs}
	}
	flushed := &FlushRecord{Attempts: []FlushAttempt{{Status: 400, Body: "Flush cache failed.\n"}, {Status: 200, Body: "Cache flushed.\n"}}}
	refused := &FlushRecord{Attempts: []FlushAttempt{{Status: 400, Body: "Flush cache failed.\n"}}}
	tests := []struct {
		name         string
		run          Run
		floor, allow int
		want         string
	}{
		{"BOS only", Run{leg("a", 1, 1, 0.46), leg("b", 1, 17, 0.6)}, 1, 0, "ok"},
		{"beyond the floor", Run{leg("a", 1, 1, 0.46), leg("b", 2, 17, 0.6)}, 1, 0,
			"POISONED: leg b reused 2 of 1407 prompt tokens (cached_tokens), beyond the 1 every prompt shares"},
		{"tolerated", Run{leg("a", 1, 1, 0.46), leg("b", 3, 17, 0.6)}, 1, 2, "ok"},
		{"no floor on this server", Run{leg("a", 0, 1, 0.46), leg("b", 1, 17, 0.6)}, 0, 0,
			"POISONED: leg b reused 1 of 1407 prompt tokens (cached_tokens)"},
		{"seed", Run{leg("a", 0, 1, 0.46), leg("b", 1406, 17, 0.20)}, 0, 0,
			"POISONED: leg b reused 1406 of 1407 prompt tokens (cached_tokens); t_b < t_a, so decode is undefined"},
		{"refused then accepted", Run{leg("a", 0, 1, 0.46), Leg{Name: "b", MaxNewTokens: 17, PromptTokens: 1407, CompletionTokens: 17, CachedTokens: ip(0), Seconds: 0.6, Flush: flushed}}, 0, 0, "ok"},
		{"flush accepted, cache still hit", Run{leg("a", 0, 1, 0.46), Leg{Name: "b", MaxNewTokens: 17, PromptTokens: 1407, CompletionTokens: 17, CachedTokens: ip(1406), Seconds: 0.6, Flush: flushed}}, 0, 0,
			"POISONED: leg b reused 1406 of 1407 prompt tokens (cached_tokens) although the flush before it was accepted"},
		{"flush refused, leg cold anyway", Run{leg("a", 0, 1, 0.46), Leg{Name: "b", MaxNewTokens: 17, PromptTokens: 1407, CompletionTokens: 17, CachedTokens: ip(0), Seconds: 0.6, Flush: refused}}, 0, 0,
			`SUSPECT: flush before leg b refused (1 try): HTTP 400 "Flush cache failed."`},
		{"short output", Run{leg("a", 0, 1, 0.46), Leg{Name: "b", MaxNewTokens: 17, PromptTokens: 1407, CompletionTokens: 9, CachedTokens: ip(0), Seconds: 0.6}}, 0, 0,
			"SUSPECT: leg b generated 9 of 17 tokens"},
		{"t_b = t_a, cold legs", Run{leg("a", 0, 1, 0.46), leg("b", 0, 17, 0.46)}, 0, 0,
			"SUSPECT: t_b = t_a, so decode is undefined"},
	}
	for _, tt := range tests {
		v := tt.run.check(tt.floor, tt.allow)
		reversed(&v, []Run{tt.run}, []Verdict{v}, false)
		if got := v.String(); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
}

// The harness must run against a real SGLang server: its non-test code
// imports nothing of the mock, only the JSON of /sim/ and the table of
// SGLang's releases (compat).
func TestImportsNoMock(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		if strings.HasPrefix(imp, "github.com/sglmock/sglmock/") && imp != "github.com/sglmock/sglmock/sim" &&
			imp != "github.com/sglmock/sglmock/compat" {
			t.Errorf("harness imports %s; only sglmock/sim and sglmock/compat are allowed", imp)
		}
	}
}

// A suggested speedup is the 1-2-5 step at or below what the lateness
// allows.
func TestNiceBelow(t *testing.T) {
	for _, tt := range []struct{ x, want float64 }{
		{5.75, 5}, {48.2, 20}, {11.5, 10}, {100, 100}, {2, 2}, {1.99, 1}, {999, 500}, {0.5, 0.5},
	} {
		if got := niceBelow(tt.x); got != tt.want {
			t.Errorf("niceBelow(%g): got %g, want %g", tt.x, got, tt.want)
		}
	}
}

// A relative error against a true time of 0 (a profile that charges
// nothing) is 0, never a NaN or an infinity that JSON cannot hold.
func TestRelErrDefined(t *testing.T) {
	for _, tt := range []struct{ got, want, err float64 }{{1.1, 1, 0.1}, {0, 0, 0}, {1, 0, 0}, {0.5, 1, -0.5}} {
		if e := relErr(tt.got, tt.want); math.Abs(e-tt.err) > 1e-12 {
			t.Errorf("relErr(%g, %g): got %g, want %g", tt.got, tt.want, e, tt.err)
		}
	}
}

// A flush is accepted by a 200, unless vLLM's body says it did not reset
// or the answer is longer than any flush answer.
func TestFlushAttemptOK(t *testing.T) {
	for _, tt := range []struct {
		a    FlushAttempt
		want bool
	}{
		{FlushAttempt{Status: 200, Body: "Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n"}, true},
		{FlushAttempt{Status: 200, Body: ""}, true},
		{FlushAttempt{Status: 200, Body: `{"success": true}`}, true},
		{FlushAttempt{Status: 200, Body: `{"success": false}`}, false},
		{FlushAttempt{Status: 400, Body: "Flush cache failed.\n"}, false},
		{FlushAttempt{Status: 404, Body: `{"detail":"Not Found"}`}, false},
		{FlushAttempt{Status: 200, Body: "Cache flushed.xxxx (the answer is larger than any answer to this request can be: more than 1 MiB)", Oversized: true}, false},
	} {
		if got := tt.a.OK(); got != tt.want {
			t.Errorf("%d %q: got %v, want %v", tt.a.Status, tt.a.Body, got, tt.want)
		}
	}
}

func TestParseMethods(t *testing.T) {
	for _, tt := range []struct {
		in, want, err string
	}{
		{"naive,flush+nonce", "[naive flush+nonce]", ""},
		{" nonce ", "[nonce]", ""},
		{"naive,naive", "", "method naive is given twice (--repeat N measures a context N times)"},
		{"fast", "", `method "fast": must be one of naive, flush, nonce, flush+nonce, salt`},
		{"salt", "[salt]", ""},
	} {
		got, err := ParseMethods(tt.in)
		if tt.err != "" {
			if err == nil || err.Error() != tt.err {
				t.Errorf("%q: got error %v, want %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || fmt.Sprint(got) != tt.want {
			t.Errorf("%q: got %v, %v; want %s", tt.in, got, err, tt.want)
		}
	}
}

// The acceptance scatter of a histogram (h[i] rounds gave i+1 tokens) and
// of a distribution, exactly; nothing to go by in fewer than two rounds or
// in what is not a distribution.
func TestScatterSources(t *testing.T) {
	for _, tt := range []struct {
		name string
		h    [][]int
		want Scatter
		ok   bool
	}{
		// 1, 3, 3, 5 tokens: mean 3, sample variance (4+0+0+4)/3.
		{"one leg", [][]int{{1, 0, 2, 0, 1}}, Scatter{3, math.Sqrt(8.0 / 3)}, true},
		{"pooled", [][]int{{1, 0, 1}, nil, {0, 0, 1, 0, 1}}, Scatter{3, math.Sqrt(8.0 / 3)}, true},
		{"one round", [][]int{{0, 1}}, Scatter{}, false},
		{"none", nil, Scatter{}, false},
	} {
		if got, ok := histogramScatter(tt.h...); got != tt.want || ok != tt.ok {
			t.Errorf("%s: got %+v, %v; want %+v, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
	// Kimi's DDTREE: accept_probs 0.95, 0.9, 0.85, 0.75, 0.6.
	kimi := []float64{0.05, 0.095, 0.12825, 0.1816875, 0.218025, 0.3270375}
	sc, ok := AcceptScatter(kimi)
	if !ok || math.Abs(sc.Mean-4.40385) > 1e-12 || math.Abs(sc.SD-math.Sqrt(21.715225-4.40385*4.40385)) > 1e-12 {
		t.Errorf("kimi: got %+v, %v; want 4.40385 ± %g", sc, ok, math.Sqrt(21.715225-4.40385*4.40385))
	}
	for _, d := range [][]float64{{0.5, 0.4}, {1.5, -0.5}, {math.NaN(), 1}} {
		if got, ok := AcceptScatter(d); ok {
			t.Errorf("%v: got %+v, want not a distribution", d, got)
		}
	}
}

// The scatter check on Kimi's DDTREE (4.40 ± 1.52 tokens a round): b-a =
// 192 over 44 rounds knows one run's decode to ±1.96 × 0.346/√44 = 10.2 %;
// 738 rounds (b-a = 3248) or 27 runs (±1.96 × 1.2533 × 0.346/√(44n))
// would know it to 2.5 %. Five runs narrow it by 1.2533/√5; 184 rounds
// and more know one run's to 5 %.
func TestScatterCheck(t *testing.T) {
	kimi := Scatter{4.40385, math.Sqrt(21.715225 - 4.40385*4.40385)}
	for _, tt := range []struct {
		flag   string
		b      int
		rounds float64
		n      int
		want   string
		sug    Suggestion
	}{
		{"--b", 193, 44, 1, "b-a = 192 spans about 44 speculative rounds of 4.40 ± 1.52 tokens, so one run's decode is known to ±10.2 % only (95 %): use --b 3249 (about 738 rounds) or --repeat 27",
			Suggestion{B: 3249, Repeat: 27}},
		{"--b", 193, 44, 5, "b-a = 192 spans about 44 speculative rounds of 4.40 ± 1.52 tokens, so the median of 5 runs' decode is known to ±5.7 % only (95 %): use --b 1025 (about 233 rounds) or --repeat 27",
			Suggestion{B: 1025, Repeat: 27}},
		{"--max-new-tokens", 193, 44, 1, "the 192 tokens after the first span about 44 speculative rounds of 4.40 ± 1.52 tokens, so one run's decode is known to ±10.2 % only (95 %): use --max-new-tokens 3249 (about 738 rounds)",
			Suggestion{B: 3249}},
		{"--b", 1025, 233, 1, "", Suggestion{}},
		{"--b", 811, 184, 1, "", Suggestion{}},
		{"--b", 807, 183, 1, "b-a = 806 spans about 183 speculative rounds of 4.40 ± 1.52 tokens, so one run's decode is known to ±5.0 % only (95 %): use --b 3249 (about 738 rounds) or --repeat 7",
			Suggestion{B: 3249, Repeat: 7}},
	} {
		var v Verdict
		sug := scatterCheck(&v, tt.flag, 1, tt.b, tt.rounds, 0, kimi, tt.n)
		want := "ok"
		if tt.want != "" {
			want = "SUSPECT: " + tt.want
		}
		if got := v.String(); got != want || sug != tt.sug {
			t.Errorf("%s %d over %g rounds, %d runs:\n got %q, %+v\nwant %q, %+v", tt.flag, tt.b, tt.rounds, tt.n, got, sug, want, tt.sug)
		}
	}
}

// Leg a's own rounds scatter too: the legs are separate requests with
// draws of their own. a = 257, b = 1025 on kimi (174 rounds past leg a's
// 58) is known to ±1.96 (σ/μ) √(174 + 2·58)/174 = ±6.6 %, not the ±5.1 %
// 174 rounds alone would give, and the fix solves R² = k (R + 2·58).
func TestScatterOfTwoLegs(t *testing.T) {
	kimi := Scatter{4.40385, math.Sqrt(21.715225 - 4.40385*4.40385)}
	var v Verdict
	sug := scatterCheck(&v, "--b", 257, 1025, 174, 58, kimi, 1)
	want := "SUSPECT: b-a = 768 spans about 174 speculative rounds of 4.40 ± 1.52 tokens, so one run's decode is known to ±6.6 % only (95 %): use --b 3953 (about 839 rounds) or --repeat 12"
	if got := v.String(); got != want || sug != (Suggestion{B: 3953, Repeat: 12}) {
		t.Errorf("got %q, %+v\nwant %q, {B:3953 Repeat:12}", got, sug, want)
	}
	if got, alone := scatterHalf(kimi, 174, 58, 1), scatterHalf(kimi, 174, 0, 1); math.Abs(got/alone-math.Sqrt(290.0/174)) > 1e-12 {
		t.Errorf("got %g against %g alone, want a ratio of √(290/174)", got, alone)
	}
}

// A histogram no server can report: a negative count, rounds other than
// spec_verify_ct, more rounds than tokens.
func TestHistogramProblems(t *testing.T) {
	for _, tt := range []struct {
		h          []int
		verify     *int
		completion int
		want       []string
	}{
		{[]int{1, 2, 3}, ip(6), 20, nil},
		{[]int{1, 2, 3}, nil, 20, nil},
		{[]int{1, -2, 3}, ip(2), 20, []string{"spec_accept_histogram[1] -2"}},
		{[]int{1, 2, 3}, ip(7), 20, []string{"spec_accept_histogram of 6 rounds for spec_verify_ct 7"}},
		{[]int{1, 2, 3}, nil, 5, []string{"spec_accept_histogram of 6 rounds for 5 tokens"}},
		{[]int{1 << 53, 1 << 53}, nil, 5, []string{"spec_accept_histogram of 18014398509481984 rounds for 5 tokens"}},
	} {
		if got := histogramProblems("spec_accept_histogram", tt.h, tt.verify, tt.completion); !slices.Equal(got, tt.want) {
			t.Errorf("%v, verify %v, %d tokens: got %q, want %q", tt.h, tt.verify, tt.completion, got, tt.want)
		}
	}
}

// The lateness cause names the speedup that follows from its numbers: a
// row at x50 whose TTFT is 171 % off (0.88 ms of wall clock) keeps no
// speedup within 2.5 %, but at x1 the same lateness is 3.4 %, within 5 %,
// and the cause says so; 10 ms at x1 no speedup removes.
func TestLatenessFixFollowsTheNumbers(t *testing.T) {
	for _, tt := range []struct {
		ttftErr, speedup float64
		suggest          float64
		want             string
	}{
		{1.71, 50, 1, "run the mock at --speedup 1, where the same lateness is 3.4 % of the figures, within 5 % (not 2.5 %, which no speedup reaches)"},
		{3, 50, 0, "at x50, which no speedup removes"},
		{0.5, 1, 0, "at x1, which no speedup removes"},
		{0.4, 200, 10, "so this host cannot keep x200: run the mock at --speedup 10 or less"},
	} {
		var v Verdict
		got := lateness(&v, tt.ttftErr, 0.0257, nil, 0, tt.speedup)
		if got != tt.suggest || len(v.Causes) != 1 || !strings.Contains(v.Causes[0].Text, tt.want) {
			t.Errorf("ttft_err %g at x%g: suggested %g, %q; want %g, %q", tt.ttftErr, tt.speedup, got, v.Causes, tt.suggest, tt.want)
		}
	}
}

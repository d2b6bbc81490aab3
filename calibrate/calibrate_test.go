package calibrate

import (
	"errors"
	"math"
	"runtime"
	"strings"
	"testing"

	"github.com/sglmock/sglmock/mockserver/profile"
)

func load(t testing.TB, name string) *profile.Profile {
	t.Helper()
	p, err := profile.Load(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The original benchmark's naive run: leg b reused the prompt.
const originalCSV = `ctx_req,prompt_tok,t_a,t_b,a,b,b_cached
1024,1407,0.46,0.20,1,17,true
8192,11382,3.86,1.57,1,17,true
32768,45507,23.72,4.26,1,17,true
`

func TestOriginalRowsReproduceWithinTolerance(t *testing.T) {
	rows, err := ReadCSV(strings.NewReader(originalCSV), "original.csv")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Fit(rows, load(t, "kimi-k2.6-rtx6000"), "original-fit")
	if err != nil {
		t.Fatal(err)
	}
	if res.MaxError > Tolerance {
		var b strings.Builder
		res.WriteReport(&b)
		t.Fatalf("largest residual %.2f %%, want <= 5 %%:\n%s", 100*res.MaxError, b.String())
	}
	// Three prefill coefficients and a decode table of three points for
	// six legs: the residual is 0 by construction, and the report says
	// that it checks nothing rather than that the rows are within 5 %.
	var report strings.Builder
	res.WriteReport(&report)
	if !res.Exact() || res.Parameters != 6 || res.Legs != 6 ||
		!strings.Contains(report.String(), "which checks nothing: 6 parameters for 6 measured legs") || strings.Contains(report.String(), "within the") {
		t.Errorf("exact %v, %d parameters, %d legs, report:\n%s\nwant an exact fit of 6 for 6, said to check nothing", res.Exact(), res.Parameters, res.Legs, report.String())
	}
	// The fitted profile is a valid profile file.
	again, err := profile.Parse(strings.NewReader(string(res.Profile.YAML())), "x")
	if err != nil {
		t.Fatalf("the fitted profile does not parse back: %v", err)
	}
	if again.Name != "original-fit" || again.Speculative == nil || again.Speculative.Algorithm != "DDTREE" {
		t.Fatalf("got %+v, want the base's speculative decoding under the new name", again)
	}
}

// rowsFrom generates exact rows from a profile: the mock's own predictions.
func rowsFrom(p *profile.Profile, prompts []int, cached bool) []Row {
	var rows []Row
	for _, n := range prompts {
		c := 0
		if cached {
			c = n - 1
		}
		rows = append(rows, Row{CtxReq: n, PromptTokens: n, A: 1, B: 33, BCached: cached,
			TA: legSeconds(p, n, 0, 1), TB: legSeconds(p, n, c, 33)})
	}
	return rows
}

func TestRecoversAKnownProfile(t *testing.T) {
	truth := load(t, "default")
	truth.Prefill = profile.PrefillCost{OverheadS: 0.011, PerTokenS: 3.1e-5, AttentionS: 2.7e-10}
	truth.Decode = profile.DecodeCost{StepOverheadS: 0.006, PerSeqS: 2e-5, PerCtxTokenS: 3.3e-9}
	for _, cached := range []bool{false, true} {
		rows := rowsFrom(truth, []int{500, 3000, 9000, 17000, 30000}, cached)
		res, err := Fit(rows, load(t, "default"), "x")
		if err != nil {
			t.Fatal(err)
		}
		if res.PrefillForm != Formula || res.DecodeForm != Formula {
			t.Fatalf("cached %v: got forms %s/%s, want formulas for rows the formulas generated", cached, res.PrefillForm, res.DecodeForm)
		}
		if res.Exact() || res.Parameters != 5 || res.Legs != 10 {
			t.Errorf("cached %v: exact %v with %d parameters for %d legs, want a check: 5 for 10", cached, res.Exact(), res.Parameters, res.Legs)
		}
		got, want := res.Profile, truth
		for _, c := range []struct {
			name      string
			got, want float64
		}{
			{"prefill.overhead_s", got.Prefill.OverheadS, want.Prefill.OverheadS},
			{"prefill.per_token_s", got.Prefill.PerTokenS, want.Prefill.PerTokenS},
			{"prefill.attention_s", got.Prefill.AttentionS, want.Prefill.AttentionS},
			{"decode.step_overhead_s + per_seq_s", got.Decode.StepOverheadS + got.Decode.PerSeqS, want.Decode.StepOverheadS + want.Decode.PerSeqS},
			{"decode.per_ctx_token_s", got.Decode.PerCtxTokenS, want.Decode.PerCtxTokenS},
		} {
			if math.Abs(c.got-c.want) > 0.01*c.want {
				t.Errorf("cached %v: %s: got %.6g, want %.6g within 1 %%", cached, c.name, c.got, c.want)
			}
		}
	}
}

// Rows a formula cannot fit within 5 % switch that part to a table, which
// goes through every row.
func TestTablesWhenTheFormulaDoesNotFit(t *testing.T) {
	truth := load(t, "default")
	truth.Decode = profile.DecodeCost{StepOverheadS: 0.004, CtxTable: profile.Table{{1000, 0.001}, {8000, 0.002}, {20000, 0.03}, {31000, 0.031}}}
	rows := rowsFrom(truth, []int{900, 7900, 19900, 30900}, false)
	res, err := Fit(rows, load(t, "default"), "x")
	if err != nil {
		t.Fatal(err)
	}
	if res.DecodeForm != Table || res.MaxError > Tolerance {
		t.Fatalf("got decode %s with largest residual %.2f %%, want a table within 5 %%", res.DecodeForm, 100*res.MaxError)
	}
}

func TestRefusesImpossibleRows(t *testing.T) {
	tests := []struct {
		name, csv, want string
		sentinel        error
	}{
		{"too few sizes", "ctx_req,prompt_tok,t_a,t_b,a,b,b_cached\n1024,1407,0.46,0.6,1,17,false\n1024,1407,0.47,0.61,1,17,false\n",
			"1 prompt size(s)", ErrTooFewRows},
		{"zero time", "ctx_req,prompt_tok,t_a,t_b,a,b,b_cached\n1024,1407,0,0.6,1,17,false\n", "line 2: t_a = 0: times must be positive", nil},
		{"negative time", "ctx_req,prompt_tok,t_a,t_b,a,b,b_cached\n1024,1407,0.4,-1,1,17,false\n", "line 2: t_b = -1", nil},
		{"cold leg b faster", "ctx_req,prompt_tok,t_a,t_b,a,b,b_cached\n1024,1407,0.46,0.2,1,17,false\n", "line 2: t_b = 0.2 <= t_a = 0.46", nil},
		{"b not above a", "ctx_req,prompt_tok,t_a,t_b,a,b,b_cached\n1024,1407,0.46,0.5,17,17,false\n", "b = 17 <= a = 17", nil},
		{"prompt past the context", "ctx_req,prompt_tok,t_a,t_b,a,b,b_cached\n1024,40000,0.46,0.5,1,17,false\n", "prompt_tok = 40000", nil},
		// Counts whose sum overflows: refused, never a panic.
		{"b = 2^63-1", "ctx_req,prompt_tok,t_a,t_b,a,b,b_cached\n1024,1407,0.46,0.5,1,9223372036854775807,false\n",
			"prompt_tok + b = 1407 + 9223372036854775807: longer than the base profile's context length 32768", nil},
		{"a and b = 2^63-1", "ctx_req,prompt_tok,t_a,t_b,a,b,b_cached\n9223372036854775807,1407,0.46,0.5,9223372036854775806,9223372036854775807,false\n",
			"longer than the base profile's context length", nil},
		{"prompt = 2^63-1", "ctx_req,prompt_tok,t_a,t_b,a,b,b_cached\n1024,9223372036854775807,0.46,0.5,1,17,false\n", "prompt_tok = 9223372036854775807", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rows, err := ReadCSV(strings.NewReader(tt.csv), "rows.csv")
			if err != nil {
				t.Fatal(err)
			}
			_, err = Fit(rows, load(t, "default"), "x")
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrBadInput) {
				t.Fatalf("got %v, want an error containing %q, of ErrBadInput", err, tt.want)
			}
			if tt.sentinel != nil && !errors.Is(err, tt.sentinel) {
				t.Fatalf("got %v, want errors.Is %v", err, tt.sentinel)
			}
		})
	}
}

func TestReadCSVErrors(t *testing.T) {
	tests := []struct{ name, csv, want string }{
		{"empty", "", "rows.csv: empty file"},
		{"missing columns", "ctx_req,prompt_tok,t_a\n", "rows.csv:1: header lacks t_b, a, b, b_cached"},
		{"bad number", "ctx_req,prompt_tok,t_a,t_b,a,b,b_cached\n1024,many,0.4,0.5,1,17,false\n", `rows.csv:2: prompt_tok = "many"`},
		{"bad bool", "ctx_req,prompt_tok,t_a,t_b,a,b,b_cached\n1024,10,0.4,0.5,1,17,maybe\n", `rows.csv:2: b_cached = "maybe"`},
		{"short record", "ctx_req,prompt_tok,t_a,t_b,a,b,b_cached\n1024,10\n", "rows.csv:2: no t_a value"},
		{"time past float64", "ctx_req,prompt_tok,t_a,t_b,a,b,b_cached\n1024,1407,0.46,1e309,1,17,false\n", `rows.csv:2: t_b = "1e309": want seconds`},
		{"count past int64", "ctx_req,prompt_tok,t_a,t_b,a,b,b_cached\n1024,1407,0.46,0.5,1,9223372036854775808,false\n", `rows.csv:2: b = "9223372036854775808": want a whole number`},
		{"bad cached_a", "ctx_req,prompt_tok,t_a,t_b,a,b,b_cached,cached_a\n1024,1407,0.46,0.5,1,17,false,-1\n", `rows.csv:2: cached_a = "-1"`},
		{"bad a_cached", "ctx_req,prompt_tok,t_a,t_b,a,b,b_cached,a_cached\n1024,1407,0.46,0.5,1,17,false,yes\n", `rows.csv:2: a_cached = "yes"`},
	}
	for _, tt := range tests {
		if _, err := ReadCSV(strings.NewReader(tt.csv), "rows.csv"); err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrBadInput) {
			t.Errorf("%s: got %v, want an error containing %q, of ErrBadInput", tt.name, err, tt.want)
		}
	}
	// Extra columns, in any order, are fine: bench's CSV has many.
	rows, err := ReadCSV(strings.NewReader("verdict,b_cached,b,a,t_b,t_a,prompt_tok,ctx_req\nok,false,17,1,0.6,0.46,1407,1024\n"), "x")
	if err != nil || len(rows) != 1 || rows[0] != (Row{CtxReq: 1024, PromptTokens: 1407, TA: 0.46, TB: 0.6, A: 1, B: 17, Line: 2, Verdict: "ok"}) {
		t.Fatalf("got %+v, %v", rows, err)
	}
}

// Under EAGLE-family speculative decoding a cached leg b reuses one token
// less (bigram keys), and the fit knows it: rows the EAGLE3 profile
// generates are reproduced.
func TestCachedLegUnderBigramKeys(t *testing.T) {
	truth := load(t, "llama-8b-eagle3-h100")
	var rows []Row
	for _, n := range []int{900, 4000, 16000, 40000} {
		rows = append(rows, Row{CtxReq: n, PromptTokens: n, A: 1, B: 33, BCached: true,
			TA: legSeconds(truth, n, 0, 1), TB: legSeconds(truth, n, n-2, 33)})
	}
	res, err := Fit(rows, load(t, "llama-8b-eagle3-h100"), "x")
	if err != nil {
		t.Fatal(err)
	}
	got, want := res.Profile.Decode, truth.Decode
	if res.MaxError > 1e-6 || math.Abs(got.PerCtxTokenS-want.PerCtxTokenS) > 1e-6*want.PerCtxTokenS {
		var b strings.Builder
		res.WriteReport(&b)
		t.Fatalf("got decode %+v with largest residual %g, want per_ctx_token_s %g reproducing the rows exactly:\n%s",
			got, res.MaxError, want.PerCtxTokenS, b.String())
	}
}

// Usable keeps the rows whose legs were cold as the row says, and drops
// the others with the reason.
func TestUsable(t *testing.T) {
	yes, no, n := true, false, 11381
	tests := []struct {
		name string
		row  Row
		want string // "" when kept
	}{
		{"hand-written naive row", Row{BCached: true}, ""},
		{"naive row as bench writes it", Row{BCached: true, ACached: &no, Verdict: "POISONED", Cause: "leg b reused 1406 of 1407"}, ""},
		{"cold row", Row{ACached: &no, Verdict: "ok"}, ""},
		{"suspect row", Row{ACached: &no, Verdict: "SUSPECT", Cause: "b-a = 16: only 4 speculative rounds"}, ""},
		{"leg a cached", Row{PromptTokens: 11382, ACached: &yes, CachedA: &n, Verdict: "POISONED"},
			"leg a was served from the cache (a_cached, cached_a 11381 of 11382), and the fit takes leg a cold"},
		{"poisoned, leg b said cold", Row{ACached: &no, Verdict: "POISONED", Cause: "t_b < t_a, so decode is undefined"},
			"bench's verdict is POISONED: t_b < t_a, so decode is undefined"},
		{"poisoned naive row of an older bench", Row{BCached: true, Verdict: "POISONED", Cause: "leg b reused"},
			"bench's verdict is POISONED: leg b reused"},
	}
	for _, tt := range tests {
		kept, dropped := Usable([]Row{tt.row})
		switch {
		case tt.want == "" && len(kept) != 1:
			t.Errorf("%s: dropped (%s), want kept", tt.name, dropped[0].Reason)
		case tt.want != "" && (len(dropped) != 1 || dropped[0].Reason != tt.want):
			t.Errorf("%s: got kept %d, dropped %+v; want dropped: %q", tt.name, len(kept), dropped, tt.want)
		}
	}
}

// endlessLine is a CSV whose second line never ends.
type endlessLine struct{ header bool }

func (e *endlessLine) Read(p []byte) (int, error) {
	if !e.header {
		e.header = true
		return copy(p, "ctx_req,prompt_tok,t_a,t_b,a,b,b_cached\n1024,"), nil
	}
	for i := range p {
		p[i] = '7'
	}
	return len(p), nil
}

// A line of any length (a 1 GB field) is refused once it passes the
// bound, having cost a bounded allocation.
func TestLineLimit(t *testing.T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := ReadCSV(&endlessLine{}, "rows.csv")
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "rows.csv: line 2 is longer than 65536 bytes: not a sweep's CSV") || !errors.Is(err, ErrBadInput) {
		t.Errorf("got %v, want the long line refused", err)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Errorf("reading allocated %d bytes, want at most 1 MiB", n)
	}
}

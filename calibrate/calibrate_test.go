package calibrate

import (
	"errors"
	"math"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/sglmock/sglmock/mockserver/mocktest"
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

// report is a fit's report, for messages.
func report(r *Result) string {
	var b strings.Builder
	r.WriteReport(&b)
	return b.String()
}

// maxErr is the largest relative residual over the legs.
func maxErr(r *Result) float64 {
	m := 0.0
	for _, l := range r.Legs {
		m = max(m, math.Abs(l.Err()))
	}
	return m
}

// The original benchmark's naive run: leg b reused the prompt.
const originalCSV = `ctx_req,prompt_tok,t_a,t_b,a,b,b_cached
1024,1407,0.46,0.20,1,17,true
8192,11382,3.86,1.57,1,17,true
32768,45507,23.72,4.26,1,17,true
`

// Three rows (six legs) leave the formulas one degree of freedom, and
// no table: a decode table of three points would have as many parameters
// as legs. The formulas leave a misfit their noise does not explain, and
// the report says so; --table passes through every row, and says that it
// checks nothing.
func TestOriginalRows(t *testing.T) {
	rows, err := ReadCSV(strings.NewReader(originalCSV), "original.csv")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Fit(rows, load(t, "kimi-k2.6-rtx6000"), Options{Name: "original-fit"})
	if err != nil {
		t.Fatal(err)
	}
	if res.PrefillForm != Formula || res.DecodeForm != Formula || res.Within() || res.DoF != 1 || res.Parameters != 5 || res.Distinct != 6 {
		t.Fatalf("got %s/%s, within %v, %d degrees of freedom, %d parameters for %d legs; want formulas, 1 degree of freedom, "+
			"outside the noise:\n%s", res.PrefillForm, res.DecodeForm, res.Within(), res.DoF, res.Parameters, res.Distinct, report(res))
	}
	if res.Accuracy.Known() || res.Accuracy.Need != 1 {
		t.Errorf("got accuracy %+v, want unknown, one prompt size short", res.Accuracy)
	}
	for _, tt := range res.AlsoTried {
		if tt.Allowed {
			t.Errorf("tried %+v as allowed; want every table refused with 6 legs", tt)
		}
	}

	exact, err := Fit(rows, load(t, "kimi-k2.6-rtx6000"), Options{Name: "original-fit", Table: true})
	if err != nil {
		t.Fatal(err)
	}
	text := report(exact)
	if !exact.Exact() || exact.PrefillForm != Table || exact.DecodeForm != Table || maxErr(exact) > 1e-6 ||
		!strings.Contains(text, "7 parameters for 6 distinct legs pass through every row by construction") {
		t.Errorf("--table: exact %v, forms %s/%s, largest residual %g; want tables through every row, said to check nothing:\n%s",
			exact.Exact(), exact.PrefillForm, exact.DecodeForm, maxErr(exact), text)
	}
	// The fitted profile is a valid profile file, with its calibration.
	again, err := profile.Parse(strings.NewReader(string(exact.Profile.YAML())), "x")
	if err != nil {
		t.Fatalf("the fitted profile does not parse back: %v", err)
	}
	if again.Name != "original-fit" || again.Speculative == nil || again.Speculative.Algorithm != "DDTREE" ||
		*again.Calibration != (profile.Calibration{MinPromptTokens: 1407, MaxPromptTokens: 45507}) {
		t.Fatalf("got %+v (calibration %+v), want the base's speculative decoding under the new name, calibrated on 1407..45507", again, again.Calibration)
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
		res, err := Fit(rows, load(t, "default"), Options{Name: "x"})
		if err != nil {
			t.Fatal(err)
		}
		if res.PrefillForm != Formula || res.DecodeForm != Formula || !res.Within() {
			t.Fatalf("cached %v: got forms %s/%s, within %v; want formulas for rows the formulas generated", cached, res.PrefillForm, res.DecodeForm, res.Within())
		}
		if res.Exact() || res.Parameters != 5 || res.Distinct != 10 || res.DoF != 5 {
			t.Errorf("cached %v: exact %v with %d parameters for %d legs, %d degrees of freedom; want a check: 5 for 10, 5 left", cached, res.Exact(), res.Parameters, res.Distinct, res.DoF)
		}
		// Rows the formulas generated are predicted exactly without any
		// of their prompt sizes.
		if !res.Accuracy.Known() || res.Accuracy.Sizes != 5 || res.Accuracy.Max > 1e-6 {
			t.Errorf("cached %v: accuracy %+v, want every size predicted exactly by the others", cached, res.Accuracy)
		}
		mocktest.CheckCosts(t, res.Profile, truth, 1e-6)
	}
}

// Rows a formula cannot fit within their noise switch that part to a
// table, when the rows have more legs than the table has points.
func TestTablesWhenTheFormulaDoesNotFit(t *testing.T) {
	truth := load(t, "default")
	truth.Decode = profile.DecodeCost{StepOverheadS: 0.004, CtxTable: profile.Table{{1000, 0.001}, {8000, 0.002}, {20000, 0.03}, {31000, 0.031}}}
	rows := rowsFrom(truth, []int{900, 7900, 19900, 30900}, false)
	res, err := Fit(rows, load(t, "default"), Options{Name: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if res.PrefillForm != Formula || res.DecodeForm != Table || !res.Within() || res.Parameters != 7 || res.Distinct != 8 {
		t.Fatalf("got %s/%s, within %v, %d parameters for %d legs; want a decode table of 4 points within the noise:\n%s",
			res.PrefillForm, res.DecodeForm, res.Within(), res.Parameters, res.Distinct, report(res))
	}
	if len(res.AlsoTried) != 3 || res.AlsoTried[2].Allowed {
		t.Errorf("tried %+v; want the three other forms, tables on both sides refused (9 parameters for 8 legs)", res.AlsoTried)
	}
}

func TestRefusesImpossibleRows(t *testing.T) {
	tests := []struct {
		name, csv, want string
		sentinel        error
	}{
		{"too few sizes", "ctx_req,prompt_tok,t_a,t_b,a,b,b_cached\n1024,1407,0.46,0.6,1,17,false\n1024,1407,0.47,0.61,1,17,false\n",
			"4 usable leg(s) at 1 prompt size(s)", ErrTooFewRows},
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
			_, err = Fit(rows, load(t, "default"), Options{Name: "x"})
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrBadInput) {
				t.Fatalf("got %v, want an error containing %q, of ErrBadInput", err, tt.want)
			}
			if tt.sentinel != nil && !errors.Is(err, tt.sentinel) {
				t.Fatalf("got %v, want errors.Is %v", err, tt.sentinel)
			}
		})
	}
	// A size to predict the base does not take.
	rows := rowsFrom(load(t, "default"), []int{1000, 4000, 9000}, false)
	for _, n := range []int{1, 32768 - 32} {
		_, err := Fit(rows, load(t, "default"), Options{Predict: []int{n}})
		if want := "the base profile default takes prompts of 2..32735 tokens with b = 33"; err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, ErrBadInput) {
			t.Errorf("predict %d: got %v, want %q", n, err, want)
		}
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
		{"no runs", "ctx_req,prompt_tok,t_a,t_b,a,b,b_cached,runs\n1024,1407,0.46,0.5,1,17,false,0\n", `rows.csv:2: runs = "0": want a whole number of runs, at least 1`},
		{"negative spread", "ctx_req,prompt_tok,t_a,t_b,a,b,b_cached,spread\n1024,1407,0.46,0.5,1,17,false,-0.1\n", `rows.csv:2: spread = "-0.1": want a relative spread >= 0`},
		{"infinite spread", "ctx_req,prompt_tok,t_a,t_b,a,b,b_cached,spread\n1024,1407,0.46,0.5,1,17,false,+Inf\n", `rows.csv:2: spread = "+Inf"`},
	}
	for _, tt := range tests {
		if _, err := ReadCSV(strings.NewReader(tt.csv), "rows.csv"); err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrBadInput) {
			t.Errorf("%s: got %v, want an error containing %q, of ErrBadInput", tt.name, err, tt.want)
		}
	}
	// Extra columns, in any order, are fine: bench's CSV has many. The
	// spread is decode's when the row has a decode rate, t_a's when not.
	rows, err := ReadCSV(strings.NewReader("verdict,b_cached,b,a,t_b,t_a,prompt_tok,ctx_req,runs,spread,decode_tok_s,method\n"+
		"ok,false,17,1,0.6,0.46,1407,1024,3,0.1,120,flush+nonce\nok,false,17,1,0.6,0.46,1407,1024,2,0.2,,naive\n"), "x")
	want := []Row{{CtxReq: 1024, PromptTokens: 1407, TA: 0.46, TB: 0.6, A: 1, B: 17, Line: 2, Verdict: "ok", Method: "flush+nonce", Runs: 3, Spread: 0.1, SpreadOf: SpreadOfDecode},
		{CtxReq: 1024, PromptTokens: 1407, TA: 0.46, TB: 0.6, A: 1, B: 17, Line: 3, Verdict: "ok", Method: "naive", Runs: 2, Spread: 0.2, SpreadOf: SpreadOfTA}}
	if err != nil || len(rows) != 2 {
		t.Fatalf("got %+v, %v", rows, err)
	}
	for i := range want {
		if !reflect.DeepEqual(rows[i], want[i]) {
			t.Errorf("row %d: got %+v, want %+v", i, rows[i], want[i])
		}
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
	res, err := Fit(rows, load(t, "llama-8b-eagle3-h100"), Options{Name: "x"})
	if err != nil {
		t.Fatal(err)
	}
	got, want := res.Profile.Decode, truth.Decode
	if maxErr(res) > 1e-6 || math.Abs(got.PerCtxTokenS-want.PerCtxTokenS) > 1e-6*want.PerCtxTokenS {
		t.Fatalf("got decode %+v with largest residual %g, want per_ctx_token_s %g reproducing the rows exactly:\n%s",
			got, maxErr(res), want.PerCtxTokenS, report(res))
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

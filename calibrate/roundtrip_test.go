package calibrate_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglmock/sglmock/calibrate"
	"github.com/sglmock/sglmock/harness"
	"github.com/sglmock/sglmock/internal/norace"
	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
	"github.com/sglmock/sglmock/mockserver/profile"
)

// bench measures points on a mock of p with flush+nonce, as `sglmock bench
// --csv` does, and returns the CSV.
func bench(t *testing.T, p *profile.Profile, points []harness.Point) []byte {
	t.Helper()
	return benchCSV(t, p, points, harness.FlushNonce, 65)
}

// benchCSV measures points on a fresh mock of p with one method, legs of 1
// and b tokens, and returns bench's CSV.
func benchCSV(t *testing.T, p *profile.Profile, points []harness.Point, method harness.Method, b int) []byte {
	t.Helper()
	var csv bytes.Buffer
	if err := benchReport(t, p, points, method, b, 1).WriteCSV(&csv); err != nil {
		t.Fatal(err)
	}
	return csv.Bytes()
}

// benchReport measures points on a fresh mock of p, repeat runs each.
func benchReport(t *testing.T, p *profile.Profile, points []harness.Point, method harness.Method, b, repeat int) *harness.Report {
	t.Helper()
	m := mocktest.Start(t, api.Config{Profile: p})
	tp := twoPointOn(m, points, method, b)
	tp.Repeat = repeat
	rep, err := tp.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	return rep
}

// twoPointOn is bench's two-point method on m: one method, legs of 1 and b
// tokens, deterministic nonces.
func twoPointOn(m *mocktest.Mock, points []harness.Point, method harness.Method, b int) *harness.TwoPoint {
	n := 0
	return &harness.TwoPoint{
		Client: &harness.Client{HTTP: m.Client, BaseURL: m.URL, Backend: harness.SGLang},
		Points: points, A: 1, B: b, Methods: []harness.Method{method}, NoncePosition: harness.NonceStart, Repeat: 1,
		Options: harness.Options{
			Flush: harness.FlushPolicy{Retries: 3, RetryWait: 100 * time.Millisecond},
			NewID: func() string { n++; return fmt.Sprintf("id-%d", n) },
		},
	}
}

// maxErr is the largest relative residual over a fit's legs.
func maxErr(r *calibrate.Result) float64 {
	m := 0.0
	for _, l := range r.Legs {
		m = max(m, math.Abs(l.Err()))
	}
	return m
}

// The round trip: bench a deployment, fit a profile to what bench wrote,
// bench the fitted profile: the same figures come back, and the fitted
// coefficients are the deployment's.
func TestRoundTripBenchCalibrateBench(t *testing.T) {
	norace.Skip(t, "checks a fit against bench's rows")
	synctest.Test(t, func(t *testing.T) {
		deployment := mocktest.Profile(t, "default")
		deployment.Name = "measured"
		deployment.Prefill = profile.PrefillCost{OverheadS: 0.012, PerTokenS: 4.1e-5, AttentionS: 3.3e-10}
		deployment.Decode = profile.DecodeCost{StepOverheadS: 0.007, PerSeqS: 2e-5, PerCtxTokenS: 2.2e-9}
		points := []harness.Point{{CtxReq: 1024, Tokens: 1024}, {CtxReq: 4096, Tokens: 4096}, {CtxReq: 12000, Tokens: 12000}, {CtxReq: 24000, Tokens: 24000}}

		first := bench(t, deployment, points)
		rows, err := calibrate.ReadCSV(bytes.NewReader(first), "bench.csv")
		if err != nil {
			t.Fatalf("bench's CSV does not read back: %v\n%s", err, first)
		}
		fit, err := calibrate.Fit(rows, mocktest.Profile(t, "default"), calibrate.Options{Name: "fitted"})
		if err != nil {
			t.Fatal(err)
		}
		if fit.PrefillForm != calibrate.Formula || fit.DecodeForm != calibrate.Formula || maxErr(fit) > 1e-6 || fit.Accuracy.Max > 1e-6 {
			t.Fatalf("got %s/%s with largest residual %g, leave-one-out %g; want formulas that reproduce and predict the rows exactly",
				fit.PrefillForm, fit.DecodeForm, maxErr(fit), fit.Accuracy.Max)
		}
		mocktest.CheckCosts(t, fit.Profile, deployment, 1e-6)

		second := bench(t, fit.Profile, points)
		again, err := calibrate.ReadCSV(bytes.NewReader(second), "again.csv")
		if err != nil {
			t.Fatal(err)
		}
		for i := range rows {
			a, b := rows[i], again[i]
			if math.Abs(a.TA-b.TA) > 1e-6*a.TA || math.Abs(a.TB-b.TB) > 1e-6*a.TB {
				t.Errorf("ctx %d: t_a %v then %v, t_b %v then %v; want the same", a.CtxReq, a.TA, b.TA, a.TB, b.TB)
			}
		}
	})
}

// Bench's CSV of any method feeds calibrate: a naive sweep's cached leg b
// and, on a Llama server, the BOS every cold leg b shares (cached_b 1, not
// a cached prompt).
func TestBenchCSVOfEveryMethodReadsBack(t *testing.T) {
	norace.Skip(t, "checks bench's CSV against calibrate's reader")
	for _, tt := range []struct {
		profile string
		method  harness.Method
		bCached bool
	}{
		{"default", harness.Naive, true},
		{"llama-8b-eagle3-h100", harness.Naive, true},
		{"llama-8b-eagle3-h100", harness.FlushNonce, false},
	} {
		t.Run(tt.profile+"/"+string(tt.method), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := mocktest.Profile(t, tt.profile)
				csv := benchCSV(t, p, []harness.Point{{CtxReq: 1000, Tokens: 1000}, {CtxReq: 4000, Tokens: 4000}, {CtxReq: 9000, Tokens: 9000}}, tt.method, 33)
				rows, err := calibrate.ReadCSV(bytes.NewReader(csv), "bench.csv")
				if err != nil {
					t.Fatalf("bench's CSV does not read back: %v", err)
				}
				for _, r := range rows {
					if r.BCached != tt.bCached {
						t.Fatalf("ctx %d: got b_cached %v (cached_b %v), want %v", r.CtxReq, r.BCached, *r.CachedB, tt.bCached)
					}
				}
				fit, err := calibrate.Fit(rows, p, calibrate.Options{Name: "fitted"})
				if err != nil {
					t.Fatal(err)
				}
				// The rows are the mock's own timings of this very profile;
				// under speculative decoding each leg b took its own draws,
				// which no expectation reproduces row by row.
				if p.Speculative == nil && maxErr(fit) > 1e-6 {
					var b bytes.Buffer
					fit.WriteReport(&b)
					t.Fatalf("largest residual %.2g, want the rows reproduced:\n%s", maxErr(fit), b.String())
				}
			})
		})
	}
}

// bench's CSV of a naive sweep run twice on one server: the second run's
// leg a found the first's prompt and prefilled one token after the rest.
// Its row says so (a_cached, cached_a), and being one run, its t_a is that
// leg's own: the fit uses it as the cached prefill it measured, and the
// rows are reproduced exactly.
func TestCachedLegsMeasureWhatTheyReused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mocktest.Profile(t, "default")
		points := []harness.Point{{CtxReq: 1000, Tokens: 1000}, {CtxReq: 4000, Tokens: 4000}, {CtxReq: 9000, Tokens: 9000}}
		tp := twoPointOn(mocktest.Start(t, api.Config{Profile: p}), points, harness.Naive, 33)
		var csv bytes.Buffer
		for i := range 2 {
			rep, err := tp.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			if err := rep.WriteCSV(&b); err != nil {
				t.Fatal(err)
			}
			if i > 0 {
				_, rest, _ := bytes.Cut(b.Bytes(), []byte("\n"))
				b = *bytes.NewBuffer(rest)
			}
			csv.Write(b.Bytes())
		}
		rows, err := calibrate.ReadCSV(bytes.NewReader(csv.Bytes()), "bench.csv")
		if err != nil {
			t.Fatal(err)
		}
		fit, err := calibrate.Fit(rows, p, calibrate.Options{Name: "fitted"})
		if err != nil || maxErr(fit) > 1e-6 || len(fit.Legs) != 12 {
			t.Fatalf("%v: %d legs, largest residual %v; want all 12 legs reproduced exactly", err, len(fit.Legs), maxErr(fit))
		}
		for i, u := range fit.Rows[3:] {
			n := points[i].Tokens
			want := fmt.Sprintf("1 token after %d cached", n-1)
			if u.Dropped != "" || u.A.What != want || u.B.What != want+", 32 decoded" {
				t.Errorf("line %d: leg a %q, leg b %q (dropped %q); want %q and the same with its decode", u.Line, u.A.What, u.B.What, u.Dropped, want)
			}
		}
	})
}

// A naive sweep of two runs: its CSV's leg a is the median of a cold leg
// and a cached one, which the fit cannot use, and its legs b alone do not
// determine the costs. Its JSON has every run's legs: the first run's leg
// a measures a cold prefill, the second's a prefill of one token after
// the cached rest, and the fit reproduces every leg exactly.
func TestJSONTellsEachRunsLeg(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mocktest.Profile(t, "default")
		points := []harness.Point{{CtxReq: 1000, Tokens: 1000}, {CtxReq: 4000, Tokens: 4000}, {CtxReq: 9000, Tokens: 9000}, {CtxReq: 20000, Tokens: 20000}}
		rep := benchReport(t, p, points, harness.Naive, 33, 2)
		var csv, js bytes.Buffer
		if err := rep.WriteCSV(&csv); err != nil {
			t.Fatal(err)
		}
		if err := rep.WriteJSON(&js); err != nil {
			t.Fatal(err)
		}
		rows, err := calibrate.ReadCSV(&csv, "bench.csv")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := calibrate.Fit(rows, p, calibrate.Options{}); !errors.Is(err, calibrate.ErrTooFewRows) {
			t.Errorf("the CSV: got %v, want too few rows (its legs b alone do not determine the costs)", err)
		}
		rows, err = calibrate.ReadJSON(&js, "bench.json")
		if err != nil {
			t.Fatal(err)
		}
		fit, err := calibrate.Fit(rows, p, calibrate.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if len(fit.Legs) != 12 || maxErr(fit) > 1e-6 || !fit.Accuracy.Known() || fit.Accuracy.Max > 1e-6 {
			t.Fatalf("%d legs, largest residual %g, leave-one-out %+v; want 12 legs reproduced and predicted exactly", len(fit.Legs), maxErr(fit), fit.Accuracy)
		}
		want := "1 of 2 runs cold prefill of 1000; 1 of 2 runs 1 token after 999 cached"
		if got := fit.Rows[0].A.What; got != want {
			t.Errorf("leg a of ctx 1000: got %q, want %q", got, want)
		}
	})
}

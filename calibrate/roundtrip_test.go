package calibrate_test

import (
	"bytes"
	"context"
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
	m := mocktest.Start(t, api.Config{Profile: p})
	rep, err := twoPointOn(m, points, method, b).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var csv bytes.Buffer
	if err := rep.WriteCSV(&csv); err != nil {
		t.Fatal(err)
	}
	m.Close()
	return csv.Bytes()
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
		fit, err := calibrate.Fit(rows, mocktest.Profile(t, "default"), "fitted")
		if err != nil {
			t.Fatal(err)
		}
		if fit.PrefillForm != calibrate.Formula || fit.DecodeForm != calibrate.Formula || fit.MaxError > 1e-6 {
			t.Fatalf("got %s/%s with largest residual %g, want formulas that reproduce the rows exactly", fit.PrefillForm, fit.DecodeForm, fit.MaxError)
		}
		got, want := fit.Profile, deployment
		for _, c := range []struct {
			name      string
			got, want float64
		}{
			{"overhead_s", got.Prefill.OverheadS, want.Prefill.OverheadS},
			{"per_token_s", got.Prefill.PerTokenS, want.Prefill.PerTokenS},
			{"attention_s", got.Prefill.AttentionS, want.Prefill.AttentionS},
			{"step_overhead_s + per_seq_s", got.Decode.StepOverheadS + got.Decode.PerSeqS, want.Decode.StepOverheadS + want.Decode.PerSeqS},
			{"per_ctx_token_s", got.Decode.PerCtxTokenS, want.Decode.PerCtxTokenS},
		} {
			if math.Abs(c.got-c.want) > 1e-6*c.want {
				t.Errorf("%s: got %.9g, want %.9g", c.name, c.got, c.want)
			}
		}

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
				fit, err := calibrate.Fit(rows, p, "fitted")
				if err != nil {
					t.Fatal(err)
				}
				// The rows are the mock's own timings of this very profile;
				// under speculative decoding each leg b took its own draws,
				// which no expectation reproduces row by row.
				if p.Speculative == nil && fit.MaxError > 0.05 {
					var b bytes.Buffer
					fit.WriteReport(&b)
					t.Fatalf("largest residual %.2f %%, want within 5 %%:\n%s", 100*fit.MaxError, b.String())
				}
			})
		})
	}
}

// bench's CSV of a naive sweep run twice on one server: the first run's
// rows are like the original benchmark's (leg b cached, as b_cached says) and fit; the
// second run's leg a found the first's prompt, and calibrate drops those
// rows, saying so, rather than fit a cached leg a as a cold prefill.
func TestCalibrateDropsRowsServedFromTheCache(t *testing.T) {
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
		kept, dropped := calibrate.Usable(rows)
		if len(kept) != 3 || len(dropped) != 3 {
			t.Fatalf("kept %d, dropped %d; want the first run's 3 and the second's 3", len(kept), len(dropped))
		}
		for i, d := range dropped {
			want := fmt.Sprintf("leg a was served from the cache (a_cached, cached_a %d of %d), and the fit takes leg a cold", points[i].Tokens-1, points[i].Tokens)
			if d.Line != 5+i || d.Reason != want {
				t.Errorf("dropped line %d: %q, want line %d: %q", d.Line, d.Reason, 5+i, want)
			}
		}
		fit, err := calibrate.Fit(kept, p, "fitted")
		if err != nil || fit.MaxError > 1e-6 {
			t.Fatalf("the first run's rows: %v, largest residual %v; want them reproduced exactly", err, fit.MaxError)
		}
	})
}

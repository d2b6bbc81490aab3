package harness_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglmock/sglmock/harness"
	"github.com/sglmock/sglmock/internal/norace"
	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
	"github.com/sglmock/sglmock/mockserver/profile"
)

// lateTransport makes the client see each /generate answer late, as a
// host that cannot keep the mock's speedup does: the first bytes of it
// reach the client delay(request) of (virtual) wall time after the server
// sent them, so a whole answer's time includes the delay, and so does a
// stream's first event.
type lateTransport struct {
	base  http.RoundTripper
	delay func(rid string, maxNew int) time.Duration
}

func (t lateTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	var body struct {
		RID            string `json:"rid"`
		SamplingParams struct {
			MaxNewTokens int `json:"max_new_tokens"`
		} `json:"sampling_params"`
	}
	if r.URL.Path == "/generate" && r.GetBody != nil {
		b, _ := r.GetBody()
		json.NewDecoder(b).Decode(&body)
	}
	resp, err := t.base.RoundTrip(r)
	if err != nil || r.URL.Path != "/generate" {
		return resp, err
	}
	resp.Body = &lateBody{ReadCloser: resp.Body, delay: t.delay(body.RID, body.SamplingParams.MaxNewTokens)}
	return resp, nil
}

type lateBody struct {
	io.ReadCloser
	delay time.Duration
	read  bool
}

func (b *lateBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 && !b.read {
		b.read = true
		time.Sleep(b.delay)
	}
	return n, err
}

// lateClient is a harness client of m whose answers come late.
func lateClient(m *mocktest.Mock, delay func(rid string, maxNew int) time.Duration) *harness.Client {
	return &harness.Client{HTTP: &http.Client{Transport: lateTransport{m.HTTP.Transport, delay}}, BaseURL: m.URL, Backend: harness.SGLang}
}

// A sweep at a speedup the host cannot keep: every answer reaches the
// client 2 ms late, which at x100 is 0.2 simulated seconds, 43 % of the 1k
// row's TTFT. The rows it moves by more than 5 % are SUSPECT with the
// lateness and the speedup at which it would leave 2.5 %; at that speedup
// the same lateness leaves every row within 5 %.
func TestSweepAtASpeedupTheHostCannotKeep(t *testing.T) {
	norace.Skip(t, "checks the verdicts of sweeps")
	const sweepB = 1025
	sweep := func(t *testing.T, speedup float64, delay func(string, int) time.Duration) *harness.Report {
		m := mocktest.Start(t, api.Config{Profile: mocktest.Profile(t, "kimi-k2.6-rtx6000"), Speedup: speedup})
		tp := twoPoint(m, originalPoints, harness.FlushNonce)
		tp.Client = lateClient(m, delay)
		// Over 230 DDTREE rounds: neither the rounds check nor the
		// scatter check has anything to say.
		tp.B = sweepB
		return run(t, tp)
	}
	late := func(string, int) time.Duration { return 2 * time.Millisecond }
	for _, tt := range []struct {
		name  string
		delay func(string, int) time.Duration
		want  []float64 // the speedup each row suggests; 0 where it is fine
		use   float64
	}{
		// A constant lateness moves t_a and t_b alike: TTFT only.
		{"every answer 2 ms late", late, []float64{5, 20, 0}, 5},
		// Leg b later than leg a: decode too.
		{"leg a 1 ms, leg b 4 ms late", func(_ string, maxNew int) time.Duration {
			if maxNew == 1 {
				return time.Millisecond
			}
			return 4 * time.Millisecond
		}, []float64{10, 0, 0}, 10},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rep := sweep(t, 100, tt.delay)
				for i, row := range rep.Rows {
					tr := row.Truth
					// The errors are the lateness: x100 makes 1 ms 0.1 s (to the
					// nanosecond of the wall clock, 1e-7 s simulated).
					lateA := 100 * tt.delay("", 1).Seconds()
					lateB := 100 * tt.delay("", sweepB).Seconds()
					if got, want := tr.TTFTErr, lateA/tr.TTFT; math.Abs(got-want) > 1e-6 {
						t.Errorf("ctx %d: ttft_err %g, want %g", row.CtxReq, got, want)
					}
					dt := (sweepB - 1) / *tr.Decode
					if got, want := *tr.DecodeErr, dt/(dt+lateB-lateA)-1; math.Abs(got-want) > 1e-6 {
						t.Errorf("ctx %d: decode_err %g, want %g", row.CtxReq, got, want)
					}
					cause := "measured off the server's own timeline"
					switch {
					case tt.want[i] == 0:
						if row.Suggested != nil && row.Suggested.Speedup != 0 || strings.Contains(row.Verdict.String(), cause) {
							t.Errorf("ctx %d: verdict %q, suggested %+v; want nothing said of its lateness (errors %+.2f %%, %+.2f %%)",
								row.CtxReq, row.Verdict, row.Suggested, 100*tr.TTFTErr, 100**tr.DecodeErr)
						}
					case row.Verdict.Level() != harness.Suspect || !strings.Contains(row.Verdict.String(), cause) ||
						row.Suggested == nil || row.Suggested.Speedup != tt.want[i]:
						t.Errorf("ctx %d: verdict %q, suggested %+v; want SUSPECT and --speedup %g", row.CtxReq, row.Verdict, row.Suggested, tt.want[i])
					}
				}
				if got := rep.SuggestedSpeedup(); got != tt.use {
					t.Errorf("the sweep suggests x%g, want x%g", got, tt.use)
				}
				again := sweep(t, rep.SuggestedSpeedup(), tt.delay)
				for _, row := range again.Rows {
					tr := row.Truth
					if strings.Contains(row.Verdict.String(), "timeline") || math.Abs(tr.TTFTErr) > harness.Tolerance/2 || math.Abs(*tr.DecodeErr) > harness.Tolerance/2 {
						t.Errorf("at x%g, ctx %d: errors %+.2f %%, %+.2f %%, verdict %q; want within 2.5 %% and nothing said",
							rep.SuggestedSpeedup(), row.CtxReq, 100*tr.TTFTErr, 100**tr.DecodeErr, row.Verdict)
					}
				}
			})
		})
	}
	// The lateness cause, whole, of the first sweep's 1k row (whose
	// decode_bias from the context leg b grows through is SUSPECT too:
	// TestContextGrowth).
	synctest.Test(t, func(t *testing.T) {
		row := sweep(t, 100, late).Rows[0]
		want := fmt.Sprintf("measured off the server's own timeline (ttft_err +%.2f%%, beyond 5 %%): the client's times and the server's differ by 2 ms of wall clock, "+
			"0.2 s simulated at x100, so this host cannot keep x100: run the mock at --speedup 5 or less",
			100*0.2/row.Truth.TTFT)
		var got []string
		for _, c := range row.Verdict.Causes {
			if !strings.HasPrefix(c.Text, "decode_bias is ") {
				got = append(got, c.Text)
			}
		}
		if len(got) != 1 || got[0] != want || row.Verdict.Level() != harness.Suspect {
			t.Errorf("verdict %s: the causes besides the growth\n got %q\nwant [%q]", row.Verdict.Level(), got, want)
		}
	})
}

// Lateness at x1 is the client's own: no speedup removes it, and the
// verdict says so.
func TestLatenessAtSpeedupOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{})
		tp := twoPoint(m, []harness.Point{{CtxReq: 1024, Tokens: 1024}}, harness.FlushNonce)
		tp.Client = lateClient(m, func(string, int) time.Duration { return 10 * time.Millisecond })
		row := run(t, tp).Rows[0]
		if !strings.Contains(row.Verdict.String(), "the client's times and the server's differ by 10 ms of wall clock at x1, which no speedup removes") || row.Suggested != nil {
			t.Errorf("verdict %q, suggested %+v", row.Verdict, row.Suggested)
		}
	})
}

// A stream's first event late by 2 ms at x100: its TTFT is off, and the
// row says which speedup the host keeps.
func TestStreamLateness(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{Profile: mocktest.Profile(t, "kimi-k2.6-rtx6000"), Speedup: 100})
		st := &harness.Stream{Client: lateClient(m, func(string, int) time.Duration { return 2 * time.Millisecond }),
			Points: originalPoints[:1], MaxNewTokens: 256, Options: harness.Options{NewID: counter(), Flush: retryFlushes}}
		row := run(t, st).Stream[0]
		// The first event 0.2 s late, the last on time: the span from one to
		// the other 0.2 s short.
		span := 255 / *row.Truth.Decode
		if got, want := row.Truth.TTFTErr, 0.2/row.Truth.TTFT; math.Abs(got-want) > 1e-6 || math.Abs(*row.Truth.DecodeErr-(span/(span-0.2)-1)) > 1e-6 {
			t.Errorf("errors %g, %g; want %g and %g", got, *row.Truth.DecodeErr, want, span/(span-0.2)-1)
		}
		if row.Suggested == nil || row.Suggested.Speedup != 5 || !strings.Contains(row.Verdict.String(), "run the mock at --speedup 5 or less") {
			t.Errorf("verdict %q, suggested %+v; want --speedup 5", row.Verdict, row.Suggested)
		}
	})
}

// On virtual time nothing is late: no truth cause, whatever the speedup.
func TestNoLatenessOnVirtualTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{Speedup: 1000})
		row := run(t, twoPoint(m, []harness.Point{{CtxReq: 512, Tokens: 512}}, harness.FlushNonce)).Rows[0]
		if row.Verdict.String() != "ok" || row.Suggested != nil {
			t.Errorf("at x1000 on virtual time: verdict %q, suggested %+v; want ok", row.Verdict, row.Suggested)
		}
	})
}

// b-a over a handful of speculative rounds is SUSPECT and names one b for
// this and the model's acceptance scatter both (787 rounds of 2.97 ± 1.10
// tokens); at b = 129, some 43 rounds, the rounds check has nothing to say
// (the scatter check has: TestAcceptanceScatter). Without speculative
// decoding one token is one round, and b = 17 is exact.
func TestSpeculativeRounds(t *testing.T) {
	for _, tt := range []struct {
		profile string
		b       int
		want    string
	}{
		{"llama-8b-eagle3-h100", 17, "SUSPECT: b-a = 16: only %d speculative rounds, and decode moves by a whole round (%d %%) from run to run: use --b 2337 (about 787 rounds of 2.97 tokens, which the scatter of the tokens a round accepts needs too)"},
		{"llama-8b-eagle3-h100", 129, ""},
		{"default", 17, "ok"},
	} {
		synctest.Test(t, func(t *testing.T) {
			p := mocktest.Profile(t, tt.profile)
			p.FlushBusyAfterFinishS = 0 // no overlap flush window: the verdict is the rounds' alone
			m := mocktest.Start(t, api.Config{Profile: p})
			tp := twoPoint(m, []harness.Point{{CtxReq: 1024, Tokens: 1024}}, harness.FlushNonce)
			tp.B = tt.b
			row := run(t, tp).Rows[0]
			rounds := row.Runs[0].B.SpecVerifyCt
			want := tt.want
			if strings.Contains(want, "%d") {
				want = fmt.Sprintf(want, *rounds, 100 / *rounds)
			}
			if got := row.Verdict.String(); want == "" && strings.Contains(got, "moves by a whole round") || want != "" && got != want {
				t.Errorf("%s, b=%d: verdict %q, want %q", tt.profile, tt.b, got, want)
			}
			switch {
			case tt.profile == "default" && (rounds != nil || row.SpecRounds != nil):
				t.Errorf("default: rounds %v, %v; want none reported", rounds, row.SpecRounds)
			case tt.profile != "default" && (rounds == nil || row.SpecRounds == nil || *row.SpecRounds != float64(*rounds)):
				t.Errorf("%s, b=%d: spec rounds %v, leg b's spec_verify_ct %v; want equal", tt.profile, tt.b, row.SpecRounds, rounds)
			}
		})
	}
}

// scatterWant is what the scatter check says of a row of n runs whose legs
// reported hists, b-a spanning rounds: the pooled mean and sample standard
// deviation of the tokens a round gave, the 95 % half-width 1.96 f σ/μ/√(Rn)
// (f = 1.2533 for a median of several runs), and the b and runs that
// would narrow it to 2.5 %.
func scatterWant(hists [][]int, a, b int, rounds float64, n int) (text string, half float64, sug harness.Suggestion) {
	var cnt, sum, ss float64
	for _, h := range hists {
		for i, c := range h {
			cnt += float64(c)
			sum += float64(c * (i + 1))
		}
	}
	mean := sum / cnt
	for _, h := range hists {
		for i, c := range h {
			ss += float64(c) * (float64(i+1) - mean) * (float64(i+1) - mean)
		}
	}
	sd := math.Sqrt(ss / (cnt - 1))
	f, known := 1.0, "one run's decode"
	if n > 1 {
		f, known = 1.2533, fmt.Sprintf("the median of %d runs' decode", n)
	}
	half = 1.96 * f * sd / mean / math.Sqrt(rounds*float64(n))
	need := math.Pow(1.96*f*sd/mean/0.025, 2) / float64(n)
	delta := int(math.Ceil(need*mean/16)) * 16
	runs := int(math.Ceil(math.Pow(1.96*1.2533*sd/mean/0.025, 2) / rounds))
	text = fmt.Sprintf("b-a = %d spans about %s speculative rounds of %.2f ± %.2f tokens, so %s is known to ±%.1f %% only (95 %%): use --b %d (about %d rounds) or --repeat %d",
		b-a, fmt.Sprint(math.Round(10*rounds)/10), mean, sd, known, 100*half, a+delta, int(math.Round(float64(delta)/mean)), runs)
	return text, half, harness.Suggestion{B: a + delta, Repeat: runs}
}

// rowHists are the histograms of accepted drafts a row's legs reported.
func rowHists(t *testing.T, row harness.Row) [][]int {
	t.Helper()
	var hs [][]int
	for _, r := range row.Runs {
		if r.B.SpecHistogram == nil {
			t.Fatalf("ctx %d: leg b reported no histogram", row.CtxReq)
		}
		hs = append(hs, r.A.SpecHistogram, r.B.SpecHistogram)
	}
	return hs
}

// One run of b-a spanning some 44 DDTREE rounds (Kimi's, 4.40 ± 1.53
// tokens) knows decode to about ±10 % (95 %): the row is SUSPECT with the
// numbers its legs' histograms give, and names the b that narrows it to
// ±2.5 %; at that b the row is ok. Under EAGLE3 the b the rounds check
// names (40 rounds) is not enough either. With repeats the median's
// interval narrows by √n, and the row says the wider of it and the
// runs' measured spread, once.
func TestAcceptanceScatter(t *testing.T) {
	norace.Skip(t, "checks the acceptance-scatter verdicts")
	for _, tt := range []struct {
		profile string
		b       int
		repeat  int
	}{
		{"kimi-k2.6-rtx6000", 193, 1},
		{"llama-8b-eagle3-h100", 129, 1},
		{"llama-8b-eagle3-h100", 73, 5},
	} {
		synctest.Test(t, func(t *testing.T) {
			p := mocktest.Profile(t, tt.profile)
			p.FlushBusyAfterFinishS = 0 // no refused flushes: the verdict is the scatter's alone
			m := mocktest.Start(t, api.Config{Profile: p})
			// Kimi's decode slows steeply past 1.4k tokens (TestContextGrowth);
			// at 45k it holds steady over the suggested b.
			point := harness.Point{CtxReq: 1024, Tokens: 1407}
			if tt.profile == "kimi-k2.6-rtx6000" {
				point = harness.Point{CtxReq: 32768, Tokens: 45507}
			}
			tp := twoPoint(m, []harness.Point{point}, harness.FlushNonce)
			tp.B, tp.Repeat = tt.b, tt.repeat
			row := run(t, tp).Rows[0]
			text, half, sug := scatterWant(rowHists(t, row), 1, tt.b, *row.SpecRounds, tt.repeat)
			if got, want := row.Verdict.String(), "SUSPECT: "+text; got != want || half <= harness.Tolerance {
				t.Errorf("%s, b=%d x%d: verdict\n got %q\nwant %q (±%.2f %%)", tt.profile, tt.b, tt.repeat, got, want, 100*half)
			}
			if row.Suggested == nil || *row.Suggested != sug {
				t.Errorf("%s, b=%d x%d: suggested %+v, want %+v", tt.profile, tt.b, tt.repeat, row.Suggested, sug)
			}
			if tt.repeat > 1 {
				return
			}
			// At the suggested b the scatter is ±2.5 %; the decode figure is
			// ok unless the context that b spans moves it too, which its
			// error budget adds up (Kimi at 45k: -3.1 %, ±5.6 % in all).
			tp.B = sug.B
			again := run(t, tp).Rows[0]
			_, half, _ = scatterWant(rowHists(t, again), 1, sug.B, *again.SpecRounds, 1)
			want := "ok"
			if tt.profile == "kimi-k2.6-rtx6000" {
				want = "SUSPECT: decode is known to ±5.6 % only, adding up what is known of its error (acceptance scatter ±2.5 %, context growth -3.1 %), each within 5 % alone: a smaller --b narrows the span of context"
			}
			if again.Verdict.String() != want || half > harness.Tolerance/2*1.2 {
				t.Errorf("%s at the suggested b=%d: verdict %q (±%.2f %%), want %q", tt.profile, sug.B, again.Verdict, 100*half, want)
			}
		})
	}
}

// Repeats that agree say nothing; repeats that scatter (each round's cost
// jittered, which no histogram predicts) are SUSPECT with the median's
// 95 % interval, computed from the runs: ±1.96 x 1.2533 s/√n.
func TestSpreadOverRepeats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{})
		tp := twoPoint(m, []harness.Point{{CtxReq: 1024, Tokens: 1024}}, harness.FlushNonce)
		tp.Repeat = 5
		if row := run(t, tp).Rows[0]; row.Verdict.String() != "ok" || row.Spread != 0 {
			t.Errorf("five exact runs: verdict %q, spread %g; want ok, 0", row.Verdict, row.Spread)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		// Without speculative decoding, a round's cost jittered by 30 %:
		// the runs scatter, and nothing predicts it.
		p := mocktest.Profile(t, "default")
		p.Jitter = 0.3
		m := mocktest.Start(t, api.Config{Profile: p})
		tp := twoPoint(m, []harness.Point{{CtxReq: 1024, Tokens: 1024}}, harness.FlushNonce)
		tp.Repeat, tp.B = 5, 17
		row := run(t, tp).Rows[0]
		var decodes []float64
		for _, r := range row.Runs {
			decodes = append(decodes, 16/(r.B.Seconds-r.A.Seconds))
		}
		mean, ss := 0.0, 0.0
		for _, d := range decodes {
			mean += d / 5
		}
		for _, d := range decodes {
			ss += (d - mean) * (d - mean)
		}
		half := 1.96 * 1.2533 * math.Sqrt(ss/4) / math.Sqrt(5) / *row.DecodeTPS
		want := fmt.Sprintf("is known to ±%s %% only (95 %%); about %d runs would know it to ±2.5 %%",
			fmt.Sprint(math.Round(1000*half)/10), int(math.Ceil(5*half*half/(0.025*0.025))))
		if half <= harness.Tolerance || row.Verdict.Level() != harness.Suspect || !strings.Contains(row.Verdict.String(), want) {
			t.Errorf("verdict %q; want it to say %q", row.Verdict, want)
		}
		// TTFT scatters too, each prefill's cost jittered: its own
		// interval, and the runs that narrow it, which the row suggests
		// when they are more.
		var ttfts []float64
		for _, r := range row.Runs {
			ttfts = append(ttfts, r.A.Seconds)
		}
		slices.Sort(ttfts)
		ttftHalf := 1.96 * 1.2533 * harness.StdDev(ttfts) / math.Sqrt(5) / ttfts[2]
		ttftWant := fmt.Sprintf("TTFT (and so the prefill rate) is known to ±%.1f %% only, adding up what is known of its error (spread over the runs ±%s %%): --repeat %d narrows the spread over the runs to ±2.5 %%",
			100*ttftHalf, fmt.Sprint(math.Round(1000*ttftHalf)/10), int(math.Ceil(5*ttftHalf*ttftHalf/(0.025*0.025))))
		if fv := row.FigureVerdicts; ttftHalf <= harness.Tolerance || fv.TTFT.Level != harness.Suspect || !strings.Contains(row.Verdict.String(), ttftWant) {
			t.Errorf("verdict %q; want it to say %q", row.Verdict, ttftWant)
		}
		runs := max(int(math.Ceil(5*half*half/(0.025*0.025))), int(math.Ceil(5*ttftHalf*ttftHalf/(0.025*0.025))))
		if row.Suggested == nil || row.Suggested.Repeat != runs {
			t.Errorf("suggested %+v, want --repeat %d; verdict %q", row.Suggested, runs, row.Verdict)
		}
	})
}

// One run of three stalled so long that its t_a passed its t_b: the row
// says so of that run, with its times, and its median decode stands (the
// stalled run counts as the fastest).
func TestReversedRunAmongRepeats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{Profile: mocktest.Profile(t, "kimi-k2.6-rtx6000")})
		tp := twoPoint(m, originalPoints[:1], harness.FlushNonce)
		tp.Repeat, tp.B = 3, 193
		// ids 1 and 2 are the floor probe's; run 2's leg a is id-5.
		tp.Client = lateClient(m, func(rid string, _ int) time.Duration {
			if rid == "twopoint-id-5" {
				return 3 * time.Second
			}
			return 0
		})
		row := run(t, tp).Rows[0]
		r := row.Runs[1]
		want := fmt.Sprintf("SUSPECT: t_b <= t_a in 1 of 3 runs (run 2: t_a %.3f, t_b %.3f): their decode is undefined; the median counts them as the fastest", r.A.Seconds, r.B.Seconds)
		if got := row.Verdict.String(); !strings.HasPrefix(got, want) {
			t.Errorf("verdict %q, want it to start %q", got, want)
		}
		d1, d3 := 192/(row.Runs[0].B.Seconds-row.Runs[0].A.Seconds), 192/(row.Runs[2].B.Seconds-row.Runs[2].A.Seconds)
		if row.DecodeTPS == nil || *row.DecodeTPS != math.Max(d1, d3) || *row.Truth.DecodeErr != 0 {
			t.Errorf("decode %v, error %v; want the larger of runs 1 and 3, %g, and error 0", row.DecodeTPS, row.Truth.DecodeErr, math.Max(d1, d3))
		}
		var js bytes.Buffer
		if err := (&harness.Report{Rows: []harness.Row{row}}).WriteJSON(&js); err != nil {
			t.Errorf("the row does not encode: %v", err)
		}
	})
}

// --ctx sends exactly the tokens asked: on the BOS profile, where a
// two-token word steps over the target, and over the OpenAI routes, which
// size with the server's /tokenize too.
func TestContextIsExact(t *testing.T) {
	norace.Skip(t, "checks a sweep's figures")
	for _, backend := range []harness.Backend{harness.SGLang, harness.OpenAI} {
		synctest.Test(t, func(t *testing.T) {
			m := mocktest.Start(t, api.Config{Profile: mocktest.Profile(t, "llama-8b-eagle3-h100")})
			points := []harness.Point{{CtxReq: 1024, Tokens: 1024}, {CtxReq: 8192, Tokens: 8192}, {CtxReq: 32768, Tokens: 32768}}
			tp := twoPoint(m, points, harness.Naive, harness.NonceMethod)
			tp.Client.Backend = backend
			for _, row := range run(t, tp).Rows {
				for _, leg := range []harness.Leg{row.Runs[0].A, row.Runs[0].B} {
					if leg.PromptTokens != row.CtxReq || leg.SizedTokens != row.CtxReq {
						t.Errorf("%s, %s at %d, leg %s: %d prompt tokens (sized %d), want %d", backend, row.Method, row.CtxReq, leg.Name, leg.PromptTokens, leg.SizedTokens, row.CtxReq)
					}
				}
			}
		})
	}
}

// Under --nonce-position end the method's heading says where the nonce is.
func TestNonceAtTheEndHeading(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{})
		tp := twoPoint(m, []harness.Point{{CtxReq: 512, Tokens: 512}}, harness.NonceMethod, harness.FlushNonce)
		tp.NoncePosition = harness.NonceEnd
		var table bytes.Buffer
		if err := run(t, tp).WriteTable(&table); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{
			"method nonce: a fresh nonce at the END of each leg's prompt (--nonce-position end: everything before it is shared), no flush; a=1, b=17\n",
			"method flush+nonce: flush before each leg and a fresh nonce at the END of each prompt (--nonce-position end: everything before it is shared); a=1, b=17\n",
		} {
			if !strings.Contains(table.String(), want) {
				t.Errorf("table lacks %q:\n%s", want, table.String())
			}
		}
	})
}

// On a profile that charges nothing every time is 0: the errors are 0,
// not NaN, and the report encodes.
func TestZeroCostProfile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mocktest.Profile(t, "default")
		p.Prefill, p.Decode = profile.PrefillCost{}, profile.DecodeCost{}
		p.FlushBusyAfterFinishS = 0 // no overlap flush window: this run never retries its flush
		m := mocktest.Start(t, api.Config{Profile: p})
		rep := run(t, twoPoint(m, []harness.Point{{CtxReq: 512, Tokens: 512}}, harness.FlushNonce))
		if row := rep.Rows[0]; row.Truth.TTFTErr != 0 || row.Verdict.String() != "SUSPECT: t_b = t_a, so decode is undefined" {
			t.Errorf("ttft_err %g, verdict %q", row.Truth.TTFTErr, row.Verdict)
		}
		var js bytes.Buffer
		if err := rep.WriteJSON(&js); err != nil {
			t.Errorf("the report does not encode: %v", err)
		}
	})
}

// lateWriteReport is a transport whose report of a finished write (the
// transport's own, from its write goroutine) comes again when the answer
// has arrived, as a descheduled write goroutine's can on a loaded host.
type lateWriteReport struct{ base http.RoundTripper }

func (l lateWriteReport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := l.base.RoundTrip(r)
	if tr := httptrace.ContextClientTrace(r.Context()); tr != nil && tr.WroteRequest != nil {
		tr.WroteRequest(httptrace.WroteRequestInfo{})
	}
	return resp, err
}

// The clock starts before the request is written, on the sending
// goroutine: a late report of the write cannot shorten a measurement
// below the server's own time.
func TestLateWriteReportDoesNotShortenTheMeasurement(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{})
		tp := twoPoint(m, []harness.Point{{CtxReq: 1024, Tokens: 1024}}, harness.FlushNonce)
		tp.Client.HTTP = &http.Client{Transport: lateWriteReport{m.Client.Transport}}
		row := run(t, tp).Rows[0]
		if tr := row.Truth; tr.TTFTErr != 0 || tr.DecodeErr == nil || *tr.DecodeErr != 0 || row.Verdict.String() != "ok" {
			t.Errorf("ttft_err %g, decode_err %v, verdict %q: want 0, 0 and ok", tr.TTFTErr, pctOf(tr.DecodeErr), row.Verdict)
		}
	})
}

// pctOf shows an optional figure.
func pctOf(x *float64) string {
	if x == nil {
		return "undefined"
	}
	return fmt.Sprint(*x)
}

// Over the OpenAI routes the server reports no rounds and no histogram:
// against sglmock the scatter comes from /sim/profile's accept_dist, and
// the rounds from its mean (192 / 4.40385 = 43.6).
func TestAcceptanceScatterFromSim(t *testing.T) {
	norace.Skip(t, "checks the acceptance-scatter verdicts")
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{Profile: mocktest.Profile(t, "kimi-k2.6-rtx6000"), EnableCacheReport: true})
		tp := twoPoint(m, []harness.Point{{CtxReq: 32768, Tokens: 45507}}, harness.NonceMethod)
		tp.Client.Backend = harness.OpenAI
		tp.B = 193
		row := run(t, tp).Rows[0]
		want := "SUSPECT: b-a = 192 spans about 43.6 speculative rounds of 4.40 ± 1.52 tokens, so one run's decode is known to ±10.3 % only (95 %): use --b 3249 (about 738 rounds) or --repeat 27"
		if got := row.Verdict.String(); got != want || row.Runs[0].B.SpecHistogram != nil {
			t.Errorf("verdict\n got %q\nwant %q (leg b's histogram %v, want none)", got, want, row.Runs[0].B.SpecHistogram)
		}
	})
}

// Leg b decodes over a context that grows from prompt+a to prompt+b, and
// the figure is that span's mean rate: where the deployment's decode slows
// across it by more than Tolerance, the row is SUSPECT with the span and
// its rates (Kimi's decode slows steeply past 1.4k tokens); where it holds
// steady, or the span is short, nothing is said of it.
func TestContextGrowth(t *testing.T) {
	norace.Skip(t, "checks the context-growth verdicts")
	for _, tt := range []struct {
		tokens, b int
		want      string
	}{
		{1407, 1025, "(-34.6 % by construction, sglmock's model): leg b decodes from 1408 to 2432 tokens of context, over which this deployment's decode goes from 134.3 to 65.4 tok/s, so the figure is that span's mean rate, not the rate at 1407 (a smaller b narrows the span and widens the scatter, which --repeat narrows)"},
		{1407, 17, ""},
		{45507, 1025, ""},
	} {
		synctest.Test(t, func(t *testing.T) {
			p := mocktest.Profile(t, "kimi-k2.6-rtx6000")
			p.FlushBusyAfterFinishS = 0
			m := mocktest.Start(t, api.Config{Profile: p})
			tp := twoPoint(m, []harness.Point{{CtxReq: tt.tokens, Tokens: tt.tokens}}, harness.FlushNonce)
			tp.B = tt.b
			row := run(t, tp).Rows[0]
			var got string
			for _, c := range row.Verdict.Causes {
				if strings.HasPrefix(c.Text, "decode_bias is ") {
					got = c.Text
				}
			}
			// The note quotes the row's own decode_bias first.
			if row.Truth.DecodeBias != nil && got != "" {
				prefix := fmt.Sprintf("decode_bias is %+.2f %% ", 100**row.Truth.DecodeBias)
				if !strings.HasPrefix(got, prefix) {
					t.Errorf("%d tokens, b=%d: the cause %q does not start with the row's %q", tt.tokens, tt.b, got, prefix)
				}
				got = strings.TrimPrefix(got, prefix)
			}
			if got != tt.want {
				t.Errorf("%d tokens, b=%d: got the cause %q, want %q (verdict %q)", tt.tokens, tt.b, got, tt.want, row.Verdict)
			}
			if tt.want != "" && row.Truth.DecodeBias != nil && math.Abs(*row.Truth.DecodeBias-(-0.346)) > harness.Tolerance {
				t.Errorf("%d tokens, b=%d: decode_bias measured %+.1f %%, want near the -34.6 %% expected", tt.tokens, tt.b, 100**row.Truth.DecodeBias)
			}
		})
	}
}

// A stream's decode figure spans the context its tokens are decoded over
// too: on Kimi at 1407 tokens, 1025 of them read 35 % slow.
func TestContextGrowthOfAStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mocktest.Profile(t, "kimi-k2.6-rtx6000")
		p.FlushBusyAfterFinishS = 0
		m := mocktest.Start(t, api.Config{Profile: p})
		row := run(t, &harness.Stream{Client: client(m), Points: []harness.Point{{CtxReq: 1407, Tokens: 1407}}, MaxNewTokens: 1025, Options: harness.Options{NewID: counter()}}).Stream[0]
		want := "(-34.6 % by construction, sglmock's model): the request decodes from 1408 to 2432 tokens of context, over which this deployment's decode goes from 134.3 to 65.4 tok/s, so the figure is that span's mean rate, not the rate at 1407 (a smaller --max-new-tokens narrows the span and widens the scatter)"
		if !slices.ContainsFunc(row.Verdict.Causes, func(c harness.Cause) bool {
			return c.Level == harness.Suspect && c.Text == fmt.Sprintf("decode_bias is %+.2f %% ", 100**row.Truth.DecodeBias)+want
		}) {
			t.Errorf("verdict %q, want the cause %q", row.Verdict, want)
		}
	})
}

// The longest prompt a context takes (its length less b) runs to the end:
// the span's last point, at the context length itself, is one the model
// does not price, and the span is not judged rather than the run ended.
func TestContextGrowthAtTheContextLength(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mocktest.Profile(t, "default")
		p.ContextLength = 4096
		m := mocktest.Start(t, api.Config{Profile: p})
		tp := twoPoint(m, []harness.Point{{CtxReq: 4096 - 33, Tokens: 4096 - 33}}, harness.FlushNonce)
		tp.B = 33
		row := run(t, tp).Rows[0]
		if row.Truth == nil || row.Truth.DecodeBias == nil {
			t.Fatalf("verdict %q, truth %+v: want the row measured to the end", row.Verdict, row.Truth)
		}
	})
}

// One error budget per figure: kimi at 32k, b = 1025, one run of the flush
// method (the held-out case whose decode_bias came out -5.59 % on an ok
// row). The acceptance scatter of its 233 rounds (±4.4 %) and the context
// leg b grows through (-1.0 %) each pass alone; added up they pass 5 %, so
// decode is SUSPECT with its bound and the runs that narrow it, while TTFT
// and the prefill rate are ok with theirs (0 on virtual time). The CSV and
// the JSON carry each figure's verdict and bound; the table stays one
// level with the figures that differ.
func TestErrorBudgetPerFigure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mocktest.Profile(t, "kimi-k2.6-rtx6000")
		p.FlushBusyAfterFinishS = 0
		m := mocktest.Start(t, api.Config{Profile: p})
		tp := twoPoint(m, []harness.Point{{CtxReq: 32768, Tokens: 45507}}, harness.FlushMethod)
		tp.B = 1025
		rep := run(t, tp)
		row := rep.Rows[0]
		fv := row.FigureVerdicts
		var scatter, growth float64
		for _, part := range fv.Decode.Parts {
			switch part.What {
			case "acceptance scatter":
				scatter = part.Share
			case "context growth":
				growth = part.Share
			default:
				t.Errorf("decode's budget has %+v, want the scatter and the growth only (no lateness on virtual time)", part)
			}
		}
		_, half, _ := scatterWant(rowHists(t, row), 1, 1025, *row.SpecRounds, 1)
		if math.Abs(scatter-half) > 1e-12 || growth >= 0 || math.Abs(growth) > harness.Tolerance || scatter > harness.Tolerance || scatter-growth <= harness.Tolerance {
			t.Fatalf("decode's parts: scatter %v (want %v), growth %v: want each within 5 %% and more than 5 %% added up", scatter, half, growth)
		}
		if fv.Decode.Level != harness.Suspect || fv.Decode.Bound == nil || *fv.Decode.Bound != scatter-growth ||
			fv.TTFT.Level != harness.OK || fv.Prefill.Level != harness.OK || *fv.TTFT.Bound != 0 || *fv.Prefill.Bound != 0 {
			t.Fatalf("figure verdicts %+v", fv)
		}
		runs := int(math.Ceil(math.Pow(scatter*1.2533/0.025, 2)))
		want := fmt.Sprintf("decode is known to ±%.1f %% only, adding up what is known of its error (acceptance scatter ±%s, context growth %+.1f %%), each within 5 %% alone: --repeat %d narrows the acceptance scatter to ±2.5 %%",
			100*(scatter-growth), strconv.FormatFloat(math.Round(1000*scatter)/10, 'f', -1, 64)+" %", 100*growth, runs)
		if row.Verdict.String() != "SUSPECT: "+want || row.Suggested == nil || row.Suggested.Repeat != runs {
			t.Errorf("verdict\n got %q\nwant %q; suggested %+v", row.Verdict, "SUSPECT: "+want, row.Suggested)
		}
		var csvOut, table bytes.Buffer
		if err := rep.WriteCSV(&csvOut); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(csvOut.String()), "\n")
		head, rec := strings.Split(lines[0], ","), strings.Split(lines[1], ",")
		got := map[string]string{}
		for i, h := range head[:min(len(head), len(rec))] {
			got[h] = rec[i]
		}
		if got["ttft_verdict"] != "ok" || got["ttft_bound"] != "0" || got["decode_verdict"] != "SUSPECT" || got["decode_bound"] != strconv.FormatFloat(scatter-growth, 'g', -1, 64) {
			t.Errorf("CSV figure columns %v", got)
		}
		if err := rep.WriteTable(&table); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(table.String(), " SUSPECT (TTFT ok) [1]\n") {
			t.Errorf("table:\n%s", table.String())
		}
		// With the runs it names, the median's scatter is within 2.5 %, and
		// decode adds up within 5 %: the row is ok.
		tp.Repeat = runs
		if again := run(t, tp).Rows[0]; again.Verdict.Level() != harness.OK || again.FigureVerdicts.Decode.Level != harness.OK {
			t.Errorf("--repeat %d: verdict %q, decode %+v", runs, again.Verdict, again.FigureVerdicts.Decode)
		}
	})
}

// A naive row on a server whose cache already holds its prompt (a rerun):
// both legs reuse it alike, so TTFT and the prefill rate are POISONED,
// while the decode figure, the difference of two prefills of the same
// size, is not moved by the reuse and is ok.
func TestNaiveRerunPoisonsTTFTOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{})
		tp := twoPoint(m, []harness.Point{{CtxReq: 1024, Tokens: 1024}}, harness.Naive)
		run(t, tp)
		row := run(t, tp).Rows[0]
		fv := row.FigureVerdicts
		if *row.CachedA != 1023 || *row.CachedB != 1023 || fv.TTFT.Level != harness.Poisoned || fv.Prefill.Level != harness.Poisoned ||
			fv.Decode.Level != harness.OK || fv.TTFT.Bound != nil || fv.Decode.Bound == nil || math.Abs(*row.Truth.DecodeBias) > harness.Tolerance {
			t.Fatalf("cached %d/%d, figure verdicts %+v, decode_bias %v", *row.CachedA, *row.CachedB, fv, *row.Truth.DecodeBias)
		}
		want := []harness.Cause{
			{Level: harness.Poisoned, Text: "leg a reused 1023 of 1024 prompt tokens (cached_tokens)", Figures: []harness.Figure{harness.FigureTTFT, harness.FigurePrefill}},
			{Level: harness.OK, Text: "leg b reused 1023 of 1024 prompt tokens (cached_tokens), as leg a did: their prefills match, so decode is not moved by it", Figures: []harness.Figure{harness.FigureDecode}},
		}
		if fmt.Sprint(row.Verdict.Causes) != fmt.Sprint(want) {
			t.Errorf("causes\n got %+v\nwant %+v", row.Verdict.Causes, want)
		}
		var table bytes.Buffer
		if err := run(t, tp).WriteTable(&table); err != nil || !strings.Contains(table.String(), " POISONED (decode ok) [1,2]\n") {
			t.Errorf("table (%v):\n%s", err, table.String())
		}
	})
}

// Reuse that --allow-shared-prefix tolerates is in the error budget: with
// the nonce at the end of a 1024-token prompt, leg b reuses the 1019
// tokens before it, which the allowance lets through, and its saved
// prefill shortens t_b-t_a over b-a = 64 tokens. The decode figure's bound
// holds its realized bias (+8.6 %), and passes 5 % (+10.7 %): SUSPECT,
// naming the reuse, where it was ok.
func TestToleratedReuseInTheBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{})
		tp := twoPoint(m, []harness.Point{{CtxReq: 1024, Tokens: 1024}}, harness.NonceMethod)
		tp.NoncePosition, tp.B = harness.NonceEnd, 65
		tp.Options.AllowSharedPrefix = 2000
		row := run(t, tp).Rows[0]
		r := row.Runs[0]
		want := 1019.0 / 1024 * r.A.Seconds / (r.B.Seconds - r.A.Seconds)
		var reuse float64
		for _, p := range row.FigureVerdicts.Decode.Parts {
			if p.What == "tolerated reuse" {
				reuse = p.Share
			}
		}
		fv := row.FigureVerdicts
		if *row.CachedA != 0 || *row.CachedB != 1019 || reuse != want || fv.Decode.Level != harness.Suspect ||
			math.Abs(*row.Truth.DecodeBias) > *fv.Decode.Bound || fv.TTFT.Level != harness.OK {
			t.Fatalf("cached %d/%d, reuse part %v (want %v), decode_bias %v, figure verdicts %+v, verdict %q",
				*row.CachedA, *row.CachedB, reuse, want, *row.Truth.DecodeBias, fv, row.Verdict)
		}
		if !strings.Contains(row.Verdict.String(), fmt.Sprintf("decode is known to ±%.1f %% only, adding up what is known of its error (tolerated reuse %+.1f %%", 100**fv.Decode.Bound, 100*want)) {
			t.Errorf("verdict %q", row.Verdict)
		}
	})
}

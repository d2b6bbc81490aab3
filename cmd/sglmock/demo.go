package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sglmock/sglmock/harness"
	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/profile"
)

// demoPoint is one of the original benchmark's contexts and the speedup
// its mock runs at. Precision is arithmetic: a client lateness of e wall seconds is
// speedup*e simulated seconds, so each context runs as fast as its shortest
// timed figure, its TTFT, allows: at x2 the 1k row's 0.46 s is 230 ms of
// wall clock, which a host stall must reach 11 ms to move by 5 %; the 8k
// row's 3.9 s at x20 and the 32k row's 24 s at x50 are 190 and 470 ms.
type demoPoint struct {
	harness.Point
	speedup float64
}

// demoPoints are the original benchmark's sizes: ctx 1024, 8192 and 32768 requested gave
// 1407, 11382 and 45507 prompt tokens.
var demoPoints = []demoPoint{
	{harness.Point{CtxReq: 1024, Tokens: 1407}, 2},
	{harness.Point{CtxReq: 8192, Tokens: 11382}, 20},
	{harness.Point{CtxReq: 32768, Tokens: 45507}, 50},
}

// demoSettings are what the demo runs: its contexts and the b of the fixed
// method. The naive method runs the original benchmark's b = 17.
type demoSettings struct {
	points []demoPoint
	// b is leg b's max_new_tokens in the fixed method. Kimi's DDTREE
	// gives 4.40 tokens a round on average, scattered with a standard
	// deviation of 1.52: b-a = 16 spans about four rounds, and its decode
	// figure moves by a whole round, ±20 %, from run to run (the original
	// benchmark's b = 17). b-a = 1024 spans about 233 rounds, whose mean
	// scatters by 1.52/4.40/√233 = 2.3 % (one standard deviation): one
	// run's decode is known to ±4.4 % (95 %), within the ±5 % the rows'
	// scatter check asks (b-a = 512, 116 rounds, is ±6.3 %, and SUSPECT).
	// The verdicts are the same from run to run, the figures within a few
	// percent, and each row says so. The demo takes about 20 s, most of it
	// leg b's decode at each context's speedup.
	b int
}

var demoDefaults = demoSettings{points: demoPoints, b: 1025}

// originalB is the original benchmark's leg b, which the naive method
// keeps.
const originalB = 17

const demoProfile = "kimi-k2.6-rtx6000"

func runDemo(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		if args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
			fmt.Fprintln(stdout, "Usage: sglmock demo")
			fmt.Fprintln(stdout)
			fmt.Fprintln(stdout, "Starts an in-process mock of Kimi K2.6 on a free loopback port and runs a two-point decode")
			fmt.Fprintln(stdout, "benchmark twice: naive (one prompt sent twice, as the original benchmark did: poisoned), then")
			fmt.Fprintln(stdout, "flush+nonce (its fix), with each figure's error against the modelled truth. Takes about 20 seconds.")
			return 0
		}
		fmt.Fprintf(stderr, "sglmock demo: takes no arguments, got %q\n", args)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	_, code := demo(ctx, demoDefaults, stdout, stderr)
	return code
}

// demo runs the two methods, one mock per context, and prints both tables
// and what they show. It returns the combined report.
func demo(ctx context.Context, set demoSettings, stdout, stderr io.Writer) (*harness.Report, int) {
	p, err := profile.Load(demoProfile)
	if err != nil {
		fmt.Fprintln(stderr, "sglmock demo:", err)
		return nil, 1
	}
	sc, _ := harness.AcceptScatter(p.AcceptDist())
	accept, scatter := sc.Mean, sc.SD/sc.Mean
	rounds := float64(set.b-1) / accept
	fmt.Fprintln(stdout, "sglmock demo: a two-point decode benchmark against a simulated Kimi K2.6 (profile "+demoProfile+"),")
	fmt.Fprintln(stdout, "one in-process mock per context on a loopback port, each at the speedup its row shows.")
	fmt.Fprintf(stdout, "naive sends, as the original benchmark did, a leg with max_new_tokens 1 (t_a) and one with %d (t_b) on the same prompt;\n", originalB)
	fmt.Fprintf(stdout, "flush+nonce sends b = %d: b-a = %d spans about %.0f speculative rounds, not %.0f, so its decode is stable.\n",
		set.b, set.b-1, rounds, float64(originalB-1)/accept)
	fmt.Fprintln(stdout)
	combined := &harness.Report{Method: "twopoint"}
	var fixed []harness.Row
	for i, dp := range set.points {
		// The tables come at the end, naive's rows together; meanwhile each
		// context says what runs and, when it ends, how long it took.
		fmt.Fprintf(stderr, "[%d/%d] ctx %d (%d prompt tokens) at x%g: naive, then flush+nonce ...", i+1, len(set.points), dp.CtxReq, dp.Tokens, dp.speedup)
		start := time.Now()
		rep, err := demoContext(ctx, p, dp, set.b)
		if err != nil {
			fmt.Fprintln(stderr)
			fmt.Fprintln(stderr, "sglmock demo:", err)
			return nil, 1
		}
		fmt.Fprintf(stderr, " %.1f s\n", time.Since(start).Seconds())
		combined.Server = rep.Server
		for _, row := range rep.Rows {
			if row.Method == harness.FlushNonce {
				// The row says why its figures hold from run to run; the
				// harness itself says when the context the leg grows through
				// moves its decode_bias (growthCheck).
				// A row the harness found SUSPECT for that scatter (this
				// run's rounds accepted fewer tokens than the profile's
				// mean), or for its errors added up, already says how well
				// its decode is known.
				if !slices.ContainsFunc(row.Verdict.Causes, func(c harness.Cause) bool {
					return c.Level == harness.Suspect && (strings.Contains(c.Text, "speculative rounds of") || strings.Contains(c.Text, "decode is known to ±"))
				}) {
					row.Verdict.Causes = append(row.Verdict.Causes, harness.Cause{Level: harness.OK,
						Text: fmt.Sprintf("b-a = %d: about %.0f rounds, so one run's decode is known to ±%.1f %% (95 %%) despite the tokens a round accepts",
							set.b-1, rounds, 100*1.96*scatter/math.Sqrt(rounds))})
				}
				fixed = append(fixed, row)
			} else {
				combined.Rows = append(combined.Rows, row)
			}
		}
	}
	combined.Rows = append(combined.Rows, fixed...)
	if err := combined.WriteTable(stdout); err != nil {
		fmt.Fprintln(stderr, "sglmock demo:", err)
		return nil, 1
	}
	worst, undefined := 0.0, 0
	for _, row := range fixed {
		worst = math.Max(worst, math.Abs(row.Truth.TTFTErr))
		if row.Truth.DecodeErr != nil {
			worst = math.Max(worst, math.Abs(*row.Truth.DecodeErr))
		} else {
			undefined++
		}
	}
	within := fmt.Sprintf("within %.2f %%", 100*worst)
	if undefined > 0 {
		within = fmt.Sprintf("within %.2f %% where defined", 100*worst)
	}
	fmt.Fprintln(stdout)
	fmt.Fprintln(stdout, "What happened:")
	fmt.Fprintln(stdout, "  naive: leg b sent the same prompt as leg a, so the server's radix prefix cache served all")
	fmt.Fprintln(stdout, "    but one of its prompt tokens. It skipped the prefill leg a paid for, finished first, and")
	fmt.Fprintln(stdout, "    (b-a)/(t_b-t_a) has no meaning: the original benchmark's nan. The verdict names the cause.")
	fmt.Fprintln(stdout, "  flush+nonce: /flush_cache before each leg (a refused flush is retried and reported) and a")
	fmt.Fprintf(stdout, "    fresh nonce at the start of each prompt keep both legs cold; decode and TTFT are %s\n", within)
	fmt.Fprintln(stdout, "    of the modelled truth of the very requests sent (ttft_err, decode_err). decode_bias is the")
	fmt.Fprintf(stdout, "    method's own error against the steady-state rate at the prompt: at the original b = %d a draw of\n", originalB)
	fmt.Fprintf(stdout, "    whole speculative rounds, ±20 %% from run to run; at b = %d a few percent where decode holds steady.\n", set.b)
	fmt.Fprintln(stdout, "    At 1k it does not: this deployment's decode slows steeply past 1.4k tokens, so the leg's mean rate")
	fmt.Fprintln(stdout, "    is off the rate at the prompt by construction, and the row is SUSPECT for it, with the figure.")
	fmt.Fprintln(stdout, "    Each figure has its own verdict: TTFT and prefill are ok; decode adds up its scatter over one run")
	fmt.Fprintln(stdout, "    and the context it grows through, and is SUSPECT where they pass 5 %, naming the runs that narrow it.")
	fmt.Fprintln(stdout)
	fmt.Fprintln(stdout, "The same measurement against a real SGLang server (no truth columns there; the checks still run):")
	fmt.Fprintf(stdout, "  sglmock bench twopoint --url http://gpu-host:30000 --ctx 1024:1407,8192:11382,32768:45507 --a 1 --b %d --method naive,flush+nonce\n", set.b)
	switch {
	case undefined > 0:
		fmt.Fprintf(stdout, "\nNote: the fixed method's decode came out undefined in %d row(s) (t_b <= t_a): this host stalled\n", undefined)
		fmt.Fprintln(stdout, "longer than a leg's decode takes at that speedup (a stall of e wall seconds is speedup*e simulated).")
	case worst > harness.Tolerance: // the rows' own rule: a row past it is SUSPECT and says so
		fmt.Fprintf(stdout, "\nNote: the fixed method came out %.2f %% off the truth, more than %.0f %%: this host was too busy for\n", 100*worst, 100*harness.Tolerance)
		fmt.Fprintln(stdout, "its wall clock to time a simulation running this fast (a stall of e wall seconds is speedup*e simulated).")
		if s := combined.SuggestedSpeedup(); s > 0 {
			fmt.Fprintf(stdout, "The rows it moved say which speedup it keeps; the lowest they name is x%g.\n", s)
		}
	}
	return combined, 0
}

// demoContext runs naive once at the original benchmark's b, then flush+nonce once at b,
// at one context on a fresh mock.
func demoContext(ctx context.Context, p *profile.Profile, dp demoPoint, b int) (*harness.Report, error) {
	m, err := startLocalMock(p, dp.speedup, api.Config{})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	c := &harness.Client{HTTP: &http.Client{Timeout: harness.DefaultRequestTimeout}, BaseURL: m.URL, Backend: harness.SGLang}
	opt := harness.Options{Flush: harness.FlushPolicy{Retries: 5, RetryWait: 20 * time.Millisecond}}
	rep := &harness.Report{}
	for _, run := range []struct {
		m harness.Method
		b int
	}{{harness.Naive, originalB}, {harness.FlushNonce, b}} {
		tp := &harness.TwoPoint{Client: c, Points: []harness.Point{dp.Point}, A: 1, B: run.b,
			Methods: []harness.Method{run.m}, NoncePosition: harness.NonceStart, Repeat: 1, Options: opt}
		r, err := tp.Run(ctx)
		if err != nil {
			return nil, fmt.Errorf("ctx %d: %w", dp.CtxReq, err)
		}
		rep.Server = r.Server
		rep.Rows = append(rep.Rows, r.Rows...)
	}
	return rep, nil
}

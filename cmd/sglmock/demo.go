package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sglmock/sglmock/harness"
	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/profile"
)

// demoPoint is one of the seed's contexts, the speedup its mock runs at
// and the runs of the fixed method. Precision is arithmetic: a client
// jitter of e wall seconds is speedup*e simulated seconds, and the 1k row's
// t_b - t_a is only about 0.13 s simulated, so the short contexts run
// slower; the median of a few runs keeps one stall of a busy host (a
// descheduled process) out of the figures.
type demoPoint struct {
	harness.Point
	speedup float64
	repeat  int
}

// demoPoints are the seed's sizes: ctx 1024, 8192 and 32768 requested gave
// 1407, 11382 and 45507 prompt tokens.
var demoPoints = []demoPoint{
	{harness.Point{CtxReq: 1024, Tokens: 1407}, 2, 7},
	{harness.Point{CtxReq: 8192, Tokens: 11382}, 15, 3},
	{harness.Point{CtxReq: 32768, Tokens: 45507}, 20, 2},
}

const demoProfile = "kimi-k2.6-rtx6000"

// demoTolerance is what the fixed method must reach: decode and TTFT within
// 2 % of the truth of the requests it sent.
const demoTolerance = 0.02

func runDemo(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		if args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
			fmt.Fprintln(stdout, "Usage: sglmock demo")
			fmt.Fprintln(stdout)
			fmt.Fprintln(stdout, "Starts an in-process mock of Kimi K2.6 on a free loopback port and runs the seed's two-point")
			fmt.Fprintln(stdout, "benchmark twice: naive (the poisoned original), then flush+nonce (the fix), with each figure's")
			fmt.Fprintln(stdout, "error against the modelled truth. Takes about 15 seconds.")
			return 0
		}
		fmt.Fprintf(stderr, "sglmock demo: takes no arguments, got %q\n", args)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	_, code := demo(ctx, demoPoints, stdout, stderr)
	return code
}

// demo runs the two methods, one mock per context, and prints both tables
// and what they show. It returns the combined report.
func demo(ctx context.Context, points []demoPoint, stdout, stderr io.Writer) (*harness.Report, int) {
	p, err := profile.Load(demoProfile)
	if err != nil {
		fmt.Fprintln(stderr, "sglmock demo:", err)
		return nil, 1
	}
	fmt.Fprintln(stdout, "sglmock demo: the seed's two-point decode benchmark against a simulated Kimi K2.6 (profile "+demoProfile+"),")
	fmt.Fprintln(stdout, "one in-process mock per context on a loopback port, each at the speedup its row shows.")
	fmt.Fprintln(stdout, "Each context sends a leg with max_new_tokens 1 (t_a) and one with 17 (t_b) on the same prompt.")
	fmt.Fprintln(stdout)
	combined := &harness.Report{Method: "twopoint"}
	var fixed []harness.Row
	for _, dp := range points {
		rep, err := demoContext(ctx, p, dp)
		if err != nil {
			fmt.Fprintln(stderr, "sglmock demo:", err)
			return nil, 1
		}
		combined.Server = rep.Server
		for _, row := range rep.Rows {
			if row.Method == harness.FlushNonce {
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
	fmt.Fprintln(stdout, "    (b-a)/(t_b-t_a) has no meaning: the seed's nan. The verdict names the cause.")
	fmt.Fprintln(stdout, "  flush+nonce: /flush_cache before each leg (a refused flush is retried and reported) and a")
	fmt.Fprintf(stdout, "    fresh nonce at the start of each prompt keep both legs cold; decode and TTFT are %s\n", within)
	fmt.Fprintln(stdout, "    of the modelled truth of the very requests sent (ttft_err, decode_err; the median of the runs).")
	fmt.Fprintln(stdout, "    decode_bias is the method's own error against the steady-state rate: 16 tokens take a few whole")
	fmt.Fprintln(stdout, "    speculative rounds, the last one partly wasted, so b=17 reads low; a larger b narrows it.")
	fmt.Fprintln(stdout)
	fmt.Fprintln(stdout, "The same measurement against a real SGLang server (no truth columns there; the checks still run):")
	fmt.Fprintln(stdout, "  sglmock bench twopoint --url http://HOST:30000 --ctx 1024:1407,8192:11382,32768:45507 --a 1 --b 17 --method naive,flush+nonce")
	switch {
	case undefined > 0:
		fmt.Fprintf(stdout, "\nNote: the fixed method's decode came out undefined in %d row(s) (t_b <= t_a in a run): this host stalled\n", undefined)
		fmt.Fprintln(stdout, "longer than a leg's decode takes at that speedup (a stall of e wall seconds is speedup*e simulated).")
	case worst > demoTolerance:
		fmt.Fprintf(stdout, "\nNote: the fixed method came out %.2f %% off the truth, more than %.0f %%: this host was too busy for\n", 100*worst, 100*demoTolerance)
		fmt.Fprintln(stdout, "its wall clock to time a simulation running this fast (a stall of e wall seconds is speedup*e simulated).")
	}
	return combined, 0
}

// demoContext runs naive once, then flush+nonce, at one context on a
// fresh mock.
func demoContext(ctx context.Context, p *profile.Profile, dp demoPoint) (*harness.Report, error) {
	m, err := startLocalMock(p, dp.speedup, api.Config{})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	c := &harness.Client{HTTP: &http.Client{}, BaseURL: m.URL, Backend: harness.SGLang}
	opt := harness.Options{Flush: harness.FlushPolicy{Retries: 5, RetryWait: 20 * time.Millisecond}}
	rep := &harness.Report{}
	for _, run := range []struct {
		m      harness.Method
		repeat int
	}{{harness.Naive, 1}, {harness.FlushNonce, dp.repeat}} {
		tp := &harness.TwoPoint{Client: c, Points: []harness.Point{dp.Point}, A: 1, B: 17,
			Methods: []harness.Method{run.m}, NoncePosition: harness.NonceStart, Repeat: run.repeat, Options: opt}
		r, err := tp.Run(ctx)
		if err != nil {
			return nil, fmt.Errorf("ctx %d: %w", dp.CtxReq, err)
		}
		rep.Server = r.Server
		rep.Rows = append(rep.Rows, r.Rows...)
	}
	return rep, nil
}

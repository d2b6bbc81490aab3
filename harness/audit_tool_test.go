package harness_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglmock/sglmock/harness"
	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
)

// npStats are numpy's mean, median and 99th percentile (linear), as the
// load tools compute their figures.
func npStats(xs []float64) (mean, median, p99 float64) {
	s := slices.Clone(xs)
	slices.Sort(s)
	for _, x := range s {
		mean += x
	}
	pct := func(p float64) float64 {
		at := p / 100 * float64(len(s)-1)
		lo := int(at)
		hi := min(lo+1, len(s)-1)
		return s[lo] + (s[hi]-s[lo])*(at-float64(lo))
	}
	return mean / float64(len(s)), pct(50), pct(99)
}

// benchServing plays SGLang's bench_serving on virtual time: a warm-up
// with the first prompt, then each prompt streamed on /generate, timed as
// it times them (TTFT at the first event, ITL per token, an event's gap
// split over its tokens), the client's own lag added to every time it
// takes, and its duration ending after overhead of its own. It returns
// its --output-file line.
func benchServing(t *testing.T, m *mocktest.Mock, prompts []string, output int, lag, overhead time.Duration) []byte {
	t.Helper()
	c := client(m)
	ctx := context.Background()
	if _, err := c.Generate(ctx, harness.Prompt{Text: prompts[0]}, min(output, 32), "warmup", true); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var ttfts, itls, tpots, e2es []float64
	outputs := 0
	var outputLens []int
	for i, p := range prompts {
		g, err := c.Generate(ctx, harness.Prompt{Text: p}, output, fmt.Sprintf("req-%02d", i), true)
		if err != nil {
			t.Fatal(err)
		}
		ttft, latency := (g.Events[0].At + lag).Seconds(), (g.Wall + lag).Seconds()
		ttfts, e2es = append(ttfts, ttft), append(e2es, latency)
		tpots = append(tpots, (latency-ttft)/float64(g.CompletionTokens-1))
		for j := 1; j < len(g.Events); j++ {
			n := g.Events[j].CompletionTokens - g.Events[j-1].CompletionTokens
			for range n {
				itls = append(itls, (g.Events[j].At-g.Events[j-1].At).Seconds()/float64(n))
			}
		}
		outputs += g.CompletionTokens
		outputLens = append(outputLens, g.CompletionTokens)
	}
	time.Sleep(overhead)
	duration := time.Since(start).Seconds()
	res := map[string]any{"backend": "sglang", "duration": duration, "completed": len(prompts), "total_input_tokens": 999,
		"total_output_tokens": outputs, "request_throughput": float64(len(prompts)) / duration, "output_throughput": float64(outputs) / duration,
		"output_lens": outputLens}
	for name, xs := range map[string][]float64{"ttft": ttfts, "itl": itls, "tpot": tpots, "e2e_latency": e2es} {
		mean, median, p99 := npStats(xs)
		res["mean_"+name+"_ms"], res["median_"+name+"_ms"], res["p99_"+name+"_ms"] = mean*1000, median*1000, p99*1000
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// figure finds a compared figure by its key.
func figure(t *testing.T, tc *harness.ToolComparison, key string) harness.ToolFigure {
	t.Helper()
	for _, f := range tc.Figures {
		if f.Key == key {
			return f
		}
	}
	t.Fatalf("no figure %s in %+v", key, tc.Figures)
	return harness.ToolFigure{}
}

// A bench_serving-like tool on virtual time, where its clock is the
// model's: every latency it reports is the truth's to the nanosecond, so
// each difference is 0, but for the throughputs, whose duration holds the
// tool's own time after its last request. With a lag of its own on every
// measurement, the difference is that lag.
func TestCompareToolResult(t *testing.T) {
	for _, lag := range []time.Duration{0, 5 * time.Millisecond} {
		t.Run(fmt.Sprint(lag), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := mocktest.Start(t, api.Config{Profile: mocktest.Profile(t, "llama-8b-eagle3-h100")})
				line := benchServing(t, m, randomPrompts(8, 4), 40, lag, 250*time.Millisecond)
				// bench_serving appends: the file's last line is this run.
				res, err := harness.ReadToolResult(strings.NewReader(`{"mean_e2e_latency_ms": 1, "completed": 3}` + "\n" + string(line) + "\n"))
				if err != nil {
					t.Fatal(err)
				}
				rep := audit(t, m, harness.AuditOptions{})
				tc, err := harness.CompareTool(context.Background(), client(m), rep, "out.jsonl", res)
				if err != nil {
					t.Fatal(err)
				}
				if res.Tool != harness.ToolSGLang || tc.Measured != 8 || tc.WarmUp != 1 || !strings.Contains(tc.Match, "their output lengths agree") {
					t.Fatalf("tool %s, measured %d, warm-up %d, match %q; want bench_serving, 8, 1, agreeing", res.Tool, tc.Measured, tc.WarmUp, tc.Match)
				}
				for _, key := range []string{"mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_e2e_latency_ms", "p99_e2e_latency_ms"} {
					f := figure(t, tc, key)
					if want := 1000 * lag.Seconds(); math.Abs(f.Tool-f.Truth-want) > 1e-6 {
						t.Errorf("%s: tool %v, truth %v: want a difference of %v ms", key, f.Tool, f.Truth, want)
					}
				}
				// Speculative rounds give several tokens an event: the ITL
				// is per token, split as bench_serving splits it.
				if f := figure(t, tc, "mean_itl_ms"); math.Abs(f.DiffPct) > 1e-6 || !strings.HasPrefix(f.Note, "per token") {
					t.Errorf("mean ITL: tool %v, truth %v (%s): want equal, per token", f.Tool, f.Truth, f.Note)
				}
				f := figure(t, tc, "request_throughput")
				span := 8 / f.Truth
				if want := 100 * (span/(span+0.25) - 1); lag == 0 && math.Abs(f.DiffPct-want) > 1e-6 {
					t.Errorf("request throughput: tool %v, truth %v, difference %v %%: want %v %% (the tool's 0.25 s after its last request)", f.Tool, f.Truth, f.DiffPct, want)
				}
				if len(tc.NotCompared) != 1 || !strings.HasPrefix(tc.NotCompared[0], "input tokens:") {
					t.Errorf("not compared: %q, want the input tokens only", tc.NotCompared)
				}
			})
		})
	}
}

// A vLLM result (one JSON object, E2E as e2el, or none at its default
// --percentile-metrics) is read as vLLM's; a file of neither tool is
// refused.
func TestReadToolResult(t *testing.T) {
	res, err := harness.ReadToolResult(strings.NewReader(`{"completed": 20, "failed": 1, "mean_e2el_ms": 12.5, "p99_ttft_ms": 3, "output_lens": [4, 0]}`))
	if err != nil || res.Tool != harness.ToolVLLM || res.Completed != 20 || res.Failed != 1 || res.Figures["p99_ttft_ms"] != 3 || !slices.Equal(res.OutputLens, []int{4, 0}) {
		t.Fatalf("got %+v, %v", res, err)
	}
	// vLLM's default --percentile-metrics (ttft,tpot,itl) writes no E2E.
	res, err = harness.ReadToolResult(strings.NewReader(`{"completed": 20, "failed": 0, "mean_ttft_ms": 3.5, "p99_itl_ms": 1}`))
	if err != nil || res.Tool != harness.ToolVLLM || res.Figures["mean_ttft_ms"] != 3.5 {
		t.Fatalf("vLLM's default result: got %+v, %v", res, err)
	}
	for _, bad := range []string{`{"completed": 3}`, `{"mean_e2el_ms": 1, "completed": -1}`, `not json`, `{"mean_e2el_ms": 1, "completed": 2.5}`} {
		if _, err := harness.ReadToolResult(strings.NewReader(bad)); err == nil {
			t.Errorf("%s: read, want refused", bad)
		}
	}
}

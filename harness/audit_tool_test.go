package harness_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
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
	return benchServingAs(t, m, "sglang", "null", prompts, output, lag, overhead)
}

// benchServingAs is benchServing with its --backend and the accept_length
// it read from the server ("null" for none), written as Python's
// json.dumps writes them, "request_rate": Infinity at its default rate.
// Its ITL is per token where bench_serving's is (its sglang backend, its
// sglang-oai backends when the server reported an accept length), else
// one gap per event.
func benchServingAs(t *testing.T, m *mocktest.Mock, backend, accept string, prompts []string, output int, lag, overhead time.Duration) []byte {
	t.Helper()
	c := client(m)
	ctx := context.Background()
	if _, err := c.Generate(ctx, harness.Prompt{Text: prompts[0]}, min(output, 32), "warmup", true); err != nil {
		t.Fatal(err)
	}
	perToken := backend == "sglang" || accept != "null"
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
			gap := (g.Events[j].At - g.Events[j-1].At).Seconds()
			n := g.Events[j].CompletionTokens - g.Events[j-1].CompletionTokens
			if !perToken {
				itls = append(itls, gap)
				continue
			}
			for range n {
				itls = append(itls, gap/float64(n))
			}
		}
		outputs += g.CompletionTokens
		outputLens = append(outputLens, g.CompletionTokens)
	}
	time.Sleep(overhead)
	duration := time.Since(start).Seconds()
	res := map[string]any{"backend": backend, "request_rate": "INF", "accept_length": "ACCEPT", "duration": duration, "completed": len(prompts), "total_input_tokens": 999,
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
	b = bytes.Replace(b, []byte(`"INF"`), []byte("Infinity"), 1)
	return bytes.Replace(b, []byte(`"ACCEPT"`), []byte(accept), 1)
}

// compareFile audits the mock and compares the tool's result file with it.
func compareFile(t *testing.T, m *mocktest.Mock, file []byte) (*harness.ToolResult, *harness.ToolComparison) {
	t.Helper()
	res, err := harness.ReadToolResult(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	rep := audit(t, m, harness.AuditOptions{})
	tc, err := harness.CompareTool(context.Background(), client(m), rep, "out.jsonl", res)
	if err != nil {
		t.Fatal(err)
	}
	return res, tc
}

// Each tool's ITL is compared with the truth counted its way, and the
// comparison names the way: bench_serving's sglang-oai backends spread an
// event's gap over its tokens when the server reported an accept length
// (use_retokenized_itl), and count one gap an event when it did not; on
// speculative rounds of several tokens an event the two differ by the
// accept length, so a truth counted the other way would be far off.
func TestToolITLDefinitions(t *testing.T) {
	for _, tt := range []struct {
		backend, accept string
		how             string
	}{
		{"sglang", "null", "per token: bench_serving's sglang backend spreads an event's gap over the tokens meta_info counts"},
		{"sglang-oai", "4.39", "per token: bench_serving's sglang-oai backend spreads an event's gap over its tokens, as the server reported an accept length (4.39)"},
		{"sglang-oai-chat", "4.39", "per token: bench_serving's sglang-oai-chat backend spreads an event's gap over its tokens, as the server reported an accept length (4.39)"},
		{"sglang-oai", "null", "per event: one gap per stream event, whatever tokens it carried, as bench_serving's sglang-oai backend counts it when the server reports no accept length"},
		{"vllm", "null", "per event: one gap per stream event, whatever tokens it carried, as bench_serving's vllm backend counts it"},
	} {
		t.Run(tt.backend+"/"+tt.accept, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := mocktest.Start(t, api.Config{Profile: mocktest.Profile(t, "llama-8b-eagle3-h100")})
				_, tc := compareFile(t, m, benchServingAs(t, m, tt.backend, tt.accept, randomPrompts(4, 4), 40, 0, 0))
				want := tt.how + "; the truth counts it the same way, each decode round's run taken as equal rounds"
				for _, key := range []string{"mean_itl_ms", "median_itl_ms", "p99_itl_ms"} {
					if f := figure(t, tc, key); math.Abs(f.DiffPct) > 1e-6 {
						t.Errorf("%s: tool %v, truth %v (%+.1f %%): want equal", key, f.Tool, f.Truth, f.DiffPct)
					}
				}
				if f := figure(t, tc, "mean_itl_ms"); f.Note != want {
					t.Errorf("note %q, want %q", f.Note, want)
				}
			})
		})
	}
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
				res, tc := compareFile(t, m, append([]byte(`{"mean_e2e_latency_ms": 1, "completed": 3}`+"\n"), append(line, '\n')...))
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
	// bench_serving's --output-file as Python's json.dumps writes it: at
	// its default --request-rate inf, "request_rate": Infinity; a figure
	// of no value (numpy's mean of none) NaN; the server's info nested.
	line := `{"tag": null, "backend": "sglang-oai", "dataset_name": "random-ids", "request_rate": Infinity, "max_concurrency": 4, ` +
		`"server_info": {"model_path": "moonshotai/Kimi-K2.6", "internal_states": [{"avg_spec_accept_length": 4.39}], "note": "NaN \" Infinity"}, ` +
		`"duration": 1.5, "completed": 20, "total_output_tokens": 640, "request_throughput": 13.3, "mean_e2e_latency_ms": 230.5, ` +
		`"mean_ttft_ms": 120.25, "mean_itl_ms": NaN, "std_itl_ms": NaN, "p99_itl_ms": -Infinity, "accept_length": 4.39}`
	res, err = harness.ReadToolResult(strings.NewReader(line + "\n"))
	if err != nil || res.Tool != harness.ToolSGLang || res.Completed != 20 || res.Figures["mean_ttft_ms"] != 120.25 || res.Backend != "sglang-oai" || res.AcceptLength != 4.39 {
		t.Fatalf("bench_serving's line: got %+v, %v", res, err)
	}
	if want := map[string]string{"request_rate": "Infinity", "mean_itl_ms": "NaN", "std_itl_ms": "NaN", "p99_itl_ms": "-Infinity"}; !maps.Equal(res.NotFinite, want) {
		t.Errorf("not finite: got %v, want %v", res.NotFinite, want)
	}
	// vLLM writes its rate as the string "inf", which is no figure.
	res, err = harness.ReadToolResult(strings.NewReader(`{"backend": "vllm", "request_rate": "inf", "completed": 20, "failed": 0, "mean_ttft_ms": 3.5}`))
	if err != nil || res.Tool != harness.ToolVLLM || len(res.NotFinite) != 0 || has(res.Figures, "request_rate") {
		t.Fatalf("vLLM's rate inf: got %+v, %v", res, err)
	}
	for _, bad := range []string{`{"completed": 3}`, `{"mean_e2el_ms": 1, "completed": -1}`, `not json`, `{"mean_e2el_ms": 1, "completed": 2.5}`} {
		if _, err := harness.ReadToolResult(strings.NewReader(bad)); err == nil {
			t.Errorf("%s: read, want refused", bad)
		}
	}
}

func has(m map[string]float64, k string) bool { _, ok := m[k]; return ok }

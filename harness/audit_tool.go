package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// Load tools whose result files audit reads.
const (
	// ToolSGLang is SGLang's bench_serving: --output-file appends one JSON
	// line per run (the last is read); E2E is "e2e_latency".
	ToolSGLang = "sglang bench_serving"
	// ToolVLLM is vLLM's benchmark_serving (vllm bench serve):
	// --save-result writes one JSON object; E2E is "e2el", written only
	// when --percentile-metrics names it (its default is ttft,tpot,itl).
	ToolVLLM = "vllm bench serve"
)

// maxToolResult bounds a result file: with --output-details it holds every
// request's generated text.
const maxToolResult = 1 << 30

// ToolResult is a load tool's figures, read from its result file: times
// in milliseconds, throughputs per second, as the tool wrote them.
type ToolResult struct {
	Tool string
	// Completed and Failed are the requests of its measured run.
	Completed int
	Failed    int
	// Figures holds every number the file has at its top level, by key.
	Figures map[string]float64
	// OutputLens are the measured requests' output lengths, when the file
	// has them (0 for a failed one).
	OutputLens []int
}

// ReadToolResult reads a bench_serving output file (JSON lines: the last
// run's line) or a vLLM --save-result file (one JSON object).
func ReadToolResult(r io.Reader) (*ToolResult, error) {
	b, err := readBounded(r, maxToolResult)
	if err != nil {
		return nil, err
	}
	var raw map[string]json.RawMessage
	if json.Unmarshal(b, &raw) != nil {
		lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
		if err := json.Unmarshal(lines[len(lines)-1], &raw); err != nil {
			return nil, fmt.Errorf("neither a JSON object (vLLM's --save-result) nor JSON lines (bench_serving's --output-file): %w", err)
		}
	}
	res := &ToolResult{Figures: map[string]float64{}}
	for k, v := range raw {
		var x float64
		if json.Unmarshal(v, &x) == nil {
			res.Figures[k] = x
		}
	}
	// bench_serving always writes its E2E; vLLM writes each figure only
	// when --percentile-metrics names it, by default TTFT, TPOT and ITL.
	switch {
	case has(res.Figures, "mean_e2e_latency_ms"):
		res.Tool = ToolSGLang
	case has(res.Figures, "mean_e2el_ms"), has(res.Figures, "mean_ttft_ms"):
		res.Tool = ToolVLLM
	default:
		return nil, errors.New("not a result file of bench_serving (no mean_e2e_latency_ms) or of vLLM's benchmark (no mean_ttft_ms or mean_e2el_ms)")
	}
	completed, ok := res.Figures["completed"]
	if !ok || completed < 0 || completed > 1e9 || completed != math.Trunc(completed) {
		return nil, fmt.Errorf("the result has no valid count of completed requests (%v)", raw["completed"])
	}
	res.Completed, res.Failed = int(completed), int(max(min(res.Figures["failed"], 1e9), 0))
	if lens, ok := raw["output_lens"]; ok {
		json.Unmarshal(lens, &res.OutputLens)
	}
	return res, nil
}

func has(m map[string]float64, k string) bool { _, ok := m[k]; return ok }

// ToolFigure is one of the tool's figures beside the truth's.
type ToolFigure struct {
	Name  string  `json:"name"`
	Key   string  `json:"key"`
	Tool  float64 `json:"tool"`
	Truth float64 `json:"truth"`
	// DiffPct is (tool - truth) / truth, in percent.
	DiffPct float64 `json:"diff_pct"`
	Note    string  `json:"note,omitempty"`
}

// ToolComparison is a load tool's own figures against the truth of the
// requests it measured: the client's own error, which only a server that
// knows the truth can show.
type ToolComparison struct {
	File string `json:"file"`
	Tool string `json:"tool"`
	// Against is "truth" (the mock's model) or "proxy" (the times the
	// recording proxy saw, next to the server).
	Against string `json:"against"`
	// Measured is the requests the tool's figures cover: the last ones
	// the command sent; WarmUp the ones before them.
	Measured int          `json:"measured"`
	WarmUp   int          `json:"warm_up"`
	Match    string       `json:"match"`
	Figures  []ToolFigure `json:"figures"`
	// NotCompared says which figures were not compared and why.
	NotCompared []string `json:"not_compared"`
}

// CompareTool compares a tool's figures with the records of the requests
// it measured: the last Completed+Failed the command sent (its warm-up,
// which its figures leave out, comes first). Times are converted to the
// wall clock at the speedup. Against the mock, ITL comes from each
// request's decode rounds (truth); through the proxy only TTFT, E2E and
// TPOT are known.
func CompareTool(ctx context.Context, c *Client, rep *AuditReport, file string, res *ToolResult) (*ToolComparison, error) {
	tc := &ToolComparison{File: file, Tool: res.Tool, Against: "truth"}
	if rep.Upstream != "" {
		tc.Against = "proxy"
	}
	n := res.Completed + res.Failed
	if n == 0 || n > len(rep.Requests) {
		tc.NotCompared = append(tc.NotCompared, fmt.Sprintf("everything: the tool says it measured %d requests, the server recorded %d", n, len(rep.Requests)))
		return tc, nil
	}
	tc.WarmUp = len(rep.Requests) - n
	measured := rep.Requests[tc.WarmUp:]
	// The truth is what the server recorded: a request whose answer the
	// proxy could not read (no end) or whose counts are impossible has no
	// times or counts to stand beside the tool's.
	var done []AuditRequest
	unknown := 0
	for _, r := range measured {
		switch {
		case rep.Upstream != "" && r.Finished == 0, impossibleAudit(&r) != "":
			unknown++
		case r.FinishReason != "abort":
			done = append(done, r)
		}
	}
	if unknown > 0 {
		tc.NotCompared = append(tc.NotCompared, fmt.Sprintf("%s without times or counts to read (an answer the proxy could not read, impossible counts): every figure covers the others only",
			plural(unknown, "measured request")))
	}
	tc.Measured = len(done)
	tc.Match = fmt.Sprintf("its figures cover the last %s the command sent (its completed and failed); before them came %s, its warm-up",
		plural(n, "request"), plural(tc.WarmUp, "request"))
	if len(res.OutputLens) > 0 {
		var tool, truth []int
		for _, l := range res.OutputLens {
			if l > 0 {
				tool = append(tool, l)
			}
		}
		for _, r := range done {
			truth = append(truth, r.CompletionTokens)
		}
		slices.Sort(tool)
		slices.Sort(truth)
		if slices.Equal(tool, truth) {
			tc.Match += "; their output lengths agree with the tool's"
		} else {
			tc.Match += "; their output lengths differ from the tool's output_lens: the tool's figures may cover other requests"
		}
	}
	scale := 1000 / rep.Speedup // server seconds to wall milliseconds
	var ttft, tpot, e2e []float64
	first, last, output := math.Inf(1), math.Inf(-1), 0
	for _, r := range done {
		if r.TTFT != nil {
			ttft = append(ttft, *r.TTFT*scale)
			if r.CompletionTokens > 1 {
				tpot = append(tpot, (r.E2E-*r.TTFT)*scale/float64(r.CompletionTokens-1))
			}
		}
		e2e = append(e2e, r.E2E*scale)
		first, last = min(first, r.Arrival), max(last, r.Arrival+r.E2E)
		output += r.CompletionTokens
	}
	e2eKey := "e2e_latency"
	if res.Tool == ToolVLLM {
		e2eKey = "e2el"
	}
	tc.summary(res, "TTFT", "ttft", ttft)
	tc.summary(res, "TPOT", "tpot", tpot)
	tc.summary(res, "E2E", e2eKey, e2e)
	if tc.Against == "truth" {
		itl, perToken, err := truthITL(ctx, c, done, scale)
		if err != nil {
			return nil, err
		}
		before := len(tc.Figures)
		tc.summary(res, "ITL", "itl", itl)
		if len(tc.Figures) > before {
			tc.Figures[before].Note = "one gap per stream event, each decode round's run taken as equal rounds"
			if perToken {
				tc.Figures[before].Note = "per token, an event's gap split over its tokens as bench_serving does on /generate; each decode round's run taken as equal rounds"
			}
		}
	} else {
		tc.NotCompared = append(tc.NotCompared, "ITL: the proxy keeps no time of each stream event")
	}
	if span := (last - first) / rep.Speedup; len(done) > 0 && span > 0 {
		tc.add(res, "request throughput (req/s)", "request_throughput", float64(len(done))/span,
			"over the span from the first request's arrival to the last one's finish; the tool's duration adds its own time around them")
		tc.add(res, "output throughput (tok/s)", "output_throughput", float64(output)/span, "")
	}
	tc.add(res, "output tokens", "total_output_tokens", float64(output), "")
	tc.NotCompared = append(tc.NotCompared, "input tokens: the tool counts its dataset's lengths with its own tokenizer, not what the server tokenized")
	return tc, nil
}

// summary adds the mean, median and p99 of one figure, in milliseconds.
func (tc *ToolComparison) summary(res *ToolResult, name, key string, truth []float64) {
	if len(truth) == 0 {
		tc.NotCompared = append(tc.NotCompared, fmt.Sprintf("%s: no measured request has one in the truth", name))
		return
	}
	if !has(res.Figures, "mean_"+key+"_ms") {
		missing := fmt.Sprintf("%s: the result file has no mean_%s_ms", name, key)
		if res.Tool == ToolVLLM {
			missing += fmt.Sprintf(" (vLLM writes a figure only when --percentile-metrics names it: add %s)", key)
		}
		tc.NotCompared = append(tc.NotCompared, missing)
		return
	}
	if key == "ttft" && res.Figures["mean_ttft_ms"] == 0 {
		tc.NotCompared = append(tc.NotCompared, "TTFT: the tool reports 0: it did not stream, so it saw no first token")
		return
	}
	s := summarize(truth)
	tc.add(res, "mean "+name+" (ms)", "mean_"+key+"_ms", s.Mean, "")
	tc.add(res, "median "+name+" (ms)", "median_"+key+"_ms", s.Median, "")
	tc.add(res, "p99 "+name+" (ms)", "p99_"+key+"_ms", s.P99, "")
}

// add compares one figure, or says the file lacks it.
func (tc *ToolComparison) add(res *ToolResult, name, key string, truth float64, note string) {
	tool, ok := res.Figures[key]
	if !ok {
		tc.NotCompared = append(tc.NotCompared, fmt.Sprintf("%s: the result file has no %s", name, key))
		return
	}
	f := ToolFigure{Name: name, Key: key, Tool: tool, Truth: truth, Note: note}
	if truth != 0 {
		f.DiffPct = 100 * (tool - truth) / truth
	}
	tc.Figures = append(tc.Figures, f)
}

// truthITL is every inter-token gap a streaming client sees, from each
// request's decode rounds: the gap from the previous event to a round's
// end. A round's tokens arrive in one event; on /generate the load tools
// split its gap evenly over them (bench_serving's adjusted ITL), on the
// OpenAI routes they count the event once. Within a stored run of rounds
// each round is taken as one equal share of the run's duration.
func truthITL(ctx context.Context, c *Client, rs []AuditRequest, scale float64) ([]float64, bool, error) {
	var itl []float64
	perToken := true
	for _, r := range rs {
		if r.TTFT == nil || r.CompletionTokens < 2 {
			continue
		}
		t, err := c.Truth(ctx, r.RID)
		if err != nil {
			return nil, false, fmt.Errorf("the truth of %s: %w", r.RID, err)
		}
		split := r.Route == "" || strings.HasPrefix(r.Route, "/generate")
		perToken = perToken && split
		prev := *t.FirstToken
		for _, run := range t.Rounds {
			if run.Count <= 0 || run.Count > maxRoundsPerRun {
				return nil, false, fmt.Errorf("the truth of %s has a run of %d rounds", r.RID, run.Count)
			}
			each := run.Duration / float64(run.Count)
			for i := range run.Count {
				end := run.Start + each*float64(i+1)
				gap := (end - prev) * scale
				prev = end
				if split && run.Gained > 1 {
					for range run.Gained {
						itl = append(itl, gap/float64(run.Gained))
					}
					continue
				}
				itl = append(itl, gap)
			}
		}
	}
	return itl, perToken, nil
}

// maxRoundsPerRun bounds a truth's run before it sizes a loop: no request
// decodes more rounds than a context holds tokens.
const maxRoundsPerRun = 1 << 24

func (tc *ToolComparison) write(b *strings.Builder) {
	fmt.Fprintf(b, "the tool's own figures (%s, %s) against the %s, on the wall clock: %s\n", tc.Tool, tc.File, tc.Against, tc.Match)
	if len(tc.Figures) > 0 {
		t := &table{head: []string{"figure", "tool says", tc.Against, "difference"}, alignLast: true}
		for _, f := range tc.Figures {
			t.add(f.Name, sig(f.Tool), sig(f.Truth), fmt.Sprintf("%+.1f %%", f.DiffPct))
		}
		t.write(b)
		for _, f := range tc.Figures {
			if f.Note != "" {
				fmt.Fprintf(b, "%s: %s\n", f.Name, f.Note)
			}
		}
	}
	for _, n := range tc.NotCompared {
		fmt.Fprintf(b, "not compared: %s\n", n)
	}
}

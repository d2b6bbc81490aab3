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
	// NotFinite holds the keys whose value Python wrote as NaN, Infinity
	// or -Infinity (bench_serving's request_rate at its default, a mean
	// over no request), with that value.
	NotFinite map[string]string
	// Backend is the tool's --backend, as its file names it ("" when it
	// does not); AcceptLength is bench_serving's accept_length, the mean
	// tokens a speculative round gave as the server reported it (0 when
	// null or absent). Together they say how the tool counted its ITL.
	Backend      string
	AcceptLength float64
}

// ReadToolResult reads a bench_serving output file (JSON lines: the last
// run's line) or a vLLM --save-result file (one JSON object).
func ReadToolResult(r io.Reader) (*ToolResult, error) {
	b, err := readBounded(r, maxToolResult)
	if err != nil {
		return nil, err
	}
	b = pythonJSON(b)
	var raw map[string]json.RawMessage
	if json.Unmarshal(b, &raw) != nil {
		lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
		if err := json.Unmarshal(lines[len(lines)-1], &raw); err != nil {
			return nil, fmt.Errorf("neither a JSON object (vLLM's --save-result) nor JSON lines (bench_serving's --output-file): %w", err)
		}
	}
	res := &ToolResult{Figures: map[string]float64{}, NotFinite: map[string]string{}}
	for k, v := range raw {
		var x float64
		var s string
		switch {
		case json.Unmarshal(v, &x) == nil:
			res.Figures[k] = x
		case json.Unmarshal(v, &s) == nil && strings.HasPrefix(s, pythonMark):
			res.NotFinite[k] = strings.TrimPrefix(s, pythonMark)
		}
	}
	json.Unmarshal(raw["backend"], &res.Backend)
	res.AcceptLength = max(res.Figures["accept_length"], 0)
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

// pythonMark starts the string pythonJSON puts in place of a number JSON
// has not: no string a tool writes starts with a NUL.
const pythonMark = "\x00"

// pythonJSON rewrites what Python's json module writes for the floats JSON
// has not, NaN, Infinity and -Infinity (bench_serving's request_rate at its
// default, inf; numpy's mean of no value), as strings marked with
// pythonMark, outside strings only, so that Go's decoder reads the rest:
// {"request_rate": Infinity} becomes {"request_rate": "\u0000Infinity"}.
func pythonJSON(b []byte) []byte {
	var out []byte // nil until something is rewritten
	inString, escaped := false, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if !inString {
			if word := pythonNumber(b[i:]); word != "" {
				if out == nil {
					out = append(make([]byte, 0, len(b)+64), b[:i]...)
				}
				out = append(out, `"\u0000`+word+`"`...)
				i += len(word) - 1
				continue
			}
		}
		switch {
		case inString && escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		}
		if out != nil {
			out = append(out, c)
		}
	}
	if out == nil {
		return b
	}
	return out
}

// pythonNumber is the float JSON has not that b starts with: "NaN",
// "Infinity", "-Infinity", or "".
func pythonNumber(b []byte) string {
	for _, word := range []string{"NaN", "Infinity", "-Infinity"} {
		if bytes.HasPrefix(b, []byte(word)) {
			return word
		}
	}
	return ""
}

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
		perToken, how := toolITL(res, done)
		itl, err := truthITL(ctx, c, done, scale, perToken)
		if err != nil {
			return nil, err
		}
		before := len(tc.Figures)
		tc.summary(res, "ITL", "itl", itl)
		if len(tc.Figures) > before {
			tc.Figures[before].Note = how + "; the truth counts it the same way, each decode round's run taken as equal rounds"
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
	if v, ok := res.NotFinite["mean_"+key+"_ms"]; ok {
		tc.NotCompared = append(tc.NotCompared, fmt.Sprintf("%s: the tool wrote %s for mean_%s_ms", name, v, key))
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
	if v, notFinite := res.NotFinite[key]; notFinite {
		tc.NotCompared = append(tc.NotCompared, fmt.Sprintf("%s: the tool wrote %s for %s", name, v, key))
		return
	}
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

// toolITL says how the tool counted its ITL, so that the truth counts it
// the same way: per token (an event's gap spread evenly over its tokens) or
// per event (one gap an event, whatever it carried). bench_serving spreads
// the gap over the tokens meta_info counts on /generate (its sglang and
// sglang-native backends), and over the tokens it retokenizes an event's
// text into on its sglang-oai backends when the server reported an
// accept length (calculate_metrics' use_retokenized_itl); every other
// backend, and vLLM's benchmark, counts one gap an event. A file that
// names no backend is judged by the route the requests came by.
func toolITL(res *ToolResult, rs []AuditRequest) (perToken bool, how string) {
	const perEvent = "per event: one gap per stream event, whatever tokens it carried"
	if res.Tool != ToolSGLang {
		return false, perEvent + ", as vLLM's benchmark counts it"
	}
	switch res.Backend {
	case "sglang", "sglang-native":
		return true, "per token: bench_serving's " + res.Backend + " backend spreads an event's gap over the tokens meta_info counts"
	case "sglang-oai", "sglang-oai-chat":
		if res.AcceptLength > 0 {
			return true, fmt.Sprintf("per token: bench_serving's %s backend spreads an event's gap over its tokens, as the server reported an accept length (%.2f)",
				res.Backend, res.AcceptLength)
		}
		return false, perEvent + ", as bench_serving's " + res.Backend + " backend counts it when the server reports no accept length"
	case "":
		if len(rs) > 0 && strings.HasPrefix(routeKey(rs[0].Route), "/generate") {
			return true, "per token: an event's gap spread over its tokens, as bench_serving does on /generate"
		}
		return false, perEvent
	}
	return false, fmt.Sprintf("%s, as bench_serving's %s backend counts it", perEvent, res.Backend)
}

// truthITL is every inter-token gap a streaming client sees, from each
// request's decode rounds: the gap from the previous event to a round's
// end. A round's tokens arrive in one event; perToken splits its gap
// evenly over them, else the event counts once (toolITL). Within a stored
// run of rounds each round is taken as one equal share of the run's
// duration.
func truthITL(ctx context.Context, c *Client, rs []AuditRequest, scale float64, perToken bool) ([]float64, error) {
	var itl []float64
	for _, r := range rs {
		if r.TTFT == nil || r.CompletionTokens < 2 {
			continue
		}
		t, err := c.Truth(ctx, r.RID)
		if err != nil {
			return nil, fmt.Errorf("the truth of %s: %w", r.RID, err)
		}
		prev := *t.FirstToken
		for _, run := range t.Rounds {
			if run.Count <= 0 || run.Count > maxRoundsPerRun {
				return nil, fmt.Errorf("the truth of %s has a run of %d rounds", r.RID, run.Count)
			}
			each := run.Duration / float64(run.Count)
			for i := range run.Count {
				end := run.Start + each*float64(i+1)
				gap := (end - prev) * scale
				prev = end
				if perToken && run.Gained > 1 {
					for range run.Gained {
						itl = append(itl, gap/float64(run.Gained))
					}
					continue
				}
				itl = append(itl, gap)
			}
		}
	}
	return itl, nil
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

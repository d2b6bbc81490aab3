package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sglmock/sglmock/harness"
	"github.com/sglmock/sglmock/internal/norace"
	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
	"github.com/sglmock/sglmock/mockserver/profile"
)

// These tests run testdata/loadgen.py, a stdlib-only Python script that
// behaves like SGLang's bench_serving and vLLM's benchmark_serving, under
// audit, over real loopback: what the tools send, audit judges. The
// verdicts and the model's figures are exact; the times the script
// measures are the wall clock's.

func python(t *testing.T) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	return py
}

// auditLoad runs audit with args over loadgen.py with load's arguments;
// it returns the exit status, stdout and the JSON report.
func auditLoad(t *testing.T, args []string, load ...string) (int, string, *harness.AuditReport) {
	t.Helper()
	js := filepath.Join(t.TempDir(), "audit.json")
	cmd := append([]string{"audit", "--json", js}, args...)
	cmd = append(cmd, "--", python(t), "testdata/loadgen.py")
	cmd = append(cmd, load...)
	var stdout, stderr bytes.Buffer
	code := run(cmd, &stdout, &stderr)
	var rep harness.AuditReport
	if b, err := os.ReadFile(js); err == nil {
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatalf("the JSON report: %v", err)
		}
	} else if code != 2 {
		t.Fatalf("no JSON report (exit %d): %v\n%s%s", code, err, stdout.String(), stderr.String())
	}
	t.Logf("sglmock %s\n%s", strings.Join(cmd[:len(cmd)-len(load)-2], " "), stdout.String())
	return code, stdout.String() + stderr.String(), &rep
}

// wrapped is a cause as the report writes it under its request: indented
// by 6, wrapped at 80 columns.
func wrapped(cause string) string {
	var b strings.Builder
	col := 0
	for _, w := range strings.Fields(cause) {
		switch {
		case col == 0:
			b.WriteString("      ")
			col = 6
		case col+1+len(w) > 80:
			b.WriteString("\n      ")
			col = 6
		default:
			b.WriteString(" ")
			col++
		}
		b.WriteString(w)
		col += len(w)
	}
	return b.String() + "\n"
}

// byLevel lists the rids of the requests at level.
func byLevel(rep *harness.AuditReport, l harness.Level) []string {
	var out []string
	for _, r := range rep.Requests {
		if r.Verdict.Level() == l {
			out = append(out, r.RID)
		}
	}
	return out
}

// onlyTheWarmupRepeat checks that the one POISONED request is the measured
// copy of the first prompt, a repeat of the warm-up, with the TTFT the
// model says the cache saved it.
func onlyTheWarmupRepeat(t *testing.T, p *profile.Profile, rep *harness.AuditReport, out string) harness.AuditRequest {
	t.Helper()
	poisoned := byLevel(rep, harness.Poisoned)
	if len(poisoned) != 1 || len(rep.Requests) < 2 || poisoned[0] != rep.Requests[1].RID {
		t.Fatalf("POISONED %v, want only the second request\n%s", poisoned, out)
	}
	r := rep.Requests[1]
	cold := p.Expect(r.PromptTokens, 0, 1).TTFT.Seconds()
	if r.Pattern != harness.Repeat || r.Source != rep.Requests[0].RID || r.ColdPrefillCost != cold || r.Saved != cold-r.PrefillCost || !r.Material {
		t.Fatalf("%s: pattern %s from %s, cold %v (want %v), saved %v (want %v)", r.RID, r.Pattern, r.Source, r.ColdPrefillCost, cold, r.Saved, cold-r.PrefillCost)
	}
	return r
}

// bench_serving's shape (kimi profile x200, 20 random prompts, its warm-up
// is its first prompt): exactly the warm-up's repeat is POISONED, the
// prompts that start alike by chance are one line, the report says what
// the cache did to TTFT, and the tool's own figures are compared with the
// truth.
func TestLoadgenBenchServing(t *testing.T) {
	p := mocktest.Profile(t, "kimi-k2.6-rtx6000")
	result := filepath.Join(t.TempDir(), "bench.jsonl")
	code, out, rep := auditLoad(t, []string{"--profile", p.Name, "--speedup", "200", "--tool-result", result},
		"--backend", "sglang", "--num-prompts", "20", "--output-file", result)
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s", code, out)
	}
	r := onlyTheWarmupRepeat(t, p, rep, out)
	// Its cause, with the server's 32-character rids, fits on two lines of
	// a terminal, and the run's fix is said once, for a tool that is
	// neither bench_serving nor vLLM's by its command.
	cause := r.Verdict.Causes[0].Text
	if len(r.RID) != 32 || !strings.Contains(out, "\n"+wrapped(cause)) || strings.Count(wrapped(cause), "\n") > 2 {
		t.Errorf("a cause with a rid of %d does not fit on two lines:\n%s", len(r.RID), out)
	}
	if v := rep.Verdict.String(); !strings.HasSuffix(v, "; fix: bench_serving's warm-up repeats its first prompt: --warmup-requests 0, or --flush-cache to flush after it") ||
		strings.Contains(out, "vLLM") || strings.Contains(out, "vllm") {
		t.Errorf("verdict %q: want bench_serving's fix alone (its result file is bench_serving's)", v)
	}
	if rep.Chance.Requests != 16 || rep.Chance.MaxImpact >= 1 {
		t.Errorf("chance reuse %+v, want 16 requests each under 1 %%", rep.Chance)
	}
	for _, want := range []string{"16 requests shared 1-", "head tokens beyond the floor with earlier prompts: no measurable effect",
		"the prefix cache made this run's mean TTFT "} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	tc := rep.Tool
	if tc == nil || tc.Tool != harness.ToolSGLang || tc.Measured != 20 || tc.WarmUp != 1 || !strings.Contains(tc.Match, "their output lengths agree") {
		t.Fatalf("tool comparison %+v", tc)
	}
	for _, key := range []string{"mean_ttft_ms", "p99_ttft_ms", "mean_itl_ms", "mean_e2e_latency_ms", "request_throughput"} {
		i := slices.IndexFunc(tc.Figures, func(f harness.ToolFigure) bool { return f.Key == key })
		if i < 0 || tc.Figures[i].Tool <= 0 || tc.Figures[i].Truth <= 0 {
			t.Errorf("%s: %+v", key, tc.Figures)
		}
	}
	if !strings.Contains(out, "figure   tool says   truth difference") && !strings.Contains(out, "tool says") {
		t.Errorf("no comparison table:\n%s", out)
	}
}

// The same run without its warm-up, or with a flush after it, is clean.
func TestLoadgenWarmupFixes(t *testing.T) {
	norace.Skip(t, "checks audit's verdicts on a load tool's run")
	for _, fix := range [][]string{{"--warmup", "0"}, {"--flush-cache"}} {
		load := append([]string{"--backend", "sglang", "--num-prompts", "20"}, fix...)
		code, out, rep := auditLoad(t, []string{"--speedup", "200"}, load...)
		if code != 0 || rep.Verdict.Level() != harness.OK || !rep.Checked {
			t.Errorf("%v: exit %d, verdict %s, checked %v; want 0, ok\n%s", fix, code, rep.Verdict, rep.Checked, out)
		}
	}
}

// vLLM's benchmark shape (its test prompt is its first prompt, with every
// output token) on /v1/completions of a Llama profile, and its
// --save-result file as vLLM writes it by default: TTFT, TPOT and ITL, no
// E2E (--percentile-metrics ttft,tpot,itl).
func TestLoadgenVLLMBench(t *testing.T) {
	norace.Skip(t, "checks audit's verdicts on a load tool's run")
	p := mocktest.Profile(t, "llama-8b-eagle3-h100")
	result := filepath.Join(t.TempDir(), "vllm.json")
	code, out, rep := auditLoad(t, []string{"--profile", p.Name, "--speedup", "200", "--tool-result", result},
		"--backend", "vllm", "--num-prompts", "20", "--output-len", "32", "--save-result", result)
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s", code, out)
	}
	r := onlyTheWarmupRepeat(t, p, rep, out)
	if r.Route != "/v1/completions" || r.CachedTokens != r.PromptTokens-2 {
		t.Errorf("%s: route %s, cached %d of %d; want /v1/completions, all but the bigram keys' 2", r.RID, r.Route, r.CachedTokens, r.PromptTokens)
	}
	tc := rep.Tool
	if tc == nil || tc.Tool != harness.ToolVLLM || tc.Measured != 20 {
		t.Fatalf("tool comparison %+v", tc)
	}
	for _, key := range []string{"mean_ttft_ms", "p99_tpot_ms", "median_itl_ms", "request_throughput"} {
		if !slices.ContainsFunc(tc.Figures, func(f harness.ToolFigure) bool { return f.Key == key }) {
			t.Errorf("no %s among %+v", key, tc.Figures)
		}
	}
	if !slices.Contains(tc.NotCompared, "E2E: the result file has no mean_e2el_ms (vLLM writes a figure only when --percentile-metrics names it: add e2el)") {
		t.Errorf("not compared %q: want E2E, with the flag that adds it", tc.NotCompared)
	}
}

// A shared-system-prompt dataset (2 groups of 4 prompts) under
// --allow-shared-prefix auto: only the warm-up's repeat poisons, and the
// groups are the workload's.
func TestLoadgenSharedSystemPrompt(t *testing.T) {
	norace.Skip(t, "checks audit's verdicts on a load tool's run")
	p := mocktest.Profile(t, "default")
	code, out, rep := auditLoad(t, []string{"--speedup", "200", "--allow-shared-prefix", "auto"}, "--dataset", "shared-prefix", "--output-len", "16")
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s", code, out)
	}
	onlyTheWarmupRepeat(t, p, rep, out)
	if len(rep.SharedPrefixes) != 2 || !rep.SharedPrefixes[0].Workload || !rep.SharedPrefixes[1].Workload {
		t.Fatalf("shared prefixes %+v, want 2, the workload's", rep.SharedPrefixes)
	}
	if !strings.Contains(out, "2 shared prefixes of about ") || !strings.Contains(out, "(the workload's own: --allow-shared-prefix auto)") {
		t.Errorf("the report does not describe the groups:\n%s", out)
	}
}

// A correct chat benchmark, a fresh UUID first in each user message and no
// flush, is clean: the template's head is the chat route's floor.
func TestLoadgenChatBenchmark(t *testing.T) {
	norace.Skip(t, "checks audit's verdicts on a load tool's run")
	code, out, rep := auditLoad(t, []string{"--speedup", "200"}, "--backend", "chat", "--dataset", "chat-nonce", "--warmup", "0")
	if code != 0 || rep.Floors[0].Route != "/v1/chat/completions" || rep.Floors[0].Floor <= 0 {
		t.Fatalf("exit %d, floors %+v: want 0 and the template's head as the floor\n%s", code, rep.Floors, out)
	}
}

// A script with a fixed URL talks to whatever answers there: another
// server, and the mock sees nothing (exit 3, said so); with --port the
// mock is where it looks.
func TestLoadgenFixedURL(t *testing.T) {
	norace.Skip(t, "checks audit's verdicts on a load tool's run")
	other, err := startLocalMock(mocktest.Profile(t, "default"), 200, api.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	code, out, rep := auditLoad(t, []string{"--speedup", "200"}, "--base-url", other.URL, "--num-prompts", "4")
	if code != 3 || rep.Checked || !strings.Contains(out, "verdict: SUSPECT: no request reached the server") {
		t.Fatalf("exit %d, checked %v: want 3, unchecked\n%s", code, rep.Checked, out)
	}
	port := mocktest.FreePort(t)
	code, out, rep = auditLoad(t, []string{"--speedup", "200", "--port", strconv.Itoa(port)},
		"--base-url", fmt.Sprintf("http://127.0.0.1:%d", port), "--num-prompts", "4")
	if code != 1 || len(rep.Requests) != 5 {
		t.Fatalf("exit %d with %d requests, want 1 and the 5 the script sent\n%s", code, len(rep.Requests), out)
	}
}

// With HTTP_PROXY set (to nothing that answers), the script's requests
// reach the mock only because audit adds it to NO_PROXY: Python's urllib,
// unlike Go, sends even loopback through the proxy otherwise.
func TestLoadgenBehindAProxy(t *testing.T) {
	norace.Skip(t, "checks audit's verdicts on a load tool's run")
	t.Setenv("HTTP_PROXY", "http://127.0.0.1:1")
	t.Setenv("http_proxy", "http://127.0.0.1:1")
	code, out, rep := auditLoad(t, []string{"--speedup", "200"}, "--num-prompts", "4")
	if code != 1 || len(rep.Requests) != 5 {
		t.Fatalf("exit %d with %d requests, want 1 and 5\n%s", code, len(rep.Requests), out)
	}
}

// verdictsByIndex are each request's pattern and level, in order: the
// server names the rids, so two runs share no rid.
func verdictsByIndex(rep *harness.AuditReport) []string {
	var out []string
	for _, r := range rep.Requests {
		out = append(out, fmt.Sprintf("%s %s", r.Pattern, r.Verdict.Level()))
	}
	return out
}

// Through the recording proxy in front of a real server (here sglmock
// serve, where the truth is known), the same run gets the same verdicts
// as against the mock directly. The upstream runs at speedup 1, as a real
// server does, with --enable-metrics, whose time stats (meta_info's
// forward_entry_time and prefill_finished_time) give the proxy's timing
// fit the server's own prefill times: a fit to the TTFTs the proxy sees
// over loopback on a loaded host is noisy enough that a reuse within its
// error is uncertain, neither POISONED nor ok (TestProxyFitFromIdleRequests
// checks that fit on virtual time).
func TestLoadgenUpstream(t *testing.T) {
	norace.Skip(t, "checks audit's verdicts on a load tool's run")
	for _, tt := range []struct {
		name  string
		audit []string
		load  []string
	}{
		{"bench_serving", nil, []string{"--backend", "sglang", "--num-prompts", "20", "--output-len", "8"}},
		{"vLLM bench", nil, []string{"--backend", "vllm", "--num-prompts", "20", "--output-len", "8"}},
		{"shared system prompt", []string{"--allow-shared-prefix", "auto"}, []string{"--dataset", "shared-prefix", "--output-len", "8"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			upstream, err := startLocalMock(mocktest.Profile(t, "llama-8b-eagle3-h100"), 1, api.Config{EnableCacheReport: true, EnableMetrics: true})
			if err != nil {
				t.Fatal(err)
			}
			defer upstream.Close()
			tt.audit = append(tt.audit, "--profile", "llama-8b-eagle3-h100")
			directCode, directOut, direct := auditLoad(t, tt.audit, tt.load...)
			code, out, through := auditLoad(t, append([]string{"--upstream", upstream.URL}, tt.audit[:len(tt.audit)-2]...), tt.load...)
			if code != directCode || !slices.Equal(verdictsByIndex(through), verdictsByIndex(direct)) {
				t.Fatalf("through the proxy: exit %d, %q\nagainst the mock: exit %d, %q\n%s\n%s", code, verdictsByIndex(through), directCode, verdictsByIndex(direct), out, directOut)
			}
			// The OpenAI routes carry no meta_info: vLLM's bench is fitted
			// from the TTFTs of the requests that met an idle server.
			fit := "fitted to the server's own prefill times"
			if tt.name == "vLLM bench" {
				fit = "those that met an idle server"
			}
			if !through.Checked || through.Upstream != upstream.URL || !strings.Contains(through.ImpactDetail, fit) {
				t.Fatalf("checked %v, upstream %q, impact from %s", through.Checked, through.Upstream, through.ImpactDetail)
			}
		})
	}
}

// bench_serving at its default --request-rate inf writes "request_rate":
// Infinity (Python's json.dumps), which audit reads: a clean run exits 0
// with the tool's figures compared, not 2.
func TestLoadgenResultAtAnInfiniteRate(t *testing.T) {
	result := filepath.Join(t.TempDir(), "bench.jsonl")
	code, out, rep := auditLoad(t, []string{"--profile", "kimi-k2.6-rtx6000", "--speedup", "200", "--tool-result", result},
		"--backend", "sglang", "--num-prompts", "8", "--warmup", "0", "--output-file", result)
	b, err := os.ReadFile(result)
	if err != nil || !bytes.Contains(b, []byte(`"request_rate": Infinity`)) {
		t.Fatalf("the result file does not hold Python's Infinity (%v):\n%s", err, b)
	}
	if code != 0 || rep.Tool == nil || rep.Tool.Measured != 8 || len(rep.Tool.Figures) == 0 {
		t.Fatalf("exit %d, tool %+v: want 0 and the figures compared\n%s", code, rep.Tool, out)
	}
}

// bench_serving's sglang-oai backends spread an event's gap over the
// tokens it carries when the server reports an accept length, as the mock
// does under speculative decoding: the truth is counted the same way, and
// the comparison says so.
func TestLoadgenSGLangOAIITL(t *testing.T) {
	for _, backend := range []string{"sglang-oai", "sglang-oai-chat"} {
		result := filepath.Join(t.TempDir(), "bench.jsonl")
		code, out, rep := auditLoad(t, []string{"--profile", "kimi-k2.6-rtx6000", "--speedup", "200", "--enable-cache-report", "--tool-result", result},
			"--backend", backend, "--num-prompts", "8", "--warmup", "0", "--output-len", "64", "--output-file", result)
		if code != 0 || rep.Tool == nil {
			t.Fatalf("%s: exit %d, tool %+v\n%s", backend, code, rep.Tool, out)
		}
		i := slices.IndexFunc(rep.Tool.Figures, func(f harness.ToolFigure) bool { return f.Key == "mean_itl_ms" })
		if i < 0 || !strings.HasPrefix(rep.Tool.Figures[i].Note, "per token: bench_serving's "+backend+" backend spreads an event's gap over its tokens, as the server reported an accept length") {
			t.Errorf("%s: mean ITL %+v: want it counted per token", backend, rep.Tool.Figures)
		}
	}
}

// bench_serving --warmup-requests 2 sends its two warm-ups at once, and
// its result file says which requests it measured: the warm-ups, one of
// them served from the other or each repeating the first, never fail the
// run and are never near-repeats. With --flush-cache the measured run is
// cold and exits 0, with or without the result file (a flush after the
// run's first copies of its first prompt ends the tool's warm-up);
// without the flush its first request is the one POISONED.
func TestLoadgenTwoWarmups(t *testing.T) {
	for _, tt := range []struct {
		flush, result bool
		want          int
	}{{true, true, 0}, {true, false, 0}, {false, true, 1}} {
		load := []string{"--backend", "sglang", "--num-prompts", "8", "--warmup", "2"}
		args := []string{"--profile", "kimi-k2.6-rtx6000", "--speedup", "200"}
		if tt.flush {
			load = append(load, "--flush-cache")
		}
		if tt.result {
			result := filepath.Join(t.TempDir(), "bench.jsonl")
			load, args = append(load, "--output-file", result), append(args, "--tool-result", result)
		}
		code, out, rep := auditLoad(t, args, load...)
		if code != tt.want {
			t.Errorf("%+v: exit %d\n%s", tt, code, out)
		}
		for i, r := range rep.Requests {
			if r.WarmUp != (i < 2) || r.Pattern == harness.NearRepeat || r.WarmUp && r.Verdict.Level() != harness.OK {
				t.Errorf("%+v: %d %s: warm-up %v, pattern %s, %s", tt, i, r.RID, r.WarmUp, r.Pattern, r.Verdict)
			}
		}
		if poisoned := byLevel(rep, harness.Poisoned); !tt.flush && (len(poisoned) != 1 || poisoned[0] != rep.Requests[2].RID) {
			t.Errorf("POISONED %v, want only the measured copy of the first prompt, %s", poisoned, rep.Requests[2].RID)
		}
	}
}

// At bench_serving's default size the warm-up's repeat moves none of the
// run's figures by 1 %: the run exits 0 with the finding and its fix;
// --strict fails it.
func TestLoadgenDefaultSize(t *testing.T) {
	load := []string{"--backend", "sglang", "--num-prompts", "1000", "--concurrency", "16", "--output-len", "8"}
	for _, strict := range []bool{false, true} {
		args := []string{"--profile", "kimi-k2.6-rtx6000", "--speedup", "200"}
		want := 0
		if strict {
			args, want = append(args, "--strict"), 1
		}
		code, out, rep := auditLoad(t, args, load...)
		if code != want || len(byLevel(rep, harness.Poisoned)) != 1 || rep.RunImpact == nil || rep.RunImpact.Max >= 1 {
			t.Fatalf("strict %v: exit %d, run impact %+v: want %d, one request POISONED, under 1 %%\n%s", strict, code, rep.RunImpact, want, out)
		}
		if !strict && !strings.Contains(out, "which moved none of the figures the run reports by 1 % (--min-run-impact") {
			t.Errorf("the verdict does not say the reuse moved nothing the run reports:\n%s", out)
		}
	}
}

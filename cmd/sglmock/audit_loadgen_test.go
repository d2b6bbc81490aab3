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
	onlyTheWarmupRepeat(t, p, rep, out)
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
// server does, so its prefill costs stand out of the wall clock's noise
// for the proxy's timing fit.
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
			upstream, err := startLocalMock(mocktest.Profile(t, "default"), 1, api.Config{EnableCacheReport: true})
			if err != nil {
				t.Fatal(err)
			}
			defer upstream.Close()
			directCode, directOut, direct := auditLoad(t, tt.audit, tt.load...)
			code, out, through := auditLoad(t, append([]string{"--upstream", upstream.URL}, tt.audit...), tt.load...)
			if code != directCode || !slices.Equal(verdictsByIndex(through), verdictsByIndex(direct)) {
				t.Fatalf("through the proxy: exit %d, %q\nagainst the mock: exit %d, %q\n%s\n%s", code, verdictsByIndex(through), directCode, verdictsByIndex(direct), out, directOut)
			}
			if !through.Checked || through.Upstream != upstream.URL {
				t.Fatalf("checked %v, upstream %q", through.Checked, through.Upstream)
			}
		})
	}
}

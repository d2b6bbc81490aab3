package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sglmock/sglmock/mockserver/profile"
)

func TestServeFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
		check   func(*serveOptions) bool
	}{
		{"defaults", nil, "", func(o *serveOptions) bool {
			return o.host == "127.0.0.1" && o.port == 30000 && o.profile.Name == "default" && o.speedup == 1 &&
				o.simTruthBytes == 256<<20
		}},
		{"truth memory", []string{"--sim-truth-bytes", "1000000"}, "", func(o *serveOptions) bool { return o.simTruthBytes == 1000000 }},
		{"no truth memory", []string{"--sim-truth-bytes", "0"}, "--sim-truth-bytes 0: must be >= 1", nil},
		{"a flag overrides the profile", []string{"--profile", "kimi-k2.6-rtx6000", "--page-size", "16", "--chunked-prefill-size", "4096", "--max-total-tokens", "500000"}, "",
			func(o *serveOptions) bool {
				return o.profile.PageSize == 16 && o.profile.ChunkedPrefillSize == 4096 && o.profile.MaxTotalTokens == 500000 &&
					o.profile.ContextLength == 200000
			}},
		{"speculative on a plain profile", []string{"--speculative-algorithm", "eagle3", "--speculative-num-steps", "4"}, "",
			func(o *serveOptions) bool {
				s := o.profile.Speculative
				return s.Algorithm == "EAGLE3" && s.NumSteps == 4 && s.NumDraftTokens == 5 && len(s.AcceptProbs) == 4
			}},
		{"fewer steps on a speculative profile", []string{"--profile", "kimi-k2.6-rtx6000", "--speculative-num-steps", "2"}, "",
			func(o *serveOptions) bool {
				s := o.profile.Speculative
				return s.NumSteps == 2 && len(s.AcceptProbs) == 2 && s.AcceptProbs[1] == 0.9 && s.Algorithm == "DDTREE"
			}},
		{"the launch arguments /server_info reports as given", []string{"--context-length", "4096", "--max-running-requests", "64"}, "",
			func(o *serveOptions) bool {
				l := o.launched
				return l.ContextLength != nil && *l.ContextLength == 4096 && l.MaxRunningRequests != nil && *l.MaxRunningRequests == 64 &&
					l.MaxTotalTokens == nil && o.profile.ContextLength == 4096
			}},
		{"none given", nil, "", func(o *serveOptions) bool {
			return o.launched == profile.Launched{}
		}},
		{"an SGLang release", []string{"--sglang-version", "v0.5.12"}, "", func(o *serveOptions) bool {
			return o.profile.Release() == "0.5.12" && !o.profile.Rules().GenerateCacheSalt
		}},
		{"an unknown SGLang release", []string{"--sglang-version", "0.5.15"}, `--sglang-version "0.5.15": not a release sglmock follows: it follows SGLang 0.5.10,`, nil},
		{"seed", []string{"--seed", "7"}, "", func(o *serveOptions) bool { return o.profile.Seed == 7 }},
		{"random seed", []string{"--random-seed", "8"}, "", func(o *serveOptions) bool { return o.profile.Seed == 8 }},
		{"fcfs", []string{"--schedule-policy", "fcfs"}, "", func(o *serveOptions) bool { return o.profile.Policy() == "fcfs" }},
		{"lpm", []string{"--schedule-policy", "lpm"}, "", func(o *serveOptions) bool { return o.profile.SchedulePolicy == "lpm" }},
		{"priority scheduling", []string{"--schedule-policy", "lof", "--enable-priority-scheduling", "--priority-scheduling-preemption-threshold", "4"}, "",
			func(o *serveOptions) bool {
				return o.profile.EnablePriorityScheduling && o.profile.PreemptionThreshold() == 4
			}},
		{"timeouts", []string{"--idle-timeout", "1m", "--body-timeout", "2s", "--read-header-timeout", "3s"}, "", func(o *serveOptions) bool {
			return o.idleTimeout == time.Minute && o.bodyTimeout == 2*time.Second && o.readHeaderTimeout == 3*time.Second
		}},
		{"zero timeout", []string{"--idle-timeout", "0s"}, "--idle-timeout 0s: must be > 0", nil},
		{"priority is refused as SGLang's scheduler refuses it", []string{"--schedule-policy", "priority"}, "Unknown schedule_policy: policy='priority'", nil},
		{"unknown policy", []string{"--schedule-policy", "fifo"},
			"argument --schedule-policy: invalid choice: 'fifo' (choose from 'lpm', 'random', 'fcfs', 'dfs-weight', 'lof', 'priority', 'routing-key')", nil},
		{"priority scheduling needs fcfs or lof", []string{"--schedule-policy", "lpm", "--enable-priority-scheduling"},
			"To use priority scheduling, schedule_policy must be 'fcfs' or 'lof'. 'lpm' is not supported.", nil},
		{"unknown flag", []string{"--tp-sise", "8"}, "unknown flag --tp-sise: did you mean --tp-size?", nil},
		{"bad value", []string{"--port", "x"}, `invalid value "x" for flag --port`, nil},
		{"port range", []string{"--port", "70000"}, "--port 70000", nil},
		{"speedup", []string{"--speedup", "0"}, "--speedup 0", nil},
		{"speedup NaN", []string{"--speedup", "NaN"}, `invalid value "NaN" for flag --speedup: want a finite number`, nil},
		{"grace +Inf", []string{"--shutdown-grace", "+Inf"}, `invalid value "+Inf" for flag --shutdown-grace: want a finite number`, nil},
		{"log level", []string{"--log-level", "loud"}, `--log-level "loud"`, nil},
		{"stray argument", []string{"serve"}, `unexpected argument "serve"`, nil},
		{"unknown profile", []string{"--profile", "nosuch"}, `--profile: no built-in profile "nosuch"`, nil},
		{"impossible override", []string{"--page-size", "0"}, "page_size = 0", nil},
		{"pool below context", []string{"--max-total-tokens", "100"}, "max_total_tokens = 100", nil},
		{"spec steps without algorithm", []string{"--speculative-num-steps", "3"}, "need --speculative-algorithm", nil},
		{"unknown algorithm", []string{"--speculative-algorithm", "MEDUSA"}, "speculative.algorithm = MEDUSA", nil},
	}
	for _, tt := range tests {
		o, err := parseServeFlags(tt.args, io.Discard)
		switch {
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%s: got error %v, want one containing %q", tt.name, err, tt.wantErr)
		case tt.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.wantErr == "" && !tt.check(o):
			t.Errorf("%s: options not applied: %+v", tt.name, o.profile)
		}
	}
}

func TestServeHelp(t *testing.T) {
	var stderr bytes.Buffer
	if code := run([]string{"serve", "--help"}, io.Discard, &stderr); code != 0 {
		t.Fatalf("serve --help: exit %d", code)
	}
	for _, want := range []string{"-chunked-prefill-size", "-speculative-algorithm", "-speedup", "-enable-metrics"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("help lacks %s", want)
		}
	}
	if code := run([]string{"serve", "--nope"}, io.Discard, io.Discard); code != 2 {
		t.Errorf("serve with an unknown flag: exit %d, want 2", code)
	}
}

// startServe runs serve on a loopback port and returns its address, the
// stop and kill functions (the first and second Ctrl-C), and its result.
func startServe(t *testing.T, args ...string) (string, func(), func(), <-chan error, *bytes.Buffer) {
	t.Helper()
	o, err := parseServeFlags(append([]string{"--port", "0"}, args...), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return startServeOptions(t, o)
}

// startServeOptions runs serve with parsed options; see startServe.
func startServeOptions(t *testing.T, o *serveOptions) (string, func(), func(), <-chan error, *bytes.Buffer) {
	t.Helper()
	ready := make(chan string, 1)
	o.ready = ready
	stop, cancel := context.WithCancel(context.Background())
	kill, killNow := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	t.Cleanup(killNow)
	logs := &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- serve(stop, kill, o, logs) }()
	select {
	case addr := <-ready:
		return "http://" + addr, cancel, killNow, done, &logs.Buffer
	case err := <-done:
		t.Fatalf("serve ended early: %v\n%s", err, logs.String())
	}
	return "", nil, nil, nil, nil
}

// syncBuffer is a bytes.Buffer the server's goroutines may write to while
// the test reads it after they stop.
type syncBuffer struct {
	mu sync.Mutex
	bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.Buffer.Write(p)
}

// TestServeOverTCP runs the real server on a loopback port: warmup, a
// request, then a graceful shutdown that aborts a stream still running.
func TestServeOverTCP(t *testing.T) {
	base, cancel, _, done, logs := startServe(t, "--speedup", "100", "--shutdown-grace", "0")
	resp, err := http.Get(base + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/health: %v %v", err, resp)
	}
	resp.Body.Close()
	// Benchmark clients open a connection per request: 400 fresh
	// connections from 100 goroutines must all be served.
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	var wg sync.WaitGroup
	failures := make(chan error, 400)
	for w := range 100 {
		wg.Go(func() {
			for i := range 4 {
				r, err := fresh.Post(base+"/generate", "application/json",
					strings.NewReader(fmt.Sprintf(`{"text": "burst %d %d", "sampling_params": {"max_new_tokens": 2}}`, w, i)))
				if err != nil {
					failures <- err
					return
				}
				io.Copy(io.Discard, r.Body)
				r.Body.Close()
				if r.StatusCode != 200 {
					failures <- fmt.Errorf("status %d", r.StatusCode)
				}
			}
		})
	}
	wg.Wait()
	close(failures)
	for err := range failures {
		t.Fatalf("connection burst: %v", err)
	}
	resp, err = http.Post(base+"/generate", "application/json",
		strings.NewReader(`{"text": "Hello", "sampling_params": {"max_new_tokens": 30000}, "stream": true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: {\"text\"") {
		t.Fatalf("first event: %q %v", line, err)
	}
	cancel() // as SIGTERM does
	rest, _ := io.ReadAll(r)
	if !strings.Contains(string(rest), `"type":"abort"`) || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("the stream in flight at shutdown must end with an abort and [DONE]; got ...%q", tail(string(rest)))
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"The server is fired up and ready to roll!", "Prefill batch,", "Shutdown complete."} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
}

func tail(s string) string { return s[max(0, len(s)-200):] }

// During the grace period the server keeps its listener: new work gets
// 503, the ground truth stays readable, and what still runs at the end is
// aborted as the server shutting down.
func TestServeGracePeriod(t *testing.T) {
	base, stop, _, done, logs := startServe(t, "--speedup", "1", "--shutdown-grace", "2", "--skip-server-warmup")
	resp, err := http.Post(base+"/generate", "application/json",
		strings.NewReader(`{"text": "Hello", "sampling_params": {"max_new_tokens": 30000}, "stream": true, "rid": "long"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	if _, err := r.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	stop()
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	var code int
	for code != 503 { // until the server has seen the signal
		r, err := fresh.Post(base+"/generate", "application/json", strings.NewReader(`{"text": "late"}`))
		if err != nil {
			t.Fatalf("a new connection during the grace period: %v", err)
		}
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
		code = r.StatusCode
	}
	sim, err := fresh.Get(base + "/sim/profile")
	if err != nil || sim.StatusCode != 200 {
		t.Fatalf("/sim/profile during the grace period: %v %v", err, sim)
	}
	sim.Body.Close()
	rest, _ := io.ReadAll(r)
	if !strings.Contains(string(rest), `"finish_reason":{"type":"abort","message":"Aborted"`) || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("the stream still running after the grace period must end with SGLang's abort; got ...%q", tail(string(rest)))
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "Shutdown complete.") {
		t.Fatalf("log: %s", logs.String())
	}
}

// A second interrupt during the grace period stops the server at once.
func TestServeSecondInterrupt(t *testing.T) {
	base, stop, kill, done, logs := startServe(t, "--speedup", "1", "--shutdown-grace", "3600", "--skip-server-warmup")
	resp, err := http.Post(base+"/generate", "application/json",
		strings.NewReader(`{"text": "Hello", "sampling_params": {"max_new_tokens": 30000}, "stream": true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	bufio.NewReader(resp.Body).ReadString('\n')
	stop()
	kill()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "Stopped at once.") {
		t.Fatalf("log: %s", logs.String())
	}
}

func TestAPIKeySources(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "key")
	os.WriteFile(file, []byte("  sk-from-file\n"), 0o600)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	tests := []struct {
		flag, file, env, want, wantErr string
	}{
		{"", "", "", "", ""},
		{"sk-flag", "", "sk-env", "sk-flag", ""},
		{"", file, "sk-env", "sk-from-file", ""},
		{"", "", "sk-env", "sk-env", ""},
		{"sk-flag", file, "", "", "give one or the other"},
		{"", filepath.Join(dir, "none"), "", "", "--api-key-file: open"},
		{"", empty, "", "", "the file is empty"},
	}
	for _, tt := range tests {
		got, err := apiKey(tt.flag, tt.file, tt.env)
		if got != tt.want || (tt.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("apiKey(%q, %q, %q): got %q, %v; want %q, error containing %q", tt.flag, tt.file, tt.env, got, err, tt.want, tt.wantErr)
		}
	}
}

// Real SGLang launch commands start the mock: the flags that describe what
// it models act, every other one is accepted with its values and named in
// one warning line.
func TestServeSGLangLaunchCommands(t *testing.T) {
	dir := t.TempDir()
	config := filepath.Join(dir, "launch.yaml")
	os.WriteFile(config, []byte("model-path: Qwen/Qwen3-32B\ntp-size: 4\ncontext-length: 32768\nenable-metrics: true\n"+
		"trust-remote-code: false\ncuda-graph-bs: [1, 2, 4]\n"), 0o600)
	tests := []struct {
		name        string
		args        []string
		wantIgnored string
		check       func(*serveOptions) bool
	}{
		{"Kimi K2 on 8 GPUs",
			strings.Fields("--model-path moonshotai/Kimi-K2-Instruct --tp 8 --trust-remote-code --mem-fraction-static 0.85 " +
				"--enable-metrics --tool-call-parser kimi_k2 --reasoning-parser kimi_k2 --context-length 131072 " +
				"--chunked-prefill-size 8192 --cuda-graph-max-bs 128 --kv-cache-dtype fp8_e4m3 --enable-cache-report"),
			"--trust-remote-code --mem-fraction-static --tool-call-parser --reasoning-parser --cuda-graph-max-bs --kv-cache-dtype",
			func(o *serveOptions) bool {
				return o.modelPath == "moonshotai/Kimi-K2-Instruct" && o.enableMetrics && o.enableCacheReport &&
					o.profile.ContextLength == 131072 && o.profile.ChunkedPrefillSize == 8192 && o.profile.TPSize == 8
			}},
		{"Llama 3.1 8B with EAGLE3, abbreviated as SGLang allows",
			strings.Fields("--model meta-llama/Llama-3.1-8B-Instruct --speculative-algorithm EAGLE3 " +
				"--speculative-draft-model-path jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B --speculative-num-steps 5 " +
				"--speculative-eagle-topk 8 --speculative-num-draft-tokens 32 --mem-fraction 0.6 --cuda-graph-max-bs 2 " +
				"--dtype float16 --random-seed=42"),
			"--speculative-draft-model-path --mem-fraction-static --cuda-graph-max-bs --dtype",
			func(o *serveOptions) bool {
				s := o.profile.Speculative
				return o.modelPath == "meta-llama/Llama-3.1-8B-Instruct" && s != nil && s.Algorithm == "EAGLE3" &&
					s.NumSteps == 5 && s.EagleTopK == 8 && s.NumDraftTokens == 32 && o.profile.Seed == 42
			}},
		{"DeepSeek V3 with DP attention and lists of values",
			strings.Fields("--model-path deepseek-ai/DeepSeek-V3 --tp 8 --dp 8 --enable-dp-attention --trust-remote-code " +
				"--disable-radix-cache --attention-backend flashinfer --moe-a2a-backend deepep --deepep-mode auto " +
				"--cuda-graph-bs 1 2 4 8 --page-size 64 --no-enable-tp-lm-head-all-to-all --model-checksum --watchdog-timeout 600"),
			"--trust-remote-code --attention-backend --moe-a2a-backend --deepep-mode " +
				"--cuda-graph-bs --no-enable-tp-lm-head-all-to-all --model-checksum --watchdog-timeout",
			func(o *serveOptions) bool {
				p := o.profile
				return o.disableRadixCache && p.PageSize == 64 && p.TPSize == 8 && p.DPSize == 8 && p.DPAttention() &&
					p.RankChunkedPrefillSize() == 1024 && p.RankMaxRunningRequests() == 32
			}},
		{"a config file, the command line winning",
			[]string{"--config", config, "--context-length", "16384"},
			"--cuda-graph-bs",
			func(o *serveOptions) bool {
				return o.modelPath == "Qwen/Qwen3-32B" && o.enableMetrics && o.profile.ContextLength == 16384 && o.profile.TPSize == 4
			}},
		{"only sglmock's flags", []string{"--speedup", "10"}, "", func(o *serveOptions) bool { return o.speedup == 10 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var warn bytes.Buffer
			o, err := parseServeFlags(append(tt.args, "--port", "0", "--host", "127.0.0.1", "--skip-server-warmup"), &warn)
			if err != nil {
				t.Fatal(err)
			}
			want := ""
			if tt.wantIgnored != "" {
				want = "sglmock serve: SGLang flags accepted and ignored (the profile stands for the deployment they describe): " + tt.wantIgnored + "\n"
			}
			if o.modelPath != "" { // a model id that is not on this machine names the model only
				want += "sglmock serve: --model-path " + o.modelPath + " is no local directory nor a model in the local Hugging Face cache: " +
					"it names the model only, and the profile's tokenizer counts tokens (give --tokenizer-path DIR to count as the model does)\n"
			}
			if warn.String() != want {
				t.Errorf("warning: got %q, want %q", warn.String(), want)
			}
			if !tt.check(o) {
				t.Errorf("flags not applied: %+v, profile %+v", o, o.profile)
			}
			base, stop, _, done, _ := startServeOptions(t, o)
			resp, err := http.Get(base + "/health")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("/health: %d", resp.StatusCode)
			}
			stop()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The usage's examples of SGLang flags that are accepted and ignored name
// none that serve gives an effect.
func TestServeUsageIgnoredExamples(t *testing.T) {
	var out bytes.Buffer
	if _, err := parseServeFlags([]string{"--help"}, &out); err != flag.ErrHelp {
		t.Fatalf("--help: got %v", err)
	}
	usage := strings.Join(strings.Fields(out.String()), " ")
	_, list, ok := strings.Cut(usage, "Every other flag of SGLang's launch_server (")
	list, _, ok2 := strings.Cut(list, ", ...)")
	if !ok || !ok2 {
		t.Fatalf("the usage lists no ignored flags:\n%s", out.String())
	}
	fs, _, _ := serveFlags(io.Discard)
	for _, name := range strings.Split(list, ", ") {
		if fs.Lookup(strings.TrimPrefix(name, "--")) != nil {
			t.Errorf("the usage gives %s as a flag without effect, but serve defines it", name)
		}
	}
}

// A launch flag given wrong gets SGLang's argparse reading in one line.
func TestServeSGLangLaunchMistakes(t *testing.T) {
	dir := t.TempDir()
	notYAML := filepath.Join(dir, "launch.json")
	os.WriteFile(notYAML, []byte("{}"), 0o600)
	list := filepath.Join(dir, "list.yaml")
	os.WriteFile(list, []byte("- tp-size\n"), 0o600)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--mem-fraction"}, "--mem-fraction-static needs a value"},
		{[]string{"--mem-fraction", "--trust-remote-code"}, "--mem-fraction-static needs a value"},
		{[]string{"--tp"}, "flag needs an argument: --tp-size"},
		{[]string{"--trust-remote-code=yes"}, "--trust-remote-code takes no value"},
		{[]string{"--cuda-graph-bs", "--tp", "8"}, "--cuda-graph-bs needs one or more values"},
		{[]string{"--enable-dp"}, "ambiguous flag --enable-dp: it could be --enable-dp-attention, --enable-dp-attention-local-control-broadcast, --enable-dp-lm-head"},
		{[]string{"--tp-sise", "8"}, "unknown flag --tp-sise: did you mean --tp-size? (sglmock serve --help lists the flags)"},
		{[]string{"--enable-expert-distribution-metrics"}, "--enable-expert-distribution-metrics: SGLang no longer takes this flag"},
		{[]string{"--config"}, "--config needs a YAML file"},
		{[]string{"--config", notYAML}, "the file must be YAML"},
		{[]string{"--config", list}, "want a mapping of flag names to values"},
		{[]string{"--config", list, "--config", list}, "one config file only"},
	}
	for _, tt := range tests {
		_, err := parseServeFlags(tt.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: got %v, want an error containing %q", tt.args, err, tt.want)
		}
	}
}

// The table is SGLang's: it parses, serve's own flags that SGLang has take
// their values as SGLang's do, and sglmock's own are not SGLang's.
func TestLaunchFlagTable(t *testing.T) {
	table, err := launchFlags()
	if err != nil {
		t.Fatal(err)
	}
	if len(table) < 450 {
		t.Fatalf("%d flags: the table lost its lines", len(table))
	}
	byName := map[string]launchFlag{}
	for _, lf := range table {
		byName[lf.name] = lf
	}
	sglmockOnly := []string{"profile", "speedup", "seed", "shutdown-grace", "max-body-bytes", "read-header-timeout",
		"idle-timeout", "body-timeout", "stall-timeout", "sim-truth-bytes", "api-key-file", "sglang-version",
		"body-budget-bytes", "answer-budget-bytes"}
	fs, _, _ := serveFlags(io.Discard)
	fs.VisitAll(func(f *flag.Flag) {
		lf, ok := byName[f.Name]
		switch {
		case slices.Contains(sglmockOnly, f.Name):
			if ok {
				t.Errorf("--%s is sglmock's own, yet the table has it as SGLang's", f.Name)
			}
		case !ok:
			t.Errorf("--%s: serve defines it as SGLang's, the table does not have it", f.Name)
		case isBoolFlag(f) != (lf.arity == arSwitch):
			t.Errorf("--%s: serve's takes a value: %v, SGLang's is %s", f.Name, !isBoolFlag(f), lf.arity)
		}
	})
	for _, bad := range []string{"tp-size", "tp-size value\ntp-size switch", "x sometimes", "x value Bad_Alias"} {
		if _, err := parseLaunchFlags(bad); err == nil {
			t.Errorf("parseLaunchFlags(%q): no error", bad)
		}
	}
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
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
		{"seed", []string{"--seed", "7"}, "", func(o *serveOptions) bool { return o.profile.Seed == 7 }},
		{"random seed", []string{"--random-seed", "8"}, "", func(o *serveOptions) bool { return o.profile.Seed == 8 }},
		{"fcfs", []string{"--schedule-policy", "fcfs"}, "", func(o *serveOptions) bool { return o.schedulePolicy == "fcfs" }},
		{"timeouts", []string{"--idle-timeout", "1m", "--body-timeout", "2s", "--read-header-timeout", "3s"}, "", func(o *serveOptions) bool {
			return o.idleTimeout == time.Minute && o.bodyTimeout == 2*time.Second && o.readHeaderTimeout == 3*time.Second
		}},
		{"zero timeout", []string{"--idle-timeout", "0s"}, "--idle-timeout 0s: must be > 0", nil},
		{"lpm is not modelled", []string{"--schedule-policy", "lpm"}, "--schedule-policy lpm: not modelled", nil},
		{"unknown policy", []string{"--schedule-policy", "fifo"}, `--schedule-policy "fifo": unknown`, nil},
		{"unknown flag", []string{"--tp-size", "8"}, "flag provided but not defined: -tp-size", nil},
		{"bad value", []string{"--port", "x"}, `invalid value "x" for flag -port`, nil},
		{"port range", []string{"--port", "70000"}, "--port 70000", nil},
		{"speedup", []string{"--speedup", "0"}, "--speedup 0", nil},
		{"speedup NaN", []string{"--speedup", "NaN"}, `invalid value "NaN" for flag -speedup: want a finite number`, nil},
		{"grace +Inf", []string{"--shutdown-grace", "+Inf"}, `invalid value "+Inf" for flag -shutdown-grace: want a finite number`, nil},
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

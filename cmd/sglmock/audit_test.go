package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/sglmock/sglmock/harness"
)

// childEnv makes the test binary, run as audit's CMD, play a benchmark
// script instead of running the tests.
const childEnv = "SGLMOCK_AUDIT_CHILD"

func TestMain(m *testing.M) {
	if behaviour := os.Getenv(childEnv); behaviour != "" {
		os.Exit(auditChild(behaviour))
	}
	os.Exit(m.Run())
}

// auditChild is a small benchmark script: "repeat" sends one prompt twice
// (the seed's bug), "flush" flushes between the legs (the fix), "fail"
// exits 3 after one request. It finds the server in the environment audit
// sets.
func auditChild(behaviour string) int {
	base := os.Getenv("SGLANG_URL")
	if os.Getenv("SGLANG_BASE_URL") != base || os.Getenv("OPENAI_BASE_URL") != base+"/v1" ||
		os.Getenv("OPENAI_API_BASE") != base+"/v1" || !strings.HasSuffix(base, ":"+os.Getenv("SGLANG_PORT")) {
		fmt.Fprintln(os.Stderr, "child: the environment lacks the server's address")
		return 4
	}
	post := func(path, body string) (int, string) {
		resp, err := http.Post(base+path, "application/json", strings.NewReader(body))
		if err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(5)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	leg := func(rid string) {
		body := fmt.Sprintf(`{"rid": %q, "text": "A prompt the two legs of a two-point benchmark share, long enough to matter.", "sampling_params": {"max_new_tokens": 4}}`, rid)
		if code, b := post("/generate", body); code != 200 {
			fmt.Fprintln(os.Stderr, "child:", code, b)
			os.Exit(6)
		}
	}
	if behaviour == "signal" {
		got := make(chan os.Signal, 1)
		signal.Notify(got, syscall.SIGTERM)
		fmt.Println("child: ready")
		fmt.Printf("child: got %v\n", <-got)
		return 0
	}
	leg("leg-a")
	switch behaviour {
	case "fail":
		fmt.Println("child: giving up")
		return 3
	case "flush":
		// The server waits for idle up to the timeout (its seconds).
		if code, b := post("/flush_cache?timeout=30", ""); code != 200 {
			fmt.Fprintln(os.Stderr, "child: flush:", code, b)
			return 7
		}
	}
	leg("leg-b")
	fmt.Println("child: sent two legs")
	return 0
}

func audit(t *testing.T, behaviour string, extra ...string) (int, string, string, *harness.AuditReport) {
	t.Helper()
	t.Setenv(childEnv, behaviour)
	js := filepath.Join(t.TempDir(), "audit.json")
	args := append([]string{"audit", "--speedup", "1000", "--json", js}, extra...)
	args = append(args, "--", os.Args[0], "-test.run=^$")
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	var rep harness.AuditReport
	if b, err := os.ReadFile(js); err == nil {
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatalf("the JSON report: %v", err)
		}
	}
	return code, stdout.String(), stderr.String(), &rep
}

// A script that repeats its prompt is POISONED (exit 1), and the report
// names the request it reused; one that flushes between the legs passes.
func TestAuditRepeatedPrompt(t *testing.T) {
	code, stdout, stderr, rep := audit(t, "repeat")
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "child: sent two legs") {
		t.Errorf("the child's output is not forwarded:\n%s", stdout)
	}
	if len(rep.Requests) != 2 || rep.Requests[1].ReusedFrom != "leg-a" || rep.Requests[1].CachedTokens != rep.Requests[1].PromptTokens-1 {
		t.Fatalf("report: %+v", rep.Requests)
	}
	want := "POISONED: repeats the prompt of leg-a (sent at"
	if !strings.Contains(stdout, want) || !strings.Contains(stdout, "no flush between them") || !strings.Contains(stdout, "verdict: POISONED: 1 of 2 requests") {
		t.Errorf("stdout lacks %q and the verdict:\n%s", want, stdout)
	}
}

func TestAuditFlushBetweenLegs(t *testing.T) {
	code, stdout, stderr, rep := audit(t, "flush")
	if code != 0 {
		t.Fatalf("exit %d, want 0\n%s%s", code, stdout, stderr)
	}
	if len(rep.Flushes) != 1 || !rep.Flushes[0].OK || rep.Requests[1].CachedTokens != 0 || rep.Verdict.String() != "ok" {
		t.Errorf("report: flushes %+v, requests %+v, verdict %s", rep.Flushes, rep.Requests, rep.Verdict)
	}
	if !strings.Contains(stdout, "flushed") || !strings.Contains(stdout, "verdict: ok") {
		t.Errorf("stdout:\n%s", stdout)
	}
}

// A shared system prompt within --allow-shared-prefix is tolerated.
func TestAuditAllowSharedPrefix(t *testing.T) {
	if code, stdout, stderr, _ := audit(t, "repeat", "--allow-shared-prefix", "100"); code != 0 {
		t.Fatalf("exit %d, want 0\n%s%s", code, stdout, stderr)
	}
}

// A failing command's own status is audit's, with a message.
func TestAuditCommandFails(t *testing.T) {
	code, stdout, stderr, _ := audit(t, "fail")
	if code != 3 || !strings.Contains(stderr, "the command failed with exit status 3") || !strings.Contains(stdout, "child: giving up") {
		t.Fatalf("exit %d, want 3\n%s%s", code, stdout, stderr)
	}
}

func TestAuditUsage(t *testing.T) {
	for _, args := range [][]string{{"audit"}, {"audit", "--speedup", "0", "--", "true"}, {"audit", "--", "/nonexistent/cmd"}} {
		var stderr bytes.Buffer
		if code := run(args, io.Discard, &stderr); code != 2 {
			t.Errorf("%q: exit %d, want 2 (%s)", args, code, stderr.String())
		}
	}
}

// readyWriter collects output and closes ready when it sees "child: ready".
type readyWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	ready chan struct{}
	once  sync.Once
}

func (w *readyWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(b)
	if strings.Contains(w.buf.String(), "child: ready") {
		w.once.Do(func() { close(w.ready) })
	}
	return len(b), nil
}

func (w *readyWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// A SIGTERM to audit reaches the command.
func TestAuditForwardsSignals(t *testing.T) {
	t.Setenv(childEnv, "signal")
	out := &readyWriter{ready: make(chan struct{})}
	done := make(chan int, 1)
	go func() { done <- run([]string{"audit", "--", os.Args[0], "-test.run=^$"}, out, io.Discard) }()
	select {
	case <-out.ready:
	case code := <-done:
		t.Fatalf("audit ended before the child was ready: exit %d\n%s", code, out.String())
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := <-done; code != 0 || !strings.Contains(out.String(), "child: got terminated") {
		t.Fatalf("exit %d, want 0 and the child's report of the signal\n%s", code, out.String())
	}
}

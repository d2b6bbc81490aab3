package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/sglmock/sglmock/harness"
	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
	"github.com/sglmock/sglmock/mockserver/tokenizer"
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

// childPrompt is long enough that reusing it cuts a request's TTFT by far
// more than 1 %.
var childPrompt = strings.Repeat("A prompt the two legs of a two-point benchmark share, long enough to matter. ", 40)

// auditChild is a small benchmark script: "repeat" sends one prompt twice
// (the original benchmark's bug), "flush" flushes between the legs (the fix), "fail"
// exits 3 after one request, "fixed" sends the repeat to the fixed URL
// $FIXED_URL, "none" sends nothing, "env" prints its proxy settings,
// "signal" waits for SIGTERM, "tree" starts a "signal" child and waits for
// it, "orphan" starts one and exits at once. It finds the server in the
// environment audit sets.
func auditChild(behaviour string) int {
	base := os.Getenv("SGLANG_URL")
	if os.Getenv("SGLANG_BASE_URL") != base || os.Getenv("OPENAI_BASE_URL") != base+"/v1" ||
		os.Getenv("OPENAI_API_BASE") != base+"/v1" || !strings.HasSuffix(base, ":"+os.Getenv("SGLANG_PORT")) {
		fmt.Fprintln(os.Stderr, "child: the environment lacks the server's address")
		return 4
	}
	if behaviour == "fixed" {
		base = os.Getenv("FIXED_URL")
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
		body := fmt.Sprintf(`{"rid": %q, "text": %q, "sampling_params": {"max_new_tokens": 4}}`, rid, childPrompt)
		if code, b := post("/generate", body); code != 200 {
			fmt.Fprintln(os.Stderr, "child:", code, b)
			os.Exit(6)
		}
	}
	switch behaviour {
	case "none":
		fmt.Println("child: no server needed")
		return 0
	case "env":
		fmt.Printf("child: NO_PROXY=%s no_proxy=%s\n", os.Getenv("NO_PROXY"), os.Getenv("no_proxy"))
		return 0
	case "model":
		// As a load tool starts: the model the server serves, then a
		// request whose prompt it counted with that model's tokenizer.
		resp, err := http.Get(base + "/v1/models")
		if err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			return 5
		}
		var models struct {
			Data []struct {
				ID string `json:"id"`
			} `json:"data"`
		}
		json.NewDecoder(resp.Body).Decode(&models)
		resp.Body.Close()
		_, b := post("/generate", fmt.Sprintf(`{"rid": "counted", "text": %q, "sampling_params": {"max_new_tokens": 4}}`, childPrompt))
		var answer struct {
			MetaInfo struct {
				PromptTokens int `json:"prompt_tokens"`
			} `json:"meta_info"`
		}
		json.Unmarshal([]byte(b), &answer)
		for _, m := range models.Data {
			fmt.Printf("child: model %s\n", m.ID)
		}
		fmt.Printf("child: prompt_tokens %d\n", answer.MetaInfo.PromptTokens)
		return 0
	case "signal":
		got := make(chan os.Signal, 1)
		signal.Notify(got, syscall.SIGTERM)
		fmt.Printf("child %d: ready\n", os.Getpid())
		if os.Getenv("READY_FD") != "" {
			// The parent waits for this before it goes on.
			ready := os.NewFile(3, "ready")
			ready.Write([]byte("ready\n"))
			ready.Close()
		}
		fmt.Printf("child %d: got %v\n", os.Getpid(), <-got)
		return 0
	case "tree", "orphan":
		r, w, err := os.Pipe()
		if err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			return 7
		}
		grandchild := exec.Command(os.Args[0], "-test.run=^$")
		grandchild.Env = append(os.Environ(), childEnv+"=signal", "READY_FD=3")
		grandchild.Stdout, grandchild.ExtraFiles = os.Stdout, []*os.File{w}
		if err := grandchild.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			return 7
		}
		w.Close()
		io.ReadAll(r) // until the grandchild is ready
		fmt.Printf("child: started %d\n", grandchild.Process.Pid)
		if behaviour == "orphan" {
			return 0
		}
		grandchild.Wait()
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
// names the request it repeated; one that flushes between the legs passes.
func TestAuditRepeatedPrompt(t *testing.T) {
	code, stdout, stderr, rep := audit(t, "repeat")
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "child: sent two legs") {
		t.Errorf("the child's output is not forwarded:\n%s", stdout)
	}
	b := rep.Requests[1]
	if len(rep.Requests) != 2 || b.ReusedFrom != "leg-a" || b.CachedTokens != b.PromptTokens-1 || b.Pattern != harness.Repeat || b.Route != "/generate" ||
		!b.Material || b.Saved != b.ColdPrefillCost-b.PrefillCost {
		t.Fatalf("report: %+v", rep.Requests)
	}
	if !strings.HasPrefix(b.Verdict.String(), "POISONED: repeats leg-a (at") || !strings.HasSuffix(b.Verdict.String(), "no flush between") ||
		!strings.Contains(stdout, "      repeats leg-a (at") || !strings.Contains(stdout, "verdict: POISONED: 1 of 2 requests") {
		t.Errorf("stdout lacks the cause and the verdict:\n%s", stdout)
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

// A number of tokens keeps today's meaning: reuse up to it is tolerated.
// auto excuses shared prefixes, never a repeat.
func TestAuditAllowSharedPrefix(t *testing.T) {
	for _, tt := range []struct {
		allow string
		code  int
	}{{"100000", 0}, {"100", 1}, {"auto", 1}} {
		if code, stdout, stderr, _ := audit(t, "repeat", "--allow-shared-prefix", tt.allow); code != tt.code {
			t.Errorf("--allow-shared-prefix %s: exit %d, want %d\n%s%s", tt.allow, code, tt.code, stdout, stderr)
		}
	}
}

// A failing command's own status is audit's, with a message.
func TestAuditCommandFails(t *testing.T) {
	code, stdout, stderr, _ := audit(t, "fail")
	if code != 3 || !strings.Contains(stderr, "the command failed with exit status 3") || !strings.Contains(stdout, "child: giving up") {
		t.Fatalf("exit %d, want 3\n%s%s", code, stdout, stderr)
	}
}

// A result file the tool never wrote costs the comparison, not the
// verdict: the report is printed and written, and the exit status is the
// command's own when it failed, 1 when a request is POISONED, else 2.
func TestAuditToolResultMissing(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "never-written.jsonl")
	for _, tt := range []struct {
		behaviour, verdict string
		code               int
	}{{"fail", "verdict: ok", 3}, {"repeat", "verdict: POISONED", 1}, {"flush", "verdict: ok", 2}} {
		code, stdout, stderr, rep := audit(t, tt.behaviour, "--tool-result", missing)
		if code != tt.code || !strings.Contains(stdout, tt.verdict) || len(rep.Requests) == 0 ||
			!strings.Contains(stderr, "sglmock audit: --tool-result: open "+missing) {
			t.Errorf("%s: exit %d with %d requests in the JSON, want %d, the report and the file's error\n%s%s",
				tt.behaviour, code, len(rep.Requests), tt.code, stdout, stderr)
		}
	}
}

// A command that sends nothing to the server leaves nothing checked: exit
// 3, and the verdict says so.
func TestAuditNothingReachedTheServer(t *testing.T) {
	code, stdout, stderr, rep := audit(t, "none")
	if code != 3 || rep.Checked || !strings.Contains(stdout, "verdict: SUSPECT: no request reached the server: nothing was checked") {
		t.Fatalf("exit %d, checked %v, want 3 and unchecked\n%s%s", code, rep.Checked, stdout, stderr)
	}
}

// --port binds the mock where a script with a fixed URL looks.
func TestAuditFixedPort(t *testing.T) {
	port := mocktest.FreePort(t)
	t.Setenv("FIXED_URL", fmt.Sprintf("http://127.0.0.1:%d", port))
	if code, stdout, stderr, rep := audit(t, "fixed", "--port", strconv.Itoa(port)); code != 1 || len(rep.Requests) != 2 {
		t.Fatalf("exit %d with %d requests, want 1 and the 2 legs\n%s%s", code, len(rep.Requests), stdout, stderr)
	}
	// A port taken is a clear error before the command runs.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	taken := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	code, stdout, stderr, _ := audit(t, "none", "--port", taken)
	if want := "sglmock audit: cannot listen on 127.0.0.1:" + taken + " (another server there? --port 0 picks a free port)"; code != 2 || !strings.HasPrefix(stderr, want) || stdout != "" {
		t.Fatalf("exit %d, stderr %q, stdout %q: want 2 and %q", code, stderr, stdout, want)
	}
}

// When a proxy is set for HTTP, the command's NO_PROXY keeps what it had
// and adds the server's host and loopback, so its requests reach the mock.
func TestAuditNoProxy(t *testing.T) {
	t.Setenv("HTTP_PROXY", "http://127.0.0.1:1")
	t.Setenv("NO_PROXY", "example.com,localhost")
	t.Setenv("no_proxy", "internal.example")
	code, stdout, stderr, _ := audit(t, "env")
	want := "child: NO_PROXY=example.com,localhost,internal.example,127.0.0.1 no_proxy=example.com,localhost,internal.example,127.0.0.1"
	if code != 3 || !strings.Contains(stdout, want) {
		t.Fatalf("exit %d, want 3 and %q\n%s%s", code, want, stdout, stderr)
	}
}

func TestAuditUsage(t *testing.T) {
	for _, args := range [][]string{
		{"audit"},
		{"audit", "--speedup", "0", "--", "true"},
		{"audit", "--min-impact", "0", "--", "true"},
		{"audit", "--min-run-impact", "0", "--", "true"},
		{"audit", "--min-run-impact", "101", "--", "true"},
		{"audit", "--upstream", "http://127.0.0.1:1", "--tokenizer-path", "x", "--", "true"}, // the real server has its own
		{"audit", "--allow-shared-prefix", "some", "--", "true"},
		{"audit", "--port", "70000", "--", "true"},
		{"audit", "--upstream", "http://127.0.0.1:1", "--profile", "kimi-k2.6-rtx6000", "--", "true"},
		{"audit", "--upstream", "ftp://x", "--", "true"},
		{"audit", "--upstream", "http://127.0.0.1:1", "--", "true"}, // nothing listens there
		{"audit", "--records", "records.jsonl", "--", "true"},       // the mock keeps its own
		{"audit", "--", "/nonexistent/cmd"},
	} {
		var stderr bytes.Buffer
		if code := run(args, io.Discard, &stderr); code != 2 {
			t.Errorf("%q: exit %d, want 2 (%s)", args, code, stderr.String())
		}
	}
}

// readyWriter collects output and closes ready when it has seen want.
type readyWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	want  string
	ready chan struct{}
	once  sync.Once
}

func (w *readyWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(b)
	if strings.Count(w.buf.String(), w.want) > 0 {
		w.once.Do(func() { close(w.ready) })
	}
	return len(b), nil
}

func (w *readyWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// runUntilReady runs audit over the test binary playing behaviour and
// waits for want in its output.
func runUntilReady(t *testing.T, behaviour, want string) (*readyWriter, chan int) {
	t.Helper()
	t.Setenv(childEnv, behaviour)
	out := &readyWriter{want: want, ready: make(chan struct{})}
	done := make(chan int, 1)
	go func() { done <- run([]string{"audit", "--", os.Args[0], "-test.run=^$"}, out, io.Discard) }()
	select {
	case <-out.ready:
	case code := <-done:
		t.Fatalf("audit ended before the child was ready: exit %d\n%s", code, out.String())
	}
	return out, done
}

// A SIGTERM to audit reaches the command and its children: the whole
// process group.
func TestAuditForwardsSignals(t *testing.T) {
	out, done := runUntilReady(t, "tree", "child: started")
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code := <-done
	pid := startedPID(t, out.String())
	// The child, which does not catch it, ends by the signal: its status
	// is audit's.
	if want := fmt.Sprintf("child %d: got terminated", pid); code != 128+int(syscall.SIGTERM) || !strings.Contains(out.String(), want) {
		t.Fatalf("exit %d, want %d and the grandchild's %q\n%s", code, 128+int(syscall.SIGTERM), want, out.String())
	}
}

func startedPID(t *testing.T, out string) int {
	t.Helper()
	_, rest, ok := strings.Cut(out, "child: started ")
	pid, err := strconv.Atoi(strings.Fields(rest + " ")[0])
	if !ok || err != nil {
		t.Fatalf("no started pid in %q", out)
	}
	return pid
}

// A command that forks and exits leaves no child behind: what is left in
// its process group is ended when it ends.
func TestAuditLeavesNoChildBehind(t *testing.T) {
	out, done := runUntilReady(t, "orphan", "child: started")
	code := <-done
	pid := startedPID(t, out.String())
	if code != 3 || !gone(pid) {
		t.Fatalf("exit %d, grandchild %d gone %v: want 3 and gone\n%s", code, pid, gone(pid), out.String())
	}
	if want := fmt.Sprintf("child %d: got terminated", pid); !strings.Contains(out.String(), want) {
		t.Errorf("the grandchild was not ended by a SIGTERM (%q):\n%s", want, out.String())
	}
}

// gone tells whether pid no longer runs: no such process, or a zombie
// waiting for its new parent to reap it.
func gone(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	_, rest, _ := strings.Cut(string(stat), ") ")
	return strings.HasPrefix(rest, "Z") || strings.HasPrefix(rest, "X")
}

// With --upstream and --records, each request the proxy saw is in the
// records file, one JSON line written as its answer was read.
func TestAuditUpstreamRecords(t *testing.T) {
	m, err := startLocalMockAt("127.0.0.1:0", mocktest.Profile(t, "default"), 1000, api.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	t.Setenv(childEnv, "repeat")
	records := filepath.Join(t.TempDir(), "records.jsonl")
	var stdout, stderr bytes.Buffer
	code := run([]string{"audit", "--upstream", m.URL, "--records", records, "--", os.Args[0], "-test.run=^$"}, &stdout, &stderr)
	if code != 1 {
		t.Fatalf("exit %d, want 1 (the repeat)\n%s%s", code, stdout.String(), stderr.String())
	}
	b, err := os.ReadFile(records)
	if err != nil {
		t.Fatal(err)
	}
	// A record is written when the proxy has read its answer, which may be
	// after the client, done reading it, sent the next request: the two
	// lines come in either order.
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	slices.SortFunc(lines, func(x, y string) int { return strings.Compare(ridOf(x), ridOf(y)) })
	if len(lines) != 2 || ridOf(lines[0]) != "leg-a" || ridOf(lines[1]) != "leg-b" ||
		!strings.Contains(lines[1], `"route":"/generate"`) || !strings.Contains(lines[1], `"cached_tokens":760`) {
		t.Fatalf("records:\n%s\nwant leg-a and leg-b, one a line", b)
	}
}

// --tokenizer-path and --served-model-name give the mock the model a load
// tool names and counts with (bench_serving's --model and --tokenizer):
// /v1/models lists that name, and a prompt counts as that tokenizer counts
// it, not as the profile's built-in one does.
func TestAuditServesTheToolsModel(t *testing.T) {
	dir := t.TempDir()
	mocktest.WriteTokenizer(t, dir, "")
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := len(tok.EncodePrompt(nil, childPrompt))
	code, stdout, stderr, _ := audit(t, "model", "--tokenizer-path", dir, "--served-model-name", "acme/tiny")
	if code != 0 || !strings.Contains(stdout, "child: model acme/tiny\n") || !strings.Contains(stdout, fmt.Sprintf("child: prompt_tokens %d\n", want)) {
		t.Fatalf("exit %d; want 0, the model acme/tiny and %d prompt tokens\n%s%s", code, want, stdout, stderr)
	}
	if _, stdout, _, _ := audit(t, "model"); strings.Contains(stdout, fmt.Sprintf("child: prompt_tokens %d\n", want)) {
		t.Fatalf("the profile's own tokenizer counts %d tokens too: the test cannot tell them apart\n%s", want, stdout)
	}
	if code, _, stderr, _ := audit(t, "none", "--tokenizer-path", filepath.Join(dir, "nowhere")); code != 2 || !strings.Contains(stderr, "--tokenizer-path "+filepath.Join(dir, "nowhere")+": no such directory") {
		t.Errorf("a missing tokenizer: exit %d, stderr %q; want 2 and the path named", code, stderr)
	}
}

// ridOf is a records line's rid, "" when it has none.
func ridOf(line string) string {
	var r struct {
		RID string `json:"rid"`
	}
	json.Unmarshal([]byte(line), &r)
	return r.RID
}

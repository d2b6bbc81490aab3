package main

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// health runs "sglmock health" with args and returns its exit code and
// output.
func health(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(append([]string{"health"}, args...), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// The health check passes while the server serves and fails once it shuts
// down (503) and once it is gone.
func TestHealthFollowsTheServer(t *testing.T) {
	base, stop, kill, done, _ := startServe(t, "--speedup", "1", "--shutdown-grace", "3600", "--skip-server-warmup")
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	host, port := u.Hostname(), u.Port()
	code, stdout, stderr := health("--host", host, "--port", port)
	if want := "healthy: " + base + "/health\n"; code != 0 || stdout != want {
		t.Fatalf("serving: got exit %d, stdout %q, stderr %q; want 0 and %q", code, stdout, stderr, want)
	}

	// A stream keeps the server in its grace period after the signal.
	resp, err := http.Post(base+"/generate", "application/json",
		strings.NewReader(`{"text": "Hello", "sampling_params": {"max_new_tokens": 30000}, "stream": true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	stop()
	for code == 0 { // until the server has seen the signal
		code, _, stderr = health("--host", host, "--port", port)
	}
	if want := "sglmock health: " + base + "/health answered 503 Service Unavailable\n"; code != 1 || stderr != want {
		t.Fatalf("shutting down: got exit %d, stderr %q; want 1 and %q", code, stderr, want)
	}
	kill()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	code, _, stderr = health("--host", host, "--port", port)
	if code != 1 || !strings.Contains(stderr, "connection refused") {
		t.Fatalf("stopped: got exit %d, stderr %q; want 1 and a refused connection", code, stderr)
	}
}

// A server that accepts but never answers fails the check after --timeout.
func TestHealthTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	code, _, stderr := health("--port", port, "--timeout", "100ms")
	if code != 1 || !strings.Contains(stderr, "context deadline exceeded") {
		t.Fatalf("got exit %d, stderr %q; want 1 and the deadline", code, stderr)
	}
	if c := <-accepted; c != nil {
		c.Close()
	}
}

func TestHealthFlags(t *testing.T) {
	tests := []struct {
		args       []string
		wantCode   int
		wantStderr string
	}{
		{[]string{"--port", "0"}, 2, "--port 0: must be in 1..65535"},
		{[]string{"--port", "65536"}, 2, "--port 65536: must be in 1..65535"},
		{[]string{"--timeout", "0s"}, 2, "--timeout 0s: must be > 0"},
		{[]string{"extra"}, 2, `unexpected argument "extra"`},
		{[]string{"--nope"}, 2, "unknown flag --nope (sglmock health --help lists the flags)"},
		{[]string{"--help"}, 0, "exits 0 when it answers 200"},
	}
	for _, tt := range tests {
		code, _, stderr := health(tt.args...)
		if code != tt.wantCode || !strings.Contains(stderr, tt.wantStderr) {
			t.Errorf("health %q: got exit %d, stderr %q; want %d and %q", tt.args, code, stderr, tt.wantCode, tt.wantStderr)
		}
	}
}

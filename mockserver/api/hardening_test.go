package api_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
)

// A body that trickles in, one byte every 59 s, never waits 60 s for a
// byte, yet is cut off once it falls behind the overall pace: at 60 s plus
// one second per MiB received (8 bytes: 7629 ns), not at its end.
func TestBodyTimeoutIsOverall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{BodyTimeout: 60 * time.Second})
		conn, err := m.HTTP.Dial()
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		start := time.Now()
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			io.WriteString(conn, "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"text\"")
			tick := time.NewTicker(59 * time.Second)
			defer tick.Stop()
			for range 93 {
				select {
				case <-tick.C:
				case <-stop:
					return
				}
				if _, err := io.WriteString(conn, " "); err != nil {
					return
				}
			}
		}()
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		want := 60*time.Second + 7629*time.Nanosecond
		if got := time.Since(start); resp.StatusCode != 408 || got != want {
			t.Fatalf("got %d after %v, want 408 after %v", resp.StatusCode, got, want)
		}
		if !strings.Contains(string(b), "the body arrived slower than 1048576 bytes/s after its first 1m0s") {
			t.Fatalf("got %s, want the overall pace named", b)
		}
		conn.Close()
		mocktest.CheckIdle(t, m.Engine())
	})
}

// A JSON body followed by NUL bytes is trailing garbage, refused as any
// other malformed body.
func TestTrailingNULRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{})
		for _, body := range []string{"{\"text\":\"hi\"}\x00", "{\"text\":\"hi\"}\x00garbage", "{\"text\":\"hi\"}   \x00\x00\x00"} {
			for _, path := range []string{"/generate", "/v1/completions"} {
				b := body
				if path == "/v1/completions" {
					b = strings.Replace(body, `"text"`, `"prompt"`, 1)
				}
				code, resp, _ := m.Do(t, "POST", path, b)
				if code != 400 || !strings.Contains(resp, `invalid character '\\x00'`) {
					t.Errorf("%s %q: got %d %s, want 400 naming the NUL byte", path, b, code, resp)
				}
			}
		}
		mocktest.CheckIdle(t, m.Engine())
	})
}

// Errors repeat at most 256 bytes of a client's value, with its length.
func TestErrorsClipEchoedInput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{})
		long := strings.Repeat("é", 50_000) // 100 kB, two bytes a character
		tests := []struct{ method, path, body string }{
			{"GET", "/v1/models/" + long, ""},
			{"GET", "/sim/requests/" + long, ""},
			{"POST", "/v1/completions/render", fmt.Sprintf(`{"model":%q,"prompt":"hi"}`, long)},
			{"POST", "/v1/chat/completions/render", fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}]}`, long)},
			{"POST", "/flush_cache?timeout=" + long, ""},
			{"GET", "/v1/loads?dp_rank=" + long, ""},
			{"GET", "/sim/expect?prompt_tokens=" + long, ""},
			{"POST", "/reset_prefix_cache?reset_running_requests=" + long, ""},
		}
		for _, tt := range tests {
			code, resp, _ := m.Do(t, tt.method, tt.path, tt.body)
			if code < 400 || len(resp) > 1024 || !strings.Contains(resp, "... (100000 bytes)") {
				t.Errorf("%s %.40s: got %d and %d bytes (%.300s), want an error of at most 1 kB naming the length", tt.method, tt.path, code, len(resp), resp)
			}
		}
	})
}

// A page that rebinds its own domain to the server sends same-origin
// requests under its domain's name: the routes that change state answer
// only to IP addresses, loopback names and the server's own name.
func TestStateChangesRefuseForeignHosts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{})
		// A rebound page's request is same-origin: its Origin names the
		// same host as its Host.
		same := func(host string) []string {
			return []string{"Host", host, "Origin", "http://" + host, "Sec-Fetch-Site", "same-origin"}
		}
		tests := []struct {
			path, host string
			header     []string
			want       int
		}{
			{"/flush_cache", "evil.example:30000", same("evil.example:30000"), 403},
			{"/flush_cache", "evil.example", []string{"Host", "evil.example", "Sec-Fetch-Site", "same-origin"}, 403},
			{"/abort_request", "rebind.attacker.test:30000", same("rebind.attacker.test:30000"), 403},
			{"/flush_cache", "127.0.0.1:30000", same("127.0.0.1:30000"), 200},
			{"/flush_cache", "[::1]:30000", same("[::1]:30000"), 200},
			{"/flush_cache", "10.1.2.3", same("10.1.2.3"), 200},
			{"/flush_cache", "localhost:30000", same("localhost:30000"), 200},
			{"/flush_cache", "LOCALHOST.", same("LOCALHOST."), 200},
			{"/flush_cache", "app.localhost:30000", same("app.localhost:30000"), 200},
			{"/flush_cache", mocktest.Host, same(mocktest.Host), 200},
			// A client that is no browser names the server as it likes: a
			// Kubernetes service, a load balancer.
			{"/flush_cache", "sglmock.default.svc:30000", []string{"Host", "sglmock.default.svc:30000"}, 200},
			{"/abort_request", "mock.internal", []string{"Host", "mock.internal"}, 200},
		}
		for _, tt := range tests {
			body := ""
			if tt.path == "/abort_request" {
				body = `{"abort_all": true}`
			}
			code, resp, _ := m.Do(t, "POST", tt.path, body, tt.header...)
			if code != tt.want {
				t.Errorf("%s with Host %s: got %d %s, want %d", tt.path, tt.host, code, resp, tt.want)
			}
			if code == 403 && !strings.Contains(resp, "Host refused") {
				t.Errorf("%s with Host %s: got %s, want the refusal explained", tt.path, tt.host, resp)
			}
		}
		// Routes that change nothing answer under any name.
		if code, resp, _ := m.Do(t, "GET", "/health", "", "Host", "evil.example"); code != 200 {
			t.Fatalf("/health under a foreign name: got %d %s, want 200", code, resp)
		}
	})
}

// Every route that tokenizes a text stops when the client leaves: with its
// request's context already ended, a long text's tokenization stops at the
// tokenizer's first look at it, and the route answers nothing and runs
// nothing (the tokenizer's own test counts the looks).
func TestTokenizingStopsOnEveryRoute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{})
		text := strings.Repeat("word ", 200<<10) // 1 MiB: past the tokenizer's first look
		for _, tt := range []struct{ path, body string }{
			{"/generate", `{"text": "` + text + `", "sampling_params": {"max_new_tokens": 1}}`},
			{"/generate", `{"text": "` + text + `", "sampling_params": {"max_new_tokens": 1, "n": 2}}`},
			{"/generate", `{"text": "` + text + `", "return_logprob": true, "sampling_params": {"max_new_tokens": 1}}`},
			{"/v1/completions", `{"prompt": "` + text + `", "max_tokens": 1}`},
			{"/v1/chat/completions", `{"messages": [{"role": "user", "content": "` + text + `"}]}`},
			{"/v1/completions/render", `{"prompt": "` + text + `"}`},
			{"/v1/chat/completions/render", `{"messages": [{"role": "user", "content": "` + text + `"}]}`},
			{"/tokenize", `{"prompt": "` + text + `"}`},
		} {
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // the client has left
			req := httptest.NewRequest("POST", tt.path, strings.NewReader(tt.body)).WithContext(ctx)
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			m.Server.Handler().ServeHTTP(rec, req)
			if rec.Body.Len() != 0 {
				t.Errorf("%s %.60s: answered %d %.200s to a client that left, want nothing", tt.path, tt.body, rec.Code, rec.Body.String())
			}
		}
		if st := simStats(t, m); st.Requests != 0 {
			t.Errorf("%d requests ran, want none", st.Requests)
		}
		mocktest.CheckIdle(t, m.Engine())
	})
}

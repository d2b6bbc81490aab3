package api_test

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
)

// A slow or idle client is cut off at the configured wall-clock limits,
// and holds nothing in the engine.
func TestConnectionLimits(t *testing.T) {
	cfg := api.Config{ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 5 * time.Second, BodyTimeout: 3 * time.Second}
	tests := []struct {
		name     string
		send     string
		response bool // a response comes before the close
		want     int
		after    time.Duration
	}{
		{"headers never end", "GET /health HTTP/1.1\r\nHost: x\r\n", false, 0, 10 * time.Second},
		{"body stops arriving", "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"text\"",
			true, 408, 3 * time.Second},
		{"idle after a request", "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", true, 200, 5 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := mocktest.Start(t, cfg)
				conn, err := m.HTTP.Dial()
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				start := time.Now()
				go io.WriteString(conn, tt.send)
				r := bufio.NewReader(conn)
				if tt.response {
					resp, err := http.ReadResponse(r, nil)
					if err != nil {
						t.Fatal(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != tt.want {
						t.Fatalf("got status %d, want %d", resp.StatusCode, tt.want)
					}
					if tt.want == 408 {
						// Cut at the body limit: answered and closed at once.
						if got := time.Since(start); got != tt.after {
							t.Fatalf("answered after %v, want %v", got, tt.after)
						}
						start = time.Now()
						tt.after = 0
					} else {
						start = time.Now()
					}
				}
				if _, err := r.ReadByte(); err != io.EOF {
					t.Fatalf("got %v, want the server to close the connection", err)
				}
				if got := time.Since(start); got != tt.after {
					t.Fatalf("closed after %v, want %v", got, tt.after)
				}
				mocktest.CheckIdle(t, m.Engine())
			})
		})
	}
}

// The routes that change state refuse requests a browser sends on behalf of
// another site; scripts, which send no Origin, are served.
func TestCrossOriginRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{})
		tests := []struct {
			name, method, path string
			header             []string
			want               int
		}{
			{"script flush", "POST", "/flush_cache", nil, 200},
			{"same-origin page", "POST", "/flush_cache", []string{"Origin", "http://" + mocktest.Host, "Sec-Fetch-Site", "same-origin"}, 200},
			{"other site, POST", "POST", "/flush_cache", []string{"Origin", "https://evil.example"}, 403},
			{"other site, GET", "GET", "/flush_cache", []string{"Sec-Fetch-Site", "cross-site"}, 403},
			{"same site, other port", "GET", "/flush_cache", []string{"Origin", "http://sglmock.test:8080", "Sec-Fetch-Site", "same-site"}, 403},
			{"other site abort", "POST", "/abort_request", []string{"Origin", "https://evil.example"}, 403},
		}
		for _, tt := range tests {
			body := ""
			if tt.path == "/abort_request" {
				body = `{"abort_all": true}`
			}
			code, resp, r := m.Do(t, tt.method, tt.path, body, tt.header...)
			if code != tt.want {
				t.Errorf("%s: got %d %s, want %d", tt.name, code, resp, tt.want)
			}
			if code == 403 && !strings.Contains(resp, `"message":"Cross-origin request refused`) {
				t.Errorf("%s: got %s, want the refusal explained", tt.name, resp)
			}
			if acao := r.Header.Get("Access-Control-Allow-Origin"); acao != "" {
				t.Errorf("%s: got Access-Control-Allow-Origin %q, want none", tt.name, acao)
			}
		}
		_, hist, _ := m.Do(t, "GET", "/sim/flushes", "")
		if got := strings.Count(hist, `"outcome"`); got != 2 {
			t.Fatalf("got %d flushes recorded, want only the 2 accepted ones: %s", got, hist)
		}
		code, _, r := m.Do(t, "OPTIONS", "/flush_cache", "", "Origin", "https://evil.example", "Access-Control-Request-Method", "POST")
		if code != 405 || r.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Fatalf("preflight: got %d with ACAO %q, want 405 and no CORS grant", code, r.Header.Get("Access-Control-Allow-Origin"))
		}
	})
}

// Two health checks at the same instant both run and both pass.
func TestConcurrentHealthGenerate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{})
		var wg sync.WaitGroup
		codes := make([]int, 2)
		for i := range codes {
			wg.Go(func() {
				code, _, _, err := m.Send("GET", "/health_generate", "")
				if err != nil {
					t.Error(err)
				}
				codes[i] = code
			})
		}
		wg.Wait()
		if codes[0] != 200 || codes[1] != 200 {
			t.Fatalf("got %v, want [200 200]", codes)
		}
	})
}

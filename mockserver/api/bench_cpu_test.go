//go:build unix

package api_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sglmock/sglmock/internal/cputime"
	"github.com/sglmock/sglmock/mockserver/api"
)

// discardStream is a ResponseWriter that flushes and keeps nothing but a
// byte count, so that a stream's cost is the server's alone.
type discardStream struct {
	header http.Header
	bytes  int
}

func (d *discardStream) Header() http.Header         { return d.header }
func (d *discardStream) Write(p []byte) (int, error) { d.bytes += len(p); return len(p), nil }
func (d *discardStream) WriteHeader(int)             {}
func (d *discardStream) Flush()                      {}

// BenchmarkLongStream measures the CPU time of one /v1/completions stream
// of 16,384 tokens at zero cost (engine, rendering and SSE; no network),
// against 16 streams of 1,024 tokens in the same run: a stream whose
// rendering is linear in its length costs about 1x, one that re-renders its
// whole output at every event 16x.
func BenchmarkLongStream(b *testing.B) {
	s, err := api.New(api.Config{Profile: constantPrefill(b, 0)})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	s.MarkReady()
	stream := func(tokens int) time.Duration {
		body := fmt.Sprintf(`{"prompt": "hello", "max_tokens": %d, "stream": true}`, tokens)
		req := httptest.NewRequest("POST", "/v1/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		w := &discardStream{header: http.Header{}}
		start := cputime.Of(b)
		s.Handler().ServeHTTP(w, req)
		cpu := cputime.Of(b) - start
		// Every content chunk carries at least one word.
		if want := tokens * len(`data: {"choices":[{"text":" x"}]}`); w.bytes < want {
			b.Fatalf("%d tokens: got %d bytes, want at least %d", tokens, w.bytes, want)
		}
		return cpu
	}
	var long, short time.Duration
	for b.Loop() {
		short = 0
		for range 16 {
			short += stream(1024)
		}
		long = stream(16384)
	}
	b.ReportMetric(long.Seconds(), "cpu-s/16k-stream")
	b.ReportMetric(float64(long)/float64(short), "x-16-short")
}

// BenchmarkChatTemplateKwargs measures the CPU time of one /tokenize chat
// whose chat_template_kwargs has 20,000 keys against 10 chats of 2,000 in
// the same run: reading the keys in order linearly costs about 1x, one
// that looks each key up among those before it 10x (60,000 keys, a body
// of 650 kB, took 17 s so).
func BenchmarkChatTemplateKwargs(b *testing.B) {
	s, err := api.New(api.Config{Profile: constantPrefill(b, 0)})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	s.MarkReady()
	chat := func(keys int) time.Duration {
		var kw strings.Builder
		for i := range keys {
			if i > 0 {
				kw.WriteByte(',')
			}
			fmt.Fprintf(&kw, `"k%d": %d`, i, i)
		}
		body := `{"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {` + kw.String() + `}}`
		req := httptest.NewRequest("POST", "/tokenize", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		start := cputime.Of(b)
		s.Handler().ServeHTTP(w, req)
		cpu := cputime.Of(b) - start
		if w.Code != 200 {
			b.Fatalf("%d keys: got %d %s", keys, w.Code, w.Body.String())
		}
		return cpu
	}
	var large, small time.Duration
	for b.Loop() {
		small = 0
		for range 10 {
			small += chat(2000)
		}
		large = chat(20000)
	}
	b.ReportMetric(large.Seconds()/small.Seconds(), "x-10-small")
}

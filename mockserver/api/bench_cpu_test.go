//go:build unix

package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sglmock/sglmock/internal/cputime"
	"github.com/sglmock/sglmock/internal/gctune"
	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/engine"
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

// BenchmarkHandler64 measures the mock's own CPU time a request, without
// the network: the three loads compared with llm-d-inference-sim
// (docs/testing.md) from 64 goroutines on one core, through the handler
// into a writer that keeps nothing, as sglmock serve's garbage collector
// runs (gctune). Against the same requests' plain JSON round trip in the
// same run (the body decoded into a map, the answer, or each of a stream's
// events, decoded into one and encoded again): x-json is how many such
// round trips a request costs. It reports
// allocations too: each is a few per cent of a short request.
func BenchmarkHandler64(b *testing.B) {
	defer gctune.ForServer(api.DefaultBodyBudget+api.DefaultAnswerBudget+engine.DefaultTruthBytes, os.Getenv).Apply()()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	longPrompt := strings.TrimSpace(strings.Repeat(hundredWords+" ", 80))
	for _, tc := range []struct {
		name, prompt string
		stream       bool
	}{
		{"completions/stream=false", hundredWords, false},
		{"completions/stream=true", hundredWords, true},
		{"completions-8k-words/stream=false", longPrompt, false},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s, err := api.New(api.Config{Profile: constantPrefill(b, 0), SpinWindow: engine.DefaultSpinWindow})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			s.MarkReady()
			h := s.Handler()
			body := fmt.Sprintf(`{"model": "m", "prompt": %q, "max_tokens": 16, "stream": %v, "ignore_eos": true}`, tc.prompt, tc.stream)
			serve := func() *discardStream {
				req := httptest.NewRequest("POST", "/v1/completions", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				w := &discardStream{header: http.Header{}}
				h.ServeHTTP(w, req)
				return w
			}
			if w := serve(); w.bytes < 16 {
				b.Fatalf("got a %d-byte answer", w.bytes)
			}
			sample := httptest.NewRecorder()
			req := httptest.NewRequest("POST", "/v1/completions", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			h.ServeHTTP(sample, req)
			// The answer's JSON values: the whole answer, or each event's.
			var values [][]byte
			for _, ev := range strings.Split(sample.Body.String(), "\n\n") {
				if v, ok := strings.CutPrefix(ev, "data: "); ok && v != "[DONE]" {
					values = append(values, []byte(v))
				}
			}
			if !tc.stream {
				values = [][]byte{sample.Body.Bytes()}
			}
			plain := func() {
				var in map[string]any
				if err := json.Unmarshal([]byte(body), &in); err != nil {
					b.Fatal(err)
				}
				for _, v := range values {
					var out map[string]any
					if err := json.Unmarshal(v, &out); err != nil {
						b.Fatal(err)
					}
					json.Marshal(out)
				}
			}
			// 64 clients a round, and the mock's CPU a request against the
			// plain round trip's, in alternating rounds.
			const perRound = 640
			var mockUs, plainUs []float64
			var allocs uint64
			for b.Loop() {
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				before := ms.Mallocs
				cpu := cputime.Of(b)
				jobs := make(chan struct{}, perRound)
				for range perRound {
					jobs <- struct{}{}
				}
				close(jobs)
				var wg sync.WaitGroup
				for range 64 {
					wg.Go(func() {
						for range jobs {
							serve()
						}
					})
				}
				wg.Wait()
				mockUs = append(mockUs, float64((cputime.Of(b)-cpu).Nanoseconds())/1e3/perRound)
				runtime.ReadMemStats(&ms)
				allocs = (ms.Mallocs - before) / perRound
				cpu = cputime.Of(b)
				for range perRound {
					plain()
				}
				plainUs = append(plainUs, float64((cputime.Of(b)-cpu).Nanoseconds())/1e3/perRound)
			}
			m, p := median(mockUs), median(plainUs)
			b.ReportMetric(m, "mock-cpu-µs/req")
			b.ReportMetric(float64(allocs), "mock-allocs/req")
			b.ReportMetric(m/p, "x-json")
		})
	}
}

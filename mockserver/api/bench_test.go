//go:build unix

package api_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sglmock/sglmock/internal/cputime"
	"github.com/sglmock/sglmock/internal/gctune"
	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/engine"
	"github.com/sglmock/sglmock/mockserver/profile"
)

// These benchmarks use real loopback TCP: they measure what a benchmark
// client on this machine sees. Run them with -benchtime=1x.

// serveTCP serves h on a loopback port until the returned stop runs.
func serveTCP(b *testing.B, h http.Handler) (string, func()) {
	return serveHTTP(b, &http.Server{Handler: h})
}

// serveHTTP is serveTCP with a server of the caller's.
func serveHTTP(b *testing.B, hs *http.Server) (string, func()) {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go hs.Serve(ln)
	return "http://" + ln.Addr().String(), func() { hs.Close() }
}

func constantPrefill(b *testing.B, seconds float64) *profile.Profile {
	p, err := profile.Load("default")
	if err != nil {
		b.Fatal(err)
	}
	p.Prefill = profile.PrefillCost{OverheadS: seconds}
	p.Decode = profile.DecodeCost{}
	return p
}

// BenchmarkLoopbackTTFT measures, over real loopback, how far the
// client-measured TTFT of a 150 ms modelled prefill lands from 150 ms
// (in simulated ms: wall time times the speedup), for 20 sequential
// requests. The engine's spin window is compared with a plain timer
// (SpinWindow 0) in the same run.
func BenchmarkLoopbackTTFT(b *testing.B) {
	const modelled = 150 * time.Millisecond
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	measure := func(speedup float64, spin time.Duration) (mean, worst float64) {
		s, err := api.New(api.Config{Profile: constantPrefill(b, modelled.Seconds()), Speedup: speedup, SpinWindow: spin})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		s.MarkReady()
		base, stop := serveTCP(b, s.Handler())
		defer stop()
		var sum float64
		for i := range 20 {
			body := fmt.Sprintf(`{"text": "request %d", "sampling_params": {"max_new_tokens": 1}, "stream": true}`, i)
			start := time.Now()
			resp, err := client.Post(base+"/generate", "application/json", strings.NewReader(body))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
				b.Fatal(err)
			}
			wall := time.Since(start)
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			errMs := (float64(wall)*speedup - float64(modelled)) / 1e6
			sum += errMs
			worst = max(worst, errMs)
		}
		return sum / 20, worst
	}
	for _, speedup := range []float64{1, 10} {
		b.Run(fmt.Sprintf("speedup=%g", speedup), func(b *testing.B) {
			var spinMean, spinMax, plainMean, plainMax float64
			for b.Loop() {
				spinMean, spinMax = measure(speedup, engine.DefaultSpinWindow)
				plainMean, plainMax = measure(speedup, 0)
			}
			b.ReportMetric(spinMean, "spin-mean-ms")
			b.ReportMetric(spinMax, "spin-max-ms")
			b.ReportMetric(plainMean, "plain-mean-ms")
			b.ReportMetric(plainMax, "plain-max-ms")
			b.ReportMetric(spinMean/plainMean, "x-plain-mean")
		})
	}
}

// hundredWords is a 100-word prompt.
var hundredWords = strings.TrimSpace(strings.Repeat("the cache keeps every prefix so later requests skip prefill. ", 10))

// median returns the median of xs, which it sorts.
func median(xs []float64) float64 {
	slices.Sort(xs)
	return xs[len(xs)/2]
}

// load runs n requests from 64 concurrent clients and returns requests/s.
func load(b *testing.B, client *http.Client, url, body string, n int) float64 {
	b.Helper()
	var wg sync.WaitGroup
	jobs := make(chan struct{}, n)
	for range n {
		jobs <- struct{}{}
	}
	close(jobs)
	start := time.Now()
	var failed sync.Once
	for range 64 {
		wg.Go(func() {
			for range jobs {
				resp, err := client.Post(url, "application/json", strings.NewReader(body))
				if err != nil {
					failed.Do(func() { b.Error(err) })
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds()
}

// BenchmarkThroughput64 measures requests/s at concurrency 64 (16 output
// tokens, zero-cost profile) against a bare net/http handler that answers
// the same bytes (a real response's, replayed event by event with a flush
// each), for /generate and /v1/completions with a 100-word prompt,
// non-streaming and streaming (16 events and [DONE]), and /v1/completions
// with an 8,000-word prompt (about 10k tokens: tokenizing, the radix
// cache's match and insert, and reading the body dominate). The three
// /v1/completions loads are the ones compared side by side with
// llm-d-inference-sim (docs/testing.md); x-bare is the figure to watch.
// The process collects garbage as sglmock serve's does (gctune).
func BenchmarkThroughput64(b *testing.B) {
	defer gctune.ForServer(api.DefaultBodyBudget+api.DefaultAnswerBudget+engine.DefaultTruthBytes, os.Getenv).Apply()()
	if len(strings.Fields(hundredWords)) != 100 {
		b.Fatalf("prompt has %d words", len(strings.Fields(hundredWords)))
	}
	longPrompt := strings.TrimSpace(strings.Repeat(hundredWords+" ", 80))
	p := constantPrefill(b, 0)
	const generate, completions = `{"text": %q, "sampling_params": {"max_new_tokens": 16}, "stream": %v}`, `{"model": "m", "prompt": %q, "max_tokens": 16, "stream": %v}`
	cases := []struct {
		name, path, body, prompt string
		stream                   bool
	}{
		{"generate/stream=false", "/generate", generate, hundredWords, false},
		{"generate/stream=true", "/generate", generate, hundredWords, true},
		{"completions/stream=false", "/v1/completions", completions, hundredWords, false},
		{"completions/stream=true", "/v1/completions", completions, hundredWords, true},
		{"completions-8k-words/stream=false", "/v1/completions", completions, longPrompt, false},
	}
	for _, tc := range cases {
		stream := tc.stream
		b.Run(tc.name, func(b *testing.B) {
			// The mock as sglmock serve runs it, with its default timeouts.
			s, err := api.New(api.Config{Profile: p, SpinWindow: engine.DefaultSpinWindow,
				ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 5 * time.Second, BodyTimeout: 60 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			s.MarkReady()
			mockURL, stopMock := serveHTTP(b, s.HTTPServer())
			defer stopMock()
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxIdleConns: 128}}
			body := fmt.Sprintf(tc.body, tc.prompt, stream)
			// The bare handler replays a real response's bytes.
			resp, err := client.Post(mockURL+tc.path, "application/json", strings.NewReader(body))
			if err != nil {
				b.Fatal(err)
			}
			sample, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			events := strings.SplitAfter(string(sample), "\n\n")
			if stream && len(events) < 17 {
				b.Fatalf("got %d events, want at least 17: %q", len(events), sample)
			}
			bare := http.NewServeMux()
			bare.HandleFunc("POST "+tc.path, func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				if !stream {
					w.Header().Set("Content-Type", "application/json")
					w.Write(sample)
					return
				}
				w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
				for _, ev := range events {
					io.WriteString(w, ev)
					w.(http.Flusher).Flush()
				}
			})
			bareURL, stopBare := serveTCP(b, bare)
			defer stopBare()
			// Rounds of 1,600 requests to each, alternating, and the
			// median of the rounds' ratios: a neighbour's burst on a
			// shared machine then moves one round, not the figure.
			const rounds, perRound = 9, 1600
			var ratios, cpuRatios, mockRPS, bareRPS, mockCPU, bareCPU []float64
			for b.Loop() {
				for range rounds {
					cpu := cputime.Of(b)
					bare := load(b, client, bareURL+tc.path, body, perRound)
					bareUs := float64((cputime.Of(b) - cpu).Microseconds()) / perRound
					cpu = cputime.Of(b)
					mock := load(b, client, mockURL+tc.path, body, perRound)
					mockUs := float64((cputime.Of(b) - cpu).Microseconds()) / perRound
					ratios, cpuRatios = append(ratios, mock/bare), append(cpuRatios, bareUs/mockUs)
					mockRPS, bareRPS = append(mockRPS, mock), append(bareRPS, bare)
					mockCPU, bareCPU = append(mockCPU, mockUs), append(bareCPU, bareUs)
				}
			}
			b.ReportMetric(median(mockRPS), "mock-req/s")
			b.ReportMetric(median(bareRPS), "bare-req/s")
			b.ReportMetric(median(ratios), "x-bare")
			// Client included: the CPU time per request, and bare's over
			// the mock's (what the ratio would be on a saturated host).
			b.ReportMetric(median(mockCPU), "mock-cpu-µs/req")
			b.ReportMetric(median(bareCPU), "bare-cpu-µs/req")
			b.ReportMetric(median(cpuRatios), "x-bare-cpu")
		})
	}
}

package api

import (
	"testing"
	"time"

	"github.com/sglmock/sglmock/mockserver/engine"
	"github.com/sglmock/sglmock/mockserver/profile"
)

// longTruth is a finished request of n output tokens, one per round.
func longTruth(n int) *engine.Truth {
	t := &engine.Truth{RID: "r", PromptTokens: 10, CompletionTokens: n, Arrival: 0, Admitted: 0,
		FirstToken: 5 * time.Millisecond, Prefilled: true, Prefill: []engine.ChunkRecord{{Tokens: 10, Batch: 1}}}
	start := t.FirstToken
	for range n - 1 {
		t.Rounds = append(t.Rounds, engine.RoundRecord{Start: start, Duration: 4 * time.Millisecond, Gained: 1, Batch: 1, Count: 1})
		start += 4 * time.Millisecond
	}
	t.Finished = start
	return t
}

// itlCount is how many inter-token latencies the registry holds.
func itlCount(t *testing.T, m *metrics) uint64 {
	t.Helper()
	families, err := m.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "sglang:inter_token_latency_seconds" {
			return f.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	t.Fatal("no inter-token latency histogram")
	return 0
}

// The engine's finish hook only queues the truth: the observing goroutine,
// or a scrape, observes its tokens. Here the goroutine is stopped first, so
// the queued truth waits for the scrape.
func TestFinishHookOnlyQueues(t *testing.T) {
	m := newMetrics("m", &profile.Profile{})
	m.close()
	m.finished(longTruth(16384))
	m.finished(&engine.Truth{NoMetrics: true, CompletionTokens: 5, Prefilled: true})
	if got := itlCount(t, m); got != 0 {
		t.Fatalf("after the hook: got %d inter-token latencies observed, want 0 (queued)", got)
	}
	m.observePending()
	if got := itlCount(t, m); got != 16383 {
		t.Fatalf("after the scrape's observation: got %d, want 16383 (the health check left out)", got)
	}
}

// BenchmarkFinishHook measures the engine-side cost of the finish hook for
// a 16,384-token request against a 16-token one, in the same run: about
// 1x when the hook is O(1). Observing the long request's tokens, as the
// hook did on the engine goroutine, is reported against the same baseline.
func BenchmarkFinishHook(b *testing.B) {
	long, short := longTruth(16384), longTruth(16)
	m := newMetrics("m", &profile.Profile{})
	defer m.close()
	var longNs, shortNs, observeNs int64
	hooks := func(t *engine.Truth) int64 {
		start := time.Now()
		for range 1000 {
			m.finished(t)
		}
		return time.Since(start).Nanoseconds()
	}
	for b.Loop() {
		shortNs += hooks(short)
		longNs += hooks(long)
		start := time.Now()
		m.observe(long)
		observeNs += time.Since(start).Nanoseconds() * 1000
	}
	b.ReportMetric(float64(longNs)/float64(shortNs), "x-short")
	b.ReportMetric(float64(observeNs)/float64(shortNs), "observe-x-short")
}

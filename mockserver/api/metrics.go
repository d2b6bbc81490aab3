package api

import (
	"net/http"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sglmock/sglmock/mockserver/engine"
)

// metrics are SGLang's Prometheus metrics. Counters and gauges are read
// from the engine at scrape time (engineCollector), so no update can be
// lost. Histograms are observed from each finished request's truth, one
// inter-token latency per output token: off the engine goroutine, which
// only queues the truth (finished), by a goroutine of their own; a scrape
// first observes whatever is queued, so it sees every request finished
// before it.
type metrics struct {
	registry *prometheus.Registry
	handler  http.Handler
	ttft     prometheus.Observer
	itl      prometheus.Observer
	e2e      prometheus.Observer
	queue    prometheus.Observer

	mu      sync.Mutex
	pending []*engine.Truth
	// observing is held while a batch is taken and observed, so a scrape
	// waits for one in progress.
	observing sync.Mutex
	wake      chan struct{}
	stop      chan struct{}
	stopped   chan struct{}
	closing   sync.Once
}

// Bucket bounds as SGLang's collector defines them, in seconds.
var (
	ttftBuckets = []float64{0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400}
	itlBuckets  = []float64{0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060,
		0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1, 2, 4, 6, 8}
	e2eBuckets = []float64{0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 800,
		1200, 1600, 2000, 2400}
)

func newMetrics(model string) *metrics {
	reg := prometheus.NewRegistry()
	labels := prometheus.Labels{"model_name": model}
	hist := func(name, help string, buckets []float64) prometheus.Observer {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets, ConstLabels: labels})
		reg.MustRegister(h)
		return h
	}
	m := &metrics{
		registry: reg,
		handler:  promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
		ttft:     hist("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttftBuckets),
		itl:      hist("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itlBuckets),
		e2e:      hist("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", e2eBuckets),
		queue:    hist("sglang:queue_time_seconds", "Histogram of queueing time in seconds.", e2eBuckets),
		wake:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		stopped:  make(chan struct{}),
	}
	go m.run()
	return m
}

// finished is the engine's finish hook: it queues the truth, whatever its
// length, and wakes the observing goroutine.
func (m *metrics) finished(t *engine.Truth) {
	if t.NoMetrics {
		return
	}
	m.mu.Lock()
	m.pending = append(m.pending, t)
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// run observes queued truths until close.
func (m *metrics) run() {
	defer close(m.stopped)
	for {
		select {
		case <-m.wake:
			m.observePending()
		case <-m.stop:
			return
		}
	}
}

// observePending observes every queued truth.
func (m *metrics) observePending() {
	m.observing.Lock()
	defer m.observing.Unlock()
	m.mu.Lock()
	batch := m.pending
	m.pending = nil
	m.mu.Unlock()
	for i, t := range batch {
		m.observe(t)
		batch[i] = nil
	}
}

// close stops the observing goroutine; it is safe to call more than once.
func (m *metrics) close() {
	m.closing.Do(func() { close(m.stop) })
	<-m.stopped
}

// serve answers a scrape with every request finished before it observed.
func (m *metrics) serve(w http.ResponseWriter, r *http.Request) {
	m.observePending()
	m.handler.ServeHTTP(w, r)
}

// observe records a finished request. Each output token after the first
// gets one inter-token latency: its round's gap since the previous output,
// shared among the tokens the round gave.
func (m *metrics) observe(t *engine.Truth) {
	m.e2e.Observe(t.E2E().Seconds())
	if t.Scheduled() {
		// SGLang observes the queue time as a request enters its first
		// prefill batch: never for one aborted while it waited.
		m.queue.Observe(t.QueueTime().Seconds())
	}
	if t.CompletionTokens == 0 || !t.Prefilled {
		return
	}
	m.ttft.Observe(t.TTFT().Seconds())
	prev := t.FirstToken
	for _, r := range t.Rounds {
		end := r.Start + r.Duration
		per := (end - prev).Seconds() / float64(r.Gained)
		for range r.Gained {
			m.itl.Observe(per)
		}
		prev = end
	}
}

// engineCollector exposes the engine's counters and gauges, with the
// labels of the SGLang collector that keeps each: the tokenizer manager's
// counters carry model_name; the scheduler's gauges and counters carry
// its labels too (engine_type "unified": neither prefill nor decode of a
// disaggregated pair; tp_rank the scheduler's, 0 on one rank). With
// several DP ranks it is the tokenizer manager's alone, and each rank's
// scheduler has a rankCollector (dp.go).
type engineCollector struct {
	eng   *engine.Engine
	model string
	// schedulers: report rank 0's scheduler metrics too (one rank).
	schedulers bool
}

var (
	tokenizerLabels = []string{"model_name"}
	schedulerLabels = []string{"engine_type", "model_name", "moe_ep_rank", "pp_rank", "tp_rank"}
	desc            = func(labels []string, name, help string, extra ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, append(slices.Clone(labels), extra...), nil)
	}
	descPromptTokens     = desc(tokenizerLabels, "sglang:prompt_tokens_total", "Number of prefill tokens processed.")
	descGenerationTokens = desc(tokenizerLabels, "sglang:generation_tokens_total", "Number of generation tokens processed.")
	descCachedTokens     = desc(tokenizerLabels, "sglang:cached_tokens_total", "Number of cached prompt tokens by source (device/host/storage).", "cache_source")
	descRequests         = desc(tokenizerLabels, "sglang:num_requests_total", "Number of requests processed.")
	descAborted          = desc(tokenizerLabels, "sglang:num_aborted_requests_total", "Number of requests aborted.")
	descRealtimeTokens   = desc(schedulerLabels, "sglang:realtime_tokens_total", "Total number of tokens processed, by mode.", "mode")
	descRunning          = desc(schedulerLabels, "sglang:num_running_reqs", "The number of running requests.")
	descQueued           = desc(schedulerLabels, "sglang:num_queue_reqs", "The number of requests in the waiting queue.")
	descUsedTokens       = desc(schedulerLabels, "sglang:num_used_tokens", "The number of used tokens.")
	descTokenUsage       = desc(schedulerLabels, "sglang:token_usage", "The token usage.")
	descGenThroughput    = desc(schedulerLabels, "sglang:gen_throughput", "The generation throughput (token/s).")
	descCacheHitRate     = desc(schedulerLabels, "sglang:cache_hit_rate", "The prefix cache hit rate of the last prefill batch.")
	descMaxTotalTokens   = desc(schedulerLabels, "sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.")
	descSpecAcceptLength = desc(schedulerLabels, "sglang:spec_accept_length", "The average acceptance length of speculative decoding.")
	descSpecAcceptRate   = desc(schedulerLabels, "sglang:spec_accept_rate", "The average acceptance rate of speculative decoding.")
)

var (
	tokenizerDescs = []*prometheus.Desc{descPromptTokens, descGenerationTokens, descCachedTokens, descRequests, descAborted}
	schedulerDescs = []*prometheus.Desc{descRealtimeTokens, descRunning, descQueued, descUsedTokens, descTokenUsage,
		descGenThroughput, descCacheHitRate, descMaxTotalTokens, descSpecAcceptLength, descSpecAcceptRate}
)

func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range tokenizerDescs {
		ch <- d
	}
	if c.schedulers {
		for _, d := range schedulerDescs {
			ch <- d
		}
	}
}

func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.eng.Stats() // with one rank, its own; with several, their sums
	counter := func(d *prometheus.Desc, v int64, extra ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append([]string{c.model}, extra...)...)
	}
	counter(descPromptTokens, st.PromptTokens)
	counter(descGenerationTokens, st.GenerationTokens)
	counter(descCachedTokens, st.CachedTokens, "device") // the mock's cache is all on the GPU
	counter(descRequests, st.Requests)
	counter(descAborted, st.Aborted)
	if c.schedulers {
		collectScheduler(ch, st, []string{"unified", c.model, "0", "0", "0"})
	}
}

// collectScheduler reports one rank's scheduler metrics with its labels
// (schedulerLabels' values).
func collectScheduler(ch chan<- prometheus.Metric, st engine.Stats, scheduler []string) {
	schedulerCounter := func(d *prometheus.Desc, v int64, mode string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append(slices.Clone(scheduler), mode)...)
	}
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, scheduler...)
	}
	schedulerCounter(descRealtimeTokens, st.PromptTokens-st.CachedTokens, "prefill_compute")
	schedulerCounter(descRealtimeTokens, st.CachedTokens, "prefill_cache")
	schedulerCounter(descRealtimeTokens, st.GenerationTokens, "decode")
	gauge(descRunning, float64(st.Running))
	gauge(descQueued, float64(st.Queued))
	gauge(descUsedTokens, float64(st.KVUsed))
	gauge(descTokenUsage, float64(st.KVUsed)/float64(st.KVCapacity))
	gauge(descGenThroughput, st.LastGenThroughput)
	gauge(descCacheHitRate, st.LastCacheHitRate)
	gauge(descMaxTotalTokens, float64(st.KVCapacity))
	gauge(descSpecAcceptLength, st.SpecAcceptLength)
	gauge(descSpecAcceptRate, st.SpecAcceptRate)
}

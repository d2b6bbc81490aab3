package api

import (
	"net/http"
	"slices"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sglmock/sglmock/mockserver/engine"
	"github.com/sglmock/sglmock/mockserver/profile"
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
	// queue is each DP rank's queue time, its scheduler's.
	queue []prometheus.Observer
	// The token counts of each finished request: its prompt, the part of
	// it not served from the cache, and its output.
	promptTokens, uncachedTokens, generationTokens prometheus.Observer

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

// Bucket bounds as SGLang's collectors define them (metrics_collector.py):
// seconds, and tokens for the token histograms, which share
// default_bucket_prompt_tokens.
var (
	ttftBuckets = []float64{0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400}
	itlBuckets  = []float64{0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060,
		0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1, 2, 4, 6, 8}
	e2eBuckets   = []float64{0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800, 2400}
	queueBuckets = []float64{0, 0.001, 0.005, 0.010, 0.050, 0.100, 0.200, 0.500, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70,
		80, 90, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1200, 1400, 1600, 1800, 2000, 2500, 3000}
	tokenBuckets = []float64{100, 300, 500, 700, 1000, 1500, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000, 12500,
		15000, 17500, 20000, 22500, 25000, 27500, 30000, 35000, 40000, 60000, 80000, 100000, 200000, 300000, 400000,
		600000, 800000, 1000000, 1100000}
	evictionBuckets = []float64{0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.007, 0.008, 0.009, 0.01, 0.02, 0.03, 0.04,
		0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60}
	loadBackBuckets = []float64{0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.007, 0.008, 0.009, 0.01, 0.02, 0.03, 0.04,
		0.05, 0.1, 0.2, 0.5, 1}
)

// engineType is SGLang's engine_type label of a server that is neither the
// prefill nor the decode half of a disaggregated pair.
const engineType = "unified"

func newMetrics(model string, p *profile.Profile) *metrics {
	reg := prometheus.NewRegistry()
	tokenizer := prometheus.Labels{"model_name": model, "engine_type": engineType}
	hist := func(reg prometheus.Registerer, labels prometheus.Labels, name, help string, buckets []float64) prometheus.Observer {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets, ConstLabels: labels})
		reg.MustRegister(h)
		return h
	}
	// The queue time is the scheduler's, observed as a request enters its
	// first prefill batch (req_time_stats.py): each rank's own, with its
	// dp_rank when it has one.
	var queue []prometheus.Observer
	for r := range p.Ranks() {
		scheduler := prometheus.Labels{"engine_type": engineType, "model_name": model, "moe_ep_rank": "0", "pp_rank": "0",
			"tp_rank": strconv.Itoa(engine.RankTPRank(p, r))}
		queue = append(queue, hist(rankRegisterer(reg, p, r), scheduler, "sglang:queue_time_seconds", "Histogram of queueing time in seconds.", queueBuckets))
	}
	m := &metrics{
		registry:         reg,
		handler:          promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
		ttft:             hist(reg, tokenizer, "sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttftBuckets),
		itl:              hist(reg, tokenizer, "sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itlBuckets),
		e2e:              hist(reg, tokenizer, "sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", e2eBuckets),
		queue:            queue,
		promptTokens:     hist(reg, tokenizer, "sglang:prompt_tokens_histogram", "Histogram of prompt token length.", tokenBuckets),
		uncachedTokens:   hist(reg, tokenizer, "sglang:uncached_prompt_tokens_histogram", "Histogram of uncached (compute) prompt token length.", tokenBuckets),
		generationTokens: hist(reg, tokenizer, "sglang:generation_tokens_histogram", "Histogram of generation token length.", tokenBuckets),
		wake:             make(chan struct{}, 1),
		stop:             make(chan struct{}),
		stopped:          make(chan struct{}),
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
	// observe_one_finished_request's token histograms, aborted requests
	// included, as num_requests_total counts them.
	m.promptTokens.Observe(float64(t.PromptTokens))
	m.uncachedTokens.Observe(float64(t.PromptTokens - t.CachedTokens))
	m.generationTokens.Observe(float64(t.CompletionTokens))
	if t.Scheduled() {
		// SGLang observes the queue time as a request enters its first
		// prefill batch: never for one aborted while it waited.
		m.queue[t.DPRank].Observe(t.QueueTime().Seconds())
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
// labels of the SGLang collector that keeps each (metrics_collector.py):
// the tokenizer manager's counters carry model_name and engine_type; the
// scheduler's its labels too (engine_type "unified": neither prefill nor
// decode of a disaggregated pair; tp_rank the scheduler's, 0 on one rank);
// the radix cache's cache_type alone, the tree cache's class. With several
// DP ranks the scheduler's are each rank's rankCollector's (dp.go); the
// radix cache's stay one series, the ranks' sum, as SGLang's
// multiprocess registry adds up the counters of every process that keeps
// a tree.
//
// Counters are read at scrape time, so no update is lost. SGLang creates a
// labelled counter's series at its first increment, so those it only
// increments when there is something to count (retractions, speculative
// rounds, evictions) appear from the first one. The scheduler's gauges are
// what its metrics reporter last logged (engine.SchedulerStats: each
// prefill batch, every decode-log interval), absent before the first log.
type engineCollector struct {
	eng   *engine.Engine
	model string
	// schedulers: report rank 0's scheduler metrics too (one rank).
	schedulers bool
}

var (
	tokenizerLabels = []string{"engine_type", "model_name"}
	schedulerLabels = []string{"engine_type", "model_name", "moe_ep_rank", "pp_rank", "tp_rank"}
	radixCacheLabel = []string{"cache_type"}
	desc            = func(labels []string, name, help string, extra ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, append(slices.Clone(labels), extra...), nil)
	}
	descPromptTokens     = desc(tokenizerLabels, "sglang:prompt_tokens_total", "Number of prefill tokens processed.")
	descGenerationTokens = desc(tokenizerLabels, "sglang:generation_tokens_total", "Number of generation tokens processed.")
	descSpecVerifyCalls  = desc(tokenizerLabels, "sglang:spec_verify_calls_total", "Number of speculative decoding verification calls.")
	descCachedTokens     = desc(tokenizerLabels, "sglang:cached_tokens_total", "Number of cached prompt tokens by source (device/host/storage).", "cache_source")
	descRequests         = desc(tokenizerLabels, "sglang:num_requests_total", "Number of requests processed.")
	descAborted          = desc(tokenizerLabels, "sglang:num_aborted_requests_total", "Number of requests aborted.")
	descRealtimeTokens   = desc(schedulerLabels, "sglang:realtime_tokens_total", "Total number of tokens processed, by mode.", "mode")
	descMaxTotalTokens   = desc(schedulerLabels, "sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.")
	descRetracted        = desc(schedulerLabels, "sglang:num_retracted_requests_total", "Total number of retracted requests.")
	descRetractedInput   = desc(schedulerLabels, "sglang:num_retracted_input_tokens_total", "Total number of retracted input tokens.")
	descRetractedOutput  = desc(schedulerLabels, "sglang:num_retracted_output_tokens_total", "Total number of retracted output tokens.")
	descEvictedTokens    = desc(radixCacheLabel, "sglang:evicted_tokens_total", "The number of tokens evicted from GPU to CPU.")
	descEvictionDuration = desc(radixCacheLabel, "sglang:eviction_duration_seconds", "Time taken to evict memory from GPU to CPU in seconds.")
	descLoadBackTokens   = desc(radixCacheLabel, "sglang:load_back_tokens_total", "The number of tokens loaded from CPU to GPU.")
	descLoadBackDuration = desc(radixCacheLabel, "sglang:load_back_duration_seconds", "Time taken to load memory from CPU to GPU in seconds.")
	// HiCache's host pool, a scheduler's gauges (_log_hicache_stats).
	descHostUsed  = desc(schedulerLabels, "sglang:hicache_host_used_tokens", "Number of tokens currently used in the host KV cache.")
	descHostTotal = desc(schedulerLabels, "sglang:hicache_host_total_tokens", "Total capacity of the host KV cache in tokens.")

	// The gauges of SGLang's log_stats, each with what it reads of the
	// logged stats.
	loggedGauges = []struct {
		desc  *prometheus.Desc
		value func(engine.SchedulerStats) float64
	}{
		{desc(schedulerLabels, "sglang:num_running_reqs", "The number of running requests."),
			func(l engine.SchedulerStats) float64 { return float64(l.Running) }},
		{desc(schedulerLabels, "sglang:num_queue_reqs", "The number of requests in the waiting queue."),
			func(l engine.SchedulerStats) float64 { return float64(l.Queued) }},
		{desc(schedulerLabels, "sglang:gen_throughput", "The generation throughput (token/s)."),
			func(l engine.SchedulerStats) float64 { return l.GenThroughput }},
		{desc(schedulerLabels, "sglang:cache_hit_rate", "The prefix cache hit rate."),
			func(l engine.SchedulerStats) float64 { return l.CacheHitRate }},
		{desc(schedulerLabels, "sglang:decode_sum_seq_lens", "The sum of all sequence lengths in decode."),
			func(l engine.SchedulerStats) float64 { return float64(l.DecodeSumSeqLens) }},
		{desc(schedulerLabels, "sglang:token_usage", "The token usage."),
			func(l engine.SchedulerStats) float64 { return l.TokenUsage }},
		{desc(schedulerLabels, "sglang:full_token_usage", "The token usage for full attention layers."),
			func(l engine.SchedulerStats) float64 { return l.FullTokenUsage }},
		{desc(schedulerLabels, "sglang:num_used_tokens", "The number of used tokens."),
			func(l engine.SchedulerStats) float64 { return float64(l.UsedTokens) }},
		{desc(schedulerLabels, "sglang:kv_available_tokens", "Number of free token slots in the KV cache pool."),
			func(l engine.SchedulerStats) float64 { return float64(l.AvailableTokens) }},
		{desc(schedulerLabels, "sglang:kv_evictable_tokens", "Number of evictable (radix-cached) token slots in the KV cache pool."),
			func(l engine.SchedulerStats) float64 { return float64(l.EvictableTokens) }},
		{desc(schedulerLabels, "sglang:kv_used_tokens", "Number of actively used token slots in the KV cache pool."),
			func(l engine.SchedulerStats) float64 { return float64(l.UsedTokens) }},
		{desc(schedulerLabels, "sglang:spec_accept_length", "Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward)."),
			func(l engine.SchedulerStats) float64 { return l.SpecAcceptLength }},
		{desc(schedulerLabels, "sglang:spec_accept_rate", "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch)."),
			func(l engine.SchedulerStats) float64 { return l.SpecAcceptRate }},
		{desc(schedulerLabels, "sglang:num_retracted_reqs", "The number of retracted requests."),
			func(l engine.SchedulerStats) float64 { return float64(l.RetractedReqs) }},
		{desc(schedulerLabels, "sglang:new_token_ratio", "The new token ratio."),
			func(l engine.SchedulerStats) float64 { return l.NewTokenRatio }},
	}
)

var (
	tokenizerDescs = []*prometheus.Desc{descPromptTokens, descGenerationTokens, descSpecVerifyCalls, descCachedTokens, descRequests, descAborted}
	schedulerDescs = []*prometheus.Desc{descRealtimeTokens, descMaxTotalTokens, descRetracted, descRetractedInput, descRetractedOutput,
		descHostUsed, descHostTotal}
	radixCacheDescs = []*prometheus.Desc{descEvictedTokens, descEvictionDuration, descLoadBackTokens, descLoadBackDuration}
)

func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range tokenizerDescs {
		ch <- d
	}
	for _, d := range radixCacheDescs {
		ch <- d
	}
	if c.schedulers {
		describeScheduler(ch)
	}
}

// describeScheduler describes a scheduler's metrics.
func describeScheduler(ch chan<- *prometheus.Desc) {
	for _, d := range schedulerDescs {
		ch <- d
	}
	for _, g := range loggedGauges {
		ch <- g.desc
	}
}

func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.eng.Stats() // with one rank, its own; with several, their sums
	tokenizer := []string{engineType, c.model}
	counter(ch, descPromptTokens, st.PromptTokens, tokenizer)
	counter(ch, descGenerationTokens, st.GenerationTokens, tokenizer)
	lazyCounter(ch, descSpecVerifyCalls, st.SpecVerifyCalls, tokenizer)
	counter(ch, descCachedTokens, st.CachedDevice, tokenizer, "device")
	// SGLang's series for another source appears with its first token.
	lazyCounter(ch, descCachedTokens, st.CachedHost, tokenizer, "host")
	var hi engine.HiCacheStats
	if c.eng.Profile().HiCacheConfig() != nil {
		hi = c.eng.HiCache()
	}
	if st.CachedStorage > 0 {
		counter(ch, descCachedTokens, st.CachedStorage, tokenizer, "storage_"+hi.StorageClass)
	}
	counter(ch, descRequests, st.Requests, tokenizer)
	counter(ch, descAborted, st.Aborted, tokenizer)
	collectRadixCache(ch, st.Counters, hi)
	if c.schedulers {
		collectScheduler(ch, st, []string{engineType, c.model, "0", "0", "0"})
	}
}

func counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v int64, labels []string, extra ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append(slices.Clone(labels), extra...)...)
}

// lazyCounter is a counter SGLang increments only by a positive amount:
// its series appears with the first.
func lazyCounter(ch chan<- prometheus.Metric, d *prometheus.Desc, v int64, labels []string, extra ...string) {
	if v > 0 {
		counter(ch, d, v, labels, extra...)
	}
}

// collectScheduler reports one rank's scheduler metrics with its labels
// (schedulerLabels' values).
func collectScheduler(ch chan<- prometheus.Metric, st engine.Stats, scheduler []string) {
	counter(ch, descRealtimeTokens, st.PromptTokens-st.CachedTokens, scheduler, "prefill_compute")
	counter(ch, descRealtimeTokens, st.CachedTokens, scheduler, "prefill_cache")
	counter(ch, descRealtimeTokens, st.GenerationTokens, scheduler, "decode")
	ch <- prometheus.MustNewConstMetric(descMaxTotalTokens, prometheus.GaugeValue, float64(st.KVCapacity), scheduler...)
	lazyCounter(ch, descRetracted, st.RetractedRequests, scheduler)
	lazyCounter(ch, descRetractedInput, st.RetractedInputTokens, scheduler)
	lazyCounter(ch, descRetractedOutput, st.RetractedOutputTokens, scheduler)
	l := st.Logged
	if !l.Logged {
		return
	}
	for _, g := range loggedGauges {
		ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, g.value(l), scheduler...)
	}
	if l.HiCache {
		ch <- prometheus.MustNewConstMetric(descHostUsed, prometheus.GaugeValue, float64(l.HostUsedTokens), scheduler...)
		ch <- prometheus.MustNewConstMetric(descHostTotal, prometheus.GaugeValue, float64(l.HostTotalTokens), scheduler...)
	}
}

// collectRadixCache reports the radix cache's series (RadixCacheMetricsCollector),
// labelled with the tree cache's class: evictions, and under HiCache the
// load backs. Each appears with its first increment. Neither takes
// modelled time (SGLang times the host's work to evict, or to issue a
// load, not the transfer), so each is observed as 0 s: a histogram's count
// is the evictions or load backs, its sum 0.
func collectRadixCache(ch chan<- prometheus.Metric, c engine.Counters, hi engine.HiCacheStats) {
	cache := []string{"RadixCache"}
	if hi.Enabled {
		cache = []string{"HiRadixCache"}
	}
	zeroSeconds := func(d *prometheus.Desc, bounds []float64, n int64) {
		buckets := make(map[float64]uint64, len(bounds))
		for _, b := range bounds {
			buckets[b] = uint64(n)
		}
		ch <- prometheus.MustNewConstHistogram(d, uint64(n), 0, buckets, cache...)
	}
	if c.Evictions > 0 {
		counter(ch, descEvictedTokens, c.EvictedTokens, cache)
		zeroSeconds(descEvictionDuration, evictionBuckets, c.Evictions)
	}
	if hi.LoadBacks > 0 {
		counter(ch, descLoadBackTokens, hi.LoadBackTokens, cache)
		zeroSeconds(descLoadBackDuration, loadBackBuckets, hi.LoadBacks)
	}
}

package engine

import "time"

// Counters are cumulative since the engine started; a flush does not reset
// them (they feed Prometheus counters, which only grow).
type Counters struct {
	Requests         int64 // finished, aborts included
	Aborted          int64
	PromptTokens     int64
	CachedTokens     int64
	GenerationTokens int64
	// CachedDevice, CachedHost and CachedStorage count cached tokens by
	// source as SGLang's cached_tokens_total does: for each request with
	// cached tokens, its cached_tokens_details (all device without
	// HiCache).
	CachedDevice, CachedHost, CachedStorage int64
	// SpecVerifyCalls sums the finished requests' speculative rounds
	// (spec_verify_ct).
	SpecVerifyCalls int64
	// RetractedRequests counts the requests retract_decode freed, and
	// RetractedInputTokens and RetractedOutputTokens their prompts' and
	// outputs' tokens at the time (SGLang's increment_retracted_reqs).
	RetractedRequests, RetractedInputTokens, RetractedOutputTokens int64
	// Evictions counts the radix cache's evictions that freed tokens, and
	// EvictedTokens the tokens they freed (update_eviction_metrics).
	Evictions, EvictedTokens int64
}

// add adds o's counts to c's: a deployment's are its ranks' sums.
func (c *Counters) add(o Counters) {
	c.Requests += o.Requests
	c.Aborted += o.Aborted
	c.PromptTokens += o.PromptTokens
	c.CachedTokens += o.CachedTokens
	c.GenerationTokens += o.GenerationTokens
	c.CachedDevice += o.CachedDevice
	c.CachedHost += o.CachedHost
	c.CachedStorage += o.CachedStorage
	c.SpecVerifyCalls += o.SpecVerifyCalls
	c.RetractedRequests += o.RetractedRequests
	c.RetractedInputTokens += o.RetractedInputTokens
	c.RetractedOutputTokens += o.RetractedOutputTokens
	c.Evictions += o.Evictions
	c.EvictedTokens += o.EvictedTokens
}

// SchedulerStats are the scheduler's figures as SGLang's metrics reporter
// last logged them (SchedulerStats): report_prefill_stats sets them at
// every prefill batch, report_decode_stats every decode-log interval, and
// its Prometheus gauges hold them in between. A prefill batch leaves the
// decode figures (GenThroughput, DecodeSumSeqLens, the speculative ones)
// as they were, and a decode log the new-token ratio. Logged is false
// before the first log point.
type SchedulerStats struct {
	Logged bool
	// Running is the running batch: before the prefill batch joins it, at
	// a prefill log. Queued is the waiting queue.
	Running, Queued int
	GenThroughput   float64
	// CacheHitRate is the prefill batch's; a decode log zeroes it.
	CacheHitRate float64
	// DecodeSumSeqLens sums the decode batch's sequence lengths.
	DecodeSumSeqLens int
	// TokenUsage is UsedTokens over the pool, rounded to two decimals as
	// SGLang rounds token_usage; FullTokenUsage is the same unrounded.
	TokenUsage, FullTokenUsage float64
	// UsedTokens, AvailableTokens and EvictableTokens split the KV pool:
	// held by requests, free, and cached but evictable (kv_used_tokens,
	// kv_available_tokens, kv_evictable_tokens).
	UsedTokens, AvailableTokens, EvictableTokens int
	// SpecAcceptLength and SpecAcceptRate are the decode-log interval's, 0
	// without speculative rounds.
	SpecAcceptLength, SpecAcceptRate float64
	// RetractedReqs is how many requests the last retraction since the
	// previous log point freed (num_retracted_reqs; 0 when none came).
	RetractedReqs int
	// NewTokenRatio is the token ratio the prefill batch was admitted
	// with.
	NewTokenRatio float64
	// HiCache says the rank runs HiCache; HostUsedTokens and
	// HostTotalTokens are then its host pool's use and size
	// (_log_hicache_stats: hicache_host_used_tokens and
	// hicache_host_total_tokens).
	HiCache                         bool
	HostUsedTokens, HostTotalTokens int
}

// Stats is a snapshot of the engine's state.
type Stats struct {
	Counters
	Now     time.Duration // simulated time since start
	Running int           // decoding or prefilling
	Queued  int
	// Prefilling counts the request being prefilled in chunks (one of
	// Running, outside SGLang's running batch); ChunkedPending is its
	// prompt tokens not yet prefilled.
	Prefilling, ChunkedPending int
	// QueuedTokens sums the queued requests' tokens (SGLang's seqlen).
	QueuedTokens int
	// KV pool, in tokens. KVUsed is SGLang's num_used_tokens: the pool less
	// the free slots (KVFree) and the evictable cache (CacheEvictable),
	// so a cache that no request holds is not used.
	KVUsed, KVFree, KVCapacity int
	// Radix cache, in tokens.
	CacheTokens, CacheEvictable, CacheProtected int
	// LastGenThroughput is the decode tokens/s over the last decode-log
	// interval (SGLang's last_gen_throughput; a flush keeps it).
	LastGenThroughput float64
	// LastCacheHitRate is cached/(cached+new) of the last prefill batch,
	// requests prefilled again after a retraction left out; a decode log
	// zeroes it, as SGLang's cache_hit_rate gauge.
	LastCacheHitRate float64
	// SpecRounds and AvgSpecAcceptLength are the speculative totals SGLang
	// folds in at each decode log since start or the last flush, as
	// /server_info reports them; AvgSpecAcceptLength means nothing while
	// SpecRounds is 0.
	SpecRounds          int64
	AvgSpecAcceptLength float64
	// SpecAcceptLength and SpecAcceptRate are the last decode-log
	// interval's (SGLang's spec_accept_length and spec_accept_rate gauges).
	SpecAcceptLength, SpecAcceptRate float64
	// Logged is what SGLang's metrics reporter last logged.
	Logged SchedulerStats
	Idle   bool
}

func (s *scheduler) stats() Stats {
	ts := s.treeStats()
	running := len(s.running)
	prefilling, chunkedPending := 0, 0
	if s.chunked != nil {
		running++
		prefilling, chunkedPending = 1, s.chunked.remainingFill()
	}
	queuedTokens := 0
	for _, r := range s.waiting {
		queuedTokens += len(r.tokens) + len(r.outputs)
	}
	return Stats{
		Prefilling:          prefilling,
		ChunkedPending:      chunkedPending,
		QueuedTokens:        queuedTokens,
		Counters:            s.counters,
		Now:                 s.now,
		Running:             running,
		Queued:              len(s.waiting),
		KVUsed:              s.used(),
		KVFree:              s.free(),
		KVCapacity:          s.capacity(),
		CacheTokens:         ts.Tokens,
		CacheEvictable:      ts.Evictable,
		CacheProtected:      ts.Protected,
		LastGenThroughput:   s.report.genThroughput,
		LastCacheHitRate:    s.report.cacheHitRate,
		SpecRounds:          s.report.specTotalRounds,
		AvgSpecAcceptLength: s.report.avgSpecAcceptLength(),
		SpecAcceptLength:    s.report.specAcceptLength,
		SpecAcceptRate:      s.report.specAcceptRate,
		Logged:              s.report.logged,
		Idle:                s.idle(),
	}
}

// sumStats is the deployment's snapshot from its ranks': counts, tokens
// and throughputs add up; the speculative averages are over every rank's
// rounds, the cache hit rate the ranks' mean, and the clock the latest.
// Logged stays empty: what a metrics reporter logged is each rank's
// (RankStats), as SGLang's scheduler gauges are. One rank's is its own.
func sumStats(ranks []Stats) Stats {
	if len(ranks) == 1 {
		return ranks[0]
	}
	var t Stats
	t.Idle = true
	var specTokens float64
	for _, st := range ranks {
		t.Counters.add(st.Counters)
		t.Now = max(t.Now, st.Now)
		t.Running += st.Running
		t.Queued += st.Queued
		t.Prefilling += st.Prefilling
		t.ChunkedPending += st.ChunkedPending
		t.QueuedTokens += st.QueuedTokens
		t.KVUsed += st.KVUsed
		t.KVFree += st.KVFree
		t.KVCapacity += st.KVCapacity
		t.CacheTokens += st.CacheTokens
		t.CacheEvictable += st.CacheEvictable
		t.CacheProtected += st.CacheProtected
		t.LastGenThroughput += st.LastGenThroughput
		t.LastCacheHitRate += st.LastCacheHitRate / float64(len(ranks))
		t.SpecRounds += st.SpecRounds
		specTokens += st.AvgSpecAcceptLength * float64(st.SpecRounds)
		t.SpecAcceptLength += st.SpecAcceptLength / float64(len(ranks))
		t.SpecAcceptRate += st.SpecAcceptRate / float64(len(ranks))
		t.Idle = t.Idle && st.Idle
	}
	if t.SpecRounds > 0 {
		t.AvgSpecAcceptLength = specTokens / float64(t.SpecRounds)
	}
	return t
}

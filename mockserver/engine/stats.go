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
	Idle                             bool
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
		Idle:                s.idle(),
	}
}

// sumStats is the deployment's snapshot from its ranks': counts, tokens
// and throughputs add up; the speculative averages are over every rank's
// rounds, the cache hit rate the ranks' mean, and the clock the latest.
// One rank's is its own.
func sumStats(ranks []Stats) Stats {
	if len(ranks) == 1 {
		return ranks[0]
	}
	var t Stats
	t.Idle = true
	var specTokens float64
	for _, st := range ranks {
		t.Requests += st.Requests
		t.Aborted += st.Aborted
		t.PromptTokens += st.PromptTokens
		t.CachedTokens += st.CachedTokens
		t.GenerationTokens += st.GenerationTokens
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

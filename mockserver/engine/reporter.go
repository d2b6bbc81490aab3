package engine

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"
)

// reporter is SGLang's SchedulerMetricsReporter: the figures the scheduler
// logs and reports. Prefill figures are taken at every prefill batch;
// decode figures, the speculative averages included, only every
// decode-log interval (40 decode batches by default). A flush resets the
// decode-batch count, the generated-token count and the speculative totals
// (reset_metrics); the last throughput and the cache hit rate survive it.
type reporter struct {
	decodeBatches       int   // since start or the last flush
	generated           int64 // decode tokens since the last decode log
	lastDecodeLog       time.Duration
	lastPrefillLog      time.Duration
	genThroughput       float64 // at the last decode log
	cacheHitRate        float64 // of the last prefill batch; 0 after a decode log
	specTokens          int64   // this interval: tokens a round gave (drafts + bonus)
	specRounds          int64   // this interval: request-rounds
	specTotalTokens     int64   // folded in at each decode log
	specTotalRounds     int64
	specAcceptLength    float64 // of the last interval
	specAcceptRate      float64
	lastInputThroughput float64
	// retracted is how many requests the last retraction freed, until the
	// next log point takes it (SGLang's num_retracted_reqs).
	retracted int
	logged    SchedulerStats
}

// logPool takes the KV pool's figures into the logged stats, as SGLang's
// PoolStats.update_scheduler_stats, the host pool's under HiCache
// (_log_hicache_stats), and the retraction count, which it then clears.
func (s *scheduler) logPool() {
	l := &s.report.logged
	l.Logged = true
	ts := s.treeStats()
	l.UsedTokens, l.AvailableTokens, l.EvictableTokens = s.used(), s.free(), ts.Evictable
	l.FullTokenUsage = s.tokenUsage()
	l.TokenUsage, _ = strconv.ParseFloat(strconv.FormatFloat(l.FullTokenUsage, 'f', 2, 64), 64)
	l.RetractedReqs, s.report.retracted = s.report.retracted, 0
	if s.hi != nil {
		// Only the host pool's figures: the storage histograms are not
		// logged here, and copying them every batch is waste.
		l.HiCache, l.HostUsedTokens, l.HostTotalTokens = true, hostUsedTokens(ts), s.hi.hostPool
	}
}

// resetOnFlush is SGLang's reset_metrics.
func (r *reporter) resetOnFlush() {
	r.decodeBatches, r.generated = 0, 0
	r.specTokens, r.specRounds, r.specTotalTokens, r.specTotalRounds = 0, 0, 0, 0
}

func (r *reporter) avgSpecAcceptLength() float64 {
	if r.specTotalRounds == 0 {
		return 0
	}
	return float64(r.specTotalTokens) / float64(r.specTotalRounds)
}

// prefillLog is one "Prefill batch" line.
type prefillLog struct {
	newSeq, newTokens, cachedTokens int
	usage                           float64
	running, queued, pending        int
	inputThroughput                 float64
}

// recordPrefill takes a finished prefill batch's figures, as SGLang's
// report_prefill_stats: the input throughput since the last prefill batch,
// and the cache hit rate of the requests not prefilled again after a
// retraction. running is the decoding batch before this one joins it.
func (s *scheduler) recordPrefill(it *iteration, running int) prefillLog {
	l := prefillLog{running: running, queued: len(s.waiting), pending: it.pending, usage: s.tokenUsage()}
	effectiveNew, effectiveCached := 0, 0
	for _, c := range it.prefill {
		cached := 0
		if c.newAdmit {
			l.newSeq++
			cached = c.prefix // what it took from the cache when admitted
		}
		l.newTokens += c.tokens
		l.cachedTokens += cached
		if c.r.truth.Retractions == 0 {
			effectiveNew += c.tokens
			effectiveCached += cached
		}
	}
	rep := &s.report
	if gap := (s.now - rep.lastPrefillLog).Seconds(); gap > 0 {
		rep.lastInputThroughput = float64(l.newTokens) / gap
	} else {
		rep.lastInputThroughput = 0
	}
	rep.lastPrefillLog = s.now
	l.inputThroughput = rep.lastInputThroughput
	rep.cacheHitRate = 0
	if total := effectiveNew + effectiveCached; total > 0 {
		rep.cacheHitRate = float64(effectiveCached) / float64(total)
	}
	logged := &rep.logged
	logged.Running, logged.Queued, logged.CacheHitRate = running, len(s.waiting), rep.cacheHitRate
	logged.NewTokenRatio = s.ratio.current
	s.logPool()
	return l
}

func (s *scheduler) logPrefill(l prefillLog) {
	if !s.log.Enabled(context.Background(), slog.LevelInfo) {
		return
	}
	s.log.Info(fmt.Sprintf("Prefill batch, #new-seq: %d, #new-token: %d, #cached-token: %d, token usage: %.2f, "+
		"#running-req: %d, #queue-req: %d, #pending-token: %d, cuda graph: False, input throughput (token/s): %.2f",
		l.newSeq, l.newTokens, l.cachedTokens, l.usage, l.running, l.queued, l.pending, l.inputThroughput))
}

// decodeLog is one "Decode batch" line.
type decodeLog struct {
	running, tokens          int
	usage                    float64
	spec                     bool
	acceptLength, acceptRate float64
	genThroughput            float64
	queued                   int
}

// recordDecode counts a finished decode round, as SGLang's decode result
// processing and report_decode_stats do. Every decode-log interval it
// takes the generation throughput since the last one, the speculative
// averages of the interval (folded into the totals /server_info reports),
// zeroes the cache hit rate, and returns the line to log.
func (s *scheduler) recordDecode(it *iteration) (decodeLog, bool) {
	rep := &s.report
	rep.decodeBatches++
	for _, g := range it.decode {
		rep.generated += int64(g.n)
		rep.specTokens += int64(g.n)
	}
	rep.specRounds += int64(len(it.decode))
	if rep.decodeBatches%s.logInterval != 0 {
		return decodeLog{}, false
	}
	if gap := (s.now - rep.lastDecodeLog).Seconds(); gap > 0 {
		rep.genThroughput = float64(rep.generated) / gap
	}
	rep.lastDecodeLog, rep.generated = s.now, 0
	l := decodeLog{running: len(it.decode), tokens: s.used(), usage: s.tokenUsage(), queued: len(s.waiting)}
	if spec := s.prof.Speculative; spec != nil && rep.specRounds > 0 {
		l.spec = true
		rep.specAcceptLength = float64(rep.specTokens) / float64(rep.specRounds)
		rep.specAcceptRate = 0
		if proposed := rep.specRounds * int64(spec.NumDraftTokens-1); proposed > 0 {
			rep.specAcceptRate = float64(rep.specTokens-rep.specRounds) / float64(proposed)
		}
		l.acceptLength, l.acceptRate = rep.specAcceptLength, rep.specAcceptRate
		rep.specTotalTokens += rep.specTokens
		rep.specTotalRounds += rep.specRounds
		rep.specTokens, rep.specRounds = 0, 0
	}
	rep.cacheHitRate = 0
	l.genThroughput = rep.genThroughput
	logged := &rep.logged
	logged.Running, logged.Queued, logged.GenThroughput, logged.CacheHitRate = l.running, l.queued, l.genThroughput, 0
	logged.DecodeSumSeqLens = 0
	for _, g := range it.decode {
		logged.DecodeSumSeqLens += g.ctx
	}
	logged.SpecAcceptLength, logged.SpecAcceptRate = l.acceptLength, l.acceptRate
	s.logPool()
	return l, true
}

// decodeLineWallGap is the least wall time between two decode lines at
// the engine's speedup. SGLang writes one every decode-log interval (40
// batches), which on a GPU is a fraction of a second; a profile that costs
// nothing would write one every few microseconds, hundreds of thousands a
// second, from the engine's goroutine. The figures are recorded at every
// interval all the same; only the line is skipped.
const decodeLineWallGap = 50 * time.Millisecond

// decodeLineDue reports whether a decode line due by the interval may be
// written now: the first, then one per decodeLineGap of modelled time
// (decodeLineWallGap at the engine's speedup).
func (s *scheduler) decodeLineDue() bool {
	if s.decodeLines > 0 && s.now-s.lastDecodeLine < s.decodeLineGap {
		return false
	}
	s.decodeLines++
	s.lastDecodeLine = s.now
	return true
}

// logDecode writes SGLang's decode line (metrics_reporter.py,
// report_decode_stats), which has no #cached-token: only the prefill line
// does, and SGLang's own log parser (debug_utils/log_parser.py) reads a
// decode line by its "#running-req: N, #token: N".
func (s *scheduler) logDecode(l decodeLog) {
	if !s.decodeLineDue() || !s.log.Enabled(context.Background(), slog.LevelInfo) {
		return
	}
	accept := ""
	if l.spec {
		accept = fmt.Sprintf("accept len: %.2f, accept rate: %.2f, ", l.acceptLength, l.acceptRate)
	}
	s.log.Info(fmt.Sprintf("Decode batch, #running-req: %d, #token: %d, token usage: %.2f, %s"+
		"cuda graph: True, gen throughput (token/s): %.2f, #queue-req: %d",
		l.running, l.tokens, l.usage, accept, l.genThroughput, l.queued))
}

func (s *scheduler) tokenUsage() float64 { return float64(s.used()) / float64(s.capacity()) }

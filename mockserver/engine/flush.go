package engine

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// FlushRecord is one /flush_cache call and its outcome.
type FlushRecord struct {
	At       time.Duration // when it was asked, simulated
	Timeout  time.Duration
	Answered time.Duration // when it was answered, simulated
	Err      error         // nil when it flushed, else why not (ErrFlushBusy, ...)
	Queued   int           // requests queued when asked, every rank's
	Running  int           // requests running when asked, every rank's
	// Origin says who asks (the HTTP layer gives the client's address).
	Origin string
	// Pending marks the flush still parked, waiting for the server to be
	// idle or its deadline: it has no Answered or Err yet.
	Pending bool
	// ClientLeft is set when the caller stopped waiting before the answer,
	// at ClientLeftAt: as in SGLang, the parked flush still runs.
	ClientLeft   bool
	ClientLeftAt time.Duration
	// Ranks is each DP rank's own answer, with several ranks (nil with
	// one). SGLang asks every rank and answers the client once all have
	// answered, with the answer that came first (the tokenizer manager's
	// flush_cache takes the first of the FanOutCommunicator's results):
	// Err is that answer, Answered when the last came. Ranks answering at
	// the same moment come in rank order. A 200 can therefore hide a rank
	// that refused.
	Ranks []RankFlush
}

// RankFlush is one DP rank's answer to a flush.
type RankFlush struct {
	Rank     int
	Answered time.Duration
	Err      error
	Queued   int
	Running  int
	Pending  bool // parked on this rank, not answered yet
}

// pendingFlush is a flush parked on one rank.
type pendingFlush struct {
	record   FlushRecord // this rank's view, for its log lines
	deadline time.Duration
	call     *flushCall
}

const maxFlushRecords = 1000

// flushCall is one Flush: every rank's answer, gathered on the loop
// goroutine, and the caller's reply once all have come.
type flushCall struct {
	log     *flushLog
	record  FlushRecord
	answers []RankFlush
	left    int
	reply   chan error // buffered: the loop never waits on the caller
}

// flushLog is the engine's record of flush calls: the answered ones,
// oldest first, and those some rank still holds parked.
type flushLog struct {
	done    []FlushRecord
	pending []*flushCall
}

func (l *flushLog) start(at, timeout time.Duration, origin string, ranks int) *flushCall {
	c := &flushCall{log: l, record: FlushRecord{At: at, Timeout: timeout, Origin: origin},
		answers: make([]RankFlush, ranks), left: ranks, reply: make(chan error, 1)}
	for r := range c.answers {
		c.answers[r] = RankFlush{Rank: r, Pending: true}
	}
	l.pending = append(l.pending, c)
	return c
}

// asked records what rank r had queued and running when the flush came.
func (c *flushCall) asked(r int, rec FlushRecord) {
	c.answers[r].Queued, c.answers[r].Running = rec.Queued, rec.Running
	c.record.Queued += rec.Queued
	c.record.Running += rec.Running
	if r == 0 {
		c.record.At = rec.At
	}
}

// answer records rank r's answer at time at; the last one answers the
// caller with the first that came.
func (c *flushCall) answer(r int, err error, at time.Duration) {
	c.answers[r] = RankFlush{Rank: r, Answered: at, Err: err, Queued: c.answers[r].Queued, Running: c.answers[r].Running}
	if c.left--; c.left > 0 {
		return
	}
	first := c.answers[0]
	for _, a := range c.answers[1:] {
		if a.Answered < first.Answered {
			first = a
		}
		c.record.Answered = max(c.record.Answered, a.Answered)
	}
	c.record.Answered = max(c.record.Answered, c.answers[0].Answered)
	c.record.Err = first.Err
	if len(c.answers) > 1 {
		c.record.Ranks = c.answers
	}
	l := c.log
	l.pending = slices.DeleteFunc(l.pending, func(x *flushCall) bool { return x == c })
	if len(l.done) == maxFlushRecords {
		l.done = slices.Delete(l.done, 0, 1)
	}
	l.done = append(l.done, c.record)
	c.reply <- c.record.Err
}

// history is the answered flushes, oldest first, then the pending ones,
// marked Pending, with the answers that came so far.
func (l *flushLog) history() []FlushRecord {
	out := slices.Clone(l.done)
	for _, c := range l.pending {
		rec := c.record
		rec.Pending = true
		if len(c.answers) > 1 {
			rec.Ranks = slices.Clone(c.answers)
		}
		out = append(out, rec)
	}
	return out
}

// clientLeft records that the caller stopped waiting at time at.
func (c *flushCall) clientLeft(at time.Duration) {
	if !c.record.ClientLeft {
		c.record.ClientLeft, c.record.ClientLeftAt = true, at
	}
}

// requestFlush answers a /flush_cache on this rank in SGLang's order (its
// SchedulerFlushWrapper): a parked flush refuses every new one; a flush
// that may not wait flushes if the rank is idle and fails if not;
// otherwise an idle rank flushes at once and a busy one parks the flush
// until it is idle or its deadline passes.
func (s *scheduler) requestFlush(at, timeout time.Duration, origin string, call *flushCall) {
	s.pollHiCache()
	now := max(s.now, at)
	rec := FlushRecord{At: now, Timeout: timeout, Queued: len(s.waiting), Running: len(s.running), Origin: origin}
	if s.chunked != nil {
		rec.Running++
	}
	call.asked(s.rank, rec)
	switch {
	case s.flush != nil:
		call.answer(s.rank, ErrFlushInProgress, now)
	case s.flushIdle(now):
		s.doFlush()
		call.answer(s.rank, nil, now)
	case timeout <= 0 && s.idle() && !s.flushReady():
		call.answer(s.rank, ErrFlushLockstep, now)
	case timeout <= 0 && s.idle():
		// Settling: the overlap scheduler's last batch, or HiCache's
		// transfers in flight.
		call.answer(s.rank, ErrFlushSettling, now)
	case timeout <= 0:
		call.answer(s.rank, ErrFlushBusy, now)
		s.log.Warn(fmt.Sprintf("Cache not flushed because there are pending requests. #queue-req: %d, #running-req: %d", rec.Queued, rec.Running))
	default:
		// The deadline saturates: a timeout of ages waits for idle.
		deadline := now + min(timeout, math.MaxInt64-now)
		s.flush = &pendingFlush{record: rec, deadline: deadline, call: call}
	}
}

// flushClientLeft records that the caller waiting on the flush parked here
// for call stopped waiting at time at. The flush stays parked, as SGLang's
// scheduler keeps it, and runs once the rank is idle.
func (s *scheduler) flushClientLeft(call *flushCall, at time.Duration) {
	if f := s.flush; f != nil && f.call == call && !f.record.ClientLeft {
		f.record.ClientLeft, f.record.ClientLeftAt = true, max(s.now, at)
		s.log.Warn(fmt.Sprintf("The client of a deferred flush_cache (%s, asked at %.3f s) left at %.3f s; "+
			"the flush stays pending and runs when the server is idle.", f.record.Origin, f.record.At.Seconds(), f.record.ClientLeftAt.Seconds()))
	}
}

// flushIdle is SGLang's is_fully_idle as a flush sees it at time now:
// nothing queued, running or in flight, and the last iteration that
// finished a request has settled (flush_busy_after_finish_s). Under DP
// attention with the overlap scheduler, a rank with nothing of its own
// still runs an idle batch with every iteration of the others, which sits
// in its result queue when the flush comes: it is idle only when every
// rank is, and settled when all are. With HiCache, no write-through,
// backup to storage or prefetch of its own may be in flight either.
func (s *scheduler) flushIdle(now time.Duration) bool {
	return s.idle() && s.flushReady() && now >= s.flushSettledAt() && s.hiCacheDrained()
}

// flushReady reports whether this rank's peers, if any, are idle too.
func (s *scheduler) flushReady() bool {
	for _, p := range s.peers {
		if !p.idle() {
			return false
		}
	}
	return true
}

// flushSettledAt is when the rank settles for a flush: the latest of its
// peers' when it has them.
func (s *scheduler) flushSettledAt() time.Duration {
	at := s.settledAt
	for _, p := range s.peers {
		at = max(at, p.settledAt)
	}
	return at
}

// serviceFlush runs at every iteration boundary, and when an idle engine
// wakes for a parked flush.
func (s *scheduler) serviceFlush() {
	f := s.flush
	if f == nil {
		return
	}
	switch {
	case s.flushIdle(s.now):
		s.flush = nil
		s.doFlush()
		s.log.Info(fmt.Sprintf("Deferred flush_cache (%s, asked at %.3f s%s) ran at %.3f s.",
			f.record.Origin, f.record.At.Seconds(), clientNote(f.record), s.now.Seconds()))
		f.call.answer(s.rank, nil, s.now)
	case s.now >= f.deadline:
		s.flush = nil
		s.log.Warn("Deferred flush_cache timed out while waiting for idle state.")
		f.call.answer(s.rank, ErrFlushTimeout, s.now)
	}
}

func clientNote(r FlushRecord) string {
	if !r.ClientLeft {
		return ""
	}
	return fmt.Sprintf(", its client gone since %.3f s", r.ClientLeftAt.Seconds())
}

// doFlush resets the cache and what SGLang's flush resets (reset_metrics):
// the decode-batch count and the speculative totals. Lifetime counters, the
// last throughput and the cache hit rate stay.
func (s *scheduler) doFlush() {
	if s.tree != nil {
		s.tree.Reset() // the host tier too; the storage tier stays
	}
	s.resetHiCache()
	s.report.resetOnFlush()
	s.log.Info("Cache flushed successfully!")
}

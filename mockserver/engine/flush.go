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
	Queued   int           // requests queued when asked
	Running  int           // requests running when asked
	// Origin says who asked (the HTTP layer gives the client's address).
	Origin string
	// Pending marks the flush still parked, waiting for the server to be
	// idle or its deadline: it has no Answered or Err yet.
	Pending bool
	// ClientLeft is set when the caller stopped waiting before the answer,
	// at ClientLeftAt: as in SGLang, the parked flush still runs.
	ClientLeft   bool
	ClientLeftAt time.Duration
}

type pendingFlush struct {
	record   FlushRecord
	deadline time.Duration
	reply    chan error
}

const maxFlushRecords = 1000

// requestFlush answers a /flush_cache in SGLang's order (its
// SchedulerFlushWrapper): a parked flush refuses every new one; a flush that
// may not wait flushes if the server is idle and fails if not; otherwise an
// idle server flushes at once and a busy one parks the flush until it is
// idle or its deadline passes.
func (s *scheduler) requestFlush(at, timeout time.Duration, origin string, reply chan error) {
	s.pollHiCache()
	now := max(s.now, at)
	rec := FlushRecord{At: now, Timeout: timeout, Queued: len(s.waiting), Running: len(s.running), Origin: origin}
	if s.chunked != nil {
		rec.Running++
	}
	switch {
	case s.flush != nil:
		s.answerFlush(rec, ErrFlushInProgress, reply, now)
	case s.flushIdle(now):
		s.doFlush()
		s.answerFlush(rec, nil, reply, now)
	case timeout <= 0 && s.idle():
		// Settling: the overlap scheduler's last batch, or HiCache's
		// transfers in flight.
		s.answerFlush(rec, ErrFlushSettling, reply, now)
	case timeout <= 0:
		s.answerFlush(rec, ErrFlushBusy, reply, now)
		s.log.Warn(fmt.Sprintf("Cache not flushed because there are pending requests. #queue-req: %d, #running-req: %d", rec.Queued, rec.Running))
	default:
		// The deadline saturates: a timeout of ages waits for idle.
		deadline := now + min(timeout, math.MaxInt64-now)
		s.flush = &pendingFlush{record: rec, deadline: deadline, reply: reply}
	}
}

// flushClientLeft records that the caller waiting on the parked flush
// whose answer goes to reply stopped waiting at time at. The flush stays
// parked, as SGLang's scheduler keeps it, and runs once the server is idle.
func (s *scheduler) flushClientLeft(reply chan error, at time.Duration) {
	if f := s.flush; f != nil && f.reply == reply && !f.record.ClientLeft {
		f.record.ClientLeft, f.record.ClientLeftAt = true, max(s.now, at)
		s.log.Warn(fmt.Sprintf("The client of a deferred flush_cache (%s, asked at %.3f s) left at %.3f s; "+
			"the flush stays pending and runs when the server is idle.", f.record.Origin, f.record.At.Seconds(), f.record.ClientLeftAt.Seconds()))
	}
}

// flushIdle is SGLang's is_fully_idle as a flush sees it at time now:
// nothing queued, running or in flight, the last iteration that finished
// a request has settled (flush_busy_after_finish_s), and with HiCache no
// write-through, backup to storage or prefetch in flight.
func (s *scheduler) flushIdle(now time.Duration) bool {
	return s.idle() && now >= s.settledAt && s.hiCacheDrained()
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
		s.answerFlush(f.record, nil, f.reply, s.now)
	case s.now >= f.deadline:
		s.flush = nil
		s.log.Warn("Deferred flush_cache timed out while waiting for idle state.")
		s.answerFlush(f.record, ErrFlushTimeout, f.reply, s.now)
	}
}

func clientNote(r FlushRecord) string {
	if !r.ClientLeft {
		return ""
	}
	return fmt.Sprintf(", its client gone since %.3f s", r.ClientLeftAt.Seconds())
}

// flushHistory is the answered flushes, oldest first, then the parked one.
func (s *scheduler) flushHistory() []FlushRecord {
	out := slices.Clone(s.flushes)
	if f := s.flush; f != nil {
		rec := f.record
		rec.Pending = true
		out = append(out, rec)
	}
	return out
}

func (s *scheduler) answerFlush(rec FlushRecord, err error, reply chan error, at time.Duration) {
	rec.Answered, rec.Err = at, err
	if len(s.flushes) == maxFlushRecords {
		s.flushes = slices.Delete(s.flushes, 0, 1)
	}
	s.flushes = append(s.flushes, rec)
	reply <- err
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

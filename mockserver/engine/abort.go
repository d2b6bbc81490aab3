package engine

import (
	"cmp"
	"slices"
	"time"
)

// requestAbort aborts r now if it only waits, else when the step in flight
// ends; at is when it was asked.
func (s *scheduler) requestAbort(r *req, at time.Duration) {
	if r.done || s.active[r.rid] != r {
		return
	}
	if r.abortMsg == "" {
		r.abortMsg = AbortedMessage
		s.aborts++
	}
	if (s.inflight == nil || !r.inFlight(s.inflight)) && !s.keepsChunking(r) {
		// Finished now, between boundaries: stamped with its own time.
		s.finishAborted(r, max(s.now, at))
		s.running = slices.DeleteFunc(s.running, func(x *req) bool { return x.done })
	}
}

// finishAborted finishes r with its abort at time at: a request still in
// the waiting queue gets SGLang's waiting-queue answer.
func (s *scheduler) finishAborted(r *req, at time.Duration) {
	if slices.Contains(s.waiting, r) {
		s.finish(r, Finish{Reason: FinishAbort, Message: WaitingQueueMessage, InWaitingQueue: true}, nil, at)
		return
	}
	s.finish(r, Finish{Reason: FinishAbort, Message: r.abortMsg}, nil, at)
}

// keepsChunking tells whether r, aborted, still has its prompt prefilled to
// the end: in releases without the abort-pending-chunk rule (PR #28086)
// SGLang's abort_request only sets to_finish on the request being
// prefilled in chunks, which update_finish_state reads after its last
// chunk, so every chunk runs, one token is sampled and the whole prompt is
// cached. A stopping engine ends it all the same.
func (s *scheduler) keepsChunking(r *req) bool {
	return r == s.chunked && !s.rules.AbortPendingChunk && !s.stopping
}

func (r *req) inFlight(it *iteration) bool {
	for _, c := range it.prefill {
		if c.r == r {
			return true
		}
	}
	for _, g := range it.decode {
		if g.r == r {
			return true
		}
	}
	return false
}

// reapAborted finishes every request with an abort pending, in arrival
// order so that their cache inserts, and so eviction order, are
// deterministic.
func (s *scheduler) reapAborted() {
	if s.aborts == 0 {
		return
	}
	var aborted []*req
	for _, r := range s.active {
		if r.abortMsg != "" && !s.keepsChunking(r) {
			aborted = append(aborted, r)
		}
	}
	slices.SortFunc(aborted, func(a, b *req) int { return cmp.Compare(a.seq, b.seq) })
	for _, r := range aborted {
		s.finishAborted(r, s.now)
	}
	s.running = slices.DeleteFunc(s.running, func(r *req) bool { return r.done })
}

// abortActive asks every active request to abort, as /abort_request's
// abort_all does and as the engine does when it closes; those not in the
// step in flight finish at once.
func (s *scheduler) abortActive() {
	for _, r := range s.active {
		if r.abortMsg == "" {
			r.abortMsg = AbortedMessage
			s.aborts++
		}
	}
	if s.inflight == nil {
		s.reapAborted()
	}
}

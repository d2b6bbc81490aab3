package engine

import "time"

// How SGLang's tokenizer manager notices a client that left.
const (
	// streamAbortDelay: a stream's response ends when its client leaves,
	// and the response's background task aborts the request 2 s later
	// (create_abort_task).
	streamAbortDelay = 2 * time.Second
	// requestStateWaitTimeout: a client waiting for one response waits on
	// the request's state 4 s at a time (SGLANG_REQUEST_STATE_WAIT_TIMEOUT);
	// when a wait times out with the client gone, the request is aborted.
	requestStateWaitTimeout = 4 * time.Second
	// forceStreamInterval: the scheduler sends such a client an output
	// every 50 tokens (SGLANG_FORCE_STREAM_INTERVAL); each one ends the
	// wait, and a client found gone then is aborted at once.
	forceStreamInterval = 50
)

// disconnect records that r's client left at time at and schedules the
// abort when SGLang's tokenizer manager would send it: 2 s later for a
// stream; for a client that waited for one response, when the current 4 s
// wait on the request times out (4 s after its arrival or its last output,
// and every 4 s after), or at its next output every 50 tokens, whichever
// comes first. Until then the request runs: it holds its batch slot and KV,
// and the server is not idle.
func (s *scheduler) disconnect(r *req, at time.Duration, streaming bool) {
	if r.done || r.left || s.active[r.rid] != r {
		return
	}
	r.left, r.leftWait = true, !streaming
	if streaming {
		r.abortDue = at + streamAbortDelay
	} else {
		waits := max((at-r.lastSent+requestStateWaitTimeout-1)/requestStateWaitTimeout, 1)
		r.abortDue = r.lastSent + waits*requestStateWaitTimeout
	}
	s.departed = append(s.departed, r)
}

// sentIntermediate notes an output the scheduler sends a client waiting
// for one response (every 50 tokens): the wait restarts, and a client
// already gone is aborted now.
func (s *scheduler) sentIntermediate(r *req) {
	r.lastSent = s.now
	if r.leftWait {
		r.abortDue = min(r.abortDue, s.now)
	}
}

// abortDeparted sends the aborts due by upTo, each at its own time: a
// request in the iteration in flight finishes with that iteration, a
// queued one at once.
func (s *scheduler) abortDeparted(upTo time.Duration) {
	kept := s.departed[:0]
	for _, r := range s.departed {
		switch {
		case r.done:
		case r.abortDue <= upTo:
			s.requestAbort(r, r.abortDue)
		default:
			kept = append(kept, r)
		}
	}
	clear(s.departed[len(kept):])
	s.departed = kept
}

// nextAbortDue is the earliest abort due for a departed client.
func (s *scheduler) nextAbortDue() (time.Duration, bool) {
	var next time.Duration
	found := false
	for _, r := range s.departed {
		if !r.done && (!found || r.abortDue < next) {
			next, found = r.abortDue, true
		}
	}
	return next, found
}

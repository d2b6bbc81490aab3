package api

import (
	"container/list"
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Server-wide budgets. Every bound on one request (its body, its sequences,
// its output tokens, its logprob entries) keeps that request bounded; the
// budgets bound what all of them hold together, in bytes, so that a handful
// of allowed requests cannot exhaust the server's memory:
//
//   - request bodies in flight (the body budget): a request's declared
//     Content-Length is charged before a byte of it is read, and held
//     until its handler returns (a parsed body keeps its prompts); one
//     that does not fit is refused at once with 503 and Retry-After, before
//     more of its body is read, the rest then thrown away as it arrives
//     (writeBodyBusy). A body without Content-Length is charged as its
//     buffer grows, and refused the same way when a growth does not fit.
//   - answers (the answer budget): a generation request is charged, once
//     it is parsed and before anything runs, what its sequences can make
//     the server hold until its answer is written (answerCost): the
//     engine's prompt and output tokens and the output's text. One that
//     does not fit waits, first come first served, as SGLang's requests
//     wait in its scheduler's queue behind a full batch; a client that
//     leaves while it waits is gone from the queue. Logprobs cost nothing
//     here: they are computed as the answer is written, 64 KiB at a time.
//
// A request larger than a whole budget is let in alone. A reader that reads
// slowly but steadily is not cut by the stall deadline, and would pin its
// answer's bytes for as long as it reads; so while a request waits for room,
// once a second, the reader that holds the most bytes for the longest
// (bytes x seconds) among those whose answer has been complete for
// pinnedGrace or more is cut off, as a stalled one is. Everything is
// counted: /sim/stats' memory and /metrics' sglmock:*_budget_* series.

// The budgets' defaults: room for two of the largest bodies at once, and
// for some 16 million output tokens in flight, far more than a real
// deployment's batches hold; together with the engine's own state they keep
// the server under 2 GB whatever its clients send.
const (
	DefaultBodyBudget   = 512 << 20
	DefaultAnswerBudget = 512 << 20
)

// byteBudget is a server-wide budget of bytes, taken by holds.
type byteBudget struct {
	limit int64
	now   func() time.Time // wall time; time.Now

	mu    sync.Mutex
	held  int64
	peak  int64
	queue list.List // of *budgetWaiter, first come first served
	holds map[*budgetHold]struct{}

	waited  atomic.Int64 // requests that had to wait for room
	refused atomic.Int64 // requests refused for want of room
	cut     atomic.Int64 // readers cut off to make room
}

// budgetHold is what one request holds of a budget.
type budgetHold struct {
	b *byteBudget
	n int64
	// complete reports whether the request's answer is complete, only
	// left to be written (the engine is done with it), and cutOff cuts the
	// request's client off: the handler sets both (attach). completeAt is
	// when cutPinned first saw the answer complete. All under b.mu.
	complete   func() bool
	completeAt time.Time
	cutOff     func()
	wasCut     bool
	released   bool
}

type budgetWaiter struct {
	n     int64
	hold  *budgetHold // set when granted
	ready chan struct{}
}

func newByteBudget(limit int64) *byteBudget {
	return &byteBudget{limit: limit, now: time.Now, holds: map[*budgetHold]struct{}{}}
}

// pinnedGrace is how long an answer must have been complete, its client
// still reading it, before its reader may be cut to make room; pinnedCheck
// is how often a waiting request looks for one.
const (
	pinnedGrace = 10 * time.Second
	pinnedCheck = time.Second
)

// fits reports whether n more bytes fit; a request larger than the whole
// budget fits only alone. b.mu is held.
func (b *byteBudget) fits(n int64) bool { return b.held+n <= b.limit || b.held == 0 }

// grantLocked takes n for a new hold. b.mu is held.
func (b *byteBudget) grantLocked(n int64) *budgetHold {
	h := &budgetHold{b: b, n: n}
	b.held += n
	b.peak = max(b.peak, b.held)
	b.holds[h] = struct{}{}
	return h
}

// tryAcquire takes n bytes now, or returns nil (counted as refused) when
// they do not fit.
func (b *byteBudget) tryAcquire(n int64) *budgetHold {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.queue.Len() > 0 || !b.fits(n) {
		b.refused.Add(1)
		return nil
	}
	return b.grantLocked(n)
}

// acquire takes n bytes, waiting its turn behind the requests already
// waiting until they fit; it returns ctx's error if ctx ends first. While
// it waits it cuts, once every pinnedCheck, the reader pinning the most
// (cutPinned).
func (b *byteBudget) acquire(ctx context.Context, n int64) (*budgetHold, error) {
	b.mu.Lock()
	if b.queue.Len() == 0 && b.fits(n) {
		h := b.grantLocked(n)
		b.mu.Unlock()
		return h, nil
	}
	w := &budgetWaiter{n: n, ready: make(chan struct{})}
	el := b.queue.PushBack(w)
	b.mu.Unlock()
	b.waited.Add(1)
	tick := time.NewTicker(pinnedCheck)
	defer tick.Stop()
	for {
		select {
		case <-w.ready:
			return w.hold, nil
		case <-tick.C:
			b.cutPinned()
		case <-ctx.Done():
			b.mu.Lock()
			if w.hold != nil { // granted as the client left
				b.mu.Unlock()
				w.hold.release()
				return nil, ctx.Err()
			}
			b.queue.Remove(el)
			b.grantWaitingLocked() // the next in line may fit now
			b.mu.Unlock()
			return nil, ctx.Err()
		}
	}
}

// grantWaitingLocked lets in the waiting requests that fit, in order,
// stopping at the first that does not. b.mu is held.
func (b *byteBudget) grantWaitingLocked() {
	for el := b.queue.Front(); el != nil; el = b.queue.Front() {
		w := el.Value.(*budgetWaiter)
		if !b.fits(w.n) {
			return
		}
		b.queue.Remove(el)
		w.hold = b.grantLocked(w.n)
		close(w.ready)
	}
}

// grow adds n bytes to h, if they fit; it reports whether they did (a
// refusal is counted).
func (h *budgetHold) grow(n int64) bool {
	b := h.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held+n > b.limit && b.held != h.n { // alone, it may pass the budget
		b.refused.Add(1)
		return false
	}
	h.n += n
	b.held += n
	b.peak = max(b.peak, b.held)
	return true
}

// shrink gives back n of h's bytes, a request that holds less than it was
// charged.
func (h *budgetHold) shrink(n int64) {
	b := h.b
	b.mu.Lock()
	defer b.mu.Unlock()
	n = min(n, h.n)
	h.n -= n
	b.held -= n
	b.grantWaitingLocked()
}

// attach tells the budget how to know when h's answer is complete and how
// to cut its client off.
func (h *budgetHold) attach(complete func() bool, cutOff func()) {
	h.b.mu.Lock()
	h.complete, h.cutOff = complete, cutOff
	h.b.mu.Unlock()
}

// release gives h's bytes back and lets waiting requests in. It may be
// called more than once; a nil hold holds nothing.
func (h *budgetHold) release() {
	if h == nil {
		return
	}
	b := h.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if h.released {
		return
	}
	h.released = true
	b.held -= h.n
	delete(b.holds, h)
	b.grantWaitingLocked()
}

// cutPinned cuts off the reader that holds the most bytes for the longest
// (bytes x seconds since its answer was complete) among those whose answer
// has been complete for pinnedGrace or more; it reports whether it cut one.
func (b *byteBudget) cutPinned() bool {
	now := b.now()
	b.mu.Lock()
	var worst *budgetHold
	var worstScore float64
	for h := range b.holds {
		if h.wasCut || h.cutOff == nil || h.complete == nil {
			continue
		}
		if h.completeAt.IsZero() {
			if !h.complete() {
				continue
			}
			h.completeAt = now
		}
		age := now.Sub(h.completeAt)
		if age < pinnedGrace {
			continue
		}
		if score := float64(h.n) * age.Seconds(); worst == nil || score > worstScore {
			worst, worstScore = h, score
		}
	}
	if worst == nil {
		b.mu.Unlock()
		return false
	}
	worst.wasCut = true
	cutOff := worst.cutOff
	b.mu.Unlock()
	b.cut.Add(1)
	cutOff()
	return true
}

// budgetStats is a budget's state and counts.
type budgetStats struct {
	limit, held, peak     int64
	waiting               int
	waited, refused, cuts int64
}

func (b *byteBudget) stats() budgetStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return budgetStats{limit: b.limit, held: b.held, peak: b.peak, waiting: b.queue.Len(),
		waited: b.waited.Load(), refused: b.refused.Load(), cuts: b.cut.Load()}
}

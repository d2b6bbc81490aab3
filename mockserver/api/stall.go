package api

import (
	"container/list"
	"errors"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Clients that stop reading. A streaming client that stops reading (or a
// client that never reads a long answer) would block its handler in a
// write for as long as its socket stays open, holding the request's output.
// Every answer to a generation request is therefore written under a
// deadline: a write that makes no progress for StallTimeout (wall time)
// fails, and a stream that stalls is aborted at once. A long answer goes
// out in writes of answerChunk, each under its own deadline, so a client
// that reads slowly but steadily is not cut for the answer's length. At most
// maxStalledWrites writes may be blocked past stallGrace at a time; past
// that, the longest-blocked one is cut at once. Either way the abort is
// counted (stalled_streams_aborted in /sim/stats,
// sglmock:stalled_streams_aborted_total in /metrics). What a stalled stream
// holds meanwhile is bounded: the engine merges the events of a reader that
// lags (engine.Stream), and one write holds at most maxCoalesced bytes of
// events. SGLang has no such limit; uvicorn's writes wait forever.

// DefaultStallTimeout is how long a write to a client may make no
// progress before the client counts as gone.
const DefaultStallTimeout = 30 * time.Second

const (
	maxStalledWrites = 64
	stallGrace       = time.Second
)

// errStalled is a write cut off because the client stopped reading.
var errStalled = errors.New("api: the client stopped reading")

// stallGuard is the server's record of writes in progress, oldest first.
type stallGuard struct {
	timeout time.Duration
	mu      sync.Mutex
	writes  list.List // of *pendingWrite
	aborted atomic.Int64
}

type pendingWrite struct {
	since   time.Time
	rc      *http.ResponseController
	el      *list.Element
	expired bool
}

// begin records a write about to start on w, under the stall deadline; if
// more than maxStalledWrites writes are in progress and the oldest has been
// blocked past stallGrace, that one is cut now.
func (g *stallGuard) begin(w http.ResponseWriter) *pendingWrite {
	now := time.Now()
	p := &pendingWrite{since: now, rc: http.NewResponseController(w)}
	p.rc.SetWriteDeadline(now.Add(g.timeout))
	g.mu.Lock()
	defer g.mu.Unlock()
	p.el = g.writes.PushBack(p)
	if g.writes.Len() > maxStalledWrites {
		if old := g.writes.Front().Value.(*pendingWrite); now.Sub(old.since) > stallGrace {
			old.expired = true
			old.rc.SetWriteDeadline(now) // the blocked write fails at once
			g.writes.Remove(old.el)
		}
	}
	return p
}

// end records the write's end and clears its deadline. err is the write's
// error; end returns errStalled, counting the abort, if the write was cut
// off because the client stopped reading.
func (g *stallGuard) end(p *pendingWrite, err error) error {
	g.mu.Lock()
	if !p.expired {
		g.writes.Remove(p.el)
	}
	g.mu.Unlock()
	if err == nil {
		p.rc.SetWriteDeadline(time.Time{})
		return nil
	}
	if p.expired || errors.Is(err, os.ErrDeadlineExceeded) {
		g.aborted.Add(1)
		return errStalled
	}
	return err
}

// write writes b to w and flushes it under the stall deadline; a nil
// guard writes without one.
func (g *stallGuard) write(w http.ResponseWriter, b []byte) error {
	if g == nil {
		_, err := w.Write(b)
		if err == nil {
			err = http.NewResponseController(w).Flush()
		}
		return err
	}
	p := g.begin(w)
	_, err := w.Write(b)
	if err == nil {
		err = p.rc.Flush()
	}
	return g.end(p, err)
}

// answerChunk is the most of an answer one write under the stall deadline
// carries, so that the deadline bounds a lack of progress, not the time a
// long answer takes in all.
const answerChunk = 64 << 10

// writeAnswer writes a short JSON answer, marshalled whole, in writes of
// answerChunk, each under the stall deadline through aw (nil: a writer of
// its own): a client that reads slowly but steadily gets it whole, and one
// that stops is cut off. It carries its Content-Length, as SGLang's
// JSONResponse does: the flushes would otherwise send it chunked. A long
// answer is encoded as it is written (answer.go).
func (s *Server) writeAnswer(c *exchange, aw *answerWriter, v any) {
	s.writeBytes(c, aw, marshal(v))
}

// writeBytes is writeAnswer for an answer already encoded.
func (s *Server) writeBytes(c *exchange, aw *answerWriter, b []byte) {
	if aw == nil {
		aw = &answerWriter{s: s, w: c.Writer}
	}
	h := c.Writer.Header()
	h["Content-Type"] = jsonContentType
	h.Set("Content-Length", strconv.Itoa(len(b)))
	c.Status(http.StatusOK)
	for len(b) > 0 {
		n := min(len(b), answerChunk)
		if aw.write(b[:n]) != nil {
			return
		}
		b = b[n:]
	}
}

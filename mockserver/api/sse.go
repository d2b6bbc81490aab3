package api

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sglmock/sglmock/mockserver/engine"
)

// sse writes Server-Sent Events: "data: " + payload + "\n\n". add buffers
// an event and flush writes the buffered events at once, so events SGLang
// yields back to back (a chat's role chunk and its first content) leave
// together.
type sse struct {
	c       *exchange
	started bool
	buf     []byte
	cpu     *cpuSlots  // for long events (addEncoded)
	pool    *sync.Pool // where buf goes back (release); nil: nowhere
	// stalls puts every write under the stall deadline (stall.go); err is
	// the first write's error, after which nothing more is written; cut
	// is set when the answer budget cut the client off (cutOff).
	stalls *stallGuard
	err    error
	cut    atomic.Bool
}

// newSSE starts an SSE writer for c's response, its buffer one of the
// server's (a stream's events would otherwise grow a new one from empty);
// its owner gives the buffer back with release.
func (s *Server) newSSE(c *exchange) *sse {
	w := &sse{c: c, stalls: s.stalls, cpu: s.cpu, pool: &s.sseBuffers}
	if b, ok := s.sseBuffers.Get().(*[]byte); ok {
		w.buf = (*b)[:0]
	} else {
		w.buf = make([]byte, 0, sseBufferSize)
	}
	return w
}

// sseBufferSize is a new SSE buffer's capacity: a stream of a few dozen
// short events; one that grew past maxPooledSSEBuffer is dropped at
// release, so a long event's memory goes back.
const (
	sseBufferSize      = 4 << 10
	maxPooledSSEBuffer = 2 * maxCoalesced
)

// release gives w's buffer back to the server's pool; w writes nothing
// after it.
func (w *sse) release() {
	if w.pool != nil && cap(w.buf) <= maxPooledSSEBuffer {
		b := w.buf[:0]
		w.pool.Put(&b)
	}
	w.buf, w.pool = nil, nil
}

// The SSE headers' values, shared by every response: net/http only reads
// them.
var (
	sseContentType = []string{"text/event-stream; charset=utf-8"}
	noCache        = []string{"no-cache"}
)

// start sets the status and headers; they go out with the first flush.
func (w *sse) start() {
	if w.started {
		return
	}
	w.started = true
	h := w.c.Writer.Header()
	h["Content-Type"], h["Cache-Control"] = sseContentType, noCache
	w.c.Status(http.StatusOK)
}

// open sends the status line and headers now.
func (w *sse) open() error {
	w.start()
	return w.flush()
}

// begin starts an event whose payload the caller appends to the returned
// buffer and passes to end.
func (w *sse) begin() []byte { return append(w.buf, "data: "...) }

func (w *sse) end(b []byte) { w.buf = append(b, "\n\n"...) }

func (w *sse) add(payload []byte) {
	w.buf = append(w.buf, "data: "...)
	w.buf = append(w.buf, payload...)
	w.buf = append(w.buf, "\n\n"...)
}

func (w *sse) flush() error {
	err := w.write(w.buf)
	w.buf = w.buf[:0]
	return err
}

// write writes b, once the status and headers are set, unless an earlier
// write failed or the client was cut off.
func (w *sse) write(b []byte) error {
	w.start()
	if w.err == nil && w.cut.Load() {
		w.err = errStalled
	}
	if w.err == nil {
		w.err = w.stalls.write(w.c.Writer, b)
		if w.err != nil && w.cut.Load() {
			w.err = errStalled
		}
	}
	return w.err
}

// addEncoded adds an event whose payload encode writes as it encodes it:
// past answerChunk bytes the events buffered so far go out, so a long
// event holds one write buffer (answer.go).
func (w *sse) addEncoded(encode func(*jsonSink)) {
	j := &jsonSink{buf: append(w.buf, "data: "...), out: w.write, cpu: w.cpu}
	w.cpu.take()
	encode(j)
	w.cpu.give()
	w.buf = append(j.buf, "\n\n"...)
}

// cutOff fails the write in progress, and every later one: the answer
// budget cut the client off (budget.go).
func (w *sse) cutOff() {
	w.cut.Store(true)
	http.NewResponseController(w.c.Writer).SetWriteDeadline(time.Now())
}

// allEnded reports whether the engine is done with every stream.
func allEnded(streams []*engine.Stream) bool {
	for _, st := range streams {
		if !st.Ended() {
			return false
		}
	}
	return true
}

func (w *sse) data(payload []byte) error {
	w.add(payload)
	return w.flush()
}

func (w *sse) done() error { return w.data([]byte("[DONE]")) }

// streamError is a streaming /generate's answer to a request refused
// inside SGLang's generator: one error event, then [DONE].
func streamError(w *sse, message string) {
	w.data(marshal(jsonObject{"error": jsonObject{"message": message}}))
	w.done()
}

// tagged is one event from one of several merged streams.
type tagged struct {
	i  int
	ev engine.Event
}

// eventSource delivers the events of several streams, each tagged with its
// stream's index, until its context ends.
type eventSource struct {
	// next waits for an event; ready returns one only if it is there.
	next  func() (tagged, error)
	ready func() (tagged, bool)
	// stop ends the context and waits for the merging goroutines.
	stop func()
}

// events reads the streams' events until ctx ends or stop is called. One
// stream is read directly; several are merged by one goroutine each.
func events(ctx context.Context, streams []*engine.Stream) eventSource {
	ctx, cancel := context.WithCancel(ctx)
	if len(streams) == 1 {
		st := streams[0]
		return eventSource{
			next: func() (tagged, error) {
				ev, err := st.Next(ctx)
				return tagged{0, ev}, err
			},
			ready: func() (tagged, bool) {
				ev, ok := st.TryNext()
				return tagged{0, ev}, ok
			},
			stop: cancel,
		}
	}
	ch := make(chan tagged)
	var wg sync.WaitGroup
	for i, st := range streams {
		wg.Go(func() {
			for {
				ev, err := st.Next(ctx)
				if err != nil {
					return
				}
				select {
				case ch <- tagged{i, ev}:
				case <-ctx.Done():
					return
				}
				if ev.Finish != nil {
					return
				}
			}
		})
	}
	return eventSource{
		next: func() (tagged, error) {
			select {
			case t := <-ch:
				return t, nil
			case <-ctx.Done():
				return tagged{}, ctx.Err()
			}
		},
		ready: func() (tagged, bool) {
			select {
			case t := <-ch:
				return t, true
			default:
				return tagged{}, false
			}
		},
		stop: func() {
			cancel()
			wg.Wait()
		},
	}
}

// maxCoalesced bounds the bytes of events that leave in one write, so a
// stream whose events come faster than they are written still goes out
// piece by piece.
const maxCoalesced = 64 << 10

// streamOutputs is the stream loop of every streaming endpoint: it reads
// the streams' events as they come, adds each to its sequence's output, and
// for each event due to the client (output.due) calls render, which adds
// the endpoint's SSE events to w. Events the engine delivered together
// leave in one write; nothing is written while no event is due, and the
// last events stay buffered for the caller to end the stream with. It
// returns the outputs, or false when the client left: the engine has been
// told (SGLang aborts the requests later), and nothing more may be written.
func (s *Server) streamOutputs(ctx context.Context, w *sse, items []item, streams []*engine.Stream, render func(i int, o *output)) ([]*output, bool) {
	src := events(ctx, streams)
	defer src.stop()
	outs := newOutputs(s.eng.Tokenizer(), items, streams)
	for left := len(streams); left > 0; {
		t, err := src.next()
		if err != nil {
			disconnectAll(streams, true)
			return nil, false
		}
		for ready := true; ready; {
			o := outs[t.i]
			o.add(t.ev)
			if t.ev.Finish != nil {
				left--
			}
			if o.due() {
				render(t.i, o)
				o.sent++
			}
			if left == 0 || len(w.buf) >= maxCoalesced {
				break
			}
			t, ready = src.ready()
		}
		if left > 0 && len(w.buf) > 0 {
			if err := w.flush(); errors.Is(err, errStalled) {
				abortStreams(streams) // the client stopped reading: counted, aborted now
				return nil, false
			} else if err != nil {
				disconnectAll(streams, true)
				return nil, false
			}
		}
	}
	return outs, true
}

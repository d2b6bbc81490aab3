package api

import (
	"context"
	"net/http"
	"sync"

	"github.com/gin-gonic/gin"

	"sglmock/mockserver/engine"
)

// sse writes Server-Sent Events: "data: " + payload + "\n\n". add buffers
// an event and flush writes the buffered events at once, so events SGLang
// yields back to back (a chat's role chunk and its first content) leave
// together.
type sse struct {
	c       *gin.Context
	started bool
	buf     []byte
}

// start sets the status and headers; they go out with the first flush.
func (w *sse) start() {
	if w.started {
		return
	}
	w.started = true
	h := w.c.Writer.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	w.c.Status(http.StatusOK)
}

// open sends the status line and headers now.
func (w *sse) open() error {
	w.start()
	return w.flush()
}

func (w *sse) add(payload []byte) {
	w.buf = append(w.buf, "data: "...)
	w.buf = append(w.buf, payload...)
	w.buf = append(w.buf, "\n\n"...)
}

func (w *sse) flush() error {
	w.start()
	_, err := w.c.Writer.Write(w.buf)
	w.buf = w.buf[:0]
	if err != nil {
		return err
	}
	w.c.Writer.Flush()
	return nil
}

func (w *sse) data(payload []byte) error {
	w.add(payload)
	return w.flush()
}

func (w *sse) done() error { return w.data([]byte("[DONE]")) }

// streamError is a streaming /generate's answer to a request refused
// inside SGLang's generator: one error event, then [DONE].
func streamError(w *sse, message string) {
	w.data(marshal(gin.H{"error": gin.H{"message": message}}))
	w.done()
}

// tagged is one event from one of several merged streams.
type tagged struct {
	i  int
	ev engine.Event
}

// events delivers the streams' events, tagged with their stream's index,
// until ctx ends. One stream is read directly; several are merged by one
// goroutine each. The returned wait blocks until those goroutines stop.
func events(ctx context.Context, streams []*engine.Stream) (next func() (tagged, error), wait func()) {
	if len(streams) == 1 {
		st := streams[0]
		return func() (tagged, error) {
			ev, err := st.Next(ctx)
			return tagged{0, ev}, err
		}, func() {}
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
	return func() (tagged, error) {
		select {
		case t := <-ch:
			return t, nil
		case <-ctx.Done():
			return tagged{}, ctx.Err()
		}
	}, wg.Wait
}

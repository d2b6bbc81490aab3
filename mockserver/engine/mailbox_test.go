package engine

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
)

// A reader that does not read while its request runs costs a bounded
// mailbox: past maxQueuedEvents, events merge into the last one, which
// keeps every token in order and the finish.
func TestLaggingReaderMailboxIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := loadProfile(t, "default")
		e := startEngine(t, Config{Profile: p})
		defer e.Close()
		const n = 5000
		st := submit(t, e, Request{InputIDs: prompt(1, 16), MaxNewTokens: n})
		done := make(chan struct{})
		var last []Event
		go func() {
			defer close(done)
			ctx := context.Background()
			for {
				// Wait for the end without reading: the mailbox fills.
				st.mu.Lock()
				ended := st.ended
				queued := len(st.events) - st.head
				st.mu.Unlock()
				if queued > maxQueuedEvents {
					t.Errorf("got %d events queued, want at most %d", queued, maxQueuedEvents)
				}
				if ended {
					break
				}
				select {
				case <-st.notify:
				case <-ctx.Done():
				}
			}
			last = drain(t, st)
		}()
		<-done
		if len(last) != maxQueuedEvents {
			t.Fatalf("got %d events, want %d (the rest merged)", len(last), maxQueuedEvents)
		}
		var tokens []int32
		for _, ev := range last {
			tokens = append(tokens, ev.Tokens...)
		}
		fin := last[len(last)-1]
		if len(tokens) != n || fin.Finish == nil || fin.CompletionTokens != n || fin.Truth == nil {
			t.Fatalf("got %d tokens, last event %+v, want all %d tokens and the finish", len(tokens), fin, n)
		}
		if !slices.Equal(tokens, st.req.outputs) {
			t.Fatalf("the merged events' tokens differ from the request's output")
		}
	})
}

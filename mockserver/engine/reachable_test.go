package engine

import (
	"context"
	"runtime"
	"testing"
	"testing/synctest"
	"weak"
)

// A burst that waited in the queue leaves nothing of its requests
// reachable from the idle engine: not through the waiting queue's backing
// array, which outlives the slice's start as requests are admitted, nor
// through the reused iteration lists.
func TestFinishedRequestsAreUnreachable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := loadProfile(t, "default")
		p.MaxRunningRequests = 2 // the rest of the burst waits
		e := startEngine(t, Config{Profile: p})
		defer e.Close()
		const burst = 24
		var reqs []weak.Pointer[req]
		var streams []*Stream
		for i := range burst {
			st := submit(t, e, Request{InputIDs: prompt(int32(i), 64), MaxNewTokens: 4})
			reqs = append(reqs, weak.Make(st.req))
			streams = append(streams, st)
		}
		for _, st := range streams {
			if _, _, err := st.Collect(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait() // the engine is idle
		streams = nil
		runtime.GC()
		runtime.GC()
		alive := 0
		for _, w := range reqs {
			if w.Value() != nil {
				alive++
			}
		}
		if alive != 0 {
			t.Fatalf("got %d of %d finished requests still reachable from the idle engine, want 0", alive, burst)
		}
	})
}

package api

import (
	"strings"
	"sync"
	"testing"
	"testing/synctest"
)

// Long encodings share a CPU slot chunk by chunk, in turn, and none holds
// one while its client is slow to take a chunk: with one slot, two
// encodings alternate, and a third takes the slot while the first waits on
// its client.
func TestCPUSlotsAreShared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cpu := &cpuSlots{c: make(chan struct{}, 1)}
		chunk := strings.Repeat("x", answerChunk)
		var mu sync.Mutex
		var order []string
		start := make(chan struct{})
		encode := func(name string) func(*jsonSink) {
			return func(j *jsonSink) {
				<-start
				for range 4 {
					mu.Lock()
					order = append(order, name)
					mu.Unlock()
					j.rawString(chunk) // a full chunk: emitted, the slot paced
				}
			}
		}
		var wg sync.WaitGroup
		for _, name := range []string{"a", "b"} {
			wg.Go(func() { encodedSize(cpu, encode(name)) })
			synctest.Wait() // a holds the slot; b waits for it
		}
		close(start)
		wg.Wait()
		if got := strings.Join(order, ""); got != "abababab" {
			t.Fatalf("got chunks in the order %q, want the two encodings in turn", got)
		}

		// A write that waits on its client holds no slot.
		blocked, release := make(chan struct{}), make(chan struct{})
		slow := &jsonSink{cpu: cpu, out: func([]byte) error { close(blocked); <-release; return nil }}
		go func() {
			cpu.take()
			slow.rawString(chunk)
			cpu.give()
		}()
		<-blocked
		taken := make(chan struct{})
		go func() { cpu.take(); close(taken); cpu.give() }()
		<-taken // would block forever if the slow writer held the slot
		close(release)
	})
}

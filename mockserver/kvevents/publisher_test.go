package kvevents

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglmock/sglmock/compat"
	"github.com/sglmock/sglmock/radixcache"
)

// stuckTransport blocks every Send until release, as a socket that cannot
// keep up would; it records the sequence numbers sent.
type stuckTransport struct {
	release chan struct{}
	sent    chan uint64
}

func (s *stuckTransport) Send(_ []byte, seq uint64, _ []byte) error {
	<-s.release
	s.sent <- seq
	return nil
}
func (s *stuckTransport) Subscriptions() []string { return nil }
func (s *stuckTransport) Close() error            { return nil }

// A full queue never blocks the engine: the batch is dropped and its
// sequence number skipped, so the subscriber sees the gap.
func TestPublishNeverBlocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		out := &stuckTransport{release: make(chan struct{}), sent: make(chan uint64, 16)}
		p := NewPublisher(Config{MaxQueueSize: 2}, "t", compat.Rules{}, out, nil)
		publish := func() {
			p.Stored(0, false, []radixcache.Page{{Hash: 1, Tokens: []int32{1}}})
			p.Publish(time.Now())
		}
		publish()
		synctest.Wait() // batch 0 is in Send, stuck
		for range 4 {
			publish() // 1 and 2 queue; 3 and 4 find the queue full
		}
		if st := p.Stats(); st.Batches != 5 || st.Dropped != 2 {
			t.Fatalf("stats %+v: want 5 batches, 2 dropped", st)
		}
		close(out.release)
		synctest.Wait()
		publish() // seq 5
		p.Close()
		close(out.sent)
		var seqs []uint64
		for s := range out.sent {
			seqs = append(seqs, s)
		}
		if want := []uint64{0, 1, 2, 5}; !slices.Equal(seqs, want) {
			t.Errorf("sent seqs %v, want %v", seqs, want)
		}
		p.Publish(time.Now()) // nothing gathered: no batch
		publish()             // after Close: dropped, never a panic
		if st := p.Stats(); st.Batches != 7 || st.Dropped != 3 || st.Published != 4 {
			t.Errorf("stats after close %+v", st)
		}
	})
}

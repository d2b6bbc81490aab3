package kvevents

import (
	"fmt"
	"net"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/sglmock/sglmock/compat"
	"github.com/sglmock/sglmock/radixcache"
)

// These tests run real ZMQ sockets on loopback, on the wall clock: a
// socket's goroutines block in the kernel, which testing/synctest cannot
// wait for. They never sleep: they wait for what the sockets report.

// freePort returns a loopback TCP port nothing listens on.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// waitFor polls cond every millisecond until it holds or 10 s pass: the
// ZMQ library tells nothing of a subscription or a send by an event, and a
// spin would starve the peer on a 2-core machine.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

func testConfig(endpoint string) Config {
	return Config{Publisher: "zmq", Endpoint: endpoint, BufferSteps: 4, HWM: DefaultHWM, MaxQueueSize: 16}
}

// publishStored publishes one batch of a stored page of tokens.
func publishStored(p *Publisher, tokens ...int32) {
	p.Stored(0, false, []radixcache.Page{{Hash: int64(tokens[0]), Tokens: tokens}})
	p.Publish(time.Unix(1_700_000_000, 0))
}

func recvBatch(t *testing.T, s *Subscriber) (Message, Batch) {
	t.Helper()
	m, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	b, err := Decode(m.Payload)
	if err != nil {
		t.Fatal(err)
	}
	return m, b
}

func TestZMQBothModes(t *testing.T) {
	for _, bind := range []bool{true, false} {
		t.Run(fmt.Sprintf("replica binds=%v", bind), func(t *testing.T) {
			port := freePort(t)
			pubEP, subEP := fmt.Sprintf("tcp://*:%d", port), fmt.Sprintf("tcp://127.0.0.1:%d", port)
			if !bind {
				// The router binds; the replica connects to it.
				pubEP, subEP = subEP, pubEP
			}
			cfg := testConfig(pubEP)
			if cfg.Binds() != bind {
				t.Fatalf("Binds() of %s: got %v", pubEP, cfg.Binds())
			}
			topic := RouterTopic("127.0.0.1", port, t.Name())
			// In connect mode the publisher starts first and waits for the
			// router: the connection is retried in the background.
			p, err := Start(cfg, topic, compat.Rules{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			s, err := Subscribe(subEP, topic, !bind)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			waitFor(t, "the subscription", func() bool { return slices.Contains(p.Subscriptions(), topic) })
			for i := range int32(3) {
				publishStored(p, 10+i)
			}
			for i := range 3 {
				m, b := recvBatch(t, s)
				if m.Topic != topic || m.Seq != uint64(i) || len(b.Events) != 1 || b.Events[0].Tokens[0] != int32(10+i) || b.TS != 1.7e9 {
					t.Errorf("message %d: got topic %q seq %d batch %+v", i, m.Topic, m.Seq, b)
				}
			}
		})
	}
}

// A replica that connects reconnects when the router restarts, and goes
// on with the next sequence numbers.
func TestZMQReconnectsAfterRouterRestart(t *testing.T) {
	port := freePort(t)
	ep := fmt.Sprintf("tcp://127.0.0.1:%d", port)
	topic := RouterTopic("127.0.0.1", port, t.Name())
	p, err := Start(testConfig(ep), topic, compat.Rules{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for round := range 2 {
		s, err := Subscribe(ep, topic, true)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the subscription", func() bool { return slices.Contains(p.Subscriptions(), topic) })
		publishStored(p, int32(round))
		if m, _ := recvBatch(t, s); m.Seq != uint64(round) {
			t.Errorf("round %d: got seq %d", round, m.Seq)
		}
		s.Close()
		waitFor(t, "the replica to see the router gone", func() bool { return len(p.Subscriptions()) == 0 })
	}
}

// The replay socket resends the last buffer_steps batches from the asked
// sequence number on, then the end marker.
func TestZMQReplay(t *testing.T) {
	port, replayPort := freePort(t), freePort(t)
	cfg := testConfig(fmt.Sprintf("tcp://*:%d", port))
	replayEP := fmt.Sprintf("tcp://*:%d", replayPort)
	cfg.ReplayEndpoint = &replayEP
	p, err := Start(cfg, "kv@a:1@m", compat.Rules{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := range int32(6) {
		publishStored(p, 100+i)
	}
	waitFor(t, "six batches sent", func() bool { return p.Stats().Published == 6 })
	msgs, err := RequestReplay(fmt.Sprintf("tcp://127.0.0.1:%d", replayPort), 3)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range msgs {
		b, err := Decode(m.Payload)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%d:%d", m.Seq, b.Events[0].Tokens[0]))
	}
	// buffer_steps 4 keeps seqs 2..5; from 3 on: 3, 4, 5.
	if want := []string{"3:103", "4:104", "5:105"}; !slices.Equal(got, want) {
		t.Errorf("replay from 3: got %v, want %v", got, want)
	}
	msgs, err = RequestReplay(fmt.Sprintf("tcp://127.0.0.1:%d", replayPort), 0)
	if err != nil || len(msgs) != 4 || msgs[0].Seq != 2 {
		t.Errorf("replay from 0: got %d messages from seq %v (%v), want the 4 buffered from 2", len(msgs), msgs, err)
	}
}

// With the high-water mark reached and no reader, the PUB socket drops
// messages instead of blocking the publisher.
func TestZMQHighWaterMarkDrops(t *testing.T) {
	port := freePort(t)
	cfg := testConfig(fmt.Sprintf("tcp://*:%d", port))
	cfg.HWM = 1
	topic := RouterTopic("127.0.0.1", port, t.Name())
	p, err := Start(cfg, topic, compat.Rules{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	s, err := Subscribe(fmt.Sprintf("tcp://127.0.0.1:%d", port), topic, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	waitFor(t, "the subscription", func() bool { return slices.Contains(p.Subscriptions(), topic) })
	// Large batches fill the kernel's socket buffers: the subscriber reads
	// nothing until every batch is published.
	// 100 batches of 640 KiB (5 bytes a token) overflow the socket
	// buffers (here up to 32 MiB received plus 4 MiB sent).
	big := make([]int32, 1<<17)
	for i := range big {
		big[i] = 1 << 30
	}
	const n = 100
	for range n {
		p.Stored(0, false, []radixcache.Page{{Hash: 1, Tokens: big}})
		p.Publish(time.Unix(0, 0))
		waitFor(t, "the batch to leave the queue", func() bool { st := p.Stats(); return st.Published+st.SendErrs+st.Dropped == st.Batches })
	}
	if st := p.Stats(); st.Published != n {
		t.Fatalf("stats %+v: every batch should reach the socket", st)
	}
	// The reader now gets what the socket kept. Small batches follow until
	// one arrives, which marks the end.
	seqs := make(chan uint64, 1024)
	go func() {
		defer close(seqs)
		for {
			m, err := s.Recv()
			if err != nil {
				return
			}
			seqs <- m.Seq
			if b, err := Decode(m.Payload); err == nil && len(b.Events[0].Tokens) == 1 {
				return
			}
		}
	}()
	var got []uint64
	for tail := false; !tail; {
		publishStored(p, 1)
		for drained := false; !drained && !tail; {
			select {
			case seq, ok := <-seqs:
				if !ok {
					tail = true
					break
				}
				got = append(got, seq)
			default:
				st := p.Stats()
				drained = st.Published == st.Batches
				runtime.Gosched()
			}
		}
	}
	gap := false
	for i := 1; i < len(got); i++ {
		gap = gap || got[i] != got[i-1]+1
	}
	if !gap || got[len(got)-1] < n {
		t.Errorf("received seqs %v: want a gap (messages the high-water mark dropped), then a small batch after the %d large ones", got, n)
	}
}

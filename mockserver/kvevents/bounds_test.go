package kvevents

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglmock/sglmock/compat"
	"github.com/sglmock/sglmock/radixcache"
)

// liveHeap is the heap in use after a collection.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// rawPeer connects to a socket at addr as a ZMTP peer of type typ and
// completes the handshake, without anything reading for it afterwards.
func rawPeer(t *testing.T, addr, typ string) *zmtpConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	z, err := handshake(c, typ, func(string) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return z
}

// loopbackConfig binds loopback only, with the mock's "bind" key.
func loopbackConfig(t *testing.T) (Config, string) {
	port := freePort(t)
	yes := true
	cfg := testConfig(fmt.Sprintf("tcp://127.0.0.1:%d", port))
	cfg.Bind = &yes
	return cfg, fmt.Sprintf("127.0.0.1:%d", port)
}

// bigBatch publishes one batch of n tokens (5 bytes a token encoded).
func bigBatch(p *Publisher, n int) {
	tokens := make([]int32, n)
	for i := range tokens {
		tokens[i] = 1 << 30
	}
	p.Stored(0, false, []radixcache.Page{{Hash: 1, Tokens: tokens}})
	p.Publish(time.Unix(0, 0))
}

// A subscriber that subscribes and then never reads costs a bounded
// amount (its queue, 16 MiB, past the kernel's socket buffers) and never
// holds up a healthy subscriber, which gets every message in order; the
// messages dropped for it are counted.
func TestSilentSubscriberIsBoundedAndStarvesNoOne(t *testing.T) {
	cfg, addr := loopbackConfig(t)
	topic := "kv@t"
	p, err := Start(cfg, topic, compat.Rules{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	silent := rawPeer(t, addr, "SUB")
	silent.Write(appendMessage(nil, append([]byte{1}, topic...)))
	healthy, err := Subscribe("tcp://"+addr, topic, false)
	if err != nil {
		t.Fatal(err)
	}
	defer healthy.Close()
	waitFor(t, "both subscriptions", func() bool { return len(p.out.(*zmqTransport).pub.topics()) == 1 && p.Stats().Subscribers == 2 })
	got := make(chan uint64, 512)
	go func() {
		defer close(got)
		for {
			m, err := healthy.Recv()
			if err != nil {
				return
			}
			got <- m.Seq
		}
	}()
	base := liveHeap()
	const n = 200 // 200 batches of 640 KiB: 125 MiB, far past the socket buffers
	for i := range n {
		bigBatch(p, 1<<17)
		waitFor(t, "the batch to be sent", func() bool { return p.Stats().Published == int64(i+1) })
	}
	var seqs []uint64
	for len(seqs) < n {
		select {
		case s := <-got:
			seqs = append(seqs, s)
		case <-time.After(10 * time.Second):
			t.Fatalf("the healthy subscriber got %d of %d messages", len(seqs), n)
		}
	}
	for i, s := range seqs {
		if s != uint64(i) {
			t.Fatalf("the healthy subscriber got seqs %v..., want 0..%d without a gap", seqs[:i+1], n-1)
		}
	}
	pinned := liveHeap() - base
	st := p.Stats()
	t.Logf("%d bytes pinned; stats %+v", pinned, st)
	// The silent one's queue (16 MiB and one message) and the replay
	// buffer's last 4 batches (2.5 MiB), with slack for the runtime.
	if pinned > 28<<20 || st.SubscriberDrops < n/2 {
		t.Fatalf("got %d MiB pinned and %d messages dropped for the silent subscriber, want at most 28 MiB and most of the %d dropped",
			pinned>>20, st.SubscriberDrops, n)
	}
}

// A subscriber whose writes make no progress for the stall time is
// disconnected and counted.
func TestStalledSubscriberIsCut(t *testing.T) {
	cfg, addr := loopbackConfig(t)
	p, err := Start(cfg, "kv@t", compat.Rules{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.out.(*zmqTransport).pub.stall = 200 * time.Millisecond
	silent := rawPeer(t, addr, "SUB")
	silent.Write(appendMessage(nil, []byte("\x01kv@")))
	waitFor(t, "the subscription", func() bool { return slices.Contains(p.Subscriptions(), "kv@") })
	for range 20 {
		bigBatch(p, 1<<17) // 12.5 MiB: past the socket buffers
	}
	waitFor(t, "the silent subscriber to be cut", func() bool { st := p.Stats(); return st.SubscribersCut == 1 && st.Subscribers == 0 })
}

// A replay client that never reads its replies delays no one else; 20,000
// malformed requests write a warning a second, not 20,000.
func TestReplayClientsAreIsolated(t *testing.T) {
	cfg, _ := loopbackConfig(t)
	rport := freePort(t)
	rep := fmt.Sprintf("tcp://127.0.0.1:%d", rport)
	cfg.ReplayEndpoint = &rep
	var logs lockedBuffer
	p, err := Start(cfg, "kv@t", compat.Rules{}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for range 4 {
		bigBatch(p, 1<<20) // 4 batches of 5 MiB: 20 MiB to replay
	}
	waitFor(t, "the batches in the replay buffer", func() bool { return len(p.Replay(0)) == 4 })
	silent := rawPeer(t, fmt.Sprintf("127.0.0.1:%d", rport), "DEALER")
	silent.Write(appendMessage(nil, nil, SeqBytes(0)))
	malformed := rawPeer(t, fmt.Sprintf("127.0.0.1:%d", rport), "DEALER")
	var junk []byte
	for range 20_000 {
		junk = appendMessage(junk, []byte("x"))
	}
	go malformed.Write(junk)
	msgs, err := RequestReplay(rep, 2)
	if err != nil || len(msgs) != 2 || msgs[0].Seq != 2 || msgs[1].Seq != 3 {
		t.Fatalf("a healthy replay next to a silent one: got %d messages, %v; want seqs 2 and 3", len(msgs), err)
	}
	waitFor(t, "the malformed requests", func() bool { return p.Stats().ReplayMalformed == 20_000 })
	if n := strings.Count(logs.String(), "invalid replay request"); n < 1 || n > 3 {
		t.Fatalf("got %d warnings for 20,000 malformed requests, want one a second", n)
	}
}

// Idle replay clients hold no slot for long: one that asks nothing for
// replayIdle (10 s) is disconnected, and a client that finds
// maxReplayClients connected ends the one idle longest; a client being
// answered is never ended to make room.
func TestIdleReplayClientsGiveWay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ring := newRing(8, 1<<20)
		ring.add(0, []byte("payload"))
		r := newReplaySocket(ring, slog.New(slog.DiscardHandler))
		ln := newPipeListener()
		r.serve(ln)
		defer func() { ln.Close(); r.close(); r.wg.Wait() }()
		var idle []*zmtpConn
		for range maxReplayClients {
			idle = append(idle, pipePeer(t, ln, "DEALER"))
			time.Sleep(time.Millisecond) // each idle a little less long
		}
		healthy := pipePeer(t, ln, "DEALER")
		synctest.Wait()
		if !closed(idle[0]) || closed(idle[1]) || r.cut.Load() != 1 {
			t.Fatalf("a client past %d idle ones: the longest idle closed %v, the next %v, %d cut; want the longest idle alone gone",
				maxReplayClients, closed(idle[0]), closed(idle[1]), r.cut.Load())
		}
		healthy.Write(appendMessage(nil, nil, SeqBytes(0)))
		for _, want := range []string{"payload", ""} {
			frames, _, err := healthy.readMessage(3, 100)
			if err != nil || len(frames) != 3 || string(frames[2]) != want {
				t.Fatalf("the replay got %q, %v; want %q", frames, err, want)
			}
		}
		start := time.Now()
		time.Sleep(replayIdle - 17*time.Millisecond)
		synctest.Wait()
		if closed(idle[maxReplayClients-1]) || closed(healthy) {
			t.Fatal("an idle client was disconnected before replayIdle")
		}
		time.Sleep(replayIdle - time.Since(start))
		synctest.Wait()
		for i, z := range idle {
			if !closed(z) {
				t.Fatalf("idle client %d open after %v without a request", i, replayIdle)
			}
		}
		if !closed(healthy) || r.cut.Load() != maxReplayClients+1 {
			t.Fatalf("the healthy client, idle since its answer: closed %v; %d cut, want it gone and all %d counted",
				closed(healthy), r.cut.Load(), maxReplayClients+1)
		}
	})
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// The replay buffer keeps the last buffer_steps batches and at most its
// bytes: the oldest go first.
func TestReplayBufferIsBoundedInBytes(t *testing.T) {
	r := newRing(10, 100)
	for seq := range uint64(5) {
		r.add(seq, make([]byte, 40))
	}
	var seqs []uint64
	for _, b := range r.from(0) {
		seqs = append(seqs, b.Seq)
	}
	if !slices.Equal(seqs, []uint64{3, 4}) || r.size() != 80 {
		t.Fatalf("got seqs %v holding %d bytes, want the last 2 (80 bytes of at most 100)", seqs, r.size())
	}
	r.add(5, make([]byte, 500)) // one batch past the bound is kept alone
	if got := r.from(0); len(got) != 1 || got[0].Seq != 5 {
		t.Fatalf("got %d batches, want only the last, oversized one", len(got))
	}
}

// The publisher's queue is bounded in bytes as in batches: a batch that
// would pass the bytes is dropped and counted.
func TestQueueIsBoundedInBytes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		out := &stuckTransport{release: make(chan struct{}), sent: make(chan uint64, 16)}
		p := NewPublisher(Config{MaxQueueSize: 100}, "t", compat.Rules{}, out, nil)
		p.maxBytes = 3 * eventBytes(1000)
		bigBatch(p, 1000)
		synctest.Wait() // batch 0 is in Send, stuck
		for range 5 {
			bigBatch(p, 1000) // three queue, two find the queue's bytes full
		}
		if st := p.Stats(); st.Dropped != 2 {
			t.Fatalf("stats %+v: want 2 batches dropped for their bytes", st)
		}
		close(out.release)
		p.Close()
	})
}

// An idle publisher holds nothing: the queue grows with its batches, not
// preallocated at max_queue_size (SGLang's default, 100,000, was 4.6 MB a
// replica).
func TestIdlePublisherHoldsLittle(t *testing.T) {
	cfg := Config{Publisher: "null", MaxQueueSize: DefaultMaxQueueSize, BufferSteps: DefaultBufferSteps}
	base := liveHeap()
	var ps []*Publisher
	for range 50 {
		p, err := Start(cfg, "t", compat.Rules{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	per := (liveHeap() - base) / 50
	for _, p := range ps {
		p.Close()
	}
	if per > 16<<10 {
		t.Fatalf("an idle publisher holds %d bytes, want at most 16 KiB", per)
	}
}

// A connecting publisher whose subscriber is down retries every 100 ms
// without its memory or goroutines growing.
func TestDialRetriesHoldNothing(t *testing.T) {
	cfg := testConfig(fmt.Sprintf("tcp://127.0.0.1:%d", freePort(t)))
	p, err := Start(cfg, "t", compat.Rules{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	wait := func(d time.Duration) {
		deadline := time.Now().Add(d)
		waitFor(t, "time to pass", func() bool { return time.Now().After(deadline) })
	}
	wait(500 * time.Millisecond)
	heap1, g1 := liveHeap(), runtime.NumGoroutine()
	wait(time.Second) // ten more failed dials
	heap2, g2 := liveHeap(), runtime.NumGoroutine()
	if heap2-heap1 > 32<<10 || g2 != g1 {
		t.Fatalf("ten failed dials grew the heap by %d bytes and goroutines from %d to %d, want neither", heap2-heap1, g1, g2)
	}
}

// An ipc:// socket left by a process that died does not stop a restart
// from binding it, as libzmq unlinks it; a file that is not a socket is
// left alone.
func TestStaleIPCSocketIsReplaced(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "kv.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close() // the socket file stays, as after a kill
	p, err := Start(testConfig("ipc://"+path), "t", compat.Rules{}, nil)
	if err != nil {
		t.Fatalf("bind over a stale socket: %v", err)
	}
	s, err := Subscribe("ipc://"+path, "t", false)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the subscription", func() bool { return slices.Contains(p.Subscriptions(), "t") })
	publishStored(p, 7)
	if _, b := recvBatch(t, s); b.Events[0].Tokens[0] != 7 {
		t.Fatalf("got %+v", b)
	}
	s.Close()
	p.Close()
	// A live socket is not taken over, and a plain file is not removed.
	live, err := Start(testConfig("ipc://"+path), "t", compat.Rules{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if _, err := Start(testConfig("ipc://"+path), "t", compat.Rules{}, nil); err == nil {
		t.Fatal("a second bind of a live socket succeeded")
	}
	plain := filepath.Join(dir, "plain")
	os.WriteFile(plain, []byte("x"), 0o600)
	if _, err := Start(testConfig("ipc://"+plain), "t", compat.Rules{}, nil); err == nil {
		t.Fatal("bind over a plain file succeeded")
	}
	if _, err := os.Stat(plain); err != nil {
		t.Fatalf("the plain file is gone: %v", err)
	}
}

// SGLang binds tcp://0.0.0.0:PORT as it binds "*" and "::"; the mock's
// "bind" key binds any address, and a bind on every interface is warned
// of, naming the loopback alternative.
func TestBindRules(t *testing.T) {
	yes, no := true, false
	for _, tt := range []struct {
		endpoint string
		bind     *bool
		want     bool
	}{
		{"tcp://*:5557", nil, true}, {"tcp://[::]:5557", nil, true}, {"tcp://0.0.0.0:5557", nil, true},
		{"tcp://127.0.0.1:5557", nil, false}, {"tcp://router:5557", nil, false}, {"ipc:///tmp/kv", nil, true},
		{"tcp://127.0.0.1:5557", &yes, true}, {"tcp://*:5557", &no, false},
	} {
		if got := (Config{Endpoint: tt.endpoint, Bind: tt.bind}).Binds(); got != tt.want {
			t.Errorf("Binds(%s, bind %v): got %v, want %v", tt.endpoint, tt.bind, got, tt.want)
		}
	}
	port := freePort(t)
	var logs lockedBuffer
	p, err := Start(testConfig(fmt.Sprintf("tcp://0.0.0.0:%d", port)), "t", compat.Rules{}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	s, err := Subscribe(fmt.Sprintf("tcp://127.0.0.1:%d", port), "t", false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	waitFor(t, "the subscription", func() bool { return slices.Contains(p.Subscriptions(), "t") })
	publishStored(p, 9)
	if _, b := recvBatch(t, s); b.Events[0].Tokens[0] != 9 {
		t.Fatalf("got %+v", b)
	}
	want := fmt.Sprintf(`listens on every interface, and its events carry the prompts' token ids; for a router on this machine bind loopback only: \"endpoint\": \"tcp://127.0.0.1:%d\", \"bind\": true`, port)
	if !strings.Contains(logs.String(), want) {
		t.Fatalf("log %q lacks the warning %q", logs.String(), want)
	}
}

// pipeListener is an in-memory net.Listener, so that sockets run inside a
// synctest bubble: dial hands the server end of a net.Pipe to Accept.
type pipeListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return &net.UnixAddr{Name: "pipe", Net: "pipe"} }

// dial connects and says nothing.
func (l *pipeListener) dial() net.Conn {
	client, server := net.Pipe()
	l.conns <- server
	return client
}

// pipePubSocket serves a PUB socket on a pipeListener; its Close is the
// transport's.
func pipePubSocket() (*zmqTransport, *pipeListener) {
	ln := newPipeListener()
	t := &zmqTransport{cancel: func() {}, pub: newPubSocket(DefaultHWM, slog.New(slog.DiscardHandler)), pubLn: ln}
	t.pub.serve(ln)
	return t, ln
}

// closed reports whether the socket closed c: a read gets EOF. A pipe
// whose server end is writing to it (a greeting) is not.
func closed(c net.Conn) bool {
	c.SetReadDeadline(time.Now())
	defer c.SetReadDeadline(time.Time{})
	var b [1]byte
	_, err := c.Read(b[:])
	return err == io.EOF
}

// Handshakes in progress are bounded apart from the subscribers, and
// small: a connection that finds maxHandshakes of them ends the oldest, and
// each ends after handshakeTimeout (3 s). So silent connections cannot lock
// a subscriber out, and a real one, which completes its handshake in a few
// round trips, gets in. Close ends those still handshaking at once, and
// leaves no goroutine behind (synctest fails a bubble whose goroutines do
// not end).
func TestHandshakesAreBoundedApart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr, ln := pipePubSocket()
		defer tr.Close()
		var silent []net.Conn
		for range maxHandshakes {
			silent = append(silent, ln.dial()) // each says nothing
			// Each connection is attached on a goroutine of its own: its
			// handshake is recorded before the next is dialled, so that
			// the oldest is the first.
			synctest.Wait()
		}
		silent = append(silent, ln.dial())
		synctest.Wait()
		if !closed(silent[0]) || closed(silent[1]) || tr.pub.cut.Load() != 1 {
			t.Fatalf("after %d silent connections and one more: oldest closed %v, next closed %v, %d cut; want the oldest alone ended",
				maxHandshakes, closed(silent[0]), closed(silent[1]), tr.pub.cut.Load())
		}
		healthy := pipePeer(t, ln, "SUB") // ends the next oldest
		healthy.Write(subscription("kv", true, false))
		synctest.Wait()
		msg := appendMessage(nil, []byte("kv"), SeqBytes(0), []byte("payload"))
		tr.pub.send("kv", func() []byte { return msg })
		frames, _, err := healthy.readMessage(3, 100)
		if err != nil || string(frames[2]) != "payload" {
			t.Fatalf("the subscriber got %q, %v; want the message", frames, err)
		}
		time.Sleep(handshakeTimeout - time.Millisecond)
		if closed(silent[maxHandshakes]) {
			t.Fatalf("a silent connection closed before the handshake timeout")
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		for i, c := range silent {
			if !closed(c) {
				t.Fatalf("silent connection %d open after the handshake timeout", i)
			}
		}
		tr.pub.mu.Lock()
		left := tr.pub.handshakes.Len()
		tr.pub.mu.Unlock()
		if left != 0 {
			t.Fatalf("%d handshakes recorded after they all ended, want 0", left)
		}
		more := ln.dial()
		synctest.Wait()
		start := time.Now()
		tr.Close()
		if waited := time.Since(start); waited != 0 {
			t.Fatalf("Close waited %v for the handshakes, want 0", waited)
		}
		if !closed(more) {
			t.Fatal("a handshaking connection open after Close")
		}
	})
}

// Established subscribers are not capped so low that idle ones lock
// others out: a subscriber that finds maxSubscribers ends the oldest that
// was never sent a message, never one that was, and is refused only when
// every one was.
func TestIdleSubscribersGiveWay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr, ln := pipePubSocket()
		defer tr.Close()
		var idle []*zmtpConn
		for range maxSubscribers {
			z := pipePeer(t, ln, "SUB")
			z.Write(subscription("zzz-never", true, false))
			idle = append(idle, z)
		}
		synctest.Wait()
		msg := appendMessage(nil, []byte("kv"), SeqBytes(0), []byte("payload"))
		tr.pub.send("kv", func() []byte { return msg }) // matches none of them
		healthy := pipePeer(t, ln, "SUB")
		healthy.Write(subscription("kv", true, false))
		synctest.Wait()
		if !closed(idle[0]) || closed(idle[1]) || tr.pub.subscribers() != maxSubscribers {
			t.Fatalf("a subscriber past %d idle ones: the oldest idle closed %v, the next %v, %d subscribers; want the oldest alone gone",
				maxSubscribers, closed(idle[0]), closed(idle[1]), tr.pub.subscribers())
		}
		tr.pub.send("kv", func() []byte { return msg })
		if frames, _, err := healthy.readMessage(3, 100); err != nil || string(frames[2]) != "payload" {
			t.Fatalf("the subscriber got %q, %v; want the message", frames, err)
		}
		late := pipePeer(t, ln, "SUB") // idle too: it ends the next oldest idle one
		synctest.Wait()
		if !closed(idle[1]) || closed(late) || tr.pub.cut.Load() != 2 {
			t.Fatalf("another subscriber: the next idle closed %v, it closed %v, %d cut; want the next idle gone", closed(idle[1]), closed(late), tr.pub.cut.Load())
		}
		// Once every subscriber was sent something, a new one is refused.
		all := appendMessage(nil, []byte("zzz-never"), SeqBytes(1), nil)
		tr.pub.send("zzz-never", func() []byte { return all })
		late.Write(subscription("", true, false))
		synctest.Wait()
		tr.pub.send("zzz-never", func() []byte { return all })
		refused := pipePeer(t, ln, "SUB")
		synctest.Wait()
		if !closed(refused) || closed(healthy) || tr.pub.subscribers() != maxSubscribers {
			t.Fatalf("with every subscriber sent messages: the newcomer closed %v, the healthy one %v, %d subscribers; want the newcomer refused",
				closed(refused), closed(healthy), tr.pub.subscribers())
		}
	})
}

// pipePeer connects to ln as a ZMTP peer of type typ and completes the
// handshake; a pipe has no buffer, so its greeting and READY go from a
// goroutine while it reads the socket's.
func pipePeer(t *testing.T, ln *pipeListener, typ string) *zmtpConn {
	t.Helper()
	c := ln.dial()
	go c.Write(append(slices.Clone(greeting), appendCommand(nil, "READY", appendProperty(nil, "Socket-Type", typ))...))
	z := &zmtpConn{Conn: c, r: bufio.NewReader(c)}
	var g [greetingLen]byte
	if _, err := io.ReadFull(z.r, g[:]); err != nil {
		t.Fatal(err)
	}
	if _, _, err := z.readCommand(); err != nil {
		t.Fatal(err)
	}
	return z
}

// subscription is a SUBSCRIBE (or CANCEL) as a ZMTP 3.0 message, or as a
// 3.1 command.
func subscription(topic string, on, command bool) []byte {
	switch {
	case command && on:
		return appendCommand(nil, "SUBSCRIBE", []byte(topic))
	case command:
		return appendCommand(nil, "CANCEL", []byte(topic))
	case on:
		return appendMessage(nil, append([]byte{1}, topic...))
	}
	return appendMessage(nil, append([]byte{0}, topic...))
}

// subscriptions are n distinct prefixes of size bytes each.
func subscriptions(n, size int, command bool) [][]byte {
	var out [][]byte
	for i := range n {
		topic := fmt.Sprintf("%0*d", size, i)
		out = append(out, subscription(topic, true, command))
	}
	return out
}

// A subscriber holds at most 256 prefixes and 64 KiB of them; one that
// sends more is disconnected and counted. A cancelled prefix frees its
// room, and a repeated one takes none.
func TestSubscriptionsAreBounded(t *testing.T) {
	for _, tt := range []struct {
		name string
		msgs [][]byte
		cut  bool
	}{
		{"256 prefixes", subscriptions(256, 8, false), false},
		{"257 prefixes", subscriptions(257, 8, false), true},
		{"257 prefixes as ZMTP 3.1 commands", subscriptions(257, 8, true), true},
		{"16 prefixes of 4000 bytes", subscriptions(16, 4000, false), false},
		{"17 prefixes of 4000 bytes", subscriptions(17, 4000, false), true},
		{"256 prefixes, one cancelled, another", append(subscriptions(256, 8, false),
			subscription(fmt.Sprintf("%08d", 0), false, false), subscription("another", true, false)), false},
		{"one prefix 1000 times", slices.Repeat([][]byte{subscription("kv@", true, false)}, 1000), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tr, ln := pipePubSocket()
				defer tr.Close()
				z := pipePeer(t, ln, "SUB")
				defer z.Close()
				for _, m := range tt.msgs {
					if _, err := z.Write(m); err != nil {
						break // disconnected
					}
				}
				synctest.Wait()
				wantCut, wantSubs := int64(0), 1
				if tt.cut {
					wantCut, wantSubs = 1, 0
				}
				if cut, subs := tr.pub.cut.Load(), tr.pub.subscribers(); cut != wantCut || subs != wantSubs {
					t.Fatalf("got %d cut and %d connected, want %d and %d", cut, subs, wantCut, wantSubs)
				}
			})
		})
	}
}

// slowPeer is a subscriber or a replay client over a pipe, with 1 MiB on
// its way to it in 64 KiB messages.
type slowPeer struct {
	z     *zmtpConn
	total int           // the bytes on their way
	stall time.Duration // the socket's stall time
	cut   func() int64
	close func()
}

const slowMessages, slowPayload = 16, 64 << 10

// slowSubscriber subscribes and is sent the messages.
func slowSubscriber(t *testing.T) slowPeer {
	tr, ln := pipePubSocket()
	z := pipePeer(t, ln, "SUB")
	z.Write(subscription("kv", true, false))
	synctest.Wait()
	total := 0
	for i := range slowMessages {
		msg := appendMessage(nil, []byte("kv"), SeqBytes(uint64(i)), make([]byte, slowPayload))
		total += len(msg)
		tr.pub.send("kv", func() []byte { return msg })
	}
	return slowPeer{z, total, tr.pub.stall, tr.pub.cut.Load, func() { tr.Close() }}
}

// slowReplayClient asks for a replay of the messages.
func slowReplayClient(t *testing.T) slowPeer {
	ring := newRing(slowMessages, 1<<30)
	total := len(appendMessage(nil, nil, endSeq, nil))
	for i := range slowMessages {
		ring.add(uint64(i), make([]byte, slowPayload))
		total += len(appendMessage(nil, nil, SeqBytes(uint64(i)), make([]byte, slowPayload)))
	}
	r := newReplaySocket(ring, slog.New(slog.DiscardHandler))
	ln := newPipeListener()
	r.serve(ln)
	z := pipePeer(t, ln, "DEALER")
	z.Write(appendMessage(nil, nil, SeqBytes(0)))
	return slowPeer{z, total, replayStall, r.cut.Load, func() { ln.Close(); r.close(); r.wg.Wait() }}
}

var slowPeers = []struct {
	name  string
	start func(*testing.T) slowPeer
}{{"subscriber", slowSubscriber}, {"replay client", slowReplayClient}}

// A peer that reads slowly but steadily, 4 KiB every 5 s, gets all of
// 1 MiB, though that takes far longer than the stall time and each 64 KiB
// message alone takes 80 s: only a write that makes no progress is cut.
func TestSlowSteadyReadersAreServed(t *testing.T) {
	for _, tt := range slowPeers {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := tt.start(t)
				defer p.close()
				buf := make([]byte, 4<<10)
				got := 0
				for got < p.total {
					n, err := p.z.r.Read(buf)
					if err != nil {
						t.Fatalf("after %d of %d bytes: %v", got, p.total, err)
					}
					got += n
					time.Sleep(5 * time.Second)
				}
				if cut := p.cut(); cut != 0 {
					t.Fatalf("got %d cut, want 0", cut)
				}
			})
		})
	}
}

// A peer that stops reading is cut once the socket's write has made no
// progress for the stall time, and within a quarter of it more.
func TestStoppedReadersAreCut(t *testing.T) {
	for _, tt := range slowPeers {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := tt.start(t)
				defer p.close()
				if _, err := io.ReadFull(p.z.r, make([]byte, 100<<10)); err != nil {
					t.Fatal(err)
				}
				time.Sleep(p.stall - time.Millisecond)
				synctest.Wait()
				if cut := p.cut(); cut != 0 {
					t.Fatalf("%v after the last read: got %d cut, want 0", p.stall-time.Millisecond, cut)
				}
				time.Sleep(p.stall/4 + 2*time.Millisecond)
				synctest.Wait()
				if cut := p.cut(); cut != 1 {
					t.Fatalf("%v after the last read: got %d cut, want 1", p.stall*5/4+time.Millisecond, cut)
				}
			})
		})
	}
}

package kvevents

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// replaySocket is the replay ROUTER socket, as SGLang's _service_replay
// answers it: a request [identity, "", start seq] gets every buffered
// message from start on, [identity, "", seq, payload], then the end marker
// [identity, "", -1, ""]. Each client is served on its own goroutine, so a
// client that does not read delays only itself; a reply (its messages and
// the end marker, in writev calls) that makes no progress for replayStall
// disconnects it, and so does replayIdle without a request (the handshake
// included). At most maxReplayClients are served at once: a new client
// that finds them all taken ends the one idle longest, or is refused when
// every one is being answered. The warnings malformed requests cause are
// written at most once a second, with the count of those not written.
type replaySocket struct {
	ring      *ring
	log       *slog.Logger
	wg        sync.WaitGroup
	cut       atomic.Int64 // clients disconnected: stalled, idle, or one too many
	malformed atomic.Int64
	lastWarn  atomic.Int64 // unix seconds of the last malformed-request warning
	warned    atomic.Int64 // malformed requests counted when it was written
	mu        sync.Mutex
	conns     map[net.Conn]*replayClient
}

// replayClient is one connection's state: idle since when, unless it is
// being answered.
type replayClient struct {
	idleSince time.Time
	busy      bool
}

const (
	maxReplayClients = 16
	replayStall      = 10 * time.Second
	// replayIdle is how long a client may wait between requests.
	replayIdle = 10 * time.Second
	// maxReplayFrame bounds a request frame: a request is an empty
	// delimiter and 8 bytes.
	maxReplayFrame = 64
)

func newReplaySocket(r *ring, log *slog.Logger) *replaySocket {
	return &replaySocket{ring: r, log: log, conns: map[net.Conn]*replayClient{}}
}

func routerCompatible(peer string) bool { return peer == "DEALER" || peer == "REQ" || peer == "ROUTER" }

func (r *replaySocket) serve(ln net.Listener) {
	acceptEach(&r.wg, ln, func(c net.Conn) {
		defer c.Close()
		st, ok := r.admit(c)
		if !ok {
			return
		}
		r.client(c, st)
		r.mu.Lock()
		delete(r.conns, c)
		r.mu.Unlock()
	})
}

// admit counts c among the clients; when maxReplayClients are there, the
// one idle longest is ended to make room, and c is refused if every one is
// being answered.
func (r *replaySocket) admit(c net.Conn) (*replayClient, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.conns) >= maxReplayClients {
		var idle net.Conn
		for o, st := range r.conns {
			if !st.busy && (idle == nil || st.idleSince.Before(r.conns[idle].idleSince)) {
				idle = o
			}
		}
		r.cut.Add(1)
		if idle == nil {
			return nil, false
		}
		delete(r.conns, idle)
		idle.Close()
	}
	st := &replayClient{idleSince: time.Now()}
	r.conns[c] = st
	return st, true
}

// setBusy marks the client as being answered, or idle from now.
func (r *replaySocket) setBusy(st *replayClient, busy bool) {
	r.mu.Lock()
	st.busy = busy
	if !busy {
		st.idleSince = time.Now()
	}
	r.mu.Unlock()
}

// client answers one connection's requests until it ends, or waits
// replayIdle for one.
func (r *replaySocket) client(c net.Conn, st *replayClient) {
	z, err := handshake(c, "ROUTER", routerCompatible)
	if err != nil {
		r.log.Debug("KV events: a replay client's handshake failed: " + err.Error())
		return
	}
	for {
		c.SetReadDeadline(time.Now().Add(replayIdle))
		frames, command, err := z.readMessage(4, maxReplayFrame)
		if err != nil {
			switch {
			case errors.Is(err, ErrPeer):
				r.warnMalformed(err.Error())
			case errors.Is(err, os.ErrDeadlineExceeded):
				r.cut.Add(1)
				r.log.Debug(fmt.Sprintf("KV events: the replay client at %s asked nothing for %v; disconnected", z.RemoteAddr(), replayIdle))
			}
			return
		}
		if command {
			continue
		}
		if len(frames) != 2 || len(frames[0]) != 0 || len(frames[1]) != 8 {
			r.warnMalformed(fmt.Sprintf("a replay request of %d frames", len(frames)))
			continue
		}
		r.setBusy(st, true)
		err = writeAll(z.Conn, r.replies(binary.BigEndian.Uint64(frames[1])), replayStall)
		r.setBusy(st, false)
		if err != nil {
			if errors.Is(err, errStalled) {
				r.cut.Add(1)
				r.log.Warn(fmt.Sprintf("KV events: the replay client at %s read nothing for %v; disconnected", z.RemoteAddr(), replayStall))
			}
			return
		}
	}
}

// replies are the buffered messages from start on and the end marker, as
// buffers for one writev; the payloads are the replay buffer's own, not
// copies.
func (r *replaySocket) replies(start uint64) net.Buffers {
	var bufs net.Buffers
	for _, b := range r.ring.from(start) {
		head := appendFrame(nil, flagMore, nil)
		head = appendFrame(head, flagMore, SeqBytes(b.Seq))
		bufs = append(bufs, appendFrameHeader(head, 0, len(b.Payload)), b.Payload)
	}
	return append(bufs, appendMessage(nil, nil, endSeq, nil))
}

// warnMalformed counts a malformed request and logs it, at most once a
// second, with how many were not logged.
func (r *replaySocket) warnMalformed(what string) {
	n := r.malformed.Add(1)
	now := time.Now().Unix()
	if r.lastWarn.Swap(now) == now {
		return
	}
	skipped := n - 1 - r.warned.Swap(n)
	msg := "KV events: invalid replay request: " + what
	if skipped > 0 {
		msg += fmt.Sprintf(" (and %d more since the last warning)", skipped)
	}
	r.log.Warn(msg)
}

// close disconnects every client; the listener is its owner's.
func (r *replaySocket) close() {
	r.mu.Lock()
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
}

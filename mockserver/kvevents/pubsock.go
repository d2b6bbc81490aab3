package kvevents

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// pubSocket is the publisher's PUB socket. Each subscriber has a queue of
// its own, bounded in messages (the high-water mark) and in bytes, and a
// writer of its own, so a subscriber that reads slowly, or not at all,
// loses messages of its own (as libzmq's PUB drops at a pipe's high-water
// mark) and never holds up the others; one whose writes make no progress
// for subscriberStall is disconnected. Messages are encoded once and shared
// by every queue. Both drops are counted.
//
// Connections are admitted as libzmq admits them, which caps neither: a
// peer that connects and never finishes its handshake holds one of
// maxHandshakes slots for at most handshakeTimeout, and a new connection
// that finds them all taken ends the oldest handshake; an established
// subscriber holds one of maxSubscribers, and a new one that finds them all
// taken ends the oldest subscriber that has been sent nothing (no message
// matched its prefixes), or is refused when every one has. So idle peers
// cannot lock a real subscriber out: silent connections renew themselves
// faster than a handshake completes only in a flood, and idle subscribers
// give way to active ones.
type pubSocket struct {
	hwm   int
	stall time.Duration // subscriberStall; tests shorten it
	log   *slog.Logger
	mu    sync.Mutex
	conns map[net.Conn]struct{} // every connection, from its first byte
	// handshakes are the connections still in their handshake, oldest
	// first.
	handshakes list.List // of net.Conn
	subs       map[*subscriber]struct{}
	joined     uint64 // subscribers established so far: their order
	closed     bool
	wg         sync.WaitGroup
	drops      atomic.Int64 // messages not queued for a subscriber whose queue was full
	cut        atomic.Int64 // connections ended: stalled, subscribed past the bounds, idle and in the way, or refused
	lastWarn   atomic.Int64 // unix seconds of the last drop warning
	lastAdmit  atomic.Int64 // unix seconds of the last warning about a connection ended to admit another
}

// Bounds on what subscribers may cost.
const (
	// maxSubscriberBytes bounds a subscriber's queue in bytes (its first
	// message is always taken, whatever its size).
	maxSubscriberBytes = 16 << 20
	// maxSubscribers bounds the established subscribers a PUB socket
	// keeps, and maxHandshakes the connections still in their handshake
	// (see pubSocket).
	maxSubscribers = 1024
	maxHandshakes  = 32
	// subscriberStall is how long a write to a subscriber may make no
	// progress before the subscriber is disconnected.
	subscriberStall = 30 * time.Second
	// maxSubscriptionBytes bounds a subscription message (a topic prefix).
	maxSubscriptionBytes = 4096
	// maxTopics and maxTopicBytes bound the prefixes a subscriber holds,
	// which every message is matched against.
	maxTopics     = 256
	maxTopicBytes = 64 << 10
)

func newPubSocket(hwm int, log *slog.Logger) *pubSocket {
	return &pubSocket{hwm: hwm, stall: subscriberStall, log: log, conns: map[net.Conn]struct{}{}, subs: map[*subscriber]struct{}{}}
}

// subscriber is one connected SUB (or XSUB) socket.
type subscriber struct {
	conn   *zmtpConn
	order  uint64 // when it was established, among the socket's subscribers
	mu     sync.Mutex
	topics []string
	tbytes int // the bytes of topics
	// matched is set once a message matched its prefixes: a subscriber
	// that was never sent anything gives way to a new one when the socket
	// is full.
	matched bool
	queue   [][]byte
	bytes   int
	wake    chan struct{}
	done    chan struct{} // closed when the connection ends
	once    sync.Once
}

func subCompatible(peer string) bool { return peer == "SUB" || peer == "XSUB" }

// serve accepts subscribers on ln until it closes.
func (p *pubSocket) serve(ln net.Listener) { acceptEach(&p.wg, ln, p.attach) }

// attach handshakes with c and serves it as a subscriber until it ends.
// It returns when the connection is over.
func (p *pubSocket) attach(c net.Conn) {
	el, ok := p.beginHandshake(c)
	if !ok {
		c.Close()
		return
	}
	defer p.release(c)
	z, err := handshake(c, "PUB", subCompatible)
	p.mu.Lock()
	if el.Value != nil { // not ended to make room
		p.handshakes.Remove(el)
	}
	p.mu.Unlock()
	if err != nil {
		p.log.Debug("KV events: a subscriber's handshake failed: " + err.Error())
		return
	}
	s := &subscriber{conn: z, wake: make(chan struct{}, 1), done: make(chan struct{})}
	if !p.join(s) {
		return
	}
	go p.write(s)
	p.read(s)
	s.end()
	p.mu.Lock()
	delete(p.subs, s)
	p.mu.Unlock()
}

// beginHandshake records c from its first byte, as one of the handshakes in
// progress; when maxHandshakes are, the oldest is ended to make room. It
// reports false once the socket is closed.
func (p *pubSocket) beginHandshake(c net.Conn) (*list.Element, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, false
	}
	if p.handshakes.Len() >= maxHandshakes {
		oldest := p.handshakes.Front()
		old := p.handshakes.Remove(oldest).(net.Conn)
		oldest.Value = nil
		old.Close()
		p.cut.Add(1)
		p.warnAdmit(fmt.Sprintf("KV events: %d handshakes in progress; the oldest, from %s, ended to admit %s", maxHandshakes, old.RemoteAddr(), c.RemoteAddr()))
	}
	p.conns[c] = struct{}{}
	return p.handshakes.PushBack(c), true
}

// join adds s to the subscribers; when maxSubscribers are there, the
// oldest that was never sent a message is ended to make room, and s is
// refused if there is none. It reports whether s joined.
func (p *pubSocket) join(s *subscriber) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	if len(p.subs) >= maxSubscribers {
		var idle *subscriber
		for o := range p.subs {
			o.mu.Lock()
			matched := o.matched
			o.mu.Unlock()
			if !matched && (idle == nil || o.order < idle.order) {
				idle = o
			}
		}
		p.cut.Add(1)
		if idle == nil {
			p.warnAdmit(fmt.Sprintf("KV events: %d subscribers already, each sent messages; %s refused", maxSubscribers, s.conn.RemoteAddr()))
			return false
		}
		delete(p.subs, idle)
		idle.end()
		p.warnAdmit(fmt.Sprintf("KV events: %d subscribers already; the oldest that was sent nothing, at %s, ended to admit %s",
			maxSubscribers, idle.conn.RemoteAddr(), s.conn.RemoteAddr()))
	}
	p.joined++
	s.order = p.joined
	p.subs[s] = struct{}{}
	return true
}

// warnAdmit logs a connection ended or refused to keep the bounds, at most
// once a second.
func (p *pubSocket) warnAdmit(msg string) {
	if now := time.Now().Unix(); p.lastAdmit.Swap(now) != now {
		p.log.Warn(msg)
	}
}

func (p *pubSocket) release(c net.Conn) {
	c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (s *subscriber) end() {
	s.once.Do(func() {
		close(s.done)
		s.conn.Close()
	})
}

// read takes the subscriber's subscriptions (ZMTP 3.0's messages and 3.1's
// commands) until the connection ends.
func (p *pubSocket) read(s *subscriber) {
	for {
		frames, command, err := s.conn.readMessage(1, maxSubscriptionBytes)
		if err != nil {
			if errors.Is(err, ErrPeer) {
				p.log.Debug("KV events: " + err.Error())
			}
			return
		}
		f := frames[0]
		var topic string
		var on bool
		switch {
		case command && len(f) > 0 && int(f[0]) <= len(f)-1:
			name := string(f[1 : 1+f[0]])
			topic, on = string(f[1+f[0]:]), name == "SUBSCRIBE"
			if name != "SUBSCRIBE" && name != "CANCEL" {
				continue // PING and the like
			}
		case !command && len(f) > 0 && f[0] <= 1:
			topic, on = string(f[1:]), f[0] == 1
		default:
			continue // a PUB ignores other messages
		}
		if !s.subscribe(topic, on) {
			p.cut.Add(1)
			p.log.Warn(fmt.Sprintf("KV events: the subscriber at %s subscribed to more than %d prefixes or %d bytes of them; disconnected",
				s.conn.RemoteAddr(), maxTopics, maxTopicBytes))
			return
		}
	}
}

// subscribe adds topic to the subscriber's prefixes, or with on unset
// removes it; it reports false, adding nothing, when the prefixes would
// pass maxTopics or maxTopicBytes.
func (s *subscriber) subscribe(topic string, on bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.Index(s.topics, topic)
	switch {
	case on && i < 0:
		if len(s.topics) == maxTopics || s.tbytes+len(topic) > maxTopicBytes {
			return false
		}
		s.topics = append(s.topics, topic)
		s.tbytes += len(topic)
	case !on && i >= 0:
		s.topics = slices.Delete(s.topics, i, i+1)
		s.tbytes -= len(topic)
	}
	return true
}

// write sends the subscriber's queue until the connection ends, each batch
// of messages in writev calls; a write that makes no progress for
// subscriberStall ends it.
func (p *pubSocket) write(s *subscriber) {
	defer s.end()
	for {
		select {
		case <-s.wake:
		case <-s.done:
			return
		}
		for {
			s.mu.Lock()
			batch := s.queue
			s.queue, s.bytes = nil, 0
			s.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			if err := writeAll(s.conn.Conn, batch, p.stall); err != nil {
				if errors.Is(err, errStalled) {
					p.cut.Add(1)
					p.log.Warn(fmt.Sprintf("KV events: the subscriber at %s read nothing for %v; disconnected", s.conn.RemoteAddr(), p.stall))
				}
				return
			}
		}
	}
}

// send queues the message build encodes, built once, for every subscriber
// of topic; with none, nothing is built.
func (p *pubSocket) send(topic string, build func() []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var msg []byte
	for s := range p.subs {
		s.mu.Lock()
		ok := slices.ContainsFunc(s.topics, func(t string) bool { return strings.HasPrefix(topic, t) })
		if ok && msg == nil {
			msg = build()
		}
		full := len(s.queue) > 0 && (p.hwm > 0 && len(s.queue) >= p.hwm || s.bytes+len(msg) > maxSubscriberBytes)
		s.matched = s.matched || ok
		if ok && !full {
			s.queue = append(s.queue, msg)
			s.bytes += len(msg)
		}
		s.mu.Unlock()
		switch {
		case ok && full:
			n := p.drops.Add(1)
			if now := time.Now().Unix(); p.lastWarn.Swap(now) != now {
				p.log.Warn(fmt.Sprintf("KV events: the subscriber at %s reads too slowly; a message dropped for it (%d so far)", s.conn.RemoteAddr(), n))
			}
		case ok:
			select {
			case s.wake <- struct{}{}:
			default:
			}
		}
	}
}

// topics returns the subscribed prefixes of every subscriber, sorted.
func (p *pubSocket) topics() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for s := range p.subs {
		s.mu.Lock()
		out = append(out, s.topics...)
		s.mu.Unlock()
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func (p *pubSocket) subscribers() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.subs)
}

// close ends every connection, those still in their handshake included;
// the listeners and the dial loop are their owners'.
func (p *pubSocket) close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
}

// dial keeps one connection to a subscriber that binds at addr, as
// libzmq's connect does: it dials every dialRetry until the subscriber is
// up, serves the connection while it lasts, and dials again when it ends,
// until ctx ends.
func (p *pubSocket) dial(ctx context.Context, network, addr string) {
	p.wg.Go(func() {
		var d net.Dialer
		down := false
		for ctx.Err() == nil {
			c, err := d.DialContext(ctx, network, addr)
			if err == nil {
				down = false
				stop := context.AfterFunc(ctx, func() { c.Close() })
				p.attach(c)
				stop()
			} else if !down && ctx.Err() == nil {
				down = true
				p.log.Info(fmt.Sprintf("KV events: the subscriber at %s is not up yet (%v); retrying every %v", addr, err, dialRetry))
			}
			select {
			case <-time.After(dialRetry):
			case <-ctx.Done():
			}
		}
	})
}

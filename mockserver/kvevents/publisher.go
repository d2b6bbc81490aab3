package kvevents

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sglmock/sglmock/compat"
	"github.com/sglmock/sglmock/radixcache"
)

// Transport sends a published message, [topic, seq, payload], on its way.
// It must not block for long: the publisher's goroutine calls it in order.
type Transport interface {
	Send(topic []byte, seq uint64, payload []byte) error
	// Subscriptions returns the topic prefixes the connected subscribers
	// asked for.
	Subscriptions() []string
	Close() error
}

// Stats are a publisher's counts since it started.
type Stats struct {
	Events    int64 // changes gathered from the engine: pages stored or removed, clears (coalesced on the wire)
	Batches   int64 // batches handed to the queue
	Published int64 // batches sent on the transport
	Dropped   int64 // batches dropped because the queue was full, in batches or in bytes
	SendErrs  int64 // batches the transport failed to send
	// The sockets' counts: subscribers connected now, messages dropped for
	// a subscriber whose queue was full, subscribers disconnected (stalled,
	// subscribed past the bounds, or one too many), replay clients disconnected (stalled, or one too
	// many) and malformed replay requests.
	Subscribers      int
	SubscriberDrops  int64
	SubscribersCut   int64
	ReplayClientsCut int64
	ReplayMalformed  int64
	// ReplayBytes is what the replay buffer holds now.
	ReplayBytes int64
}

// Bounds in bytes, which SGLang does not have: its queue and replay buffer
// are bounded in batches only, and a batch can hold a whole prompt's pages.
const (
	// MaxQueueBytes bounds the batches waiting for the publisher's
	// goroutine, by their events' estimated encoded size.
	MaxQueueBytes = 64 << 20
	// MaxReplayBytes bounds the replay buffer: the oldest batches go first
	// once it holds more.
	MaxReplayBytes = 64 << 20
)

// Publisher is SGLang's ZmqEventPublisher for one engine: the engine
// calls it as the radix cache changes (it is the engine's CacheEvents) and
// at each publication point; a goroutine encodes the batches and sends
// them, in order, each with the next sequence number.
//
// The engine never waits for it. SGLang's queue.put blocks the scheduler
// when max_queue_size batches wait; the mock's queue of that size (and of
// MaxQueueBytes) drops the batch instead, counting it in Stats.Dropped and
// logging it, and its sequence number is skipped, so a subscriber sees the
// gap as it sees a high-water-mark drop (the replay socket cannot resend
// it). The queue grows as batches come: an idle publisher holds nothing.
type Publisher struct {
	topic  []byte
	out    Transport
	log    *slog.Logger
	dpRank int // every batch's DPRank (Config.ForRank)
	// rules are the server's SGLang release's: they say how events are
	// coalesced (the batch-removed-pages and coalesce-kv-events rules).
	rules compat.Rules

	// Engine goroutine only.
	pending      []Event
	pendingBytes int
	nextSeq      uint64

	mu         sync.Mutex // guards the queue
	closed     bool
	queue      []queued // from qhead on
	qhead      int
	queueBytes int
	maxQueue   int
	maxBytes   int // MaxQueueBytes; tests lower it
	wake       chan struct{}

	ring *ring
	done chan struct{}

	events, batches, published, dropped, sendErrs atomic.Int64
	lastDropLog                                   atomic.Int64 // unix seconds of the last drop warning
}

type queued struct {
	seq   uint64
	batch Batch
	bytes int // the events' estimated encoded size
}

// eventBytes estimates an event's encoded size: its fixed fields and at
// most five bytes a token.
func eventBytes(tokens int) int { return 48 + 5*tokens }

// NewPublisher starts a publisher that sends on out with the given topic,
// keeping the last cfg.BufferSteps messages (at most MaxReplayBytes) for
// Replay, and gathering events as rules' SGLang release does.
func NewPublisher(cfg Config, topic string, rules compat.Rules, out Transport, log *slog.Logger) *Publisher {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Publisher{
		rules:    rules,
		topic:    []byte(topic),
		out:      out,
		log:      log,
		dpRank:   cfg.dpRank,
		maxQueue: cfg.MaxQueueSize,
		maxBytes: MaxQueueBytes,
		wake:     make(chan struct{}, 1),
		ring:     newRing(cfg.BufferSteps, MaxReplayBytes),
		done:     make(chan struct{}),
	}
	go p.run()
	return p
}

// Topic returns the topic every message carries.
func (p *Publisher) Topic() string { return string(p.topic) }

// Stored implements radixcache.Observer: the node's pages are one
// BlockStored, or extend the BlockStored just gathered when they hang from
// its last page with pages of the same size (SGLang's coalescing, PR
// #31479). Before that rule each page is an event of its own, hanging
// from the page before it (KVCacheEventMixin._record_store_event).
func (p *Publisher) Stored(parent int64, hasParent bool, pages []radixcache.Page) {
	p.StoredOn(radixcache.Device, parent, hasParent, pages)
}

// StoredOn implements radixcache.TierObserver: Stored, on the medium a
// tree with a host tier names (a run coalesces only on one medium).
func (p *Publisher) StoredOn(medium radixcache.Medium, parent int64, hasParent bool, pages []radixcache.Page) {
	if len(pages) == 0 {
		return
	}
	for _, pg := range pages {
		p.pendingBytes += eventBytes(len(pg.Tokens)) // a page's own event, at most: coalescing only saves
	}
	p.events.Add(int64(len(pages)))
	if !p.rules.CoalesceKVEvents {
		for _, pg := range pages {
			e := Event{Kind: BlockStored, Parent: parent, HasParent: hasParent, Bigram: pg.Bigram, Medium: mediumOf(medium)}
			e.BlockSize = len(pg.Tokens) / e.unit()
			e.addPages([]radixcache.Page{pg})
			p.pending = append(p.pending, e)
			parent, hasParent = pg.Hash, true
		}
		return
	}
	e := Event{Kind: BlockStored, Parent: parent, HasParent: hasParent, Bigram: pages[0].Bigram, Medium: mediumOf(medium)}
	e.BlockSize = len(pages[0].Tokens) / e.unit()
	if n := len(p.pending); n > 0 && hasParent {
		if tail := &p.pending[n-1]; tail.Kind == BlockStored && tail.BlockSize == e.BlockSize && tail.Bigram == e.Bigram &&
			tail.Medium == e.Medium && tail.Hashes[len(tail.Hashes)-1] == parent {
			tail.addPages(pages)
			return
		}
	}
	e.addPages(pages)
	p.pending = append(p.pending, e)
}

// addPages appends pages to a BlockStored event. The event owns its
// slices: a page's tokens may be a view of the radix tree's key, which an
// append must never write into.
func (e *Event) addPages(pages []radixcache.Page) {
	for _, pg := range pages {
		e.Hashes = append(e.Hashes, pg.Hash)
		if e.Tokens == nil {
			e.Tokens = pg.Tokens[:len(pg.Tokens):len(pg.Tokens)] // the first append copies
			continue
		}
		e.Tokens = append(e.Tokens, pg.Tokens...)
	}
}

// Removed implements radixcache.Observer: the node's pages are one
// BlockRemoved, or extend the BlockRemoved just gathered (SGLang's
// coalescing, PR #31479). Before that rule the node's pages are one event
// (PR #29265), and before that each page is one.
func (p *Publisher) Removed(pages []radixcache.Page) { p.RemovedFrom(radixcache.Device, pages) }

// RemovedFrom implements radixcache.TierObserver: Removed, from the medium
// a tree with a host tier names.
func (p *Publisher) RemovedFrom(medium radixcache.Medium, pages []radixcache.Page) {
	if len(pages) == 0 {
		return
	}
	p.pendingBytes += len(pages) * eventBytes(0)
	p.events.Add(int64(len(pages)))
	m := mediumOf(medium)
	if !p.rules.BatchRemovedPages {
		for _, pg := range pages {
			p.pending = append(p.pending, Event{Kind: BlockRemoved, Hashes: []int64{pg.Hash}, Medium: m})
		}
		return
	}
	n := len(p.pending)
	if n == 0 || p.pending[n-1].Kind != BlockRemoved || p.pending[n-1].Medium != m || !p.rules.CoalesceKVEvents {
		p.pending = append(p.pending, Event{Kind: BlockRemoved, Medium: m})
		n++
	}
	tail := &p.pending[n-1]
	for _, pg := range pages {
		tail.Hashes = append(tail.Hashes, pg.Hash)
	}
}

// Cleared implements radixcache.Observer: AllBlocksCleared.
func (p *Publisher) Cleared() {
	p.pending = append(p.pending, Event{Kind: AllBlocksCleared})
	p.pendingBytes += eventBytes(0)
	p.events.Add(1)
}

// Publish queues the events gathered since the last call as one batch
// stamped at (SGLang publishes nothing when there is nothing). It never
// blocks: a full queue drops the batch.
func (p *Publisher) Publish(at time.Time) {
	if len(p.pending) == 0 {
		return
	}
	q := queued{seq: p.nextSeq, batch: Batch{TS: float64(at.Unix()) + float64(at.Nanosecond())/1e9, Events: p.pending, DPRank: p.dpRank}, bytes: p.pendingBytes}
	p.nextSeq++
	p.pending, p.pendingBytes = nil, 0
	p.batches.Add(1)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		p.dropped.Add(1)
		return
	}
	waiting := len(p.queue) - p.qhead
	if waiting >= p.maxQueue || waiting > 0 && p.queueBytes+q.bytes > p.maxBytes {
		p.dropped.Add(1)
		if now := time.Now().Unix(); p.lastDropLog.Swap(now) != now {
			p.log.Warn(fmt.Sprintf("KV events: the publisher's queue is full (%d batches, %d bytes; at most %d and %d); batch %d (%d events) dropped, %d dropped so far",
				waiting, p.queueBytes, p.maxQueue, p.maxBytes, q.seq, len(q.batch.Events), p.dropped.Load()))
		}
		return
	}
	p.queue = append(p.queue, q)
	p.queueBytes += q.bytes
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// take returns the next queued batch, waiting for one; ok is false once
// the publisher is closed and the queue is empty.
func (p *Publisher) take() (q queued, ok bool) {
	for {
		p.mu.Lock()
		if p.qhead < len(p.queue) {
			q = p.queue[p.qhead]
			p.queue[p.qhead] = queued{}
			p.qhead++
			if p.qhead == len(p.queue) {
				p.queue, p.qhead = p.queue[:0], 0
				if cap(p.queue) > 1024 {
					p.queue = nil // a burst's array goes back
				}
			}
			p.queueBytes -= q.bytes
			p.mu.Unlock()
			return q, true
		}
		closed := p.closed
		p.mu.Unlock()
		if closed {
			return queued{}, false
		}
		<-p.wake
	}
}

func (p *Publisher) run() {
	defer close(p.done)
	var buf []byte
	for {
		q, ok := p.take()
		if !ok {
			return
		}
		var err error
		if buf, err = q.batch.Append(buf[:0]); err != nil {
			p.log.Error("KV events: " + err.Error())
			p.sendErrs.Add(1)
			continue
		}
		payload := bytes.Clone(buf)
		if err := p.out.Send(p.topic, q.seq, payload); err != nil {
			p.sendErrs.Add(1)
			p.log.Warn("KV events: " + err.Error())
		} else {
			p.published.Add(1)
		}
		p.ring.add(q.seq, payload)
		if cap(buf) > 1<<20 {
			buf = nil // a large batch's buffer goes back
		}
	}
}

// Stats returns the publisher's counts.
func (p *Publisher) Stats() Stats {
	st := Stats{
		Events: p.events.Load(), Batches: p.batches.Load(), Published: p.published.Load(),
		Dropped: p.dropped.Load(), SendErrs: p.sendErrs.Load(), ReplayBytes: p.ring.size(),
	}
	if c, ok := p.out.(interface{ counts(*Stats) }); ok {
		c.counts(&st)
	}
	return st
}

// Subscriptions returns the topic prefixes the transport's subscribers
// asked for.
func (p *Publisher) Subscriptions() []string { return p.out.Subscriptions() }

// Close sends what is queued, then closes the transport. Batches published
// afterwards are dropped.
func (p *Publisher) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.done
		return nil
	}
	p.closed = true
	select {
	case p.wake <- struct{}{}:
	default:
	}
	p.mu.Unlock()
	<-p.done
	return p.out.Close()
}

// Replay returns the buffered messages from sequence number from on, in
// order: what the replay socket resends.
func (p *Publisher) Replay(from uint64) []Buffered { return p.ring.from(from) }

// Buffered is a sent message the replay buffer keeps.
type Buffered struct {
	Seq     uint64
	Payload []byte
}

// ring keeps the last n sent messages (SGLang's deque(maxlen=buffer_steps)),
// and at most maxBytes of them: the oldest go first.
type ring struct {
	mu       sync.Mutex
	n        int
	maxBytes int64
	items    []Buffered // from head on, oldest first
	head     int
	bytes    int64
}

func newRing(n int, maxBytes int64) *ring { return &ring{n: n, maxBytes: maxBytes} }

func (r *ring) add(seq uint64, payload []byte) {
	if r.n == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.items = append(r.items, Buffered{seq, payload})
	r.bytes += int64(len(payload))
	for len(r.items)-r.head > r.n || r.bytes > r.maxBytes && len(r.items)-r.head > 1 {
		r.bytes -= int64(len(r.items[r.head].Payload))
		r.items[r.head] = Buffered{}
		r.head++
	}
	if r.head > len(r.items)/2 {
		// Move the live items to the front, so the array does not grow.
		n := copy(r.items, r.items[r.head:])
		clear(r.items[n:])
		r.items, r.head = r.items[:n], 0
	}
}

func (r *ring) from(seq uint64) []Buffered {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Buffered
	for _, b := range r.items[r.head:] {
		if b.Seq >= seq {
			out = append(out, b)
		}
	}
	return out
}

func (r *ring) size() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bytes
}

// SeqBytes is a sequence number as the second frame carries it: 8 bytes,
// big-endian.
func SeqBytes(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

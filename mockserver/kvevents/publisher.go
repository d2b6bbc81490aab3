package kvevents

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

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
	Dropped   int64 // batches dropped because the queue was full
	SendErrs  int64 // batches the transport failed to send
}

// Publisher is SGLang's ZmqEventPublisher for one engine: the engine
// calls it as the radix cache changes (it is the engine's CacheEvents) and
// at each publication point; a goroutine encodes the batches and sends
// them, in order, each with the next sequence number.
//
// The engine never waits for it. SGLang's queue.put blocks the scheduler
// when max_queue_size batches wait; the mock's queue of that size drops
// the batch instead, counting it in Stats.Dropped and logging it, and its
// sequence number is skipped, so a subscriber sees the gap as it sees a
// high-water-mark drop (the replay socket cannot resend it).
type Publisher struct {
	topic []byte
	out   Transport
	log   *slog.Logger

	// Engine goroutine only.
	pending []Event
	nextSeq uint64

	mu     sync.Mutex // guards queue against Close
	closed bool
	queue  chan queued

	ring *ring
	done chan struct{}

	events, batches, published, dropped, sendErrs atomic.Int64
	lastDropLog                                   atomic.Int64 // unix seconds of the last drop warning
}

type queued struct {
	seq   uint64
	batch Batch
}

// NewPublisher starts a publisher that sends on out with the given topic,
// keeping the last cfg.BufferSteps messages for Replay.
func NewPublisher(cfg Config, topic string, out Transport, log *slog.Logger) *Publisher {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Publisher{
		topic: []byte(topic),
		out:   out,
		log:   log,
		queue: make(chan queued, cfg.MaxQueueSize),
		ring:  newRing(cfg.BufferSteps),
		done:  make(chan struct{}),
	}
	go p.run()
	return p
}

// Topic returns the topic every message carries.
func (p *Publisher) Topic() string { return string(p.topic) }

// Stored implements radixcache.Observer: the node's pages are one
// BlockStored, or extend the BlockStored just gathered when they hang from
// its last page with pages of the same size (SGLang's coalescing, PR
// #31479).
func (p *Publisher) Stored(parent int64, hasParent bool, pages []radixcache.Page) {
	if len(pages) == 0 {
		return
	}
	e := Event{Kind: BlockStored, Parent: parent, HasParent: hasParent, Bigram: pages[0].Bigram}
	e.BlockSize = len(pages[0].Tokens) / e.unit()
	if n := len(p.pending); n > 0 && hasParent {
		if tail := &p.pending[n-1]; tail.Kind == BlockStored && tail.BlockSize == e.BlockSize && tail.Bigram == e.Bigram &&
			tail.Hashes[len(tail.Hashes)-1] == parent {
			tail.addPages(pages)
			p.events.Add(int64(len(pages)))
			return
		}
	}
	e.addPages(pages)
	p.pending = append(p.pending, e)
	p.events.Add(int64(len(pages)))
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
// coalescing).
func (p *Publisher) Removed(pages []radixcache.Page) {
	if len(pages) == 0 {
		return
	}
	n := len(p.pending)
	if n == 0 || p.pending[n-1].Kind != BlockRemoved {
		p.pending = append(p.pending, Event{Kind: BlockRemoved})
		n++
	}
	tail := &p.pending[n-1]
	for _, pg := range pages {
		tail.Hashes = append(tail.Hashes, pg.Hash)
	}
	p.events.Add(int64(len(pages)))
}

// Cleared implements radixcache.Observer: AllBlocksCleared.
func (p *Publisher) Cleared() {
	p.pending = append(p.pending, Event{Kind: AllBlocksCleared})
	p.events.Add(1)
}

// Publish queues the events gathered since the last call as one batch
// stamped at (SGLang publishes nothing when there is nothing). It never
// blocks: a full queue drops the batch.
func (p *Publisher) Publish(at time.Time) {
	if len(p.pending) == 0 {
		return
	}
	q := queued{seq: p.nextSeq, batch: Batch{TS: float64(at.Unix()) + float64(at.Nanosecond())/1e9, Events: p.pending}}
	p.nextSeq++
	p.pending = nil
	p.batches.Add(1)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		p.dropped.Add(1)
		return
	}
	select {
	case p.queue <- q:
	default:
		p.dropped.Add(1)
		if now := time.Now().Unix(); p.lastDropLog.Swap(now) != now {
			p.log.Warn(fmt.Sprintf("KV events: the publisher's queue is full (max_queue_size %d); batch %d (%d events) dropped, %d dropped so far",
				cap(p.queue), q.seq, len(q.batch.Events), p.dropped.Load()))
		}
	}
}

func (p *Publisher) run() {
	defer close(p.done)
	var buf []byte
	for q := range p.queue {
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
	}
}

// Stats returns the publisher's counts.
func (p *Publisher) Stats() Stats {
	return Stats{
		Events: p.events.Load(), Batches: p.batches.Load(), Published: p.published.Load(),
		Dropped: p.dropped.Load(), SendErrs: p.sendErrs.Load(),
	}
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
	close(p.queue)
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

// ring keeps the last n sent messages (SGLang's deque(maxlen=buffer_steps)).
type ring struct {
	mu    sync.Mutex
	n     int
	items []Buffered // grows to n, then is overwritten from next on
	next  int
}

func newRing(n int) *ring { return &ring{n: n} }

func (r *ring) add(seq uint64, payload []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.n == 0:
	case len(r.items) < r.n:
		r.items = append(r.items, Buffered{seq, payload})
	default:
		r.items[r.next] = Buffered{seq, payload}
		r.next = (r.next + 1) % r.n
	}
}

func (r *ring) from(seq uint64) []Buffered {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Buffered
	for i := range r.items {
		if b := r.items[(r.next+i)%len(r.items)]; b.Seq >= seq {
			out = append(out, b)
		}
	}
	return out
}

// SeqBytes is a sequence number as the second frame carries it: 8 bytes,
// big-endian.
func SeqBytes(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

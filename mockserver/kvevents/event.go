package kvevents

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// Kind is an event's type, its tag on the wire.
type Kind uint8

// The events SGLang's radix cache records.
const (
	BlockStored Kind = iota + 1
	BlockRemoved
	AllBlocksCleared
)

// Medium is the storage medium SGLang names in every block event
// (MEDIUM_GPU): the mock has no host or disk tier.
const Medium = "GPU"

func (k Kind) String() string {
	switch k {
	case BlockStored:
		return "BlockStored"
	case BlockRemoved:
		return "BlockRemoved"
	case AllBlocksCleared:
		return "AllBlocksCleared"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Event is one KV event: one page stored or removed, or every page
// cleared.
type Event struct {
	Kind Kind
	// Hash is the page's block hash (BlockStored, BlockRemoved).
	Hash int64
	// Parent is the block hash of the page this one hangs from, absent
	// (HasParent false) at the root (BlockStored).
	Parent    int64
	HasParent bool
	// Tokens are the page's token ids; under bigram keys, its bigrams as
	// pairs in a row (BlockStored).
	Tokens []int32
	// Bigram tells that Tokens holds pairs: the wire carries them as
	// [[a, b], ...], as SGLang's tuples.
	Bigram bool
}

// BlockSize is the event's block_size: the page's tokens, or its bigrams.
func (e *Event) BlockSize() int {
	if e.Bigram {
		return len(e.Tokens) / 2
	}
	return len(e.Tokens)
}

// Batch is SGLang's KVEventBatch: the events one publication point
// gathered.
type Batch struct {
	// TS is the wall time of the publication, in seconds since the epoch
	// (SGLang's time.time()).
	TS     float64
	Events []Event
	// DPRank is the data-parallel rank of the publishing scheduler
	// (attn_dp_rank), always 0 in the mock.
	DPRank int
}

// Encode appends the batch's msgpack payload to buf and returns it. The
// bytes are msgspec's for SGLang's structs (array_like, tag=True): the
// batch is [ts, [event...], dp_rank], ts a float64 and every integer in its
// shortest form; an event is
//
//	["BlockStored", [hash], parent_hash | nil, [token...], block_size, nil, "GPU"]
//	["BlockRemoved", [hash], "GPU"]
//	["AllBlocksCleared"]
//
// with the lora_id nil (the mock serves no adapter) and, under bigram
// keys, each token a [first, second] pair.
func (b *Batch) Encode(buf *bytes.Buffer) error {
	enc := msgpack.NewEncoder(buf)
	w := errWriter{enc: enc}
	w.arrayLen(3)
	w.err = firstErr(w.err, enc.EncodeFloat64(b.TS))
	w.arrayLen(len(b.Events))
	for i := range b.Events {
		w.event(&b.Events[i])
	}
	w.int(int64(b.DPRank))
	return w.err
}

type errWriter struct {
	enc *msgpack.Encoder
	err error
}

func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func (w *errWriter) arrayLen(n int) { w.err = firstErr(w.err, w.enc.EncodeArrayLen(n)) }
func (w *errWriter) int(v int64)    { w.err = firstErr(w.err, w.enc.EncodeInt(v)) }
func (w *errWriter) str(s string)   { w.err = firstErr(w.err, w.enc.EncodeString(s)) }
func (w *errWriter) null()          { w.err = firstErr(w.err, w.enc.EncodeNil()) }

func (w *errWriter) event(e *Event) {
	switch e.Kind {
	case BlockStored:
		w.arrayLen(7)
		w.str("BlockStored")
		w.arrayLen(1)
		w.int(e.Hash)
		if e.HasParent {
			w.int(e.Parent)
		} else {
			w.null()
		}
		if e.Bigram {
			w.arrayLen(len(e.Tokens) / 2)
			for i := 0; i+1 < len(e.Tokens); i += 2 {
				w.arrayLen(2)
				w.int(int64(e.Tokens[i]))
				w.int(int64(e.Tokens[i+1]))
			}
		} else {
			w.arrayLen(len(e.Tokens))
			for _, t := range e.Tokens {
				w.int(int64(t))
			}
		}
		w.int(int64(e.BlockSize()))
		w.null()
		w.str(Medium)
	case BlockRemoved:
		w.arrayLen(3)
		w.str("BlockRemoved")
		w.arrayLen(1)
		w.int(e.Hash)
		w.str(Medium)
	case AllBlocksCleared:
		w.arrayLen(1)
		w.str("AllBlocksCleared")
	default:
		w.err = firstErr(w.err, fmt.Errorf("kvevents: cannot encode %v", e.Kind))
	}
}

// ErrMalformed reports a payload that is not a KV event batch as this
// package encodes them.
var ErrMalformed = errors.New("kvevents: malformed payload")

// Decode reads a payload as a subscriber does, strictly: the exact array
// lengths, tags and types Encode writes, one hash per block event, and
// nothing after the batch.
func Decode(payload []byte) (Batch, error) {
	d := msgpack.NewDecoder(bytes.NewReader(payload))
	var b Batch
	if err := expectLen(d, 3, "batch"); err != nil {
		return b, err
	}
	ts, err := d.DecodeFloat64()
	if err != nil {
		return b, fmt.Errorf("%w: ts: %v", ErrMalformed, err)
	}
	b.TS = ts
	n, err := d.DecodeArrayLen()
	if err != nil || n < 0 {
		return b, fmt.Errorf("%w: events: %v", ErrMalformed, err)
	}
	b.Events = make([]Event, 0, min(n, len(payload)))
	for i := range n {
		e, err := decodeEvent(d)
		if err != nil {
			return b, fmt.Errorf("event %d: %w", i, err)
		}
		b.Events = append(b.Events, e)
	}
	rank, err := d.DecodeInt64()
	if err != nil {
		return b, fmt.Errorf("%w: dp rank: %v", ErrMalformed, err)
	}
	b.DPRank = int(rank)
	if _, err := d.PeekCode(); err == nil {
		return b, fmt.Errorf("%w: bytes after the batch", ErrMalformed)
	}
	return b, nil
}

func expectLen(d *msgpack.Decoder, want int, what string) error {
	n, err := d.DecodeArrayLen()
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrMalformed, what, err)
	}
	if n != want {
		return fmt.Errorf("%w: %s has %d fields, want %d", ErrMalformed, what, n, want)
	}
	return nil
}

func decodeEvent(d *msgpack.Decoder) (Event, error) {
	n, err := d.DecodeArrayLen()
	if err != nil || n < 1 {
		return Event{}, fmt.Errorf("%w: not a tagged array", ErrMalformed)
	}
	tag, err := d.DecodeString()
	if err != nil {
		return Event{}, fmt.Errorf("%w: tag: %v", ErrMalformed, err)
	}
	var e Event
	switch tag {
	case "BlockStored":
		e.Kind = BlockStored
		if n != 7 {
			return e, fmt.Errorf("%w: BlockStored has %d fields, want 7", ErrMalformed, n)
		}
		if e.Hash, err = oneHash(d); err != nil {
			return e, err
		}
		if code, _ := d.PeekCode(); code == msgpcode.Nil {
			err = d.DecodeNil()
		} else {
			e.Parent, err = d.DecodeInt64()
			e.HasParent = true
		}
		if err != nil {
			return e, fmt.Errorf("%w: parent_block_hash: %v", ErrMalformed, err)
		}
		if err := decodeTokens(d, &e); err != nil {
			return e, err
		}
		size, err := d.DecodeInt64()
		if err != nil || int(size) != e.BlockSize() {
			return e, fmt.Errorf("%w: block_size %d for %d tokens (%v)", ErrMalformed, size, e.BlockSize(), err)
		}
		if err := d.DecodeNil(); err != nil {
			return e, fmt.Errorf("%w: lora_id: %v", ErrMalformed, err)
		}
		if err := expectMedium(d); err != nil {
			return e, err
		}
	case "BlockRemoved":
		e.Kind = BlockRemoved
		if n != 3 {
			return e, fmt.Errorf("%w: BlockRemoved has %d fields, want 3", ErrMalformed, n)
		}
		if e.Hash, err = oneHash(d); err != nil {
			return e, err
		}
		if err := expectMedium(d); err != nil {
			return e, err
		}
	case "AllBlocksCleared":
		e.Kind = AllBlocksCleared
		if n != 1 {
			return e, fmt.Errorf("%w: AllBlocksCleared has %d fields, want 1", ErrMalformed, n)
		}
	default:
		return e, fmt.Errorf("%w: unknown tag %q", ErrMalformed, tag)
	}
	return e, nil
}

func oneHash(d *msgpack.Decoder) (int64, error) {
	if err := expectLen(d, 1, "block_hashes"); err != nil {
		return 0, err
	}
	h, err := d.DecodeInt64()
	if err != nil {
		return 0, fmt.Errorf("%w: block hash: %v", ErrMalformed, err)
	}
	return h, nil
}

func expectMedium(d *msgpack.Decoder) error {
	m, err := d.DecodeString()
	if err != nil || m != Medium {
		return fmt.Errorf("%w: medium %q, want %q (%v)", ErrMalformed, m, Medium, err)
	}
	return nil
}

// decodeTokens reads token_ids: ints, or [first, second] pairs.
func decodeTokens(d *msgpack.Decoder, e *Event) error {
	n, err := d.DecodeArrayLen()
	if err != nil || n < 0 {
		return fmt.Errorf("%w: token_ids: %v", ErrMalformed, err)
	}
	for i := range n {
		code, err := d.PeekCode()
		if err != nil {
			return fmt.Errorf("%w: token_ids[%d]: %v", ErrMalformed, i, err)
		}
		pair := msgpcode.IsFixedArray(code) || code == msgpcode.Array16 || code == msgpcode.Array32
		if i == 0 {
			e.Bigram = pair
		} else if pair != e.Bigram {
			return fmt.Errorf("%w: token_ids mixes tokens and pairs", ErrMalformed)
		}
		width := 1
		if pair {
			if err := expectLen(d, 2, "bigram"); err != nil {
				return err
			}
			width = 2
		}
		for range width {
			t, err := d.DecodeInt64()
			if err != nil || t < 0 || t > 1<<31-1 {
				return fmt.Errorf("%w: token_ids[%d]: %d (%v)", ErrMalformed, i, t, err)
			}
			e.Tokens = append(e.Tokens, int32(t))
		}
	}
	return nil
}

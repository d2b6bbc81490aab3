package kvevents

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"github.com/sglmock/sglmock/radixcache"
)

// Kind is an event's type, its tag on the wire.
type Kind uint8

// The events SGLang's radix cache records.
const (
	BlockStored Kind = iota + 1
	BlockRemoved
	AllBlocksCleared
)

// The storage media SGLang names in block events (StorageMedium): the
// device's KV pool, and HiCache's host pool. A storage write sends no event
// (HiRadixCache records none for its storage tier).
const (
	MediumGPU = "GPU"
	MediumCPU = "CPU_PINNED"
)

// media are the StorageMedium values SGLang defines, which a decoder
// accepts: DISK and EXTERNAL too, which HiRadixCache never sends.
var media = []string{MediumGPU, MediumCPU, "DISK", "EXTERNAL"}

// mediumOf is Event.Medium for a tree medium: empty for the device.
func mediumOf(m radixcache.Medium) string {
	if m == radixcache.Host {
		return MediumCPU
	}
	return ""
}

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

// Event is one KV event: pages stored or removed, or every page cleared.
// SGLang coalesces (PR #31479, KVCacheEventRecorder.enqueue): a store whose
// first page hangs from the last page of the store just before it, with
// the same block size, extends that event, and removals in a row are one
// event; so one event carries a run of pages.
type Event struct {
	Kind Kind
	// Hashes are the pages' block hashes, in path order (BlockStored,
	// BlockRemoved).
	Hashes []int64
	// Parent is the block hash of the page the first one hangs from,
	// absent (HasParent false) at the root (BlockStored).
	Parent    int64
	HasParent bool
	// Tokens are the pages' token ids, page after page; under bigram keys,
	// their bigrams as pairs in a row (BlockStored).
	Tokens []int32
	// BlockSize is the tokens, or bigrams, of each page (BlockStored).
	BlockSize int
	// Bigram tells that Tokens holds pairs: the wire carries them as
	// [[a, b], ...], as SGLang's tuples.
	Bigram bool
	// Medium is where the pages were stored or removed, empty for the
	// device (MediumGPU on the wire): MediumCPU for HiCache's host pool
	// (BlockStored, BlockRemoved).
	Medium string
}

// medium is e's medium on the wire.
func (e *Event) medium() string {
	if e.Medium == "" {
		return MediumGPU
	}
	return e.Medium
}

// unit is the number of ids a page's token (or bigram) takes in Tokens.
func (e *Event) unit() int {
	if e.Bigram {
		return 2
	}
	return 1
}

// Pages splits a BlockStored or BlockRemoved event into its pages, as the
// radix cache announced them (Tokens empty for a removal).
func (e *Event) Pages() []radixcache.Page {
	pages := make([]radixcache.Page, len(e.Hashes))
	per := e.BlockSize * e.unit()
	for i, h := range e.Hashes {
		pages[i] = radixcache.Page{Hash: h, Bigram: e.Bigram}
		if e.Kind == BlockStored {
			pages[i].Tokens = e.Tokens[i*per : (i+1)*per : (i+1)*per]
		}
	}
	return pages
}

// Batch is SGLang's KVEventBatch: the events one publication point
// gathered.
type Batch struct {
	// TS is the wall time of the publication, in seconds since the epoch
	// (SGLang's time.time()).
	TS     float64
	Events []Event
	// DPRank is the data-parallel rank of the publishing scheduler
	// (attn_dp_rank: its DP rank under DP attention, else 0; see
	// Config.ForRank).
	DPRank int
}

// Encode appends the batch's msgpack payload to buf and returns it. The
// bytes are msgspec's for SGLang's structs (array_like, tag=True): the
// batch is [ts, [event...], dp_rank], ts a float64 and every integer in its
// shortest form; an event is
//
//	["BlockStored", [hash...], parent_hash | nil, [token...], block_size, nil, "GPU"]
//	["BlockRemoved", [hash...], "GPU"]
//	["AllBlocksCleared"]
//
// with the lora_id nil (the mock serves no adapter) and, under bigram
// keys, each token a [first, second] pair.
func (b *Batch) Encode(buf *bytes.Buffer) error {
	out, err := b.Append(buf.AvailableBuffer())
	buf.Write(out)
	return err
}

// Append appends the batch's msgpack payload (see Encode) to dst. It
// writes the bytes itself: the publisher encodes every event, and a
// general-purpose encoder's interface calls per value cost it a third of
// its time.
func (b *Batch) Append(dst []byte) ([]byte, error) {
	dst = appendArrayLen(dst, 3)
	dst = append(dst, msgpcode.Double)
	dst = binary.BigEndian.AppendUint64(dst, math.Float64bits(b.TS))
	dst = appendArrayLen(dst, len(b.Events))
	for i := range b.Events {
		e := &b.Events[i]
		switch e.Kind {
		case BlockStored:
			dst = appendArrayLen(dst, 7)
			dst = appendStr(dst, "BlockStored")
			dst = appendHashes(dst, e.Hashes)
			if e.HasParent {
				dst = appendInt(dst, e.Parent)
			} else {
				dst = append(dst, msgpcode.Nil)
			}
			if e.Bigram {
				dst = appendArrayLen(dst, len(e.Tokens)/2)
				for i := 0; i+1 < len(e.Tokens); i += 2 {
					dst = appendArrayLen(dst, 2)
					dst = appendInt(dst, int64(e.Tokens[i]))
					dst = appendInt(dst, int64(e.Tokens[i+1]))
				}
			} else {
				dst = appendArrayLen(dst, len(e.Tokens))
				for _, t := range e.Tokens {
					dst = appendInt(dst, int64(t))
				}
			}
			dst = appendInt(dst, int64(e.BlockSize))
			dst = append(dst, msgpcode.Nil)
			dst = appendStr(dst, e.medium())
		case BlockRemoved:
			dst = appendArrayLen(dst, 3)
			dst = appendStr(dst, "BlockRemoved")
			dst = appendHashes(dst, e.Hashes)
			dst = appendStr(dst, e.medium())
		case AllBlocksCleared:
			dst = appendArrayLen(dst, 1)
			dst = appendStr(dst, "AllBlocksCleared")
		default:
			return dst, fmt.Errorf("kvevents: cannot encode %v", e.Kind)
		}
	}
	return appendInt(dst, int64(b.DPRank)), nil
}

func appendHashes(dst []byte, hashes []int64) []byte {
	dst = appendArrayLen(dst, len(hashes))
	for _, h := range hashes {
		dst = appendInt(dst, h)
	}
	return dst
}

func appendArrayLen(dst []byte, n int) []byte {
	switch {
	case n < 16:
		return append(dst, msgpcode.FixedArrayLow|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(dst, msgpcode.Array16), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(dst, msgpcode.Array32), uint32(n))
}

// appendStr writes the short strings of the format (fixstr, under 32
// bytes).
func appendStr(dst []byte, s string) []byte {
	return append(append(dst, msgpcode.FixedStrLow|byte(len(s))), s...)
}

// appendInt writes v in its shortest form: a non-negative value as a
// positive fixint or uint8/16/32/64, a negative one as a negative fixint or
// int8/16/32/64, as msgspec and msgpack-python write Python ints.
func appendInt(dst []byte, v int64) []byte {
	if v >= 0 {
		u := uint64(v)
		switch {
		case u <= math.MaxInt8:
			return append(dst, byte(u))
		case u <= math.MaxUint8:
			return append(dst, msgpcode.Uint8, byte(u))
		case u <= math.MaxUint16:
			return binary.BigEndian.AppendUint16(append(dst, msgpcode.Uint16), uint16(u))
		case u <= math.MaxUint32:
			return binary.BigEndian.AppendUint32(append(dst, msgpcode.Uint32), uint32(u))
		}
		return binary.BigEndian.AppendUint64(append(dst, msgpcode.Uint64), u)
	}
	switch {
	case v >= -32:
		return append(dst, byte(v))
	case v >= math.MinInt8:
		return append(dst, msgpcode.Int8, byte(v))
	case v >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(dst, msgpcode.Int16), uint16(v))
	case v >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(dst, msgpcode.Int32), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(dst, msgpcode.Int64), uint64(v))
}

// ErrMalformed reports a payload that is not a KV event batch as this
// package encodes them.
var ErrMalformed = errors.New("kvevents: malformed payload")

// Decode reads a payload as a subscriber does, strictly: the exact array
// lengths, tags and types Encode writes, at least one hash per block event
// (a store's tokens filling its pages exactly), and nothing after the
// batch.
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
		if e.Hashes, err = decodeHashes(d); err != nil {
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
		if err != nil || size < 1 || int64(len(e.Tokens)) != size*int64(len(e.Hashes)*e.unit()) {
			return e, fmt.Errorf("%w: block_size %d for %d pages of %d ids (%v)", ErrMalformed, size, len(e.Hashes), len(e.Tokens), err)
		}
		e.BlockSize = int(size)
		if err := d.DecodeNil(); err != nil {
			return e, fmt.Errorf("%w: lora_id: %v", ErrMalformed, err)
		}
		if e.Medium, err = decodeMedium(d); err != nil {
			return e, err
		}
	case "BlockRemoved":
		e.Kind = BlockRemoved
		if n != 3 {
			return e, fmt.Errorf("%w: BlockRemoved has %d fields, want 3", ErrMalformed, n)
		}
		if e.Hashes, err = decodeHashes(d); err != nil {
			return e, err
		}
		if e.Medium, err = decodeMedium(d); err != nil {
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

// decodeHashes reads block_hashes: one or more block hashes.
func decodeHashes(d *msgpack.Decoder) ([]int64, error) {
	n, err := d.DecodeArrayLen()
	if err != nil || n < 1 {
		return nil, fmt.Errorf("%w: block_hashes: %d hashes (%v)", ErrMalformed, n, err)
	}
	var hashes []int64 // grown as hashes are read: a length alone reserves nothing
	for range n {
		h, err := d.DecodeInt64()
		if err != nil {
			return nil, fmt.Errorf("%w: block hash: %v", ErrMalformed, err)
		}
		hashes = append(hashes, h)
	}
	return hashes, nil
}

func decodeMedium(d *msgpack.Decoder) (string, error) {
	m, err := d.DecodeString()
	if err != nil || !slices.Contains(media, m) {
		return "", fmt.Errorf("%w: medium %q, want one of %v (%v)", ErrMalformed, clipStr(m), media, err)
	}
	if m == MediumGPU {
		return "", nil
	}
	return m, nil
}

// clipStr keeps an error's echo of a value short.
func clipStr(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
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

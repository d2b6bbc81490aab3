package kvevents

import (
	"bytes"
	"encoding/hex"
	"errors"
	"reflect"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglmock/sglmock/compat"
	"github.com/sglmock/sglmock/mockserver/mocktest"
	"github.com/sglmock/sglmock/radixcache"
)

func sampleBatch() Batch {
	return Batch{TS: 1700000000.25, Events: []Event{
		{Kind: AllBlocksCleared},
		{Kind: BlockStored, Hashes: []int64{3817746824117602890, -4216701448867210342}, Tokens: []int32{1, 2, 300, 70000}, BlockSize: 2},
		{Kind: BlockStored, Hashes: []int64{1267363100005438100}, Parent: 3817746824117602890, HasParent: true,
			Tokens: []int32{7, 100, 100, 101}, BlockSize: 2, Bigram: true},
		{Kind: BlockRemoved, Hashes: []int64{-4216701448867210342, 3817746824117602890}},
	}}
}

// The payload's bytes, pinned. Each integer takes its shortest msgpack
// form (msgspec's and msgpack-python's): a positive hash is a uint64
// (cf), a negative one an int64 (d3), 300 a uint16 (cd), 70000 a uint32
// (ce); ts is a float64 (cb); the tags and "GPU" are fixstr (a0|len). The
// independent check that these are the canonical bytes is
// TestPythonDecodesEvents, where msgpack-python re-encodes them.
func TestEncodeGolden(t *testing.T) {
	var buf bytes.Buffer
	b := sampleBatch()
	if err := b.Encode(&buf); err != nil {
		t.Fatal(err)
	}
	mocktest.Golden(t, "batch.hex", []byte(hex.Dump(buf.Bytes())))
	got, err := Decode(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, b) {
		t.Errorf("Decode(Encode(b)):\n got %+v\nwant %+v", got, b)
	}
}

func TestDecodeRefuses(t *testing.T) {
	var buf bytes.Buffer
	b := sampleBatch()
	if err := b.Encode(&buf); err != nil {
		t.Fatal(err)
	}
	good := buf.Bytes()
	mutate := func(f func([]byte) []byte) []byte { return f(bytes.Clone(good)) }
	for _, tt := range []struct {
		name    string
		payload []byte
	}{
		{"empty", nil},
		{"a batch of 2 fields", mutate(func(p []byte) []byte { p[0] = 0x92; return p })},
		{"a trailing byte", append(bytes.Clone(good), 0xc0)},
		{"cut short", good[:len(good)-3]},
		{"an unknown tag", bytes.Replace(good, []byte("BlockRemoved"), []byte("BlockRemovex"), 1)},
		{"another medium", bytes.Replace(good, []byte("GPU"), []byte("CPU"), 1)},
		{"a block size that does not fill the pages", bytes.Replace(good, []byte{0xcd, 0x01, 0x2c, 0xce, 0x00, 0x01, 0x11, 0x70, 0x02}, []byte{0xcd, 0x01, 0x2c, 0xce, 0x00, 0x01, 0x11, 0x70, 0x03}, 1)},
	} {
		if _, err := Decode(tt.payload); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %v, want ErrMalformed", tt.name, err)
		}
	}
	// A block event names at least one block.
	empty := Batch{Events: []Event{{Kind: BlockRemoved}}}
	var e bytes.Buffer
	if err := empty.Encode(&e); err != nil {
		t.Fatal(err)
	}
	if _, err := Decode(e.Bytes()); !errors.Is(err, ErrMalformed) {
		t.Errorf("a removal of no block: got %v, want ErrMalformed", err)
	}
}

// The publisher coalesces as SGLang's KVCacheEventRecorder.enqueue (PR
// #31479): a node's pages are one event; a store that hangs from the last
// page of the store just gathered, with pages of the same size, extends it;
// removals in a row are one event; anything else starts a new event.
// Before it (0.5.17) a removed node's pages are one event (PR #29265), and
// before that (0.5.12) every page is an event of its own.
func TestPublisherCoalesces(t *testing.T) {
	stored := func(parent int64, hashes []int64, tokens []int32, size int) Event {
		return Event{Kind: BlockStored, Hashes: hashes, Parent: parent, HasParent: parent != 0, Tokens: tokens, BlockSize: size}
	}
	removed := func(hashes ...int64) Event { return Event{Kind: BlockRemoved, Hashes: hashes} }
	perPageStores := []Event{
		{Kind: AllBlocksCleared},
		stored(0, []int64{1}, []int32{10, 11}, 2),
		stored(1, []int64{2}, []int32{12, 13}, 2),
		stored(2, []int64{3}, []int32{14, 15}, 2),
		stored(1, []int64{4}, []int32{20, 21}, 2),
		stored(4, []int64{5}, []int32{22}, 1),
	}
	for _, tc := range []struct {
		release string
		want    []Event
	}{
		{"0.5.18", []Event{
			{Kind: AllBlocksCleared},
			stored(0, []int64{1, 2, 3}, []int32{10, 11, 12, 13, 14, 15}, 2),
			stored(1, []int64{4}, []int32{20, 21}, 2),
			stored(4, []int64{5}, []int32{22}, 1),
			removed(5, 3, 2),
			stored(0, []int64{6}, []int32{30, 31}, 2),
			removed(6),
		}},
		{"0.5.17", append(slices.Clone(perPageStores),
			removed(5), removed(3, 2), stored(0, []int64{6}, []int32{30, 31}, 2), removed(6))},
		{"0.5.12", append(slices.Clone(perPageStores),
			removed(5), removed(3), removed(2), stored(0, []int64{6}, []int32{30, 31}, 2), removed(6))},
	} {
		t.Run(tc.release, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rules, err := compat.For(tc.release)
				if err != nil {
					t.Fatal(err)
				}
				out := &captureTransport{}
				p := NewPublisher(Config{MaxQueueSize: 4}, "t", rules, out, nil)
				page := func(h int64, tokens ...int32) radixcache.Page { return radixcache.Page{Hash: h, Tokens: tokens} }
				p.Cleared()
				p.Stored(0, false, []radixcache.Page{page(1, 10, 11), page(2, 12, 13)}) // a node of two pages
				p.Stored(2, true, []radixcache.Page{page(3, 14, 15)})                   // hangs from 2: extends
				p.Stored(1, true, []radixcache.Page{page(4, 20, 21)})                   // hangs from 1: a new event
				p.Stored(4, true, []radixcache.Page{page(5, 22)})                       // another block size: a new event
				p.Removed([]radixcache.Page{{Hash: 5}})
				p.Removed([]radixcache.Page{{Hash: 3}, {Hash: 2}}) // removals in a row: one event
				p.Stored(0, false, []radixcache.Page{page(6, 30, 31)})
				p.Removed([]radixcache.Page{{Hash: 6}})
				p.Publish(time.Unix(1, 0))
				p.Close()
				msgs := out.take()
				if len(msgs) != 1 {
					t.Fatalf("%d messages, want one batch", len(msgs))
				}
				b, err := Decode(msgs[0].Payload)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(b.Events, tc.want) {
					t.Errorf("events:\n got %+v\nwant %+v", b.Events, tc.want)
				}
				if st := p.Stats(); st.Events != 1+6+4 {
					t.Errorf("changes gathered: %d, want 11 (a clear, six pages stored, four removed)", st.Events)
				}
			})
		})
	}
}

// A coalesced store owns its tokens: a page's tokens may be a view of the
// radix tree's key, which extending the event must never write into.
func TestCoalescingCopiesTokens(t *testing.T) {
	key := []int32{1, 2, 3, 4, 99, 99}
	out := &captureTransport{}
	p := NewPublisher(Config{MaxQueueSize: 4}, "t", compat.Rules{CoalesceKVEvents: true}, out, nil)
	p.Stored(0, false, []radixcache.Page{{Hash: 1, Tokens: key[0:2]}})
	p.Stored(1, true, []radixcache.Page{{Hash: 2, Tokens: []int32{7, 8}}})
	p.Publish(time.Unix(1, 0))
	p.Close()
	if !slices.Equal(key, []int32{1, 2, 3, 4, 99, 99}) {
		t.Fatalf("the tree's key was written into: %v", key)
	}
}

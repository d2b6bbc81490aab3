package kvevents

import (
	"bytes"
	"encoding/hex"
	"errors"
	"reflect"
	"testing"

	"github.com/sglmock/sglmock/mockserver/mocktest"
)

func sampleBatch() Batch {
	return Batch{TS: 1700000000.25, Events: []Event{
		{Kind: AllBlocksCleared},
		{Kind: BlockStored, Hash: 3817746824117602890, Tokens: []int32{1, 2}},
		{Kind: BlockStored, Hash: -4216701448867210342, Parent: 3817746824117602890, HasParent: true, Tokens: []int32{300, 70000}},
		{Kind: BlockStored, Hash: 1267363100005438100, Tokens: []int32{7, 100, 100, 101}, Bigram: true},
		{Kind: BlockRemoved, Hash: -4216701448867210342},
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
	} {
		if _, err := Decode(tt.payload); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %v, want ErrMalformed", tt.name, err)
		}
	}
}

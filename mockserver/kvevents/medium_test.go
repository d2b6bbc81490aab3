package kvevents

import (
	"bytes"
	"github.com/sglmock/sglmock/compat"
	"reflect"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglmock/sglmock/radixcache"
)

// A tree with a host tier reports HiCache's media, as HiRadixCache records
// them: a node stored on the device, its host copy once written
// (CPU_PINNED), its eviction from the device (GPU), its eviction from the
// host (CPU_PINNED); a run coalesces on one medium only.
func TestHostMedium(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		out := &captureTransport{}
		rules, err := compat.For(compat.Default)
		if err != nil {
			t.Fatal(err)
		}
		p := NewPublisher(Config{MaxQueueSize: 4}, "t", rules, out, nil)
		tr, err := radixcache.New[string](2)
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.EnableHost(radixcache.HostTier{Capacity: 100, WriteThreshold: 1}); err != nil {
			t.Fatal(err)
		}
		if err := tr.Observe(p); err != nil {
			t.Fatal(err)
		}
		tr.Insert("", []int32{1, 2, 3, 4}, "a")
		for _, w := range tr.TakeHostWrites() {
			if err := tr.HostWriteDone(w.Node); err != nil {
				t.Fatal(err)
			}
		}
		tr.Evict(4)
		tr.EvictHost(4)
		p.Publish(time.Unix(1, 0))
		p.Close()
		msgs := out.take()
		if len(msgs) != 1 {
			t.Fatalf("%d messages, want one batch", len(msgs))
		}
		if !bytes.Contains(msgs[0].Payload, []byte(MediumCPU)) {
			t.Fatalf("the batch does not name %s", MediumCPU)
		}
		b, err := Decode(msgs[0].Payload)
		if err != nil {
			t.Fatal(err)
		}
		var hashes []int64
		for _, pg := range b.Events[1].Pages() {
			hashes = append(hashes, pg.Hash)
		}
		want := []Event{
			{Kind: AllBlocksCleared},
			{Kind: BlockStored, Hashes: hashes, Tokens: []int32{1, 2, 3, 4}, BlockSize: 2},
			{Kind: BlockStored, Hashes: hashes, Tokens: []int32{1, 2, 3, 4}, BlockSize: 2, Medium: MediumCPU},
			{Kind: BlockRemoved, Hashes: hashes},
			{Kind: BlockRemoved, Hashes: hashes, Medium: MediumCPU},
		}
		if !reflect.DeepEqual(b.Events, want) {
			t.Errorf("events:\n got %+v\nwant %+v", b.Events, want)
		}
	})
}

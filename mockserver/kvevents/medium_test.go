package kvevents

import (
	"bytes"
	"reflect"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglmock/sglmock/compat"
	"github.com/sglmock/sglmock/radixcache"
)

// A tree with a host tier reports HiCache's media, as HiRadixCache records
// them: a node stored on the device, its host copy once written
// (CPU_PINNED), its eviction from the device (GPU), its eviction from the
// host (CPU_PINNED); a run coalesces on one medium only. A release before
// the coalescing rule sends each medium's events as it sends the device's:
// 0.5.17 one BlockStored a page and one BlockRemoved a node, 0.5.12 and
// 0.5.11 one event a page, each page's store hanging from the page before
// it. A release before the host-kv-events rule (0.5.10.post1, 0.5.10)
// names no host medium: the node is stored on the GPU, its write-through
// and device eviction send nothing, and the host eviction removes it from
// the GPU, one event a page.
func TestHostMedium(t *testing.T) {
	for _, release := range []string{compat.Default, "0.5.17", "0.5.12", "0.5.11", "0.5.10.post1", "0.5.10"} {
		synctest.Test(t, func(t *testing.T) {
			out := &captureTransport{}
			rules, err := compat.For(release)
			if err != nil {
				t.Fatal(err)
			}
			p := NewPublisher(Config{MaxQueueSize: 4}, "t", rules, out, nil)
			tr, err := radixcache.New[string](2)
			if err != nil {
				t.Fatal(err)
			}
			if err := tr.EnableHost(radixcache.HostTier{Capacity: 100, WriteThreshold: 1, UntieredEvents: !rules.HostKVEvents}); err != nil {
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
				t.Fatalf("%s: %d messages, want one batch", release, len(msgs))
			}
			if got := bytes.Contains(msgs[0].Payload, []byte(MediumCPU)); got != rules.HostKVEvents {
				t.Fatalf("%s: the batch names %s: %v, want %v", release, MediumCPU, got, rules.HostKVEvents)
			}
			b, err := Decode(msgs[0].Payload)
			if err != nil {
				t.Fatal(err)
			}
			var hashes []int64
			for _, e := range b.Events[1:] {
				if e.Kind == BlockStored && e.Medium == "" {
					for _, pg := range e.Pages() {
						hashes = append(hashes, pg.Hash)
					}
				}
			}
			if len(hashes) != 2 {
				t.Fatalf("%s: the device stores hold %d pages, want 2: %+v", release, len(hashes), b.Events)
			}
			h1, h2 := hashes[0], hashes[1]
			stored := func(medium string) []Event {
				if rules.CoalesceKVEvents {
					return []Event{{Kind: BlockStored, Hashes: []int64{h1, h2}, Tokens: []int32{1, 2, 3, 4}, BlockSize: 2, Medium: medium}}
				}
				return []Event{
					{Kind: BlockStored, Hashes: []int64{h1}, Tokens: []int32{1, 2}, BlockSize: 2, Medium: medium},
					{Kind: BlockStored, Hashes: []int64{h2}, Parent: h1, HasParent: true, Tokens: []int32{3, 4}, BlockSize: 2, Medium: medium},
				}
			}
			removed := func(medium string) []Event {
				if rules.BatchRemovedPages {
					return []Event{{Kind: BlockRemoved, Hashes: []int64{h1, h2}, Medium: medium}}
				}
				return []Event{{Kind: BlockRemoved, Hashes: []int64{h1}, Medium: medium}, {Kind: BlockRemoved, Hashes: []int64{h2}, Medium: medium}}
			}
			want := []Event{{Kind: AllBlocksCleared}}
			if rules.HostKVEvents {
				want = append(append(append(append(want, stored("")...), stored(MediumCPU)...), removed("")...), removed(MediumCPU)...)
			} else {
				want = append(append(want, stored("")...), removed("")...)
			}
			if !reflect.DeepEqual(b.Events, want) {
				t.Errorf("%s: events:\n got %+v\nwant %+v", release, b.Events, want)
			}
		})
	}
}

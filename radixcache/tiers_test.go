package radixcache

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func tiered(t *testing.T, page int, h HostTier) *Tree[string] {
	t.Helper()
	tr := mustNew(t, page)
	if err := tr.EnableHost(h); err != nil {
		t.Fatal(err)
	}
	return tr
}

// doneWrites completes every write-through the tree started and returns
// the tokens of each, in order.
func doneWrites(t *testing.T, tr *Tree[string]) []int {
	t.Helper()
	var sizes []int
	for _, w := range tr.TakeHostWrites() {
		sizes = append(sizes, w.Tokens)
		if !w.WriteBack {
			if err := tr.HostWriteDone(w.Node); err != nil {
				t.Fatal(err)
			}
		}
	}
	return sizes
}

// write_through (threshold 1) backs a node up on its first insertion;
// write_through_selective (2) on its second; write_back (0) never on
// insertion. The hit counts of SGLang's _inc_hit_count.
func TestWritePolicies(t *testing.T) {
	for _, tc := range []struct {
		name      string
		threshold int
		first     []int // writes after inserting the prompt
		second    []int // after inserting prompt + output
	}{
		{"write_through", 1, []int{10}, []int{5}},
		{"write_through_selective", 2, nil, []int{10}},
		{"write_back", 0, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := tiered(t, 1, HostTier{Capacity: 100, WriteThreshold: tc.threshold})
			tr.Insert("", seq(1, 10), "a")
			if got := doneWrites(t, tr); !slices.Equal(got, tc.first) {
				t.Errorf("after the prompt: writes %v, want %v", got, tc.first)
			}
			tr.Insert("", seq(1, 15), "a")
			if got := doneWrites(t, tr); !slices.Equal(got, tc.second) {
				t.Errorf("after prompt and output: writes %v, want %v", got, tc.second)
			}
			checkInvariants(t, tr)
		})
	}
}

// A chunk that is not the prompt's last counts no hit (SGLang's
// chunked=True): nothing is backed up until the last chunk's insertion.
func TestInsertChunkCountsNoHit(t *testing.T) {
	tr := tiered(t, 1, HostTier{Capacity: 100, WriteThreshold: 1})
	tr.InsertChunk("", seq(1, 8), "a")
	if w := tr.TakeHostWrites(); len(w) != 0 {
		t.Fatalf("chunk: got %d writes, want 0", len(w))
	}
	tr.Insert("", seq(1, 12), "a")
	if got := doneWrites(t, tr); !slices.Equal(got, []int{8, 4}) {
		t.Fatalf("last chunk: writes %v, want [8 4] (the chunk's node, then the new leaf)", got)
	}
}

// A write-through locks its node until it is done: the device cannot evict
// it meanwhile. Once done, eviction keeps it in the tree on the host, and a
// match then finds it past the device part.
func TestEvictBackedUpNodeStaysOnHost(t *testing.T) {
	tr := tiered(t, 1, HostTier{Capacity: 100, WriteThreshold: 1})
	tr.Insert("", seq(1, 10), "a")
	if got := tr.Evict(10); got != 0 {
		t.Fatalf("evict during the write: freed %d, want 0 (the write holds a lock)", got)
	}
	doneWrites(t, tr)
	if got := tr.Evict(10); got != 10 {
		t.Fatalf("evict: freed %d, want 10", got)
	}
	wantStats(t, tr, Stats{Nodes: 1, HostTokens: 10, HostOnly: 10})
	if n, _ := tr.Match("", seq(1, 10)); n != 0 {
		t.Fatalf("Match: got %d on the device, want 0", n)
	}
	m := tr.MatchTiers("", seq(1, 12))
	if m.Device != 0 || m.Host != 10 || m.End.PrefixLen() != 10 || m.Backed != m.End || !m.DeviceNode.IsRoot() {
		t.Fatalf("MatchTiers: got device %d host %d end %d", m.Device, m.Host, m.End.PrefixLen())
	}
	if err := tr.Lock(m.End); !errors.Is(err, ErrNotOnDevice) {
		t.Fatalf("Lock of a host-only node: got %v, want ErrNotOnDevice", err)
	}
	if n, err := tr.LoadBack(m.End); n != 10 || err != nil {
		t.Fatalf("LoadBack: got %d, %v; want 10", n, err)
	}
	wantStats(t, tr, Stats{Tokens: 10, Evictable: 10, Nodes: 1, HostTokens: 10})
}

// Without a host copy a device leaf is deleted (write_through_selective's
// cold nodes); under write_back it is written to the host first, and kept
// on the device when the host pool has no room.
func TestEvictWithoutHostCopy(t *testing.T) {
	tr := tiered(t, 1, HostTier{Capacity: 100, WriteThreshold: 2})
	tr.Insert("", seq(1, 10), "a")
	if got := tr.Evict(10); got != 10 {
		t.Fatalf("selective: freed %d, want 10", got)
	}
	wantStats(t, tr, Stats{})

	// write_back: a pool of 5 takes neither 10-token leaf, which stay.
	tr = tiered(t, 1, HostTier{Capacity: 5, WriteThreshold: 0})
	tr.Insert("", seq(1, 10), "a")
	tr.Insert("", seq(21, 30), "b")
	if got := tr.Evict(20); got != 0 {
		t.Fatalf("write_back without room: freed %d, want 0", got)
	}
	wantStats(t, tr, Stats{Tokens: 20, Evictable: 20, Nodes: 2})

	// A pool of 12 takes a, then evicts it from the host to take b.
	tr = tiered(t, 1, HostTier{Capacity: 12, WriteThreshold: 0})
	tr.Insert("", seq(1, 10), "a")
	tr.Insert("", seq(21, 30), "b")
	if got := tr.Evict(20); got != 20 {
		t.Fatalf("write_back with room for one: freed %d, want 20", got)
	}
	var written []string
	for _, w := range tr.TakeHostWrites() {
		if !w.WriteBack || w.Tokens != 10 {
			t.Fatalf("write_back: got write %+v, want 10 tokens written back", w)
		}
		written = append(written, w.Node.Value())
	}
	if !slices.Equal(written, []string{"a", "b"}) {
		t.Fatalf("written back: %v, want [a b]", written)
	}
	wantStats(t, tr, Stats{Nodes: 1, HostTokens: 10, HostOnly: 10})
	if m := tr.MatchTiers("", seq(21, 30)); m.Host != 10 {
		t.Fatalf("b on the host: got %d, want 10", m.Host)
	}
}

// The host pool evicts host-only leaves, least recently used first, to
// make room for a backup; a protected one stays.
func TestHostEvictionLRU(t *testing.T) {
	tr := tiered(t, 1, HostTier{Capacity: 20, WriteThreshold: 1})
	for i, v := range []string{"a", "b"} {
		tr.Insert("", seq(int32(10*i+1), int32(10*i+10)), v)
	}
	doneWrites(t, tr)
	tr.Evict(20)
	tr.Match("", seq(1, 10)) // a is now the more recently used
	tr.Insert("", seq(41, 45), "c")
	ws := tr.TakeHostWrites()
	if len(ws) != 1 {
		t.Fatalf("got %d writes, want c's", len(ws))
	}
	if m := tr.MatchTiers("", seq(11, 20)); m.Host != 0 {
		t.Fatalf("b: still on the host (%d tokens), want evicted as least recently used", m.Host)
	}
	if m := tr.MatchTiers("", seq(1, 10)); m.Host != 10 {
		t.Fatalf("a: got %d on the host, want 10", m.Host)
	}
	// A protected host copy is not evicted.
	a := tr.MatchTiers("", seq(1, 10)).End
	if err := tr.ProtectHost(a); err != nil {
		t.Fatal(err)
	}
	if got := tr.EvictHost(10); got != 0 {
		t.Fatalf("EvictHost with a protected: freed %d, want 0", got)
	}
	if err := tr.ReleaseHost(a); err != nil {
		t.Fatal(err)
	}
	if got := tr.EvictHost(10); got != 10 {
		t.Fatalf("EvictHost after release: freed %d, want 10", got)
	}
	checkInvariants(t, tr)
}

// A write-through needs its parent backed up first: when the host pool
// could not take the parent, the child is not backed up either.
func TestWriteThroughNeedsParentBackedUp(t *testing.T) {
	tr := tiered(t, 1, HostTier{Capacity: 5, WriteThreshold: 1})
	tr.Insert("", seq(1, 10), "a")
	if ws := tr.TakeHostWrites(); len(ws) != 0 {
		t.Fatalf("10 tokens in a 5-token pool: got %d writes", len(ws))
	}
	tr.Insert("", seq(1, 12), "a")
	if ws := tr.TakeHostWrites(); len(ws) != 0 {
		t.Fatalf("a 2-token child of a node not backed up: got %d writes, want 0", len(ws))
	}
}

// A prefetch's fetched pages go in as a host-only leaf after the node it
// started from, in slots taken from its reservation; what the tree had
// already is only counted.
func TestInsertHost(t *testing.T) {
	tr := tiered(t, 2, HostTier{Capacity: 40, WriteThreshold: 1})
	tr.Insert("", seq(1, 4), "a")
	doneWrites(t, tr)
	m := tr.MatchTiers("", seq(1, 20))
	if !tr.HostReserve(16) {
		t.Fatal("HostReserve(16) refused")
	}
	matched, inserted, err := tr.InsertHost(m.Backed, "", seq(1, 20), m.Device, "storage")
	if err != nil || matched != 0 || inserted != 16 {
		t.Fatalf("InsertHost: got %d matched, %d inserted, %v; want 0, 16", matched, inserted, err)
	}
	wantStats(t, tr, Stats{Tokens: 4, Evictable: 4, Nodes: 2, HostTokens: 20, HostOnly: 16})
	got := tr.MatchTiers("", seq(1, 21))
	if got.Device != 4 || got.Host != 16 || got.End.Value() != "storage" {
		t.Fatalf("MatchTiers: device %d host %d value %q", got.Device, got.Host, got.End.Value())
	}
}

// tierRecorder logs an observer's calls with their media.
type tierRecorder struct{ log []string }

func (r *tierRecorder) Stored(parent int64, hasParent bool, pages []Page) {
	r.StoredOn(Device, parent, hasParent, pages)
}
func (r *tierRecorder) Removed(pages []Page) { r.RemovedFrom(Device, pages) }
func (r *tierRecorder) Cleared()             { r.log = append(r.log, "cleared") }
func (r *tierRecorder) StoredOn(m Medium, _ int64, _ bool, pages []Page) {
	r.log = append(r.log, fmt.Sprintf("stored %s %d", m, len(pages)))
}
func (r *tierRecorder) RemovedFrom(m Medium, pages []Page) {
	r.log = append(r.log, fmt.Sprintf("removed %s %d", m, len(pages)))
}

// loadBackAndEvict loads tokens 1 to 10 back to the device, then evicts
// them from the device and from the host.
func loadBackAndEvict(t *testing.T, tr *Tree[string]) {
	t.Helper()
	if _, err := tr.LoadBack(tr.MatchTiers("", seq(1, 10)).End); err != nil {
		t.Fatal(err)
	}
	tr.Evict(10)
	tr.EvictHost(10)
}

// The events of HiRadixCache with their media, and without them
// (UntieredEvents, SGLang before PR #22894). Tiered: a new node is stored
// on the device; its host copy when the write-through is done; a device
// eviction of a backed-up node removes it from the device only; a load back
// stores it on the device again; a host eviction removes it from the host;
// a prefetch's pages are stored on the host; a write-back's copy is stored
// on the host before the device eviction removes the node there. Untiered:
// only the insertion and the node's leaving the tree are told, on the
// device, even for a prefetch's pages, which were never stored. A plain
// Observer hears the device's events only.
func TestTierEvents(t *testing.T) {
	// cycle writes a node through, evicts it from the device, loads it back,
	// evicts it again and then from the host.
	cycle := func(t *testing.T, tr *Tree[string]) {
		tr.Insert("", seq(1, 10), "a")
		doneWrites(t, tr)
		tr.Evict(10)
		loadBackAndEvict(t, tr)
	}
	// prefetch hangs 6 fetched tokens below a 4-token node on the host,
	// loads them back, evicts the whole path and then the host.
	prefetch := func(t *testing.T, tr *Tree[string]) {
		tr.Insert("", seq(1, 4), "a")
		doneWrites(t, tr)
		m := tr.MatchTiers("", seq(1, 10))
		if _, inserted, err := tr.InsertHost(m.Backed, "", seq(1, 10), m.Device, "storage"); err != nil || inserted != 6 {
			t.Fatalf("InsertHost: %d inserted, %v; want 6", inserted, err)
		}
		loadBackAndEvict(t, tr)
	}
	// writeBack evicts a node under write_back: written to the host, then
	// off the device.
	writeBack := func(t *testing.T, tr *Tree[string]) {
		tr.Insert("", seq(1, 10), "a")
		tr.Evict(10)
		doneWrites(t, tr)
	}
	for _, tc := range []struct {
		name      string
		untiered  bool
		threshold int
		play      func(*testing.T, *Tree[string])
		want      string
		pages     string // the tree's Pages after play, by medium
	}{
		{"cycle", false, 1, cycle,
			"cleared; stored device 10; stored host 10; removed device 10; stored device 10; removed device 10; removed host 10", ""},
		{"cycle", true, 1, cycle,
			"cleared; stored device 10; removed device 10", ""},
		{"prefetch", false, 1, prefetch,
			"cleared; stored device 4; stored host 4; stored host 6; stored device 6; removed device 6; removed device 4; removed host 6; removed host 4", ""},
		{"prefetch", true, 1, prefetch,
			"cleared; stored device 4; removed device 6; removed device 4", ""},
		{"write-back", false, 0, writeBack,
			"cleared; stored device 10; stored host 10; removed device 10", "host 10"},
		{"write-back", true, 0, writeBack,
			"cleared; stored device 10", "device 10"},
	} {
		t.Run(fmt.Sprintf("%s/untiered=%v", tc.name, tc.untiered), func(t *testing.T) {
			tr := tiered(t, 1, HostTier{Capacity: 10, WriteThreshold: tc.threshold, UntieredEvents: tc.untiered})
			r := &tierRecorder{}
			if err := tr.Observe(r); err != nil {
				t.Fatal(err)
			}
			tc.play(t, tr)
			if got := strings.Join(r.log, "; "); got != tc.want {
				t.Errorf("events:\n got %s\nwant %s", got, tc.want)
			}
			perMedium := map[Medium]int{}
			for p := range tr.Pages() {
				perMedium[p.Medium]++
			}
			var pages []string
			for _, m := range []Medium{Device, Host} {
				if perMedium[m] > 0 {
					pages = append(pages, fmt.Sprintf("%s %d", m, perMedium[m]))
				}
			}
			if got := strings.Join(pages, ", "); got != tc.pages {
				t.Errorf("pages as announced: got %q, want %q", got, tc.pages)
			}
		})
	}

	plain := &recorder{}
	tr := tiered(t, 1, HostTier{Capacity: 10, WriteThreshold: 1})
	if err := tr.Observe(plain); err != nil {
		t.Fatal(err)
	}
	tr.Insert("", seq(1, 10), "a")
	doneWrites(t, tr)
	tr.Evict(10)
	if got := len(plain.log); got != 3 {
		t.Fatalf("plain observer: %d events %v, want cleared, stored, removed", got, plain.log)
	}
}

// PageDigests gives the digests the tree gives the same pages, chained from
// a node's last page: what a prefetch looks storage up by.
func TestPageDigestsMatchTree(t *testing.T) {
	for _, bigram := range []bool{false, true} {
		tr := mustNew(t, 2)
		if bigram {
			tr, _ = NewBigram[string](2)
		}
		tr.EnableHost(HostTier{Capacity: 100, WriteThreshold: 1})
		key := seq(1, 13)
		_, first := tr.Insert("", key[:5], "a")
		_, last := tr.Insert("", key, "a")
		prior, _ := first.LastDigest()
		at := first.PrefixLen()
		got := PageDigests(&prior, key, at, 100, 2, bigram)
		if !slices.Equal(got, last.Digests()) {
			t.Errorf("bigram %v: PageDigests from unit %d: %d digests, the tree's node has %d, or they differ", bigram, at, len(got), len(last.Digests()))
		}
	}
}

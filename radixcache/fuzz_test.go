package radixcache

import (
	"errors"
	"slices"
	"testing"
)

// refSeg is one node of the reference model, kept flat: the whole path from
// the root to the node's end, and where the node begins on it.
type refSeg struct {
	ns    string
	full  []int32
	start int
	lock  int
	tick  uint64
	seq   uint64
	// The host tier: on the device, with a host copy, its write-through in
	// flight, its hits and host protections.
	dev, backed, writing bool
	hits, hostRef        int
}

func (s *refSeg) size() int { return len(s.full) - s.start }

// refModel is a deliberately naive model of the tree: a list of segments,
// linear scans for children, parents and leaves, and its own recency clock.
type refModel struct {
	page      int
	segs      []*refSeg
	tick, seq uint64
	// The host tier, when tiered: capacity, write threshold, reserved
	// slots, and the backups started and not yet compared with the tree's.
	tiered       bool
	hostCap, thr int
	reserved     int
	writes       []*refSeg
	writesWB     []bool
}

func (m *refModel) floor(n int) int { return n - n%m.page }

func (m *refModel) isParent(p, c *refSeg) bool {
	return p.ns == c.ns && len(p.full) == c.start && slices.Equal(p.full, c.full[:c.start])
}

func (m *refModel) parent(c *refSeg) *refSeg {
	for _, s := range m.segs {
		if m.isParent(s, c) {
			return s
		}
	}
	return nil
}

func (m *refModel) hasChild(p *refSeg) bool {
	for _, s := range m.segs {
		if m.isParent(p, s) {
			return true
		}
	}
	return false
}

// childAt finds the segment that starts at pos on key's path and shares
// key's page at pos.
func (m *refModel) childAt(ns string, key []int32, pos int) *refSeg {
	for _, s := range m.segs {
		if s.ns == ns && s.start == pos && slices.Equal(s.full[:pos], key[:pos]) &&
			slices.Equal(s.full[pos:pos+m.page], key[pos:pos+m.page]) {
			return s
		}
	}
	return nil
}

func (m *refModel) newSeg(ns string, full []int32, start int) *refSeg {
	m.seq++
	s := &refSeg{ns: ns, full: slices.Clone(full), start: start, tick: m.tick, seq: m.seq, dev: true}
	m.segs = append(m.segs, s)
	return s
}

// walk is Match when insert is false and Insert when it is true. It returns
// the matched (or already present) length and the handle; nil is the root.
func (m *refModel) walk(ns string, key []int32, insert bool) (int, *refSeg) {
	key = key[:m.floor(len(key))]
	m.tick++
	pos := 0
	var last *refSeg
	for pos < len(key) {
		s := m.childAt(ns, key, pos)
		if s == nil {
			break
		}
		s.tick = m.tick
		p := 0
		for pos+p < len(s.full) && pos+p < len(key) && s.full[pos+p] == key[pos+p] {
			p++
		}
		p = m.floor(p)
		if pos+p < len(s.full) {
			pos, last = pos+p, m.split(s, pos+p)
			break
		}
		pos, last = len(s.full), s
	}
	if insert && pos < len(key) {
		return pos, m.newSeg(ns, key, pos)
	}
	return pos, last
}

// split cuts s at path position at and returns the new upper segment,
// which takes s's lock, tiers and hits; a write in flight stays with s.
func (m *refModel) split(s *refSeg, at int) *refSeg {
	upper := m.newSeg(s.ns, s.full[:at], s.start)
	upper.lock, upper.dev, upper.backed, upper.hits = s.lock, s.dev, s.backed, s.hits
	s.start = at
	return upper
}

func (m *refModel) live(s *refSeg) bool { return s == nil || slices.Contains(m.segs, s) }

func (m *refModel) lock(s *refSeg, delta int) {
	for ; s != nil; s = m.parent(s) {
		s.lock += delta
	}
}

func (m *refModel) evict(n int) int {
	freed := 0
	for freed < n {
		var victim *refSeg
		for _, s := range m.segs {
			if s.lock != 0 || m.hasChild(s) {
				continue
			}
			if victim == nil || s.tick < victim.tick || (s.tick == victim.tick && s.seq < victim.seq) {
				victim = s
			}
		}
		if victim == nil {
			break
		}
		freed += victim.size()
		m.segs = slices.DeleteFunc(m.segs, func(s *refSeg) bool { return s == victim })
	}
	return freed
}

func (m *refModel) stats() Stats {
	var st Stats
	for _, s := range m.segs {
		st.Nodes++
		if s.backed {
			st.HostTokens += s.size()
		}
		if !s.dev {
			st.HostOnly += s.size()
			continue
		}
		if s.lock > 0 {
			st.Protected += s.size()
		} else {
			st.Evictable += s.size()
		}
	}
	st.Tokens = st.Evictable + st.Protected
	if m.tiered {
		st.HostReserved = m.reserved
	}
	return st
}

// handle pairs a tree handle with the reference's, and counts the locks the
// fuzz driver holds through it.
type handle struct {
	node  *Node[string]
	ref   *refSeg
	locks int
}

// fuzzInput hands out bytes of the fuzz input, then zeros.
type fuzzInput []byte

func (in *fuzzInput) next() int {
	if len(*in) == 0 {
		return 0
	}
	b := (*in)[0]
	*in = (*in)[1:]
	return int(b)
}

func (in *fuzzInput) key() []int32 {
	n := in.next() % 13
	k := make([]int32, n)
	for i := range k {
		k[i] = int32(in.next() % 3)
	}
	return k
}

func (in *fuzzInput) namespace() string {
	return []string{"", "", "salt"}[in.next()%3]
}

// FuzzTree drives the tree and the reference model with the same operations
// and checks that they agree and that the tree's invariants hold after each.
func FuzzTree(f *testing.F) {
	f.Add([]byte{0, 1, 5, 0, 1, 2, 0, 1, 0, 4, 0, 1, 2, 9, 2, 0, 4, 1, 0, 3, 0})
	f.Add([]byte{1, 1, 8, 0, 0, 1, 1, 2, 2, 0, 1, 1, 6, 0, 0, 1, 1, 1, 1, 2, 0, 4, 5})
	f.Add([]byte{2, 1, 12, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 2, 0, 3, 0, 1, 6, 4, 9, 5})
	// Bigram trees (first byte 3-5).
	f.Add([]byte{3, 1, 5, 0, 1, 2, 0, 1, 0, 4, 0, 1, 2, 9, 2, 0, 4, 1, 0, 3, 0})
	f.Add([]byte{4, 0, 1, 8, 0, 0, 1, 1, 2, 2, 0, 1, 1, 6, 0, 0, 1, 1, 1, 1, 2, 0, 4, 5})
	f.Add([]byte{5, 1, 12, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 2, 0, 3, 0, 1, 6, 4, 9, 5})
	// Host tiers (first byte 6-11): capacity, write threshold, then the
	// operations, the tier's included.
	f.Add([]byte{6, 30, 1, 0, 0, 6, 0, 1, 2, 0, 1, 2, 5, 12, 8, 0, 6, 0, 1, 2, 0, 1, 11, 0, 5, 12, 9, 3, 13, 0, 1, 0, 4, 2, 2})
	f.Add([]byte{7, 20, 0, 1, 1, 8, 0, 0, 1, 1, 2, 2, 0, 1, 5, 19, 8, 1, 8, 0, 0, 1, 1, 10, 0, 9, 10, 13, 1, 7, 5, 19})
	f.Add([]byte{8, 39, 2, 0, 0, 12, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 0, 0, 12, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 11, 0, 5, 15, 8, 0, 12, 1, 2, 1, 2, 1, 2, 1, 2, 1})
	f.Add([]byte{9, 25, 1, 1, 1, 5, 0, 1, 2, 0, 1, 7, 1, 9, 2, 2, 2, 2, 2, 2, 2, 2, 2, 5, 18, 12, 0, 0, 13, 0, 0, 0, 6, 1, 1, 1, 1, 1, 1})
	f.Fuzz(runOps)
}

// bigrams is the reference model's view of a bigram key: one unit per pair
// of adjacent tokens, spelled as a number (fuzz tokens are below 1000).
func bigrams(key []int32) []int32 {
	if len(key) < 2 {
		return nil
	}
	out := make([]int32, len(key)-1)
	for i := range out {
		out[i] = key[i]*1000 + key[i+1]
	}
	return out
}

// runOps is the body of FuzzTree. The first byte picks the tree: page size
// (1-3), bigram keys, and from 6 on a host tier, whose capacity and write
// threshold (0 write_back, 1 write_through, 2 write_through_selective) the
// next two bytes give; a tree with a host tier also plays the tier's
// operations.
func runOps(t *testing.T, data []byte) {
	in := fuzzInput(data)
	mode := in.next()
	page, bigram, tiered := 1+mode%3, mode/3%2 == 1, mode/6%2 == 1
	tr := mustNew(t, page)
	units := func(key []int32) []int32 { return key }
	if bigram {
		var err error
		if tr, err = NewBigram[string](page); err != nil {
			t.Fatal(err)
		}
		units = bigrams
	}
	ref := &refModel{page: page}
	nOps := 7
	if tiered {
		ref.tiered, ref.hostCap, ref.thr = true, in.next()%40, in.next()%3
		if err := tr.EnableHost(HostTier{Capacity: ref.hostCap, WriteThreshold: ref.thr}); err != nil {
			t.Fatal(err)
		}
		nOps = 14
	}
	var hs []*handle
	var pending []pendingWrite
	pick := func() *handle {
		if len(hs) == 0 {
			return nil
		}
		return hs[in.next()%len(hs)]
	}
	for ops := 0; len(in) > 0 && ops < 200; ops++ {
		switch op := in.next() % nOps; op {
		case 0, 1: // Insert
			ns, key := in.namespace(), in.key()
			got, node := tr.Insert(ns, key, "")
			var want int
			var seg *refSeg
			if tiered {
				want, seg = ref.insertTiered(ns, units(key), false)
			} else {
				want, seg = ref.walk(ns, units(key), true)
			}
			if got != want {
				t.Fatalf("op %d Insert(%q, %v): got existed %d, want %d", ops, ns, key, got, want)
			}
			hs = append(hs, &handle{node: node, ref: seg})
		case 2: // Match
			ns, key := in.namespace(), in.key()
			got, node := tr.Match(ns, key)
			want, seg := ref.walk(ns, units(key), false)
			if tiered {
				for seg != nil && !seg.dev {
					seg = ref.parent(seg)
				}
				want = refEnd(seg)
			}
			if got != want {
				t.Fatalf("op %d Match(%q, %v): got %d, want %d", ops, ns, key, got, want)
			}
			hs = append(hs, &handle{node: node, ref: seg})
		case 3: // Lock
			h := pick()
			if h == nil {
				continue
			}
			err := tr.Lock(h.node)
			if ref.live(h.ref) && checkTierLock(t, ops, h, err) {
				continue
			}
			if live := ref.live(h.ref); live != (err == nil) {
				t.Fatalf("op %d Lock: got error %v, reference says live=%v", ops, err, live)
			}
			if err == nil {
				ref.lock(h.ref, 1)
				h.locks++
			}
		case 4: // Unlock
			h := pick()
			if h == nil {
				continue
			}
			err := tr.Unlock(h.node)
			switch {
			case h.locks > 0 && err != nil:
				t.Fatalf("op %d Unlock of a held lock: %v", ops, err)
			case h.locks > 0:
				ref.lock(h.ref, -1)
				h.locks--
			case !ref.live(h.ref):
				if !errors.Is(err, ErrStaleHandle) {
					t.Fatalf("op %d Unlock of a dead node: got %v, want ErrStaleHandle", ops, err)
				}
			case checkTierLock(t, ops, h, err):
			case h.ref != nil && h.ref.lock == 0:
				if !errors.Is(err, ErrNotLocked) {
					t.Fatalf("op %d Unlock of an unlocked node: got %v, want ErrNotLocked", ops, err)
				}
			case err == nil:
				// Another handle's lock covers this node; undo the
				// borrowed unlock so every held lock stays balanced.
				ref.lock(h.ref, -1)
				if err := tr.Lock(h.node); err != nil {
					t.Fatal(err)
				}
				ref.lock(h.ref, 1)
			default:
				t.Fatalf("op %d Unlock of a node another handle holds: %v", ops, err)
			}
		case 5: // Evict
			n := in.next() % 20
			before := tr.Stats().Protected
			got := tr.Evict(n)
			want := 0
			if tiered {
				want = ref.evictTiered(n)
			} else {
				want = ref.evict(n)
			}
			if got != want {
				t.Fatalf("op %d Evict(%d): got %d freed, want %d", ops, n, got, want)
			}
			if after := tr.Stats().Protected; after != before {
				t.Fatalf("op %d Evict(%d): protected tokens went from %d to %d", ops, n, before, after)
			}
		case 6: // Reset, rarely: most inputs should build deep trees
			if in.next()%4 != 0 {
				continue
			}
			tr.Reset()
			ref.segs, ref.reserved, ref.writes, ref.writesWB = nil, 0, nil, nil
			hs, pending = nil, nil
		default:
			runTierOp(t, ops, op, &in, tr, ref, units, &hs, pick, &pending)
		}
		if tiered {
			checkWrites(t, ops, tr, ref, &pending)
		}
		if got, want := tr.Stats(), ref.stats(); got != want {
			t.Fatalf("op %d: stats got %+v, reference %+v", ops, got, want)
		}
		checkInvariants(t, tr)
	}
	// Releasing every held lock, and completing every write, leaves nothing
	// protected.
	for _, h := range hs {
		for ; h.locks > 0; h.locks-- {
			if err := tr.Unlock(h.node); err != nil {
				t.Fatalf("final unlock: %v", err)
			}
		}
	}
	for _, w := range pending {
		if err := tr.HostWriteDone(w.node); err != nil {
			t.Fatalf("final write: %v", err)
		}
	}
	if st := tr.Stats(); st.Protected != 0 {
		t.Fatalf("after releasing every lock: got %d protected tokens, want 0", st.Protected)
	}
	checkInvariants(t, tr)
}

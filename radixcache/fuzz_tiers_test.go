package radixcache

import (
	"errors"
	"slices"
	"testing"
)

// The reference model's host tier: HiRadixCache's rules, written as
// naively as the rest of the model (linear scans, whole-path segments).

func (m *refModel) hostFree() int {
	used := m.reserved
	for _, s := range m.segs {
		if s.backed {
			used += s.size()
		}
	}
	return m.hostCap - used
}

// lru picks the least recently used segment that ok accepts.
func (m *refModel) lru(ok func(*refSeg) bool) *refSeg {
	var victim *refSeg
	for _, s := range m.segs {
		if !ok(s) {
			continue
		}
		if victim == nil || s.tick < victim.tick || (s.tick == victim.tick && s.seq < victim.seq) {
			victim = s
		}
	}
	return victim
}

func (m *refModel) hasDevChild(p *refSeg) bool {
	for _, s := range m.segs {
		if s.dev && m.isParent(p, s) {
			return true
		}
	}
	return false
}

func (m *refModel) remove(victim *refSeg) {
	m.segs = slices.DeleteFunc(m.segs, func(s *refSeg) bool { return s == victim })
}

func (m *refModel) evictHost(n int) int {
	freed := 0
	for freed < n {
		v := m.lru(func(s *refSeg) bool { return !s.dev && s.hostRef == 0 && s.lock == 0 && !m.hasChild(s) })
		if v == nil {
			break
		}
		freed += v.size()
		m.remove(v)
	}
	return freed
}

func (m *refModel) backup(s *refSeg, writeBack bool) bool {
	if p := m.parent(s); !writeBack && p != nil && !p.backed {
		return false
	}
	if s.size() > m.hostFree() {
		m.evictHost(s.size())
		if s.size() > m.hostFree() {
			return false
		}
	}
	s.backed = true
	if !writeBack {
		s.writing = true
		m.lock(s, 1)
	}
	m.writes = append(m.writes, s)
	m.writesWB = append(m.writesWB, writeBack)
	return true
}

func (m *refModel) hit(s *refSeg, chunked bool) {
	if m.thr == 0 || chunked {
		return
	}
	s.hits++
	if !s.backed && s.hits >= m.thr {
		m.backup(s, false)
	}
}

// insertTiered is HiRadixCache.insert in the model.
func (m *refModel) insertTiered(ns string, key []int32, chunked bool) (int, *refSeg) {
	key = key[:m.floor(len(key))]
	m.tick++
	pos, existed := 0, 0
	var node *refSeg
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
		cur := s
		if pos+p < len(s.full) {
			cur = m.split(s, pos+p)
		}
		if !cur.dev {
			cur.dev = true
		} else {
			m.hit(cur, chunked)
			existed += p
		}
		pos, node = pos+p, cur
	}
	if pos < len(key) {
		leaf := m.newSeg(ns, key, pos)
		if m.thr > 0 {
			m.hit(leaf, chunked)
		}
		return existed, leaf
	}
	return existed, node
}

// evictTiered is HiRadixCache.evict in the model.
func (m *refModel) evictTiered(n int) int {
	freed := 0
	var kept []*refSeg
	for freed < n {
		v := m.lru(func(s *refSeg) bool {
			return s.dev && s.lock == 0 && !m.hasDevChild(s) && !slices.Contains(kept, s)
		})
		if v == nil {
			break
		}
		switch {
		case v.backed:
			v.dev = false
			freed += v.size()
		case m.thr == 0:
			if m.backup(v, true) {
				v.dev = false
				freed += v.size()
			} else {
				kept = append(kept, v)
			}
		default:
			freed += v.size()
			for _, d := range slices.Clone(m.segs) {
				if d != v && d.ns == v.ns && d.start >= len(v.full) && slices.Equal(d.full[:len(v.full)], v.full) {
					m.remove(d)
				}
			}
			m.remove(v)
		}
	}
	return freed
}

// matchTiers is MatchTiers in the model: the whole match, where its
// device part ends, and the nearest backed-up segment (nil: the root).
func (m *refModel) matchTiers(ns string, key []int32) (walked int, end, dev, backed *refSeg) {
	walked, end = m.walk(ns, key, false)
	dev = end
	for dev != nil && !dev.dev {
		dev = m.parent(dev)
	}
	backed = end
	for backed != nil && !backed.backed {
		backed = m.parent(backed)
	}
	return walked, end, dev, backed
}

func refEnd(s *refSeg) int {
	if s == nil {
		return 0
	}
	return len(s.full)
}

func (m *refModel) loadBack(s *refSeg) int {
	n := 0
	for ; s != nil && !s.dev; s = m.parent(s) {
		s.dev = true
		n += s.size()
	}
	return n
}

// insertHost is HiRadixCache._insert_helper_host in the model: units is
// the fetched continuation, hung after from.
func (m *refModel) insertHost(from *refSeg, ns string, units []int32) (int, int) {
	var base []int32
	if from != nil {
		base, ns = from.full, from.ns
	}
	path := append(slices.Clone(base), units[:m.floor(len(units))]...)
	m.tick++
	if from != nil {
		from.tick = m.tick
	}
	pos, matched := len(base), 0
	for pos < len(path) {
		s := m.childAt(ns, path, pos)
		if s == nil {
			break
		}
		s.tick = m.tick
		p := 0
		for pos+p < len(s.full) && pos+p < len(path) && s.full[pos+p] == path[pos+p] {
			p++
		}
		p = m.floor(p)
		matched += p
		if pos+p < len(s.full) {
			m.split(s, pos+p)
			pos += p
			break
		}
		pos = len(s.full)
	}
	fits := m.reserved + m.hostFree()
	if n := m.floor(min(len(path)-pos, fits)); n > 0 {
		leaf := m.newSeg(ns, path[:pos+n], pos)
		leaf.dev, leaf.backed = false, true
		m.reserved -= min(n, m.reserved)
		return matched, n
	}
	return matched, 0
}

func (m *refModel) reserve(n int) bool {
	if n > m.hostFree() {
		m.evictHost(n)
		if n > m.hostFree() {
			return false
		}
	}
	m.reserved += n
	return true
}

// pendingWrite pairs a write-through the tree started with the model's.
type pendingWrite struct {
	node *Node[string]
	ref  *refSeg
}

// runTierOp plays one host-tier operation (op 7 and up) on the tree and the
// model and checks that they agree.
func runTierOp(t *testing.T, ops, op int, in *fuzzInput, tr *Tree[string], ref *refModel,
	units func([]int32) []int32, hs *[]*handle, pick func() *handle, pending *[]pendingWrite) {
	switch op {
	case 7: // InsertChunk: no hits
		ns, key := in.namespace(), in.key()
		got, node := tr.InsertChunk(ns, key, "")
		want, seg := ref.insertTiered(ns, units(key), true)
		if got != want {
			t.Fatalf("op %d InsertChunk(%q, %v): got existed %d, want %d", ops, ns, key, got, want)
		}
		*hs = append(*hs, &handle{node: node, ref: seg})
	case 8: // MatchTiers
		ns, key := in.namespace(), in.key()
		got := tr.MatchTiers(ns, key)
		walked, end, dev, backed := ref.matchTiers(ns, units(key))
		if got.Device != refEnd(dev) || got.Device+got.Host != walked || got.End.PrefixLen() != refEnd(end) ||
			got.DeviceNode.PrefixLen() != refEnd(dev) || got.Backed.PrefixLen() != refEnd(backed) {
			t.Fatalf("op %d MatchTiers(%q, %v): got device %d host %d backed at %d, want device %d host %d backed at %d",
				ops, ns, key, got.Device, got.Host, got.Backed.PrefixLen(), refEnd(dev), walked-refEnd(dev), refEnd(backed))
		}
		*hs = append(*hs, &handle{node: got.End, ref: end}, &handle{node: got.Backed, ref: backed})
	case 9: // EvictHost
		n := in.next() % 20
		if got, want := tr.EvictHost(n), ref.evictHost(n); got != want {
			t.Fatalf("op %d EvictHost(%d): got %d freed, want %d", ops, n, got, want)
		}
	case 10: // LoadBack
		h := pick()
		if h == nil {
			return
		}
		got, err := tr.LoadBack(h.node)
		if live := ref.live(h.ref); live != (err == nil) {
			t.Fatalf("op %d LoadBack: got error %v, reference says live=%v", ops, err, live)
		}
		if err == nil {
			if want := ref.loadBack(h.ref); got != want {
				t.Fatalf("op %d LoadBack: got %d loaded, want %d", ops, got, want)
			}
		}
	case 11: // HostWriteDone
		if len(*pending) == 0 {
			return
		}
		i := in.next() % len(*pending)
		w := (*pending)[i]
		*pending = slices.Delete(*pending, i, i+1)
		if err := tr.HostWriteDone(w.node); err != nil {
			t.Fatalf("op %d HostWriteDone: %v", ops, err)
		}
		w.ref.writing = false
		ref.lock(w.ref, -1)
	case 12: // ProtectHost, ReleaseHost
		h := pick()
		if h == nil || h.ref == nil {
			return
		}
		if in.next()%2 == 0 {
			err := tr.ProtectHost(h.node)
			if live := ref.live(h.ref); live != (err == nil) {
				t.Fatalf("op %d ProtectHost: got error %v, reference says live=%v", ops, err, live)
			}
			if err == nil {
				h.ref.hostRef++
			}
			return
		}
		err := tr.ReleaseHost(h.node)
		if ok := ref.live(h.ref) && h.ref.hostRef > 0; ok != (err == nil) {
			t.Fatalf("op %d ReleaseHost: got error %v, reference says %v", ops, err, ok)
		}
		if err == nil {
			h.ref.hostRef--
		}
	case 13: // InsertHost after a handle, HostReserve, HostRelease
		switch in.next() % 3 {
		case 0:
			h := pick()
			if h == nil {
				return
			}
			ns, key := in.namespace(), in.key()
			at := min(in.next()%4, len(key))
			if bigram := len(units([]int32{0, 0})) == 1; bigram && h.ref != nil && at < len(key) {
				// A bigram continuation's first pair starts with the
				// token its parent ends with: the tree keeps no other.
				key[at] = h.ref.full[len(h.ref.full)-1] % 1000
			}
			got, gotIns, err := tr.InsertHost(h.node, ns, key, at, "")
			if live := ref.live(h.ref); live != (err == nil) {
				t.Fatalf("op %d InsertHost: got error %v, reference says live=%v", ops, err, live)
			}
			if err == nil {
				if want, wantIns := ref.insertHost(h.ref, ns, units(key[at:])); got != want || gotIns != wantIns {
					t.Fatalf("op %d InsertHost(%q, %v, at %d): got matched %d inserted %d, want %d and %d", ops, ns, key, at, got, gotIns, want, wantIns)
				}
			}
		case 1:
			n := in.next() % 10
			if got, want := tr.HostReserve(n), ref.reserve(n); got != want {
				t.Fatalf("op %d HostReserve(%d): got %v, want %v", ops, n, got, want)
			}
		default:
			n := in.next() % 10
			tr.HostRelease(n)
			ref.reserved = max(0, ref.reserved-n)
		}
	}
}

// checkWrites compares the backups the tree started with the model's and
// keeps the write-throughs for HostWriteDone.
func checkWrites(t *testing.T, ops int, tr *Tree[string], ref *refModel, pending *[]pendingWrite) {
	ws := tr.TakeHostWrites()
	if len(ws) != len(ref.writes) {
		t.Fatalf("op %d: the tree started %d host writes, the reference %d", ops, len(ws), len(ref.writes))
	}
	for i, w := range ws {
		r := ref.writes[i]
		if w.Tokens != r.size() || w.Node.PrefixLen() != len(r.full) || w.WriteBack != ref.writesWB[i] {
			t.Fatalf("op %d: host write %d: got %d tokens ending at %d (write-back %v), want %d ending at %d (%v)",
				ops, i, w.Tokens, w.Node.PrefixLen(), w.WriteBack, r.size(), len(r.full), ref.writesWB[i])
		}
		if !w.WriteBack {
			*pending = append(*pending, pendingWrite{node: w.Node, ref: r})
		}
	}
	ref.writes, ref.writesWB = nil, nil
}

// A locked or host-only handle refuses what needs device KV.
func checkTierLock(t *testing.T, ops int, h *handle, err error) bool {
	if h.ref != nil && !h.ref.dev {
		if !errors.Is(err, ErrNotOnDevice) {
			t.Fatalf("op %d: lock of a host-only node: got %v, want ErrNotOnDevice", ops, err)
		}
		return true
	}
	return false
}

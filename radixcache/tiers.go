package radixcache

import (
	"container/heap"
	"errors"
	"fmt"
	"slices"
)

// Medium is where a page's KV lives, as SGLang's KV events name it
// (StorageMedium): the device's KV pool, or the host pool of HiCache.
type Medium uint8

const (
	Device Medium = iota // SGLang's StorageMedium.GPU
	Host                 // StorageMedium.CPU ("CPU_PINNED")
)

func (m Medium) String() string {
	if m == Host {
		return "host"
	}
	return "device"
}

// ErrNotOnDevice reports a Lock or Unlock of a node whose KV is only on
// the host: a request holds device KV, never a host copy.
var ErrNotOnDevice = errors.New("radixcache: node is on the host only")

// HostTier configures a tree's host tier, SGLang's HiRadixCache over a
// host KV pool.
type HostTier struct {
	// Capacity is the host pool's size in tokens (in bigrams for a bigram
	// tree).
	Capacity int
	// WriteThreshold is the hit count at which a node on the device is
	// backed up to the host (HiRadixCache's write_through_threshold: 1 for
	// write_through, 2 for write_through_selective); 0 is write_back, which
	// backs a node up only when the device evicts it.
	WriteThreshold int
	// UntieredEvents makes the tree's events ignore the tiers, as
	// HiRadixCache's did before SGLang PR #22894: a node is stored on the
	// device when inserted and removed from the device when it leaves the
	// tree, whichever tier it leaves from; a host copy, a device eviction
	// of a backed-up node, a load back and a prefetch's host pages are not
	// announced.
	UntieredEvents bool
}

// HostWrite is a backup of a node's KV to the host pool that the tree
// started: the engine charges its transfer. A write-through backup locks
// the node until HostWriteDone (SGLang's ongoing_write_through); a
// write-back backup is done at once (SGLang blocks on it while it evicts).
type HostWrite[V any] struct {
	Node      *Node[V]
	Tokens    int
	WriteBack bool
}

// tierState is a node's place in the tiers. The zero value is a node on
// the device only.
type tierState struct {
	hostOnly bool  // evicted from the device, kept on the host (SGLang: evicted)
	backed   bool  // a host copy exists or is being written (SGLang: backuped)
	writing  bool  // its write-through is in flight
	silent   bool  // host copy never announced: split off a node while it was written
	revived  bool  // back on the device by an Insert, which SGLang does not announce
	fetched  bool  // inserted on the host by a prefetch (InsertHost)
	hostRef  int32 // protections of the host copy (SGLang's host_ref_counter)
	hits     int32 // SGLang's hit_count
	devKids  int32 // children on the device
	hostIdx  int   // position in the host-leaf heap, -1 when absent
}

// splitUpper is the state of the upper part of a split node: the same
// tiers, but the write in flight belongs to the lower part (SGLang's
// ongoing_write_through keeps the node's id), so the upper part's host copy
// is never announced.
func (s tierState) splitUpper() tierState {
	u := tierState{hostOnly: s.hostOnly, backed: s.backed, silent: s.silent || s.writing, revived: s.revived,
		fetched: s.fetched, hits: s.hits, hostIdx: -1}
	return u
}

// announcedOn reports whether the tree's events announced the node's pages
// on medium and have not removed them since; untiered, whether they were
// announced at all (every node but a prefetch's, and on the device only).
func (s *tierState) announcedOn(m Medium, untiered bool) bool {
	if untiered {
		return m == Device && !s.fetched
	}
	if m == Device {
		return !s.hostOnly && !s.revived
	}
	return s.backed && !s.writing && !s.silent
}

// hostTier is the tree's side of the host pool.
type hostTier[V any] struct {
	HostTier
	leaves   leafHeap[V] // host-only leaves, least recently used first
	backed   int         // tokens with a host copy
	only     int         // of them, tokens on the host only
	reserved int         // slots reserved outside the tree
	writes   []HostWrite[V]
}

func (h *hostTier[V]) reset() {
	h.leaves = leafHeap[V]{host: true}
	h.backed, h.only, h.reserved = 0, 0, 0
	h.writes = nil
}

func (h *hostTier[V]) free() int { return h.Capacity - h.backed - h.reserved }

// EnableHost gives an empty tree a host tier. Without one a tree is
// SGLang's RadixCache; with one, its HiRadixCache: a node evicted from the
// device stays in the tree when it has a host copy, a match continues into
// host-only nodes, and insertions count hits and back nodes up as
// h.WriteThreshold says.
func (t *Tree[V]) EnableHost(h HostTier) error {
	if t.nodes > 0 {
		return ErrNotEmpty
	}
	if h.Capacity < 0 || h.WriteThreshold < 0 {
		return fmt.Errorf("radixcache: host tier needs capacity and write threshold >= 0, got %d and %d", h.Capacity, h.WriteThreshold)
	}
	t.host = &hostTier[V]{HostTier: h}
	t.host.reset()
	return nil
}

// HostTier returns the tree's host tier configuration, and false when it
// has none.
func (t *Tree[V]) HostTier() (HostTier, bool) {
	if t.host == nil {
		return HostTier{}, false
	}
	return t.host.HostTier, true
}

// untieredEvents reports whether the tree has a host tier whose events
// ignore it (HostTier.UntieredEvents).
func (t *Tree[V]) untieredEvents() bool { return t.host != nil && t.host.UntieredEvents }

// SetWriteThreshold changes the write policy of a tree's host tier.
func (t *Tree[V]) SetWriteThreshold(n int) {
	if t.host != nil && n >= 0 {
		t.host.WriteThreshold = n
	}
}

// OnDevice reports whether n's KV is in the device pool.
func (n *Node[V]) OnDevice() bool { return !n.tier.hostOnly }

// BackedUp reports whether n has a host copy (or one is being written).
func (n *Node[V]) BackedUp() bool { return n.tier.backed }

// Digests are n's page digests, SGLang's hash_value: in a tree with a host
// tier or an observer. They belong to the tree.
func (n *Node[V]) Digests() []Digest { return n.digests }

// Len is the number of tokens (units) n adds to its parent's prefix.
func (n *Node[V]) Len() int { return len(n.key) }

// Parent is the node n hangs from; nil for the root.
func (n *Node[V]) Parent() *Node[V] { return n.parent }

// IsRoot reports whether n is the root of its tree.
func (n *Node[V]) IsRoot() bool { return n.parent == nil && n.tree != nil && n.tree.root == n }

// LastDigest is the digest of n's last page (SGLang's
// get_last_hash_value), and false for the root or a node without digests.
func (n *Node[V]) LastDigest() (Digest, bool) {
	if len(n.digests) == 0 {
		return Digest{}, false
	}
	return n.digests[len(n.digests)-1], true
}

// deviceEnd is the deepest node at or above n whose KV is on the device
// (device nodes form a subtree at the top of the tree).
func deviceEnd[V any](n *Node[V]) *Node[V] {
	for n.tier.hostOnly {
		n = n.parent
	}
	return n
}

// TierMatch is a match in a tree with a host tier, as SGLang's
// HiRadixCache.match_prefix returns it.
type TierMatch[V any] struct {
	// Device is the length matched on the device and DeviceNode where it
	// ends (SGLang's device_indices and last_device_node).
	Device     int
	DeviceNode *Node[V]
	// Host is the length matched beyond Device in host-only nodes, and End
	// where it ends (SGLang's host_hit_length and last_node).
	Host int
	End  *Node[V]
	// Backed is the deepest node at or above End with a host copy, or the
	// root: SGLang's last_host_node, which a prefetch from storage starts
	// after.
	Backed *Node[V]
}

// MatchTiers is Match in a tree with a host tier: it walks the key as
// Match does, through host-only nodes too, and reports where the device
// part and the whole match end. Without a host tier the whole match is on
// the device.
func (t *Tree[V]) MatchTiers(ns string, key []int32) TierMatch[V] {
	ns, key = t.units(ns, key)
	key = key[:t.floorPage(len(key))]
	t.tick++
	walked, end := t.descend(ns, key)
	dev := deviceEnd(end)
	backed := end
	for backed != t.root && !backed.tier.backed {
		backed = backed.parent
	}
	return TierMatch[V]{Device: dev.end, DeviceNode: dev, Host: walked - dev.end, End: end, Backed: backed}
}

// InsertChunk is Insert for a prompt chunk that is not the prompt's last:
// it counts no hits (SGLang's insert with chunked=True, from
// stash_chunked_request), so it backs nothing up under a write-through
// policy. Without a host tier it is Insert.
func (t *Tree[V]) InsertChunk(ns string, key []int32, value V) (existed int, last *Node[V]) {
	if t.host != nil {
		return t.insertTiered(ns, key, value, true)
	}
	return t.Insert(ns, key, value)
}

// insertTiered is HiRadixCache.insert: along the path, a node that is only
// on the host gets device KV again (a recomputation, which SGLang does not
// announce), every other node counts a hit (unless chunked) and is backed up
// once its hits reach the write threshold; the new leaf counts one too.
// existed counts the tokens already on the device.
func (t *Tree[V]) insertTiered(ns string, key []int32, value V, chunked bool) (existed int, last *Node[V]) {
	ns, key = t.units(ns, key)
	key = key[:t.floorPage(len(key))]
	t.tick++
	node := t.root
	for len(key) > 0 {
		next, p, _ := t.step(node, ns, key)
		if next == nil {
			break
		}
		if next.tier.hostOnly {
			t.revive(next)
		} else {
			t.hit(next, chunked)
			existed += p
		}
		node, key = next, key[p:]
	}
	if len(key) == 0 {
		return existed, node
	}
	leaf := t.addLeaf(node, ns, key, value)
	if t.host.WriteThreshold > 0 {
		t.hit(leaf, chunked)
	}
	return existed, leaf
}

// addLeaf hangs rest from node as a new device leaf holding value.
func (t *Tree[V]) addLeaf(node *Node[V], ns string, rest []int32, value V) *Node[V] {
	leaf := t.link(node, ns, rest, value)
	t.evictable += len(rest)
	node.tier.devKids++
	t.updateLeafStatus(node)
	t.updateLeafStatus(leaf)
	t.stored(leaf, Device)
	return leaf
}

// link hangs a new node of rest, holding value, from node.
func (t *Tree[V]) link(node *Node[V], ns string, rest []int32, value V) *Node[V] {
	leaf := t.newNode(node, ns, slices.Clone(rest))
	leaf.end = node.end + len(rest)
	leaf.order = leaf.seq
	leaf.value = value
	if node.children == nil {
		node.children = make(map[string]*Node[V], 1)
	}
	node.children[string(t.childKey(node, ns, rest))] = leaf
	t.nodes++
	return leaf
}

// revive gives a host-only node device KV again.
func (t *Tree[V]) revive(x *Node[V]) {
	x.tier.hostOnly, x.tier.revived = false, true
	t.host.only -= len(x.key)
	t.evictable += len(x.key)
	x.parent.tier.devKids++
	t.updateLeafStatus(x)
	t.updateHostLeafStatus(x)
	t.updateLeafStatus(x.parent)
	t.updateHostLeafStatus(x.parent)
}

// hit is HiRadixCache._inc_hit_count: under a write-through policy every
// insertion through a node counts, and a node not yet backed up is once
// its count reaches the threshold.
func (t *Tree[V]) hit(x *Node[V], chunked bool) {
	if t.host.WriteThreshold == 0 || chunked {
		return
	}
	x.tier.hits++
	if !x.tier.backed && int(x.tier.hits) >= t.host.WriteThreshold {
		t.backup(x, false)
	}
}

// backup is HiRadixCache.write_backup: it takes host slots for x (evicting
// host-only leaves for x's size when the pool is short, as evict_host
// does), marks x backed up and queues the write. A write-through backup
// locks x until HostWriteDone and needs x's parent backed up first, so
// that backed-up nodes form a prefix of every path; a write-back backup is
// done at once. It reports whether x was backed up.
func (t *Tree[V]) backup(x *Node[V], writeBack bool) bool {
	h := t.host
	if !writeBack && x.parent != t.root && !x.parent.tier.backed {
		return false
	}
	n := len(x.key)
	if n > h.free() {
		t.EvictHost(n)
		if n > h.free() {
			return false
		}
	}
	x.tier.backed = true
	h.backed += n
	h.writes = append(h.writes, HostWrite[V]{Node: x, Tokens: n, WriteBack: writeBack})
	if writeBack {
		if !t.untieredEvents() {
			t.announce(x, Host)
		}
		return true
	}
	x.tier.writing = true
	if err := t.Lock(x); err != nil {
		panic(err) // x is on the device: the walk just reached it
	}
	return true
}

// TakeHostWrites returns the host writes started since the last call and
// forgets them.
func (t *Tree[V]) TakeHostWrites() []HostWrite[V] {
	if t.host == nil {
		return nil
	}
	w := t.host.writes
	t.host.writes = nil
	return w
}

// HostWriteDone completes n's write-through: the host copy is announced
// and the lock the write held is released (HiRadixCache.writing_check).
func (t *Tree[V]) HostWriteDone(n *Node[V]) error {
	if err := t.check(n); err != nil {
		return err
	}
	if !n.tier.writing {
		return fmt.Errorf("radixcache: no write in flight for this node")
	}
	n.tier.writing = false
	if !t.untieredEvents() {
		t.announce(n, Host)
	}
	return t.Unlock(n)
}

// evictTiered is HiRadixCache.evict: the device's least recently used
// unlocked leaves go first; one backed up stays in the tree on the host
// (announced as leaving the device), one without a host copy is written
// back first under write_back (and stays on the device if the host pool
// has no room for it) or else deleted.
func (t *Tree[V]) evictTiered(n int) int {
	freed := 0
	var kept []*Node[V]
	for freed < n && t.leaves.Len() > 0 {
		x := heap.Pop(&t.leaves).(*Node[V])
		switch {
		case x.tier.backed:
			freed += t.demote(x)
		case t.host.WriteThreshold == 0:
			if t.backup(x, true) {
				freed += t.demote(x)
			} else {
				kept = append(kept, x)
			}
		default:
			freed += len(x.key)
			t.evictable -= len(x.key)
			t.deleteSubtree(x)
		}
	}
	for _, x := range kept {
		t.updateLeafStatus(x)
	}
	return freed
}

// demote moves x, backed up, off the device: it stays in the tree on the
// host (untiered, still announced on the device).
func (t *Tree[V]) demote(x *Node[V]) int {
	if !t.untieredEvents() {
		t.removed(x, Device)
	}
	x.tier.hostOnly, x.tier.revived = true, false
	t.evictable -= len(x.key)
	t.host.only += len(x.key)
	x.parent.tier.devKids--
	t.updateLeafStatus(x)
	t.updateHostLeafStatus(x)
	t.updateLeafStatus(x.parent)
	t.updateHostLeafStatus(x.parent)
	return len(x.key)
}

// deleteSubtree deletes x, a device leaf without a host copy, and any
// host-only nodes below it. SGLang asserts such a leaf has no children;
// a prefetch from storage can hang host-only nodes below a node that was
// never backed up (write_through_selective), and the mock drops them with
// it rather than stop.
func (t *Tree[V]) deleteSubtree(x *Node[V]) {
	for len(x.children) > 0 {
		for _, c := range x.children {
			t.dropHostSubtree(c)
			break
		}
	}
	t.deleteLeaf(x, Device)
}

// dropHostSubtree deletes the host-only subtree at x.
func (t *Tree[V]) dropHostSubtree(x *Node[V]) {
	for len(x.children) > 0 {
		for _, c := range x.children {
			t.dropHostSubtree(c)
			break
		}
	}
	if x.tier.hostIdx >= 0 {
		heap.Remove(&t.host.leaves, x.tier.hostIdx)
	}
	t.host.backed -= len(x.key)
	t.host.only -= len(x.key)
	t.deleteLeaf(x, Host)
}

// EvictHost is HiRadixCache.evict_host: it deletes host-only leaves that
// nothing protects, least recently used first, until at least n tokens of
// the host pool are free or none is left, and returns the tokens freed. A
// parent left host-only and childless becomes a candidate in turn.
func (t *Tree[V]) EvictHost(n int) int {
	h := t.host
	if h == nil {
		return 0
	}
	freed := 0
	for freed < n && h.leaves.Len() > 0 {
		x := heap.Pop(&h.leaves).(*Node[V])
		freed += len(x.key)
		h.backed -= len(x.key)
		h.only -= len(x.key)
		t.deleteLeaf(x, Host)
	}
	return freed
}

// updateHostLeafStatus keeps the invariant: x is in the host-leaf heap
// exactly when it is only on the host, unprotected, unlocked and
// childless.
func (t *Tree[V]) updateHostLeafStatus(x *Node[V]) {
	h := t.host
	if h == nil {
		return
	}
	want := x != t.root && x.tier.hostOnly && x.tier.hostRef == 0 && x.lockRef == 0 && len(x.children) == 0
	switch {
	case want && x.tier.hostIdx < 0:
		heap.Push(&h.leaves, x)
	case !want && x.tier.hostIdx >= 0:
		heap.Remove(&h.leaves, x.tier.hostIdx)
	}
}

// ProtectHost keeps n's host copy from host eviction until ReleaseHost
// (SGLang's protect_host, for a prefetch that starts after n or a backup
// of n to storage).
func (t *Tree[V]) ProtectHost(n *Node[V]) error {
	if err := t.check(n); err != nil {
		return err
	}
	n.tier.hostRef++
	t.updateHostLeafStatus(n)
	return nil
}

// ReleaseHost undoes a ProtectHost.
func (t *Tree[V]) ReleaseHost(n *Node[V]) error {
	if err := t.check(n); err != nil {
		return err
	}
	if n.tier.hostRef == 0 {
		return errors.New("radixcache: release of a host copy that is not protected")
	}
	n.tier.hostRef--
	t.updateHostLeafStatus(n)
	return nil
}

// HostFree is the host pool's free slots.
func (t *Tree[V]) HostFree() int {
	if t.host == nil {
		return 0
	}
	return t.host.free()
}

// HostReserve takes n host slots outside the tree (a prefetch's buffer),
// evicting host-only leaves for n tokens first when the pool is short, as
// HiRadixCache.prefetch_from_storage does. It reports whether it could.
func (t *Tree[V]) HostReserve(n int) bool {
	h := t.host
	if h == nil || n < 0 {
		return false
	}
	if n > h.free() {
		t.EvictHost(n)
		if n > h.free() {
			return false
		}
	}
	h.reserved += n
	return true
}

// HostRelease gives back n slots HostReserve took.
func (t *Tree[V]) HostRelease(n int) {
	if t.host != nil {
		t.host.reserved = max(0, t.host.reserved-n)
	}
}

// HostPath is the length of the host-only run that ends at n: the tokens
// a load back of n brings to the device.
func (t *Tree[V]) HostPath(n *Node[V]) int {
	if t.check(n) != nil {
		return 0
	}
	return n.end - deviceEnd(n).end
}

// LoadBack brings the host-only nodes from n up to its device ancestor
// back to the device, top down, announcing each (HiRadixCache.load_back;
// the engine has made room for them), and returns the tokens it loaded.
func (t *Tree[V]) LoadBack(n *Node[V]) (int, error) {
	if err := t.check(n); err != nil {
		return 0, err
	}
	var path []*Node[V]
	for x := n; x.tier.hostOnly; x = x.parent {
		path = append(path, x)
	}
	loaded := 0
	for _, x := range slices.Backward(path) {
		x.tier.hostOnly, x.tier.revived = false, false
		t.host.only -= len(x.key)
		t.evictable += len(x.key)
		loaded += len(x.key)
		x.parent.tier.devKids++
		t.updateLeafStatus(x)
		t.updateHostLeafStatus(x)
		t.updateLeafStatus(x.parent)
		t.updateHostLeafStatus(x.parent)
		if !t.untieredEvents() {
			t.announce(x, Device)
		}
	}
	return loaded, nil
}

// InsertHost is HiRadixCache._insert_helper_host: it walks units from
// from, as a prefetch from storage that started after from inserts what it
// fetched, and hangs what the tree lacks as a host-only leaf holding value,
// announced on the host. key is the whole key the prefetch was for and at
// the unit where the fetched part starts. The leaf's host slots come from
// the reservations (HostReserve: the prefetch's buffer), then from free
// slots; what fits in neither is not inserted. It returns how many of the
// fetched units were in the tree already and how many it inserted.
func (t *Tree[V]) InsertHost(from *Node[V], ns string, key []int32, at int, value V) (matched, inserted int, err error) {
	if err := t.check(from); err != nil {
		return 0, 0, err
	}
	h := t.host
	if h == nil {
		return 0, 0, errors.New("radixcache: InsertHost on a tree without a host tier")
	}
	if at < 0 || at > len(key) {
		return 0, 0, fmt.Errorf("radixcache: InsertHost at unit %d of a %d-token key", at, len(key))
	}
	// The fetched units are the key's from at on: in a bigram tree the
	// pairs from (key[at], key[at+1]), whose first token a node at the
	// root keeps in its namespace.
	ns, rest := t.units(ns, key[at:])
	if from != t.root {
		ns = from.ns
	}
	rest = rest[:t.floorPage(len(rest))]
	t.tick++
	node := from
	if node != t.root {
		t.touch(node)
	}
	for len(rest) > 0 {
		next, p, whole := t.step(node, ns, rest)
		if next == nil {
			break
		}
		matched += p
		rest, node = rest[p:], next
		if !whole {
			break
		}
	}
	rest = rest[:t.floorPage(min(len(rest), h.reserved+h.free()))]
	if len(rest) == 0 {
		return matched, 0, nil
	}
	leaf := t.link(node, ns, rest, value)
	leaf.tier.hostOnly, leaf.tier.backed, leaf.tier.fetched = true, true, true
	fromReserved := min(len(rest), h.reserved)
	h.reserved -= fromReserved
	h.backed += len(rest)
	h.only += len(rest)
	t.updateHostLeafStatus(leaf)
	t.updateLeafStatus(node)
	t.updateHostLeafStatus(node)
	t.stored(leaf, Host)
	return matched, len(rest), nil
}

// checkOnDevice is check for the operations that need device KV.
func (t *Tree[V]) checkOnDevice(n *Node[V]) error {
	if err := t.check(n); err != nil {
		return err
	}
	if n.tier.hostOnly {
		return ErrNotOnDevice
	}
	return nil
}

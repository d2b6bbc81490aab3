package radixcache

import (
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// Errors returned by Lock and Unlock.
var (
	// ErrStaleHandle reports a node that was evicted, or that belongs to a
	// tree that was reset since, or to another tree.
	ErrStaleHandle = errors.New("radixcache: stale node handle (evicted, reset or foreign)")
	// ErrNotLocked reports an Unlock without a matching Lock.
	ErrNotLocked = errors.New("radixcache: unlock of a node that is not locked")
)

// Node is a handle to a position in the tree: the end of a cached prefix.
// Its fields belong to the tree.
type Node[V any] struct {
	parent   *Node[V]
	children map[string]*Node[V]
	key      []int32 // the tokens this node adds to its parent's prefix
	end      int     // tokens from the root to the end of this node
	ns       string
	lockRef  int32
	removed  bool // no longer in the tree: evicted from every tier, or the tree was reset
	heapIdx  int  // position in the evictable-leaf heap, -1 when absent
	tier     tierState
	tick     uint64 // logical time of last access
	seq      uint64 // creation order; breaks recency ties
	// order is the node's place among its parent's children, as a Python
	// dict keeps SGLang's: when its first page was added there. A split's
	// upper part takes the place of the node it splits.
	order   uint64
	epoch   uint64 // the tree's epoch at creation; Reset makes older nodes stale
	tree    *Tree[V]
	digests []Digest // one per page, only in an observed tree
	value   V        // given by the Insert that added these tokens; last, so the fields above keep their offsets whatever V
}

// PrefixLen is the number of tokens from the root to the end of n: the
// length of the cached prefix that n ends.
func (n *Node[V]) PrefixLen() int { return n.end }

// Value is the value given to the Insert that added n's tokens (the zero
// value for the root). A node split from it keeps it, so every node on the
// path of an Insert's new tokens carries that Insert's value.
func (n *Node[V]) Value() V { return n.value }

// Stats are the tree's token and node counts. Tokens, Evictable and
// Protected count the device tier (the KV pool); the Host fields are zero
// without a host tier.
type Stats struct {
	Tokens    int // cached tokens on the device: Evictable + Protected
	Evictable int // device tokens in nodes no request holds
	Protected int // device tokens in nodes a request holds (lock count > 0)
	Nodes     int // nodes, the root excluded, host-only ones included
	// HostTokens are the tokens with a copy in the host pool (SGLang's
	// backuped nodes), HostOnly those of them evicted from the device,
	// HostReserved the host pool slots reserved outside the tree
	// (HostReserve: prefetches from storage).
	HostTokens, HostOnly, HostReserved int
}

// Tree is a radix tree over token ids with SGLang's prefix-cache rules,
// each node carrying a value of type V that its Insert gave. The zero value
// is not usable; call New.
type Tree[V any] struct {
	pageSize  int
	bigram    bool
	root      *Node[V]
	epoch     uint64
	tick      uint64
	seq       uint64
	evictable int
	protected int
	nodes     int
	leaves    leafHeap[V]
	host      *hostTier[V] // nil: the device tier only
	scratch   []byte       // builds root-level child keys without allocating
	obs       Observer
	pageBuf   []Page // reused by the observer calls
	hashBuf   []byte // reused by digest
}

// New returns an empty tree that matches and inserts in pages of pageSize
// tokens (SGLang's --page-size; 1 means token granularity).
func New[V any](pageSize int) (*Tree[V], error) {
	if pageSize < 1 {
		return nil, fmt.Errorf("radixcache: page size must be >= 1, got %d", pageSize)
	}
	t := &Tree[V]{pageSize: pageSize}
	t.Reset()
	return t, nil
}

// NewBigram returns an empty tree keyed on bigrams, as SGLang keys its
// cache under EAGLE-family speculative decoding: a key of n tokens is n-1
// units, each a pair of adjacent tokens, and every length (matched,
// existing, PrefixLen, Stats, Evict) counts units; pages are pageSize
// units.
func NewBigram[V any](pageSize int) (*Tree[V], error) {
	t, err := New[V](pageSize)
	if err != nil {
		return nil, err
	}
	t.bigram = true
	return t, nil
}

// PageSize returns the tree's page size in tokens (in bigrams for a bigram
// tree).
func (t *Tree[V]) PageSize() int { return t.pageSize }

// Bigram reports whether the tree is keyed on bigrams.
func (t *Tree[V]) Bigram() bool { return t.bigram }

// units turns a key into the namespace and unit sequence the tree stores.
// A bigram key's units are its pairs of adjacent tokens; a path of pairs is
// spelled by its first token and then the second token of each pair, so the
// first token joins the namespace and the rest is the unit sequence. The
// namespace stays injective: every such namespace is ns plus four bytes.
func (t *Tree[V]) units(ns string, key []int32) (string, []int32) {
	if !t.bigram {
		return ns, key
	}
	if len(key) == 0 {
		return ns, nil
	}
	return ns + string(asBytes(key[:1])), key[1:]
}

// Reset empties the tree. Handles from before the reset become stale.
func (t *Tree[V]) Reset() {
	t.epoch++
	t.root = &Node[V]{lockRef: 1, heapIdx: -1, epoch: t.epoch, tree: t}
	t.root.tier.hostIdx = -1
	t.evictable, t.protected, t.nodes = 0, 0, 0
	t.leaves = leafHeap[V]{}
	if t.host != nil {
		t.host.reset()
	}
	if t.obs != nil {
		t.obs.Cleared()
	}
}

// Stats returns the current counts.
func (t *Tree[V]) Stats() Stats {
	st := Stats{
		Tokens:    t.evictable + t.protected,
		Evictable: t.evictable,
		Protected: t.protected,
		Nodes:     t.nodes,
	}
	if h := t.host; h != nil {
		st.HostTokens, st.HostOnly, st.HostReserved = h.backed, h.only, h.reserved
	}
	return st
}

// ReusablePrefixLen is the longest prefix of an n-token sequence that a
// request may take from the cache in this tree: under bigram keys the n-1
// tokens a request may match are n-2 units, page-floored.
func (t *Tree[V]) ReusablePrefixLen(n int) int {
	if t.bigram {
		return ReusablePrefixLen(n-1, t.pageSize)
	}
	return ReusablePrefixLen(n, t.pageSize)
}

// ReusablePrefixLen is the longest prefix of an n-token sequence that SGLang
// lets a request take from the cache: n-1 tokens, because the last token must
// be computed to produce logits, floored to a multiple of pageSize because a
// partial page never matches.
func ReusablePrefixLen(n, pageSize int) int {
	if n <= 1 || pageSize < 1 {
		return 0
	}
	m := n - 1
	return m - m%pageSize
}

// Match returns the length of the longest cached prefix of key in namespace
// ns, and the node where it ends (the root when nothing matches). The key is
// first floored to whole pages. Every node on the path becomes most recently
// used. Match does not lock the result. In a bigram tree the length counts
// bigrams: a key of n tokens matches at most n-1.
func (t *Tree[V]) Match(ns string, key []int32) (int, *Node[V]) {
	ns, key = t.units(ns, key)
	key = key[:t.floorPage(len(key))]
	t.tick++
	walked, node := t.descend(ns, key)
	if t.host != nil {
		node = deviceEnd(node)
		walked = node.end
	}
	return walked, node
}

// Insert caches key in namespace ns and returns how many of its leading
// tokens were cached already, and the node where key ends. The key is first
// floored to whole pages; a trailing partial page is not cached. Every node on
// the path becomes most recently used. The node of the tokens it adds
// carries value (the engine's: the inserting request's id); tokens already
// cached keep theirs. In a bigram tree a key of n tokens caches n-1
// bigrams.
func (t *Tree[V]) Insert(ns string, key []int32, value V) (existed int, last *Node[V]) {
	if t.host != nil {
		return t.insertTiered(ns, key, value, false)
	}
	ns, key = t.units(ns, key)
	key = key[:t.floorPage(len(key))]
	t.tick++
	existed, node := t.descend(ns, key)
	rest := key[existed:]
	if len(rest) == 0 {
		return existed, node
	}
	return existed, t.addLeaf(node, ns, rest, value)
}

// descend walks key from the root as SGLang's match and insert both do:
// each node on the path becomes most recently used, and a node the key
// leaves part-way is split there. It returns the length walked and the node
// that ends exactly there.
func (t *Tree[V]) descend(ns string, key []int32) (int, *Node[V]) {
	node, walked := t.root, 0
	for len(key) > 0 {
		next, p, whole := t.step(node, ns, key)
		if next == nil {
			break
		}
		walked += p
		if !whole {
			return walked, next
		}
		node, key = next, key[p:]
	}
	return walked, node
}

// step walks one node down from node along key, as match and insert do:
// the child that starts with key's first page becomes most recently used
// and, when key leaves it part-way, is split there. It returns the node
// that ends where the walk stopped (nil when no child starts with key),
// the tokens walked, and whether the walk reached the child's end.
func (t *Tree[V]) step(node *Node[V], ns string, key []int32) (next *Node[V], p int, whole bool) {
	child := t.child(node, ns, key)
	if child == nil {
		return nil, 0, false
	}
	t.touch(child)
	p = t.commonPrefix(child.key, key)
	if p < len(child.key) {
		return t.split(child, p), p, false
	}
	return child, p, true
}

// Lock adds a reference to n and every ancestor, protecting their tokens from
// eviction (SGLang's inc_lock_ref). The root is always locked.
func (t *Tree[V]) Lock(n *Node[V]) error {
	if err := t.checkOnDevice(n); err != nil {
		return err
	}
	for x := n; x != t.root; x = x.parent {
		if x.lockRef == 0 {
			t.evictable -= len(x.key)
			t.protected += len(x.key)
		}
		x.lockRef++
		t.updateLeafStatus(x)
		t.updateHostLeafStatus(x)
	}
	return nil
}

// Unlock removes a reference added by Lock (SGLang's dec_lock_ref).
func (t *Tree[V]) Unlock(n *Node[V]) error {
	if err := t.checkOnDevice(n); err != nil {
		return err
	}
	if n != t.root && n.lockRef == 0 {
		return ErrNotLocked
	}
	for x := n; x != t.root; x = x.parent {
		x.lockRef--
		if x.lockRef == 0 {
			t.evictable += len(x.key)
			t.protected -= len(x.key)
		}
		t.updateLeafStatus(x)
		t.updateHostLeafStatus(x)
	}
	return nil
}

// Evict deletes unlocked leaves, least recently used first, until at least
// n tokens are freed or nothing evictable remains, and returns the number of
// tokens freed. Whole nodes are deleted, so it may free more than n. A parent
// left as an unlocked leaf becomes a candidate in turn.
func (t *Tree[V]) Evict(n int) int {
	if t.host != nil {
		return t.evictTiered(n)
	}
	freed := 0
	for freed < n && t.leaves.Len() > 0 {
		x := heap.Pop(&t.leaves).(*Node[V])
		freed += len(x.key)
		t.evictable -= len(x.key)
		t.deleteLeaf(x, Device)
	}
	return freed
}

// deleteLeaf takes the leaf x out of the tree, telling the observer that
// its pages left medium.
func (t *Tree[V]) deleteLeaf(x *Node[V], medium Medium) {
	if x.heapIdx >= 0 {
		heap.Remove(&t.leaves, x.heapIdx)
	}
	if x.tier.hostIdx >= 0 {
		heap.Remove(&t.host.leaves, x.tier.hostIdx)
	}
	parent := x.parent
	delete(parent.children, string(t.childKey(parent, x.ns, x.key)))
	if !x.tier.hostOnly {
		parent.tier.devKids--
	}
	t.nodes--
	x.removed = true
	x.parent = nil
	t.updateLeafStatus(parent)
	t.updateHostLeafStatus(parent)
	if t.obs != nil {
		t.removed(x, medium)
	}
}

func (t *Tree[V]) check(n *Node[V]) error {
	if n == nil || n.tree != t || n.epoch != t.epoch || n.removed {
		return ErrStaleHandle
	}
	return nil
}

func (t *Tree[V]) floorPage(n int) int { return n - n%t.pageSize }

func (t *Tree[V]) newNode(parent *Node[V], ns string, key []int32) *Node[V] {
	t.seq++
	return &Node[V]{
		parent:  parent,
		key:     key,
		ns:      ns,
		heapIdx: -1,
		tier:    tierState{hostIdx: -1},
		tick:    t.tick,
		seq:     t.seq,
		epoch:   t.epoch,
		tree:    t,
	}
}

// child returns the child of parent whose first page equals key's, or nil.
func (t *Tree[V]) child(parent *Node[V], ns string, key []int32) *Node[V] {
	return parent.children[string(t.childKey(parent, ns, key))]
}

// childKey is the map key of the child of parent that starts with key's
// first page. Root-level keys carry the namespace, so namespaces never share
// a node; below the root every node inherits its parent's namespace. The
// returned bytes are only valid until the next call.
func (t *Tree[V]) childKey(parent *Node[V], ns string, key []int32) []byte {
	page := asBytes(key[:t.pageSize])
	if parent != t.root {
		return page
	}
	b := binary.AppendUvarint(t.scratch[:0], uint64(len(ns)))
	b = append(b, ns...)
	b = append(b, page...)
	t.scratch = b
	return b
}

// touch makes x most recently used.
func (t *Tree[V]) touch(x *Node[V]) {
	x.tick = t.tick
	if x.heapIdx >= 0 {
		heap.Fix(&t.leaves, x.heapIdx)
	}
	if x.tier.hostIdx >= 0 {
		heap.Fix(&t.host.leaves, x.tier.hostIdx)
	}
}

// split cuts child after p tokens and returns the new upper node. The
// original node keeps the lower part, so handles to it stay valid; the upper
// node inherits the lock count, so protected and evictable sizes are
// unchanged.
func (t *Tree[V]) split(child *Node[V], p int) *Node[V] {
	parent := child.parent
	upper := t.newNode(parent, child.ns, slices.Clone(child.key[:p]))
	upper.end = child.end - len(child.key) + p
	upper.lockRef = child.lockRef
	upper.value = child.value
	upper.tier = child.tier.splitUpper()
	upper.order, child.order = child.order, upper.seq
	parent.children[string(t.childKey(parent, child.ns, child.key))] = upper
	child.key = slices.Clone(child.key[p:])
	if child.digests != nil {
		k := p / t.pageSize
		upper.digests, child.digests = child.digests[:k:k], child.digests[k:]
	}
	child.parent = upper
	upper.children = map[string]*Node[V]{string(t.childKey(upper, child.ns, child.key)): child}
	t.nodes++
	if !child.tier.hostOnly {
		upper.tier.devKids = 1
	}
	if t.host != nil {
		// Above a host-only child, the upper part is a device leaf.
		t.updateLeafStatus(upper)
	}
	return upper
}

// updateLeafStatus keeps the invariant: x is in the evictable-leaf heap
// exactly when it is not the root, has no lock and has no children on the
// device (SGLang's evictable_leaves: a host-only child does not count),
// and is on the device itself.
func (t *Tree[V]) updateLeafStatus(x *Node[V]) {
	want := x != t.root && x.lockRef == 0 && !x.tier.hostOnly
	if want && t.host != nil {
		want = x.tier.devKids == 0
	} else if want {
		want = len(x.children) == 0
	}
	switch {
	case want && x.heapIdx < 0:
		heap.Push(&t.leaves, x)
	case !want && x.heapIdx >= 0:
		heap.Remove(&t.leaves, x.heapIdx)
	}
}

// leafHeap orders evictable leaves least recently used first: the
// device tier's (indexed by heapIdx) or, with host set, the host tier's
// (indexed by tier.hostIdx).
type leafHeap[V any] struct {
	nodes []*Node[V]
	host  bool
}

func (h *leafHeap[V]) index(n *Node[V]) *int {
	if h.host {
		return &n.tier.hostIdx
	}
	return &n.heapIdx
}

func (h *leafHeap[V]) Len() int { return len(h.nodes) }

func (h *leafHeap[V]) Less(i, j int) bool {
	a, b := h.nodes[i], h.nodes[j]
	if a.tick != b.tick {
		return a.tick < b.tick
	}
	return a.seq < b.seq
}

func (h *leafHeap[V]) Swap(i, j int) {
	h.nodes[i], h.nodes[j] = h.nodes[j], h.nodes[i]
	*h.index(h.nodes[i]) = i
	*h.index(h.nodes[j]) = j
}

func (h *leafHeap[V]) Push(x any) {
	n := x.(*Node[V])
	*h.index(n) = len(h.nodes)
	h.nodes = append(h.nodes, n)
}

func (h *leafHeap[V]) Pop() any {
	old := h.nodes
	n := old[len(old)-1]
	old[len(old)-1] = nil
	h.nodes = old[:len(old)-1]
	*h.index(n) = -1
	return n
}

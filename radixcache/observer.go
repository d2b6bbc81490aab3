package radixcache

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"iter"
	"unsafe"
)

// ErrNotEmpty reports an Observe call on a tree that already caches tokens:
// an observer must see every page from the first.
var ErrNotEmpty = errors.New("radixcache: an observer can only be set on an empty tree")

// Digest is the SHA-256 digest that identifies a cached page, chained over
// the pages before it on its path (SGLang's hash_value entries, as bytes).
type Digest [sha256.Size]byte

// Hash is the page's block hash as SGLang's KV events carry it
// (hash_str_to_int64): the digest's first 64 bits, big-endian, as a signed
// integer.
func (d *Digest) Hash() int64 { return int64(binary.BigEndian.Uint64(d[:8])) }

// Page is one cached page as an Observer is told of it.
type Page struct {
	// Hash is the page's block hash (Digest.Hash).
	Hash int64
	// Tokens are the page's token ids. In a bigram tree they are the page's
	// bigrams, each as its two tokens in a row (a0, b0, a1, b1, ...). The
	// slice is never modified afterwards, so an observer may keep it.
	Tokens []int32
	// Bigram tells that Tokens holds pairs.
	Bigram bool
}

// Observer is told of every change to the tree's set of pages, in the order
// the changes happen, synchronously, on the goroutine that changed the
// tree. It is SGLang's radix cache event queue (_record_store_event,
// _record_remove_event, _record_all_cleared_event) as an interface: it must
// not call the tree, and the pages slice it is given is only valid during
// the call.
type Observer interface {
	// Stored reports the pages a new node added, in path order. parent is
	// the hash of the page just before the first one on its path, absent
	// (hasParent false) when the node hangs from the root. A page's own
	// parent is always announced before it.
	Stored(parent int64, hasParent bool, pages []Page)
	// Removed reports the pages of an evicted node, in path order. Only
	// leaves are evicted, so a page is removed before the page it hangs
	// from.
	Removed(pages []Page)
	// Cleared reports that every page is gone: a Reset, and the empty tree
	// an observer starts from (SGLang's constructor resets its tree too).
	Cleared()
}

// TierObserver is an Observer that also hears of the host tier, as
// SGLang's HiRadixCache records its events with a medium: every page event
// of the tree, the device's included, comes through StoredOn and
// RemovedFrom. A plain Observer of a tree with a host tier hears of the
// device's pages only.
type TierObserver interface {
	Observer
	StoredOn(medium Medium, parent int64, hasParent bool, pages []Page)
	RemovedFrom(medium Medium, pages []Page)
}

// Observe sets the tree's observer, which the tree tells of every page it
// stores or removes from now on; it reports Cleared at once. It returns
// ErrNotEmpty if the tree already caches tokens. Observing costs a SHA-256
// per stored page: page digests are computed only for an observed tree or
// one with a host tier.
func (t *Tree[V]) Observe(o Observer) error {
	if t.evictable+t.protected > 0 || t.nodes > 0 {
		return ErrNotEmpty
	}
	t.obs = o
	o.Cleared()
	return nil
}

// pageCount is the number of pages in n's key.
func (t *Tree[V]) pageCount(n *Node[V]) int { return len(n.key) / t.pageSize }

// keepsDigests reports whether the tree computes page digests: an observed
// tree does, for its events, and so does a tree with a host tier, whose
// pages SGLang's storage backends key by them.
func (t *Tree[V]) keepsDigests() bool { return t.obs != nil || t.host != nil }

// stored computes a new node's page digests, if the tree keeps them, and
// tells the observer its pages reached medium.
func (t *Tree[V]) stored(n *Node[V], medium Medium) {
	if !t.keepsDigests() {
		return
	}
	var prior *Digest
	if p := n.parent; p != t.root && len(p.digests) > 0 {
		prior = &p.digests[len(p.digests)-1]
	}
	k := t.pageCount(n)
	n.digests = make([]Digest, k)
	for i := range k {
		n.digests[i] = t.digest(prior, t.pageTokens(n, i))
		prior = &n.digests[i]
	}
	if medium == Host && t.untieredEvents() {
		return // untiered, a prefetch's host pages are not announced
	}
	t.announce(n, medium)
}

// announce tells the observer that n's pages, whose digests it has, are
// on medium.
func (t *Tree[V]) announce(n *Node[V], medium Medium) {
	if t.obs == nil {
		return
	}
	pages := t.nodePages(n, true)
	var parentHash int64
	hasParent := n.parent != t.root && len(n.parent.digests) > 0
	if hasParent {
		parentHash = n.parent.digests[len(n.parent.digests)-1].Hash()
	}
	switch o, tiered := t.obs.(TierObserver); {
	case tiered:
		o.StoredOn(medium, parentHash, hasParent, pages)
	case medium == Device:
		t.obs.Stored(parentHash, hasParent, pages)
	}
	clear(t.pageBuf)
}

// nodePages builds n's pages in the tree's buffer, with their tokens when
// withTokens.
func (t *Tree[V]) nodePages(n *Node[V], withTokens bool) []Page {
	pages := t.pageBuf[:0]
	for i := range n.digests {
		p := Page{Hash: n.digests[i].Hash(), Bigram: t.bigram}
		if withTokens {
			p.Tokens = t.pageTokens(n, i)
		}
		pages = append(pages, p)
	}
	t.pageBuf = pages
	return pages
}

// pageTokens is page i of n as an observer sees it: in a token tree the
// page's slice of the node's key; in a bigram tree a fresh slice of its
// pairs, each unit paired with the one before it (for a node's first
// unit, the last unit of its parent, or at the root the first token, which
// the namespace keeps).
func (t *Tree[V]) pageTokens(n *Node[V], i int) []int32 {
	units := n.key[i*t.pageSize : (i+1)*t.pageSize]
	if !t.bigram {
		return units
	}
	var prev int32
	switch {
	case i > 0:
		prev = n.key[i*t.pageSize-1]
	case n.parent == t.root:
		prev = firstToken(n.ns)
	default:
		prev = n.parent.key[len(n.parent.key)-1]
	}
	pairs := make([]int32, 0, 2*len(units))
	for _, u := range units {
		pairs = append(pairs, prev, u)
		prev = u
	}
	return pairs
}

// digest is SGLang's get_hash_str for one page: SHA-256 over the previous
// page's digest, if any, then every token as 4 bytes, little-endian,
// unsigned (both tokens of each bigram, in order).
func (t *Tree[V]) digest(prior *Digest, tokens []int32) Digest {
	b := t.hashBuf[:0]
	if prior != nil {
		b = append(b, prior[:]...)
	}
	for _, tok := range tokens {
		b = binary.LittleEndian.AppendUint32(b, uint32(tok))
	}
	t.hashBuf = b
	return sha256.Sum256(b)
}

// removed tells the observer that x's pages left medium; untiered, a
// node that leaves the tree from the host leaves the device.
func (t *Tree[V]) removed(x *Node[V], medium Medium) {
	if t.obs == nil {
		return
	}
	if t.untieredEvents() {
		medium = Device
	}
	pages := t.nodePages(x, false)
	switch o, tiered := t.obs.(TierObserver); {
	case tiered:
		o.RemovedFrom(medium, pages)
	case medium == Device:
		t.obs.Removed(pages)
	}
	clear(t.pageBuf)
}

// PageRecord is one cached page of an observed tree with the hash of the
// page it hangs from, and the medium the events announced it on (Device
// for every page of a tree without a host tier).
type PageRecord struct {
	Parent    int64
	HasParent bool
	Medium    Medium
	Page
}

// Pages yields every page of an observed tree as its events announced it,
// each after the page it hangs from, with the tokens Stored reported for
// it: a page on the device, and, with a host tier, a page whose host copy
// was announced (one record for each medium). An unobserved tree yields
// nothing.
func (t *Tree[V]) Pages() iter.Seq[PageRecord] {
	return func(yield func(PageRecord) bool) {
		if t.obs == nil {
			return
		}
		var walk func(n *Node[V]) bool
		untiered := t.untieredEvents()
		walk = func(n *Node[V]) bool {
			for _, m := range [...]Medium{Device, Host} {
				if !n.tier.announcedOn(m, untiered) {
					continue
				}
				var parent int64
				hasParent := n.parent != t.root && len(n.parent.digests) > 0
				if hasParent {
					parent = n.parent.digests[len(n.parent.digests)-1].Hash()
				}
				for i := range n.digests {
					rec := PageRecord{Parent: parent, HasParent: hasParent, Medium: m,
						Page: Page{Hash: n.digests[i].Hash(), Tokens: t.pageTokens(n, i), Bigram: t.bigram}}
					if !yield(rec) {
						return false
					}
					parent, hasParent = n.digests[i].Hash(), true
				}
			}
			for _, c := range n.children {
				if !walk(c) {
					return false
				}
			}
			return true
		}
		for _, c := range t.root.children {
			if !walk(c) {
				return
			}
		}
	}
}

// firstToken reads back the token a bigram namespace ends with (units puts
// it there in the machine's byte order).
func firstToken(ns string) int32 {
	b := []byte(ns[len(ns)-4:])
	return *(*int32)(unsafe.Pointer(&b[0]))
}

// PageDigests is what a tree gives pages pages of key's units from unit at
// on, chained after prior (nil for pages that start at the root): SGLang's
// get_hash_str over each page, as a prefetch from storage computes the keys
// of the pages it looks for. In a bigram tree unit j is the pair (key[j],
// key[j+1]). It stops early when key runs out.
func PageDigests(prior *Digest, key []int32, at, pages, pageSize int, bigram bool) []Digest {
	units := len(key)
	if bigram {
		units--
	}
	pages = max(0, min(pages, (units-at)/pageSize))
	out := make([]Digest, pages)
	var b []byte
	for i := range pages {
		b = b[:0]
		if prior != nil {
			b = append(b, prior[:]...)
		}
		for j := at + i*pageSize; j < at+(i+1)*pageSize; j++ {
			b = binary.LittleEndian.AppendUint32(b, uint32(key[j]))
			if bigram {
				b = binary.LittleEndian.AppendUint32(b, uint32(key[j+1]))
			}
		}
		out[i] = sha256.Sum256(b)
		prior = &out[i]
	}
	return out
}

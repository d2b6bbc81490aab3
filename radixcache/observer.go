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

// Observe sets the tree's observer, which the tree tells of every page it
// stores or removes from now on; it reports Cleared at once. It returns
// ErrNotEmpty if the tree already caches tokens. Observing costs a SHA-256
// per stored page: page digests are computed only for an observed tree.
func (t *Tree[V]) Observe(o Observer) error {
	if t.evictable+t.protected > 0 {
		return ErrNotEmpty
	}
	t.obs = o
	o.Cleared()
	return nil
}

// pageCount is the number of pages in n's key.
func (t *Tree[V]) pageCount(n *Node[V]) int { return len(n.key) / t.pageSize }

// stored computes a new leaf's page digests and tells the observer. full
// is the Insert's whole key (before the bigram split into namespace and
// units), so the leaf's units start at unit index from.
func (t *Tree[V]) stored(leaf *Node[V], full []int32, from int) {
	parent := leaf.parent
	var prior *Digest
	if parent != t.root && len(parent.digests) > 0 {
		prior = &parent.digests[len(parent.digests)-1]
	}
	n := t.pageCount(leaf)
	leaf.digests = make([]Digest, n)
	pages := t.pageBuf[:0]
	for i := range n {
		tokens := t.pageTokens(full, from+i*t.pageSize, leaf.key[i*t.pageSize:(i+1)*t.pageSize])
		leaf.digests[i] = t.digest(prior, tokens)
		prior = &leaf.digests[i]
		pages = append(pages, Page{Hash: leaf.digests[i].Hash(), Tokens: tokens, Bigram: t.bigram})
	}
	t.pageBuf = pages
	var parentHash int64
	hasParent := parent != t.root && len(parent.digests) > 0
	if hasParent {
		parentHash = parent.digests[len(parent.digests)-1].Hash()
	}
	t.obs.Stored(parentHash, hasParent, pages)
	clear(t.pageBuf)
}

// pageTokens is a page's tokens as an observer sees them: in a token tree
// the page's slice of the node's key; in a bigram tree a fresh slice of
// its pairs, unit i of the key being the pair (full[i], full[i+1]).
func (t *Tree[V]) pageTokens(full []int32, at int, units []int32) []int32 {
	if !t.bigram {
		return units
	}
	pairs := make([]int32, 0, 2*len(units))
	for i := range units {
		pairs = append(pairs, full[at+i], full[at+i+1])
	}
	return pairs
}

// digest is SGLang's get_hash_str for one page: SHA-256 over the previous
// page's digest, if any, then every token as 4 bytes, little-endian,
// unsigned (both tokens of a bigram, in order).
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

// removed tells the observer of an evicted node's pages.
func (t *Tree[V]) removed(x *Node[V]) {
	pages := t.pageBuf[:0]
	for i := range x.digests {
		pages = append(pages, Page{Hash: x.digests[i].Hash(), Bigram: t.bigram})
	}
	t.pageBuf = pages
	t.obs.Removed(pages)
	clear(t.pageBuf)
}

// PageRecord is one cached page of an observed tree with the hash of the
// page it hangs from.
type PageRecord struct {
	Parent    int64
	HasParent bool
	Page
}

// Pages yields every page of an observed tree, each after the page it
// hangs from, with the tokens Stored reported for it. An unobserved tree
// has no page digests and yields nothing.
func (t *Tree[V]) Pages() iter.Seq[PageRecord] {
	return func(yield func(PageRecord) bool) {
		if t.obs == nil {
			return
		}
		var walk func(n *Node[V], head int32) bool
		walk = func(n *Node[V], head int32) bool {
			var parent int64
			hasParent := n.parent != t.root && len(n.parent.digests) > 0
			if hasParent {
				parent = n.parent.digests[len(n.parent.digests)-1].Hash()
			}
			full := n.key
			if t.bigram {
				full = append([]int32{head}, n.key...)
			}
			for i := range n.digests {
				tokens := t.pageTokens(full, i*t.pageSize, n.key[i*t.pageSize:(i+1)*t.pageSize])
				if !yield(PageRecord{Parent: parent, HasParent: hasParent, Page: Page{Hash: n.digests[i].Hash(), Tokens: tokens, Bigram: t.bigram}}) {
					return false
				}
				parent, hasParent = n.digests[i].Hash(), true
			}
			last := full[len(full)-1]
			for _, c := range n.children {
				if !walk(c, last) {
					return false
				}
			}
			return true
		}
		for _, c := range t.root.children {
			var head int32
			if t.bigram {
				head = firstToken(c.ns)
			}
			if !walk(c, head) {
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

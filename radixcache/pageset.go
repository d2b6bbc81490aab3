package radixcache

import (
	"cmp"
	"fmt"
	"slices"
)

// PageSet is what a subscriber to a tree's events knows of the tree: the
// pages stored and not yet removed, replayed from Stored, Removed and
// Cleared. It is a multiset, as the hashes are: the same tokens cached in
// two namespaces are two pages with one hash, as in SGLang, whose hashes
// do not depend on the namespace. The zero value is an empty set.
//
// Replaying checks what a subscriber relies on: a page's parent is known
// when the page is stored, and a removed page was stored.
type PageSet struct {
	pages map[int64][]PageRecord
	n     int
}

// Stored adds pages, each hanging from the one before it, the first from
// parent. It fails if the parent is unknown.
func (s *PageSet) Stored(parent int64, hasParent bool, pages []Page) error {
	if s.pages == nil {
		s.pages = make(map[int64][]PageRecord)
	}
	if hasParent && len(s.pages[parent]) == 0 {
		return fmt.Errorf("radixcache: page %d stored before its parent %d", pages[0].Hash, parent)
	}
	for _, p := range pages {
		s.pages[p.Hash] = append(s.pages[p.Hash], PageRecord{Parent: parent, HasParent: hasParent, Page: p})
		parent, hasParent = p.Hash, true
		s.n++
	}
	return nil
}

// Removed drops one page per hash. It fails if a hash is not in the set.
func (s *PageSet) Removed(hashes ...int64) error {
	for _, h := range hashes {
		recs := s.pages[h]
		if len(recs) == 0 {
			return fmt.Errorf("radixcache: page %d removed but not stored", h)
		}
		if len(recs) == 1 {
			delete(s.pages, h)
		} else {
			s.pages[h] = recs[:len(recs)-1]
		}
		s.n--
	}
	return nil
}

// Cleared empties the set.
func (s *PageSet) Cleared() {
	clear(s.pages)
	s.n = 0
}

// Len is the number of pages in the set.
func (s *PageSet) Len() int { return s.n }

// Records returns the set's pages in a canonical order (by hash, parent
// and tokens).
func (s *PageSet) Records() []PageRecord {
	out := make([]PageRecord, 0, s.n)
	for _, recs := range s.pages {
		out = append(out, recs...)
	}
	SortRecords(out)
	return out
}

// SortRecords puts page records in PageSet.Records' canonical order, so
// that two multisets of pages compare with slices.EqualFunc.
func SortRecords(recs []PageRecord) {
	slices.SortFunc(recs, func(a, b PageRecord) int {
		return cmp.Or(
			cmp.Compare(a.Hash, b.Hash),
			compareBool(a.HasParent, b.HasParent),
			cmp.Compare(a.Parent, b.Parent),
			slices.Compare(a.Tokens, b.Tokens),
		)
	})
}

// EqualRecords reports whether two record lists, each in canonical order,
// hold the same pages.
func EqualRecords(a, b []PageRecord) bool {
	return slices.EqualFunc(a, b, func(x, y PageRecord) bool {
		return x.Hash == y.Hash && x.HasParent == y.HasParent && x.Parent == y.Parent && slices.Equal(x.Tokens, y.Tokens)
	})
}

func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

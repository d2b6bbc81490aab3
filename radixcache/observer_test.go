package radixcache

import (
	"github.com/sglmock/sglmock/internal/norace"

	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// recorder logs the observer calls as text and replays them into a PageSet.
type recorder struct {
	log  []string
	set  PageSet
	errs []error
}

func (r *recorder) Stored(parent int64, hasParent bool, pages []Page) {
	p := "nil"
	if hasParent {
		p = fmt.Sprint(parent)
	}
	var parts []string
	for _, pg := range pages {
		parts = append(parts, fmt.Sprintf("%d%v", pg.Hash, pg.Tokens))
	}
	r.log = append(r.log, fmt.Sprintf("stored parent=%s %s", p, strings.Join(parts, " ")))
	if err := r.set.Stored(parent, hasParent, slices.Clone(pages)); err != nil {
		r.errs = append(r.errs, err)
	}
}

func (r *recorder) Removed(pages []Page) {
	var hashes []int64
	for _, pg := range pages {
		hashes = append(hashes, pg.Hash)
	}
	r.log = append(r.log, fmt.Sprintf("removed %v", hashes))
	if err := r.set.Removed(hashes...); err != nil {
		r.errs = append(r.errs, err)
	}
}

func (r *recorder) Cleared() {
	r.log = append(r.log, "cleared")
	r.set.Cleared()
}

func observed(t testing.TB, tr *Tree[string]) *recorder {
	t.Helper()
	r := &recorder{}
	if err := tr.Observe(r); err != nil {
		t.Fatal(err)
	}
	return r
}

func treePages(tr *Tree[string]) []PageRecord {
	recs := slices.Collect(tr.Pages())
	SortRecords(recs)
	return recs
}

// The hashes are SGLang's: get_hash_str chains SHA-256 over the previous
// page's digest and each token as 4 little-endian bytes (both tokens of a
// bigram), and hash_str_to_int64 keeps the first 16 hex digits as a signed
// int64. The wanted values were computed with those two Python functions
// (hashlib), copied from python/sglang/srt/mem_cache/hicache_storage.py.
func TestPageHashesAreSGLangs(t *testing.T) {
	tests := []struct {
		name   string
		page   int
		bigram bool
		key    []int32
		want   []int64
	}{
		{"page 2", 2, false, []int32{1, 2, 3, 4, 5, 6}, []int64{3817746824117602890, -4216701448867210342, 5371148316746243504}},
		{"page 1", 1, false, []int32{259, 1024}, []int64{9204690281073638432, 3639246371987415880}},
		{"bigram, page 2", 2, true, []int32{7, 100, 101, 102, 103}, []int64{1267363100005438100, -8459714743258891441}},
	}
	for _, tt := range tests {
		tr := mustNew(t, tt.page)
		if tt.bigram {
			var err error
			if tr, err = NewBigram[string](tt.page); err != nil {
				t.Fatal(err)
			}
		}
		observed(t, tr)
		tr.Insert("", tt.key, "")
		var got []int64
		for p := range tr.Pages() {
			got = append(got, p.Hash)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: got hashes %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestObserverEvents(t *testing.T) {
	tr := mustNew(t, 2)
	r := observed(t, tr)
	tr.Insert("", seq(1, 6), "a")                  // pages [1 2] [3 4] [5 6]
	tr.Insert("", cat(seq(1, 4), seq(9, 12)), "b") // splits after [3 4], adds [9 10] [11 12]
	tr.Insert("", seq(1, 4), "c")                  // nothing new
	tr.Match("", cat(seq(1, 2), []int32{8, 8}))    // splits after [1 2]: no event
	tr.Insert("salt", seq(1, 2), "d")              // same tokens, another namespace: the same hash
	tr.Evict(1)                                    // least recent leaf: [5 6]
	tr.Evict(100)
	tr.Insert("", seq(1, 2), "e")
	tr.Reset()
	want := []string{
		"cleared",
		"stored parent=nil 3817746824117602890[1 2] -4216701448867210342[3 4] 5371148316746243504[5 6]",
		"stored parent=-4216701448867210342 -3493067470035911263[9 10] -3760915287332959910[11 12]",
		"stored parent=nil 3817746824117602890[1 2]",
		"removed [5371148316746243504]",
		"removed [-3493067470035911263 -3760915287332959910]",
		"removed [-4216701448867210342]",
		"removed [3817746824117602890]",
		"removed [3817746824117602890]",
		"stored parent=nil 3817746824117602890[1 2]",
		"cleared",
	}
	if !slices.Equal(r.log, want) {
		t.Errorf("events:\n got %s\nwant %s", strings.Join(r.log, "\n     "), strings.Join(want, "\n     "))
	}
	if len(r.errs) > 0 {
		t.Errorf("replay errors: %v", r.errs)
	}
	if err := tr.Observe(r); err != nil {
		t.Errorf("Observe on an empty tree: %v", err)
	}
	tr.Insert("", seq(1, 2), "")
	if err := tr.Observe(r); !errors.Is(err, ErrNotEmpty) {
		t.Errorf("Observe on a tree with tokens: got %v, want ErrNotEmpty", err)
	}
}

// TestObservedReplayMatchesPages replays every event of random operations
// (inserts that split and extend, matches that split, locks, evictions,
// resets) into a PageSet and compares it with the tree's pages after each
// one, for token and bigram trees and several page sizes.
func TestObservedReplayMatchesPages(t *testing.T) {
	norace.Skip(t, "checks the observed pages (the tree has no goroutines)")
	for _, bigram := range []bool{false, true} {
		for _, page := range []int{1, 2, 4} {
			t.Run(fmt.Sprintf("bigram=%v/page=%d", bigram, page), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(page), 7))
				tr := mustNew(t, page)
				if bigram {
					tr, _ = NewBigram[string](page)
				}
				rec := observed(t, tr)
				var locked []*Node[string]
				randKey := func() []int32 {
					k := make([]int32, r.IntN(24))
					for i := range k {
						k[i] = r.Int32N(3) // a small alphabet shares prefixes often
					}
					return k
				}
				for step := range 3000 {
					ns := []string{"", "x"}[r.IntN(2)]
					switch op := r.IntN(20); {
					case op < 9:
						_, n := tr.Insert(ns, randKey(), "")
						if r.IntN(3) == 0 && tr.Lock(n) == nil {
							locked = append(locked, n)
						}
					case op < 13:
						tr.Match(ns, randKey())
					case op < 15 && len(locked) > 0:
						i := r.IntN(len(locked))
						if err := tr.Unlock(locked[i]); err != nil {
							t.Fatal(err)
						}
						locked = slices.Delete(locked, i, i+1)
					case op < 19:
						tr.Evict(r.IntN(12))
					default:
						tr.Reset()
						locked = nil
					}
					if len(rec.errs) > 0 {
						t.Fatalf("step %d: %v", step, rec.errs)
					}
					if got, want := rec.set.Records(), treePages(tr); !EqualRecords(got, want) {
						t.Fatalf("step %d: replayed %d pages, the tree holds %d:\n got %v\nwant %v", step, len(got), len(want), got, want)
					}
					if want := tr.Stats().Tokens / page; rec.set.Len() != want {
						t.Fatalf("step %d: replayed %d pages, the tree caches %d units in pages of %d", step, rec.set.Len(), tr.Stats().Tokens, page)
					}
				}
			})
		}
	}
}

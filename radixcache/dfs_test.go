package radixcache

import (
	"slices"
	"testing"
)

// TestDFSWeightOrder: SGLang's _dfs_weight_order on a tree built in a
// known order. Root: [1 2] (split from [1 2 3 4], inserted first, so it
// keeps that place) with children [3 4] and [9], then [5 6].
func TestDFSWeightOrder(t *testing.T) {
	tr, err := New[string](1)
	if err != nil {
		t.Fatal(err)
	}
	tr.Insert("", []int32{1, 2, 3, 4}, "a")
	tr.Insert("", []int32{5, 6}, "b")
	tr.Insert("", []int32{1, 2, 9}, "c")
	at := func(key ...int32) *Node[string] {
		_, n := tr.Match("", key)
		return n
	}
	for _, tc := range []struct {
		name  string
		nodes []*Node[string]
		want  []int
	}{
		// [1 2] weighs 3 and goes first; under it [9] (2) before [3 4]
		// (1); then [5 6]; the request with nothing cached last.
		{"by weight", []*Node[string]{at(5, 6, 7), at(1, 2, 9, 9), at(8), at(1, 2, 3, 4, 5), at(1, 2, 9)}, []int{1, 4, 3, 0, 2}},
		// Equal weights keep the parent's order: the split's upper part
		// [1 2] stands where [1 2 3 4] was, ahead of [5 6].
		{"split keeps its place", []*Node[string]{at(5, 6), at(1, 2)}, []int{1, 0}},
		// Under [1 2], [3 4] (the original node) was there before [9].
		{"children in insertion order", []*Node[string]{at(1, 2, 9), at(1, 2, 3, 4)}, []int{1, 0}},
		// A node's own requests come after its children's, in the order
		// given.
		{"post-order", []*Node[string]{at(1, 2), at(1, 2, 3), at(1, 2, 7)}, []int{1, 0, 2}},
		{"all at the root", []*Node[string]{at(7), at(8)}, []int{0, 1}},
	} {
		if got := tr.DFSWeightOrder(tc.nodes); !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestDFSWeightOrderSplitBehind: the upper part of a split node stands
// where the node stood, behind a sibling added before it.
func TestDFSWeightOrderSplitBehind(t *testing.T) {
	tr, err := New[string](1)
	if err != nil {
		t.Fatal(err)
	}
	tr.Insert("", []int32{5, 6}, "b")
	tr.Insert("", []int32{1, 2, 3, 4}, "a")
	_, upper := tr.Match("", []int32{1, 2})
	_, five := tr.Match("", []int32{5, 6})
	if got, want := tr.DFSWeightOrder([]*Node[string]{upper, five}), []int{1, 0}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// TestDFSWeightOrderEvictedNode: a node that left the tree counts as the
// root; a first page added again after an eviction goes last among its
// siblings, as a key deleted from a dict and set again does.
func TestDFSWeightOrderEvictedNode(t *testing.T) {
	tr, err := New[string](1)
	if err != nil {
		t.Fatal(err)
	}
	_, x := tr.Insert("", []int32{1, 2}, "x")
	tr.Insert("", []int32{3, 4}, "y")
	tr.Match("", []int32{3, 4}) // [1 2] is the least recently used
	if freed := tr.Evict(1); freed != 2 {
		t.Fatalf("evicted %d tokens, want [1 2]'s 2", freed)
	}
	_, again := tr.Insert("", []int32{1, 2}, "x2")
	_, y := tr.Match("", []int32{3, 4})
	if got, want := tr.DFSWeightOrder([]*Node[string]{x, again, y}), []int{2, 1, 0}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

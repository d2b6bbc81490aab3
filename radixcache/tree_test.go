package radixcache

import (
	"errors"
	"testing"
)

func seq(from, to int32) []int32 {
	s := make([]int32, 0, to-from+1)
	for v := from; v <= to; v++ {
		s = append(s, v)
	}
	return s
}

func cat(parts ...[]int32) []int32 {
	var s []int32
	for _, p := range parts {
		s = append(s, p...)
	}
	return s
}

func mustNew(t testing.TB, pageSize int) *Tree[string] {
	t.Helper()
	tr, err := New[string](pageSize)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func wantStats(t *testing.T, tr *Tree[string], want Stats) {
	t.Helper()
	if got := tr.Stats(); got != want {
		t.Fatalf("stats: got %+v, want %+v", got, want)
	}
	checkInvariants(t, tr)
}

func TestNewRejectsBadPageSize(t *testing.T) {
	for _, p := range []int{0, -1} {
		if _, err := New[string](p); err == nil {
			t.Errorf("New(%d): got nil error, want one", p)
		}
	}
}

func TestReusablePrefixLen(t *testing.T) {
	tests := []struct {
		n, page, want int
	}{
		{0, 1, 0},
		{1, 1, 0}, // a one-token prompt never hits
		{2, 1, 1},
		{1407, 1, 1406}, // the original benchmark's 1k prompt: second request reuses 1406 of 1407
		{16, 16, 0},
		{17, 16, 16},
		{32, 16, 16},
		{33, 16, 32},
		{40, 16, 32},
		{5, 0, 0},
	}
	for _, tt := range tests {
		if got := ReusablePrefixLen(tt.n, tt.page); got != tt.want {
			t.Errorf("ReusablePrefixLen(%d, %d): got %d, want %d", tt.n, tt.page, got, tt.want)
		}
	}
	tr := mustNew(t, 16)
	if got := tr.ReusablePrefixLen(40); got != 32 {
		t.Errorf("Tree.ReusablePrefixLen(40) with page 16: got %d, want 32", got)
	}
}

func TestInsertThenMatch(t *testing.T) {
	tr := mustNew(t, 1)
	prompt := seq(1, 1407)
	if existed, _ := tr.Insert("", prompt, ""); existed != 0 {
		t.Fatalf("first insert: got existed %d, want 0", existed)
	}
	n, node := tr.Match("", prompt)
	if n != 1407 || node.PrefixLen() != 1407 {
		t.Fatalf("match of the cached prompt: got %d (node ends at %d), want 1407", n, node.PrefixLen())
	}
	// What the scheduler asks for: one token short.
	n, node = tr.Match("", prompt[:tr.ReusablePrefixLen(len(prompt))])
	if n != 1406 || node.PrefixLen() != 1406 {
		t.Fatalf("match of the reusable prefix: got %d (node ends at %d), want 1406", n, node.PrefixLen())
	}
	wantStats(t, tr, Stats{Tokens: 1407, Evictable: 1407, Nodes: 2})

	existed, last := tr.Insert("", cat(prompt, seq(5000, 5009)), "")
	if existed != 1407 || last.PrefixLen() != 1417 {
		t.Fatalf("insert of prompt+output: got existed %d ending at %d, want 1407 ending at 1417", existed, last.PrefixLen())
	}
	wantStats(t, tr, Stats{Tokens: 1417, Evictable: 1417, Nodes: 3})
}

func TestMatchMisses(t *testing.T) {
	tr := mustNew(t, 1)
	tr.Insert("", []int32{1, 2, 3}, "")
	tests := []struct {
		name string
		key  []int32
		want int
	}{
		{"empty key", nil, 0},
		{"different first token", []int32{9, 2, 3}, 0},
		{"longer key", []int32{1, 2, 3, 4, 5}, 3},
		{"diverges at 2", []int32{1, 2, 7}, 2},
	}
	for _, tt := range tests {
		n, node := tr.Match("", tt.key)
		if n != tt.want || node.PrefixLen() != tt.want {
			t.Errorf("%s: got %d (node ends at %d), want %d", tt.name, n, node.PrefixLen(), tt.want)
		}
	}
	checkInvariants(t, tr)
}

func TestPageSize16(t *testing.T) {
	tr := mustNew(t, 16)
	key := seq(1, 40)
	existed, last := tr.Insert("", key, "")
	if existed != 0 || last.PrefixLen() != 32 {
		t.Fatalf("insert of 40 tokens: got existed %d ending at %d, want 0 ending at 32 (partial page dropped)", existed, last.PrefixLen())
	}
	wantStats(t, tr, Stats{Tokens: 32, Evictable: 32, Nodes: 1})

	tests := []struct {
		name string
		key  []int32
		want int
	}{
		{"same 40 tokens", key, 32},
		{"31 tokens", key[:31], 16},
		{"15 tokens: no whole page", key[:15], 0},
		{"reusable prefix of 40", key[:ReusablePrefixLen(40, 16)], 32},
		{"differs inside page 2", cat(seq(1, 20), []int32{99}, seq(22, 40)), 16},
		{"differs in the last token of page 1", cat(seq(1, 15), []int32{99}, seq(17, 40)), 0},
	}
	for _, tt := range tests {
		if n, _ := tr.Match("", tt.key); n != tt.want {
			t.Errorf("%s: got %d, want %d", tt.name, n, tt.want)
		}
	}
	// The mismatch inside page 2 split the node at the page boundary.
	wantStats(t, tr, Stats{Tokens: 32, Evictable: 32, Nodes: 2})
}

func TestPagedSiblingsShareFirstToken(t *testing.T) {
	// Two keys that agree on the first token but differ later in the first
	// page are different children of the root.
	tr := mustNew(t, 4)
	tr.Insert("", []int32{1, 2, 3, 4, 5, 6, 7, 8}, "")
	if existed, _ := tr.Insert("", []int32{1, 2, 3, 9, 5, 6, 7, 8}, ""); existed != 0 {
		t.Fatalf("insert of a key differing in page 1: got existed %d, want 0", existed)
	}
	wantStats(t, tr, Stats{Tokens: 16, Evictable: 16, Nodes: 2})
	if n, _ := tr.Match("", []int32{1, 2, 3, 9, 5, 6, 7, 8}); n != 8 {
		t.Fatalf("match of the second key: got %d, want 8", n)
	}
}

func TestSplitMidEdge(t *testing.T) {
	tr := mustNew(t, 1)
	_, leaf := tr.Insert("", seq(1, 10), "")
	if err := tr.Lock(leaf); err != nil {
		t.Fatal(err)
	}
	n, upper := tr.Match("", []int32{1, 2, 3, 4, 99})
	if n != 4 || upper.PrefixLen() != 4 {
		t.Fatalf("match ending mid-edge: got %d (node ends at %d), want 4", n, upper.PrefixLen())
	}
	if upper == leaf || leaf.PrefixLen() != 10 {
		t.Fatalf("split must keep the original node as the lower part: leaf ends at %d, want 10", leaf.PrefixLen())
	}
	// The upper part inherits the lock: nothing becomes evictable.
	wantStats(t, tr, Stats{Tokens: 10, Protected: 10, Nodes: 2})
	if got := tr.Evict(100); got != 0 {
		t.Fatalf("evict with the path locked: got %d freed, want 0", got)
	}
	// The old handle still unlocks the whole path.
	if err := tr.Unlock(leaf); err != nil {
		t.Fatal(err)
	}
	wantStats(t, tr, Stats{Tokens: 10, Evictable: 10, Nodes: 2})
}

// Each node carries the value of the Insert that added its tokens, of
// whatever type the tree holds: a split keeps it on both parts, and
// inserting cached tokens again does not change it.
func TestValueSurvivesSplits(t *testing.T) {
	tr, err := New[uint64](1)
	if err != nil {
		t.Fatal(err)
	}
	tr.Insert("", seq(1, 10), 7)
	tr.Insert("", cat(seq(1, 10), seq(20, 25)), 8)
	tr.Insert("", seq(1, 10), 9) // cached already: nothing new
	tests := []struct {
		key  []int32
		want uint64
	}{
		{seq(1, 4), 7}, // split inside the first insert's node: the upper part keeps 7
		{seq(1, 10), 7},
		{cat(seq(1, 10), seq(20, 22)), 8},
		{[]int32{99}, 0}, // the root
	}
	for _, tt := range tests {
		if _, n := tr.Match("", tt.key); n.Value() != tt.want {
			t.Errorf("match %v: got value %d, want %d", tt.key, n.Value(), tt.want)
		}
	}
}

func TestNamespaceIsolation(t *testing.T) {
	tr := mustNew(t, 1)
	prompt := seq(1, 100)
	tr.Insert("salt-a", prompt, "")
	tests := []struct {
		ns   string
		want int
	}{
		{"salt-a", 100},
		{"salt-b", 0},
		{"", 0},
		{"salt-", 0}, // a namespace that is a prefix of another is still distinct
	}
	for _, tt := range tests {
		if n, _ := tr.Match(tt.ns, prompt); n != tt.want {
			t.Errorf("match in namespace %q: got %d, want %d", tt.ns, n, tt.want)
		}
	}
	if existed, _ := tr.Insert("salt-b", prompt, ""); existed != 0 {
		t.Fatalf("insert in a second namespace: got existed %d, want 0", existed)
	}
	wantStats(t, tr, Stats{Tokens: 200, Evictable: 200, Nodes: 2})
	// Evicting one namespace's copy leaves the other intact.
	tr.Evict(1)
	if n, _ := tr.Match("salt-b", prompt); n != 100 {
		t.Fatalf("after evicting salt-a's copy, salt-b: got %d, want 100", n)
	}
	if n, _ := tr.Match("salt-a", prompt); n != 0 {
		t.Fatalf("after evicting salt-a's copy, salt-a: got %d, want 0", n)
	}
}

func TestLRUEvictionOrder(t *testing.T) {
	tr := mustNew(t, 1)
	a, b, c := seq(100, 109), seq(200, 219), seq(300, 329)
	tr.Insert("", a, "")
	tr.Insert("", b, "")
	tr.Insert("", c, "")
	tr.Match("", a) // a becomes most recent: order is now b, c, a

	steps := []struct {
		ask, freed int
		gone       []int32
	}{
		{1, 20, b},  // whole node b, though 1 token was asked
		{25, 30, c}, // c alone covers 25
		{1, 10, a},
		{1, 0, nil}, // nothing left
	}
	for i, s := range steps {
		if got := tr.Evict(s.ask); got != s.freed {
			t.Fatalf("step %d: Evict(%d) got %d freed, want %d", i, s.ask, got, s.freed)
		}
		if s.gone != nil {
			if n, _ := tr.Match("", s.gone); n != 0 {
				t.Fatalf("step %d: evicted key still matches %d tokens", i, n)
			}
		}
		checkInvariants(t, tr)
	}
}

func TestMatchEndingMidEdgeRefreshesTheWholeNode(t *testing.T) {
	// SGLang stamps the child before splitting it, so the unmatched lower
	// part is refreshed too, and an older leaf goes first.
	tr := mustNew(t, 1)
	tr.Insert("", seq(1, 6), "")
	tr.Insert("", seq(50, 51), "")
	tr.Match("", []int32{1, 2, 3, 99})
	if got := tr.Evict(1); got != 2 {
		t.Fatalf("first eviction: got %d freed, want 2 (the older leaf [50 51])", got)
	}
	if n, _ := tr.Match("", seq(1, 6)); n != 6 {
		t.Fatalf("refreshed key: got %d cached, want 6", n)
	}
}

func TestLockedPathsNeverEvicted(t *testing.T) {
	tr := mustNew(t, 1)
	sys := seq(1, 50)
	_, locked := tr.Insert("", cat(sys, seq(1000, 1009)), "")
	tr.Insert("", cat(sys, seq(2000, 2019)), "")
	tr.Insert("", seq(3000, 3039), "")
	if err := tr.Lock(locked); err != nil {
		t.Fatal(err)
	}
	wantStats(t, tr, Stats{Tokens: 120, Evictable: 60, Protected: 60, Nodes: 4})

	if got := tr.Evict(1 << 30); got != 60 {
		t.Fatalf("evict everything: got %d freed, want 60 (the unlocked leaves)", got)
	}
	wantStats(t, tr, Stats{Tokens: 60, Protected: 60, Nodes: 2})
	if n, _ := tr.Match("", cat(sys, seq(1000, 1009))); n != 60 {
		t.Fatalf("locked key after eviction: got %d, want 60", n)
	}
	// Once unlocked, the whole path is evictable and cascades to nothing.
	if err := tr.Unlock(locked); err != nil {
		t.Fatal(err)
	}
	if got := tr.Evict(1 << 30); got != 60 {
		t.Fatalf("evict after unlock: got %d freed, want 60", got)
	}
	wantStats(t, tr, Stats{})
}

func TestCascadingEviction(t *testing.T) {
	tr := mustNew(t, 1)
	tr.Insert("", []int32{1, 2, 3, 4}, "")
	tr.Insert("", []int32{1, 2, 5, 6}, "")
	wantStats(t, tr, Stats{Tokens: 6, Evictable: 6, Nodes: 3})
	// [3 4] is older than [5 6]; after both go, [1 2] is a leaf and goes too.
	if got := tr.Evict(2); got != 2 {
		t.Fatalf("Evict(2): got %d, want 2", got)
	}
	if n, _ := tr.Match("", []int32{1, 2, 5, 6}); n != 4 {
		t.Fatalf("younger sibling: got %d, want 4", n)
	}
	if got := tr.Evict(3); got != 4 {
		t.Fatalf("Evict(3): got %d, want 4 (leaf then its parent)", got)
	}
	wantStats(t, tr, Stats{})
}

func TestLockUnlockErrors(t *testing.T) {
	tr := mustNew(t, 1)
	other := mustNew(t, 1)
	_, foreign := other.Insert("", []int32{1, 2}, "")
	_, n := tr.Insert("", []int32{1, 2, 3}, "")

	if err := tr.Unlock(n); !errors.Is(err, ErrNotLocked) {
		t.Errorf("unlock of an unlocked node: got %v, want ErrNotLocked", err)
	}
	if err := tr.Lock(foreign); !errors.Is(err, ErrStaleHandle) {
		t.Errorf("lock of another tree's node: got %v, want ErrStaleHandle", err)
	}
	if err := tr.Lock(nil); !errors.Is(err, ErrStaleHandle) {
		t.Errorf("lock of nil: got %v, want ErrStaleHandle", err)
	}
	tr.Evict(1)
	if err := tr.Lock(n); !errors.Is(err, ErrStaleHandle) {
		t.Errorf("lock of an evicted node: got %v, want ErrStaleHandle", err)
	}
	_, n = tr.Insert("", []int32{1, 2, 3}, "")
	tr.Reset()
	if err := tr.Lock(n); !errors.Is(err, ErrStaleHandle) {
		t.Errorf("lock of a node from before Reset: got %v, want ErrStaleHandle", err)
	}
	// The root (a zero-length match) may be locked and unlocked freely.
	_, root := tr.Match("", []int32{42})
	if err := tr.Lock(root); err != nil {
		t.Errorf("lock of the root: %v", err)
	}
	if err := tr.Unlock(root); err != nil {
		t.Errorf("unlock of the root: %v", err)
	}
	wantStats(t, tr, Stats{})
}

func TestReset(t *testing.T) {
	tr := mustNew(t, 1)
	_, n := tr.Insert("", seq(1, 10), "")
	tr.Insert("ns", seq(1, 10), "")
	if err := tr.Lock(n); err != nil {
		t.Fatal(err)
	}
	tr.Reset()
	wantStats(t, tr, Stats{})
	if got, _ := tr.Match("", seq(1, 10)); got != 0 {
		t.Fatalf("match after Reset: got %d, want 0", got)
	}
	if existed, _ := tr.Insert("", seq(1, 10), ""); existed != 0 {
		t.Fatalf("insert after Reset: got existed %d, want 0", existed)
	}
	wantStats(t, tr, Stats{Tokens: 10, Evictable: 10, Nodes: 1})
}

func TestCommonPrefix(t *testing.T) {
	long := seq(0, 5000)
	tests := []struct {
		name string
		a, b []int32
		want int
	}{
		{"both empty", nil, nil, 0},
		{"one empty", long, nil, 0},
		{"equal", long, long, 5001},
		{"prefix", long, long[:3000], 3000},
		{"differ at 0", []int32{1}, []int32{2}, 0},
		{"differ at block edge", long, cat(long[:1024], []int32{-1}), 1024},
		{"differ after blocks", long, cat(long[:4097], []int32{-1}, long[4098:]), 4097},
		{"differ in low byte only", []int32{1, 0x100}, []int32{1, 0x101}, 1},
	}
	for _, tt := range tests {
		if got := commonPrefix(tt.a, tt.b); got != tt.want {
			t.Errorf("%s: got %d, want %d", tt.name, got, tt.want)
		}
	}
}

// checkInvariants walks the whole tree and checks what the fast counters
// and the leaf heap claim.
func checkInvariants(t testing.TB, tr *Tree[string]) {
	t.Helper()
	var evictable, protected, nodes, hostTokens, hostOnly int
	var walk func(n *Node[string])
	walk = func(n *Node[string]) {
		devKids := 0
		for k, c := range n.children {
			nodes++
			if c.parent != n {
				t.Fatalf("node ending at %d: parent link broken", c.end)
			}
			if k != string(tr.childKey(n, c.ns, c.key)) {
				t.Fatalf("node ending at %d: stored under the wrong child key", c.end)
			}
			if len(c.key) == 0 || len(c.key)%tr.pageSize != 0 {
				t.Fatalf("node ending at %d: %d tokens, not a positive multiple of page %d", c.end, len(c.key), tr.pageSize)
			}
			if c.end != n.end+len(c.key) {
				t.Fatalf("node: end %d, want parent end %d + %d", c.end, n.end, len(c.key))
			}
			if c.lockRef < 0 {
				t.Fatalf("node ending at %d: negative lock count %d", c.end, c.lockRef)
			}
			if n != tr.root && c.lockRef > n.lockRef {
				t.Fatalf("node ending at %d: lock %d above its parent's %d", c.end, c.lockRef, n.lockRef)
			}
			ts := c.tier
			switch {
			case ts.hostOnly && !ts.backed:
				t.Fatalf("node ending at %d: host-only without a host copy", c.end)
			case !ts.hostOnly && n.tier.hostOnly:
				t.Fatalf("node ending at %d: on the device below a host-only node", c.end)
			case ts.hostOnly && c.lockRef > 0:
				t.Fatalf("node ending at %d: host-only and locked", c.end)
			case ts.writing && !ts.backed:
				t.Fatalf("node ending at %d: written but not backed up", c.end)
			case tr.host == nil && (ts.hostOnly || ts.backed):
				t.Fatalf("node ending at %d: tier state in a tree without a host tier", c.end)
			}
			if ts.backed {
				hostTokens += len(c.key)
			}
			if ts.hostOnly {
				hostOnly += len(c.key)
			} else {
				devKids++
				if c.lockRef > 0 {
					protected += len(c.key)
				} else {
					evictable += len(c.key)
				}
			}
			if tr.keepsDigests() && len(c.digests) != len(c.key)/tr.pageSize {
				t.Fatalf("node ending at %d: %d digests for %d pages", c.end, len(c.digests), len(c.key)/tr.pageSize)
			}
			walk(c)
		}
		if tr.host != nil && int(n.tier.devKids) != devKids {
			t.Fatalf("node ending at %d: devKids %d, children on the device %d", n.end, n.tier.devKids, devKids)
		}
		if n == tr.root {
			return
		}
		wantLeaf := n.lockRef == 0 && !n.tier.hostOnly && devKids == 0
		if tr.host == nil {
			wantLeaf = n.lockRef == 0 && len(n.children) == 0
		}
		if inHeap := n.heapIdx >= 0 && n.heapIdx < tr.leaves.Len() && tr.leaves.nodes[n.heapIdx] == n; inHeap != wantLeaf {
			t.Fatalf("node ending at %d: in leaf heap %v, want %v", n.end, inHeap, wantLeaf)
		}
		if tr.host != nil {
			wantHost := n.tier.hostOnly && n.tier.hostRef == 0 && n.lockRef == 0 && len(n.children) == 0
			h := tr.host.leaves
			if inHeap := n.tier.hostIdx >= 0 && n.tier.hostIdx < h.Len() && h.nodes[n.tier.hostIdx] == n; inHeap != wantHost {
				t.Fatalf("node ending at %d: in host-leaf heap %v, want %v", n.end, inHeap, wantHost)
			}
		}
	}
	walk(tr.root)
	got := tr.Stats()
	want := Stats{Tokens: evictable + protected, Evictable: evictable, Protected: protected, Nodes: nodes}
	if tr.host != nil {
		want.HostTokens, want.HostOnly, want.HostReserved = hostTokens, hostOnly, tr.host.reserved
		if hostTokens+tr.host.reserved > tr.host.Capacity {
			t.Fatalf("host pool: %d tokens and %d reserved in a pool of %d", hostTokens, tr.host.reserved, tr.host.Capacity)
		}
	}
	if got != want {
		t.Fatalf("counters: got %+v, walk says %+v", got, want)
	}
	for i, l := range tr.leaves.nodes {
		if l.heapIdx != i || l.removed {
			t.Fatalf("leaf heap entry %d: index %d, removed %v", i, l.heapIdx, l.removed)
		}
	}
	if tr.host != nil {
		for i, l := range tr.host.leaves.nodes {
			if l.tier.hostIdx != i || l.removed {
				t.Fatalf("host-leaf heap entry %d: index %d, removed %v", i, l.tier.hostIdx, l.removed)
			}
		}
	}
}

// Under EAGLE-family speculative decoding SGLang keys the cache on bigrams:
// an n-token key is n-1 units, so every length is one shorter, and a prefix
// that shares only its first token (a BOS) shares no bigram at all.
func TestBigramKeys(t *testing.T) {
	const bos = 7
	tr, err := NewBigram[string](1)
	if err != nil {
		t.Fatal(err)
	}
	if !tr.Bigram() {
		t.Fatal("NewBigram: Bigram() is false")
	}
	prompt := cat([]int32{bos}, seq(100, 198)) // 100 tokens
	if existed, last := tr.Insert("", prompt, ""); existed != 0 || last.PrefixLen() != 99 {
		t.Fatalf("insert of 100 tokens: got existed %d ending at %d, want 0 ending at 99 bigrams", existed, last.PrefixLen())
	}
	wantStats(t, tr, Stats{Tokens: 99, Evictable: 99, Nodes: 1})
	tests := []struct {
		name string
		key  []int32
		want int
	}{
		// The scheduler asks with all but the last token: 99 tokens, 98 bigrams.
		{"the same prompt again", prompt[:99], 98},
		{"shares 51 tokens, then differs", cat(prompt[:51], []int32{5, 6, 7}), 50},
		{"shares only the BOS", cat([]int32{bos}, seq(500, 540)), 0},
		{"a single token", prompt[:1], 0},
		{"no token", nil, 0},
	}
	for _, tt := range tests {
		n, node := tr.Match("", tt.key)
		if n != tt.want || node.PrefixLen() != tt.want {
			t.Errorf("%s: got %d (node ends at %d), want %d", tt.name, n, node.PrefixLen(), tt.want)
		}
	}
	if got := tr.ReusablePrefixLen(100); got != 98 {
		t.Errorf("ReusablePrefixLen(100) under bigram keys: got %d, want 98", got)
	}
	// Token keys share the BOS.
	tok := mustNew(t, 1)
	tok.Insert("", prompt, "")
	if n, _ := tok.Match("", cat([]int32{bos}, seq(500, 540))); n != 1 {
		t.Errorf("token keys, shared BOS: got %d, want 1", n)
	}
	// Namespaces stay apart, and pages count bigrams.
	if n, _ := tr.Match("salt", prompt[:99]); n != 0 {
		t.Errorf("another namespace: got %d, want 0", n)
	}
	paged, err := NewBigram[string](4)
	if err != nil {
		t.Fatal(err)
	}
	key := seq(1, 11) // 10 bigrams: 8 in whole pages
	if _, last := paged.Insert("", key, ""); last.PrefixLen() != 8 {
		t.Errorf("page 4, 11 tokens: cached %d bigrams, want 8", last.PrefixLen())
	}
	if n, _ := paged.Match("", key[:10]); n != 8 || paged.ReusablePrefixLen(11) != 8 {
		t.Errorf("page 4, reusable prefix of 11 tokens: matched %d, ReusablePrefixLen %d, want 8 and 8", n, paged.ReusablePrefixLen(11))
	}
	checkInvariants(t, tr)
	checkInvariants(t, paged)
}

package engine

import (
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"
)

// wantBytes is what the store counts for a truth, spelled out: the Truth,
// its rid and reused-from strings, one record per prefill chunk and per
// decode run, the speculative histogram and the matched stop.
func wantBytes(t *Truth) int64 {
	n := int64(unsafe.Sizeof(Truth{})) + int64(len(t.RID)+len(t.ReusedFrom))
	n += int64(len(t.Prefill))*int64(unsafe.Sizeof(ChunkRecord{})) + int64(len(t.Rounds))*int64(unsafe.Sizeof(RoundRecord{}))
	n += int64(len(t.Spec.Histogram)) * 8
	if t.Finish.MatchedString != nil {
		n += 16 + int64(len(*t.Finish.MatchedString))
	}
	return n
}

// The store keeps a truth's decode rounds as runs: a lone request is one
// run whose sums are the rounds' sums, while the last event still carries
// every round.
func TestStoredTruthMergesRounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := startEngine(t, Config{Profile: loadProfile(t, "default")})
		defer e.Close()
		last, _ := run(t, e, Request{RID: "a", InputIDs: prompt(1, 100), MaxNewTokens: 1000})
		full := last.Truth.Rounds
		stored, ok := e.Truth("a")
		if !ok {
			t.Fatal("no stored truth")
		}
		var total time.Duration
		for _, r := range full {
			total += r.Duration
		}
		want := []RoundRecord{{Start: full[0].Start, Duration: total, Gained: 1, Batch: 1, Context: 101, Count: 999}}
		if len(full) != 999 || !slices.Equal(stored.Rounds, want) {
			t.Fatalf("event: %d rounds; stored: %+v, want %+v", len(full), stored.Rounds, want)
		}
		if cap(stored.Rounds) != 1 || cap(stored.Prefill) != 1 {
			t.Fatalf("stored slices: capacity %d rounds, %d chunks; want exactly their length", cap(stored.Rounds), cap(stored.Prefill))
		}
	})
}

// A second request that joins and leaves splits the first one's rounds into
// runs at each change of batch and at the prefill between them.
func TestStoredRunsSplitAtBatchChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := startEngine(t, Config{Profile: loadProfile(t, "default")})
		defer e.Close()
		a := submit(t, e, Request{RID: "a", InputIDs: prompt(1, 100), MaxNewTokens: 300})
		time.Sleep(50 * time.Millisecond)
		drain(t, submit(t, e, Request{RID: "b", InputIDs: prompt(2, 100), MaxNewTokens: 20}))
		evs := drain(t, a)
		full := evs[len(evs)-1].Truth.Rounds
		stored, _ := e.Truth("a")
		// Expand the runs again: the batch and gain of every round, and the
		// sums, are those of the full record.
		var batches []int
		var total time.Duration
		rounds := 0
		for _, run := range stored.Rounds {
			for range run.Count {
				batches = append(batches, run.Batch)
			}
			total += run.Duration
			rounds += run.Count
		}
		var wantBatches []int
		var wantTotal time.Duration
		for _, r := range full {
			wantBatches = append(wantBatches, r.Batch)
			wantTotal += r.Duration
		}
		if len(stored.Rounds) != 3 || !slices.Equal(batches, wantBatches) || total != wantTotal || rounds != 299 {
			t.Fatalf("stored runs %+v: %d rounds over %v; want 3 runs (alone, with b, alone again) of 299 rounds over %v",
				stored.Rounds, rounds, total, wantTotal)
		}
	})
}

// The store is bounded by the bytes its truths hold, as Truth.Bytes counts
// them, the oldest going first; its accounting is exact.
func TestTruthStoreBytes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := loadProfile(t, "default")
		var sizes []int64
		probe := startEngine(t, Config{Profile: p})
		for i := range 3 {
			run(t, probe, Request{RID: fmt.Sprintf("r%d", i), InputIDs: prompt(int32(i), 50), MaxNewTokens: 10})
			tr, _ := probe.Truth(fmt.Sprintf("r%d", i))
			if got, want := tr.Bytes(), wantBytes(tr); got != want {
				t.Fatalf("r%d: Bytes %d, want %d", i, got, want)
			}
			sizes = append(sizes, tr.Bytes())
		}
		if n, bytes := probe.TruthUsage(); n != 3 || bytes != sizes[0]+sizes[1]+sizes[2] {
			t.Fatalf("usage: %d truths, %d bytes; want 3, %d", n, bytes, sizes[0]+sizes[1]+sizes[2])
		}
		probe.Close()

		// Room for two: the third evicts the first.
		e := startEngine(t, Config{Profile: p, TruthBytes: sizes[0] + sizes[1]})
		defer e.Close()
		for i := range 3 {
			run(t, e, Request{RID: fmt.Sprintf("r%d", i), InputIDs: prompt(int32(i), 50), MaxNewTokens: 10})
		}
		if _, ok := e.Truth("r0"); ok {
			t.Error("r0 is still stored: the oldest goes first")
		}
		if n, bytes := e.TruthUsage(); n != 2 || bytes != sizes[1]+sizes[2] {
			t.Fatalf("usage: %d truths, %d bytes; want 2, %d", n, bytes, sizes[1]+sizes[2])
		}
		if got := e.Truths(); len(got) != 2 || got[0].RID != "r1" || got[1].RID != "r2" {
			t.Fatalf("Truths: %d, want r1 and r2", len(got))
		}
		// A truth larger than the whole store is not kept, and evicts
		// nothing.
		long := string(make([]byte, MaxRIDBytes))
		run(t, e, Request{RID: long, InputIDs: prompt(9, 50), MaxNewTokens: 10})
		if _, ok := e.Truth(long); ok {
			t.Error("a truth larger than the store was kept")
		}
		if n, bytes := e.TruthUsage(); n != 2 || bytes != sizes[1]+sizes[2] {
			t.Fatalf("after the large truth: %d truths, %d bytes; want 2, %d", n, bytes, sizes[1]+sizes[2])
		}
		// By count: the oldest goes first too.
		c := startEngine(t, Config{Profile: p, TruthCapacity: 2})
		defer c.Close()
		for i := range 3 {
			run(t, c, Request{RID: fmt.Sprintf("r%d", i), InputIDs: prompt(int32(i), 50), MaxNewTokens: 10})
		}
		if got := c.Truths(); len(got) != 2 || got[0].RID != "r1" || got[1].RID != "r2" {
			t.Fatalf("capacity 2: %d truths stored, want r1 and r2", len(got))
		}
	})
}

// TestTruthStoreRIDUsedAgain: a rid used again replaces its stored truth,
// and eviction passes over the replaced one to the oldest still stored.
func TestTruthStoreRIDUsedAgain(t *testing.T) {
	s := newTruthStore(3, 1<<30)
	truth := func(rid string, arrival time.Duration) *Truth { return &Truth{RID: rid, Arrival: arrival} }
	oldB, newB := truth("b", 2), truth("b", 4)
	for _, tr := range []*Truth{truth("a", 1), oldB, truth("c", 3), newB, truth("d", 5)} {
		s.add(tr, true)
	}
	// Storing d evicted a, the oldest: the store holds c, b (the newer) and d.
	rids := func() []string {
		var out []string
		for _, tr := range s.all(func(*Truth) bool { return true }) {
			out = append(out, tr.RID)
		}
		return out
	}
	if got, want := rids(), []string{"c", "b", "d"}; !slices.Equal(got, want) {
		t.Fatalf("after d: got %v, want %v", got, want)
	}
	if got, _ := s.get("b"); got != newB {
		t.Fatalf("got b arriving at %v, want the newer (4ns)", got.Arrival)
	}
	// Storing e evicts c: the replaced b before it is passed over.
	s.add(truth("e", 6), true)
	if got, want := rids(), []string{"b", "d", "e"}; !slices.Equal(got, want) {
		t.Fatalf("after e: got %v, want %v", got, want)
	}
	if n, bytes := s.usage(); n != 3 || bytes != newB.Bytes()+2*truth("d", 0).Bytes() {
		t.Fatalf("got %d truths and %d bytes, want 3 and %d", n, bytes, newB.Bytes()+2*truth("d", 0).Bytes())
	}
	if len(s.replaced) != 0 {
		t.Fatalf("got %d replaced truths still kept, want 0", len(s.replaced))
	}
}

// TestClientRIDUsedAgainReplacesItsTruth: a client's rid used again after
// its request finished stores the newer truth in the older one's place,
// beside truths of rids the engine made.
func TestClientRIDUsedAgainReplacesItsTruth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := startEngine(t, Config{Profile: loadProfile(t, "default")})
		defer e.Close()
		run(t, e, Request{RID: "r", InputIDs: prompt(1, 100), MaxNewTokens: 2})
		run(t, e, Request{InputIDs: prompt(2, 50), MaxNewTokens: 2})
		run(t, e, Request{RID: "r", InputIDs: prompt(3, 30), MaxNewTokens: 2})
		if got, ok := e.Truth("r"); !ok || got.PromptTokens != 30 {
			t.Fatalf("rid r: got %+v, %v; want the second request's truth (30 prompt tokens)", got, ok)
		}
		var prompts []int
		for _, tr := range e.Truths() {
			prompts = append(prompts, tr.PromptTokens)
		}
		if want := []int{50, 30}; !slices.Equal(prompts, want) {
			t.Fatalf("stored truths' prompt tokens: got %v, want %v", prompts, want)
		}
		if n, _ := e.TruthUsage(); n != 2 {
			t.Fatalf("got %d truths, want 2", n)
		}
	})
}

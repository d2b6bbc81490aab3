package engine

import (
	"cmp"
	"slices"
	"sync"
	"unsafe"
)

// Default bounds of the ground-truth store.
const (
	DefaultTruthCapacity = 10000
	DefaultTruthBytes    = 256 << 20
)

// truthStore keeps finished requests' ground truths for Truth and Truths,
// bounded by count and by the bytes they hold (Truth.Bytes): the oldest
// stored goes first when either bound would be passed. It is safe for
// concurrent use: the engine goroutine adds, handlers read.
type truthStore struct {
	maxCount int
	maxBytes int64

	mu    sync.Mutex
	byRID map[string]*Truth
	order []*Truth // oldest first; order[head:] are stored, but replaced ones
	head  int
	bytes int64
	// replaced are truths in order that a newer one with their rid
	// replaced: nearly always none, so that the oldest is evicted
	// without a look-up by rid to tell whether it is still stored.
	replaced map[*Truth]bool
}

func newTruthStore(maxCount int, maxBytes int64) *truthStore {
	return &truthStore{maxCount: maxCount, maxBytes: maxBytes, byRID: make(map[string]*Truth), replaced: make(map[*Truth]bool)}
}

// add stores t, which the store owns from now on, evicting the oldest
// truths to make room. A truth larger than the whole store is not kept.
// reusedRID says t's rid may be stored already (a client's rid: an
// engine-made uuid is new, and is not looked up).
func (s *truthStore) add(t *Truth, reusedRID bool) {
	size := t.Bytes()
	s.mu.Lock()
	defer s.mu.Unlock()
	if reusedRID {
		if old, ok := s.byRID[t.RID]; ok {
			// A rid used again after its request finished: the newer wins.
			s.remove(old)
			s.replaced[old] = true
		}
	}
	if size > s.maxBytes {
		return
	}
	for len(s.byRID) >= s.maxCount || s.bytes+size > s.maxBytes {
		s.evictOldest()
	}
	s.byRID[t.RID] = t
	s.order = append(s.order, t)
	s.bytes += size
}

func (s *truthStore) evictOldest() {
	for s.head < len(s.order) {
		t := s.order[s.head]
		s.order[s.head] = nil
		s.head++
		if s.replaced[t] {
			delete(s.replaced, t)
			continue
		}
		s.remove(t)
		break
	}
	// Reclaim the evicted prefix once it is half the queue.
	if s.head > len(s.order)/2 {
		s.order = slices.Delete(s.order, 0, s.head)
		s.head = 0
	}
}

// remove forgets t; its slot in order is skipped when reached.
func (s *truthStore) remove(t *Truth) {
	delete(s.byRID, t.RID)
	s.bytes -= t.Bytes()
}

func (s *truthStore) get(rid string) (*Truth, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.byRID[rid]
	return t, ok
}

// all returns the stored truths that keep is true of, in arrival order.
func (s *truthStore) all(keep func(*Truth) bool) []*Truth {
	s.mu.Lock()
	out := make([]*Truth, 0, len(s.byRID))
	for _, t := range s.order[s.head:] {
		if t != nil && !s.replaced[t] && keep(t) {
			out = append(out, t)
		}
	}
	s.mu.Unlock()
	slices.SortStableFunc(out, func(a, b *Truth) int { return cmp.Compare(a.Arrival, b.Arrival) })
	return out
}

// usage is the store's count and bytes.
func (s *truthStore) usage() (int, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byRID), s.bytes
}

// Sizes the store's byte accounting counts.
const (
	truthSize    = int64(unsafe.Sizeof(Truth{}))
	chunkSize    = int64(unsafe.Sizeof(ChunkRecord{}))
	roundSize    = int64(unsafe.Sizeof(RoundRecord{}))
	intSize      = int64(unsafe.Sizeof(int(0)))
	int32Size    = int64(unsafe.Sizeof(int32(0)))
	strSize      = int64(unsafe.Sizeof(""))
	tiersSize    = int64(unsafe.Sizeof(CacheTiers{}))
	prefetchSize = int64(unsafe.Sizeof(PrefetchRecord{}))
)

// Bytes is the memory t holds as the truth store counts it: the Truth
// itself, its strings' bytes, its slices' backing arrays (by capacity) and
// what its Finish points to.
func (t *Truth) Bytes() int64 {
	n := truthSize + int64(len(t.RID)+len(t.ReusedFrom)+len(t.Route)+len(t.SampleOf))
	n += int64(cap(t.Prefill))*chunkSize + int64(cap(t.Rounds))*roundSize + int64(cap(t.Spec.Histogram))*intSize
	if t.Finish.MatchedToken != nil {
		n += int32Size
	}
	if t.Tiers != nil {
		n += tiersSize
	}
	if t.Prefetch != nil {
		n += prefetchSize
	}
	if s := t.Finish.MatchedString; s != nil {
		n += strSize + int64(len(*s))
	}
	return n
}

// compact returns the copy of t the store keeps: slices exactly as long
// as their contents, and its decode rounds merged into runs (see
// RoundRecord), so a long request takes a record per change of batch,
// gain or timeline rather than one per round.
func (t *Truth) compact() *Truth {
	c := *t
	c.Prefill = slices.Clone(t.Prefill)
	c.Spec.Histogram = slices.Clone(t.Spec.Histogram)
	runs := 0
	for i := range t.Rounds {
		if i == 0 || !continues(&t.Rounds[i-1], &t.Rounds[i]) {
			runs++
		}
	}
	c.Rounds = nil
	if runs > 0 {
		c.Rounds = make([]RoundRecord, 0, runs)
	}
	for i, r := range t.Rounds {
		if i > 0 && continues(&t.Rounds[i-1], &r) {
			run := &c.Rounds[len(c.Rounds)-1]
			run.Duration += r.Duration
			run.Count += r.Count
			continue
		}
		c.Rounds = append(c.Rounds, r)
	}
	return &c
}

// continues reports whether round r extends the run that ends with prev:
// it starts where prev ended, on the context prev left, in a batch of the
// same size, gaining the same number of tokens a round.
func continues(prev, r *RoundRecord) bool {
	return r.Start == prev.Start+prev.Duration && r.Context == prev.Context+prev.Count*prev.Gained &&
		r.Batch == prev.Batch && r.Gained == prev.Gained
}

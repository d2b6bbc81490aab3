package radixcache

import (
	"bytes"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"
)

// Each benchmark reports, besides ns/op for the operation alone, its ratio
// to a floor measured in the same run and interleaved with it, so a noisy
// shared machine moves both alike. The floor is the memory traffic the
// operation cannot avoid: bytes.Equal over the tokens it must compare, and a
// copy of the tokens it must store.

// benchRatio times op and floor alternately, b.N times each, and reports
// op/floor as unit. ns/op counts op only.
func benchRatio(b *testing.B, unit string, setup, floor, op func()) {
	b.Helper()
	var opTime, floorTime time.Duration
	for b.Loop() {
		b.StopTimer()
		if setup != nil {
			setup()
		}
		start := time.Now()
		floor()
		floorTime += time.Since(start)
		b.StartTimer()
		start = time.Now()
		op()
		opTime += time.Since(start)
	}
	b.ReportMetric(float64(opTime)/float64(floorTime), unit)
}

func randomTokens(r *rand.Rand, n int) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = r.Int32N(200_000)
	}
	return s
}

// BenchmarkMatch200k matches a fully cached 200,000-token prompt. Floor:
// bytes.Equal over the same 800 KB, which any exact match must read.
func BenchmarkMatch200k(b *testing.B) {
	prompt := randomTokens(rand.New(rand.NewPCG(1, 2)), 200_000)
	tr := mustNew(b, 1)
	tr.Insert("", prompt, "")
	query := slices.Clone(prompt)
	qa, qb := asBytes(query), asBytes(slices.Clone(prompt))
	var n int
	benchRatio(b, "x-floor", nil,
		func() {
			if bytes.Equal(qa, qb) {
				n++
			}
		},
		func() {
			m, _ := tr.Match("", query)
			n += m
		})
	b.SetBytes(int64(4 * len(prompt)))
	runtime.KeepAlive(n)
}

// BenchmarkInsert200k inserts 200,000 new tokens into an empty tree. Floor:
// copying them, which the tree must do to own its keys.
func BenchmarkInsert200k(b *testing.B) {
	prompt := randomTokens(rand.New(rand.NewPCG(1, 2)), 200_000)
	var tr *Tree[string]
	var sink []int32
	benchRatio(b, "x-floor",
		func() { tr = mustNew(b, 1) },
		func() { sink = slices.Clone(prompt) },
		func() { tr.Insert("", prompt, "") })
	b.SetBytes(int64(4 * len(prompt)))
	runtime.KeepAlive(sink)
}

// sharedPrefixWorkload is 10,000 requests over 100 system prompts of 2,000
// tokens, each request with a unique 500-token suffix.
type sharedPrefixWorkload struct {
	systems  [][]int32
	suffixes [][]int32
}

func newSharedPrefixWorkload() sharedPrefixWorkload {
	r := rand.New(rand.NewPCG(3, 4))
	w := sharedPrefixWorkload{}
	for range 100 {
		w.systems = append(w.systems, randomTokens(r, 2000))
	}
	for i := range 10_000 {
		s := randomTokens(r, 500)
		s[0] = int32(1_000_000 + i) // unique from the first suffix token
		w.suffixes = append(w.suffixes, s)
	}
	return w
}

// run serves every request as the scheduler would: match the reusable
// prefix, then insert the whole prompt. buf is reused to build each prompt.
func (w sharedPrefixWorkload) run(tr *Tree[string], buf []int32) {
	for i, suffix := range w.suffixes {
		buf = append(append(buf[:0], w.systems[i%len(w.systems)]...), suffix...)
		tr.Match("", buf[:tr.ReusablePrefixLen(len(buf))])
		tr.Insert("", buf, "")
	}
}

// BenchmarkMatchInsertSharedPrefix10k runs the 10,000-request workload on an
// empty tree. Floor: building each prompt, comparing it once and copying its
// new tokens.
func BenchmarkMatchInsertSharedPrefix10k(b *testing.B) {
	w := newSharedPrefixWorkload()
	buf := make([]int32, 0, 2500)
	other := make([]int32, 2500)
	var tr *Tree[string]
	var sink [][]int32
	benchRatio(b, "x-floor",
		func() { tr = mustNew(b, 1); sink = sink[:0] },
		func() {
			for i, suffix := range w.suffixes {
				buf = append(append(buf[:0], w.systems[i%len(w.systems)]...), suffix...)
				if bytes.Equal(asBytes(buf), asBytes(other)) {
					b.Fatal("unexpected equal")
				}
				sink = append(sink, slices.Clone(suffix))
			}
		},
		func() { w.run(tr, buf) })
	runtime.KeepAlive(sink)
}

// BenchmarkEvict1M evicts 1,000,000 tokens spread over 10,000 leaves. Floor:
// sorting the 10,000 leaves' recency stamps, the order eviction must follow.
func BenchmarkEvict1M(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	keys := make([][]int32, 10_000)
	for i := range keys {
		keys[i] = randomTokens(r, 100)
		keys[i][0] = int32(i) // 10,000 distinct root children
	}
	var tr *Tree[string]
	stamps := make([]uint64, len(keys))
	benchRatio(b, "x-floor",
		func() {
			tr = mustNew(b, 1)
			for _, k := range keys {
				tr.Insert("", k, "")
			}
			for i := range stamps {
				stamps[i] = r.Uint64()
			}
		},
		func() { slices.Sort(stamps) },
		func() {
			if freed := tr.Evict(1_000_000); freed != 1_000_000 {
				b.Fatalf("freed %d, want 1000000", freed)
			}
		})
}

// BenchmarkMemory reports heap bytes per cached token for the 10,000-request
// shared-prefix workload (5.2M cached tokens). Token ids alone take 4 bytes.
func BenchmarkMemory(b *testing.B) {
	w := newSharedPrefixWorkload()
	buf := make([]int32, 0, 2500)
	var perToken float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		tr := mustNew(b, 1)
		w.run(tr, buf)
		runtime.GC()
		runtime.ReadMemStats(&after)
		perToken = float64(after.HeapAlloc-before.HeapAlloc) / float64(tr.Stats().Tokens)
		runtime.KeepAlive(tr)
	}
	b.ReportMetric(perToken, "B/token")
}

//go:build unix

package engine

import (
	"bytes"
	"context"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sglmock/sglmock/internal/cputime"
	"github.com/sglmock/sglmock/mockserver/profile"
	"github.com/sglmock/sglmock/mockserver/tokenizer"
	"github.com/sglmock/sglmock/radixcache"
)

// Each benchmark reports a ratio to a floor measured in the same run and
// interleaved with it, so a noisy shared machine moves both alike.

// BenchmarkDecodeRound256 measures the scheduler's own work for one decode
// round over 256 running requests: plan, draw, generate a token each, push
// 256 events. Floor: appending one token and one event to 256 slices, the
// least any engine must do per round.
func BenchmarkDecodeRound256(b *testing.B) {
	p, err := profile.Load("default")
	if err != nil {
		b.Fatal(err)
	}
	p.MaxRunningRequests = 256
	e := &Engine{prof: p}
	s := newScheduler(p, builtinTok, false, slog.New(slog.DiscardHandler), 40, 0)
	g := &group{ranks: []*scheduler{s}}
	var reqs []*req
	for i := range 256 {
		r := &req{rid: string(rune(0x4e00 + i)), tokens: prompt(int32(i), 100), maxNew: 500, maxCached: 100, seq: uint64(i)}
		r.hash = tokenizer.PromptHash(r.tokens)
		r.stream = newStream(e, r)
		s.enqueue(r)
		reqs = append(reqs, r)
	}
	for len(s.running) < 256 {
		g.plan()
		g.complete()
	}
	outs := make([][]int32, 256)
	evs := make([][]Event, 256)
	var roundNs, floorNs int64
	for b.Loop() {
		b.StopTimer()
		start := time.Now()
		for i := range outs {
			outs[i] = append(outs[i], int32(i))
			evs[i] = append(evs[i], Event{Tokens: outs[i][len(outs[i])-1:]})
		}
		floorNs += time.Since(start).Nanoseconds()
		if len(outs[0]) > 400 {
			for i := range outs {
				outs[i], evs[i] = outs[i][:0], evs[i][:0]
			}
			for _, r := range reqs {
				r.outputs = r.outputs[:1]
				r.stream.events, r.stream.head = r.stream.events[:0], 0
			}
		}
		b.StartTimer()
		start = time.Now()
		g.plan()
		g.complete()
		roundNs += time.Since(start).Nanoseconds()
	}
	b.ReportMetric(float64(roundNs)/float64(floorNs), "x-floor")
	b.ReportMetric(float64(roundNs)/float64(b.N)/256, "ns/request-round")
}

// BenchmarkPrompt200kPath measures what a 200,000-token text prompt costs
// the server before any modelled time: tokenize, match the reusable prefix,
// insert. Floor: one bytes.Count pass over the text plus one bytes.Equal
// over the token ids, the least any exact path must read.
func BenchmarkPrompt200kPath(b *testing.B) {
	var sb strings.Builder
	for i := 0; builtinTok.Count(sb.String()) < 200_000; i++ {
		sb.WriteString("The server keeps every prefix of every prompt in a radix tree, and request ")
		sb.WriteString(strings.Repeat("x", i%7))
		sb.WriteString(" reuses what it can. ")
		if sb.Len() > 2_000_000 {
			break
		}
	}
	text := sb.String()
	raw := []byte(text)
	ids := builtinTok.Encode(nil, text)
	other := slices.Clone(ids)
	var pathNs, floorNs int64
	var tokens int
	for b.Loop() {
		b.StopTimer()
		tree, err := radixcache.New[string](1)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		n := bytes.Count(raw, []byte{'\n'})
		if slices.Equal(ids, other) {
			n++
		}
		floorNs += time.Since(start).Nanoseconds()
		runtime.KeepAlive(n)
		b.StartTimer()
		start = time.Now()
		toks := builtinTok.Encode(nil, text)
		tree.Match("", toks[:tree.ReusablePrefixLen(len(toks))])
		tree.Insert("", toks, "")
		pathNs += time.Since(start).Nanoseconds()
		tokens = len(toks)
	}
	b.ReportMetric(float64(pathNs)/float64(b.N)/float64(tokens)/1e3, "µs/token")
	b.ReportMetric(float64(pathNs)/float64(floorNs), "x-floor")
}

// BenchmarkWakeLateness measures how late the engine wakes for a deadline
// in real time, with the spin window the server uses against a plain timer
// (SpinWindow 0), in the same run. It reports p50 and p99 lateness in
// microseconds and the p99 ratio.
func BenchmarkWakeLateness(b *testing.B) {
	measure := func(spin time.Duration, n int) (p50, p99 float64) {
		e := &Engine{speedup: 1, spin: spin, spinShare: maxSpinShare, inbox: make(chan call), clock: systemClock{}, stop: make(chan struct{}), wallStart: time.Now()}
		timer := time.NewTimer(time.Hour)
		timer.Stop()
		late := make([]float64, 0, n)
		for range n {
			target := e.Now() + 3*time.Millisecond
			e.waitUntil(target, timer)
			late = append(late, float64(time.Since(e.wallAt(target)).Microseconds()))
		}
		slices.Sort(late)
		return late[len(late)/2], late[len(late)*99/100]
	}
	var plain50, plain99, spin50, spin99 float64
	for b.Loop() {
		plain50, plain99 = measure(0, 300)
		spin50, spin99 = measure(DefaultSpinWindow, 300)
	}
	b.ReportMetric(plain50, "plain-p50-µs")
	b.ReportMetric(plain99, "plain-p99-µs")
	b.ReportMetric(spin50, "spin-p50-µs")
	b.ReportMetric(spin99, "spin-p99-µs")
	b.ReportMetric(spin99/max(plain99, 1), "x-plain-p99")
}

// BenchmarkSpinShare measures the CPU share of an engine at speedup 1000
// decoding one long request (a 4 ms modelled round is 4 µs of wall time,
// always within the spin window), with the spin bounded as the server runs
// it against unbounded polling, in the same run: the share of a core the
// process used while the request ran, and how late it ended on the wall.
func BenchmarkSpinShare(b *testing.B) {
	measure := func(share float64) (cpuShare, lateMs float64) {
		e, err := New(Config{Profile: loadProfile(b, "default"), Speedup: 1000, SpinWindow: DefaultSpinWindow})
		if err != nil {
			b.Fatal(err)
		}
		defer e.Close()
		e.do(func(time.Duration) { e.spinShare = share })
		cpu, start := cputime.Of(b), time.Now()
		st, err := e.Submit(Request{InputIDs: prompt(1, 10), MaxNewTokens: 20000})
		if err != nil {
			b.Fatal(err)
		}
		last, _, err := st.Collect(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		wall := time.Since(start)
		modelled := time.Duration(float64(last.Truth.E2E()) / 1000)
		return float64(cputime.Of(b)-cpu) / float64(wall), float64(wall-modelled) / 1e6
	}
	var bounded, unbounded, boundedLate, unboundedLate float64
	for b.Loop() {
		unbounded, unboundedLate = measure(1)
		bounded, boundedLate = measure(maxSpinShare)
	}
	b.ReportMetric(bounded, "cpu-share")
	b.ReportMetric(unbounded, "unbounded-cpu-share")
	b.ReportMetric(bounded/unbounded, "x-unbounded")
	b.ReportMetric(boundedLate, "late-ms")
	b.ReportMetric(unboundedLate, "unbounded-late-ms")
}

// BenchmarkPrefetchReadyWaiting measures a scheduling pass's prefetch
// checks (prefetchReady, each waiting request in turn) over 4,000 waiting
// requests with a storage prefetch in flight each, against 400 in the same
// run: a check that works out the I/O thread's schedule once per change
// costs the same per request at both (x-10x-waiting about 1), one that
// walks every prefetch each time ten times more.
func BenchmarkPrefetchReadyWaiting(b *testing.B) {
	perCheck := func(n int) time.Duration {
		hc := &hiCache{cfg: &profile.HiCache{PrefetchPolicy: "wait_complete"}, perRead: time.Millisecond,
			prefetches: make(map[*req]*prefetchOp)}
		s := &scheduler{hi: hc}
		waiting := make([]*req, n)
		for i := range waiting {
			r := &req{}
			op := &prefetchOp{r: r, pages: 100, issued: time.Duration(i) * time.Microsecond}
			hc.prefetches[r], hc.io, waiting[i] = op, append(hc.io, op), r
		}
		hc.ioChanged = true
		start := cputime.Of(b)
		for _, r := range waiting {
			if s.prefetchReady(r) {
				b.Fatal("a prefetch of 100 pages read at time 0 is ready")
			}
		}
		return (cputime.Of(b) - start) / time.Duration(n)
	}
	var ratios []float64
	for b.Loop() {
		small, large := perCheck(400), perCheck(4000)
		ratios = append(ratios, float64(large)/float64(max(small, 1)))
	}
	slices.Sort(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "x-10x-waiting")
}

package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglmock/sglmock/mockserver/hicache"
	"github.com/sglmock/sglmock/mockserver/profile"
	"github.com/sglmock/sglmock/radixcache"
)

// hiProfile is a small deployment with round figures: a prefill costs
// 0.1 ms a token, a decode round 1 ms; a token's KV is 8 bytes (4 layers),
// moved over the host link at 1e-5 s a token plus 1 ms a transfer, and
// read from or written to storage at 1 ms a page of one token. The KV pool
// holds 3000 tokens, the host pool twice that.
func hiProfile(t testing.TB, policy, storage string) *profile.Profile {
	t.Helper()
	p := loadProfile(t, "default")
	p.ContextLength, p.MaxTotalTokens = 3000, 3000
	p.ChunkedPrefillSize, p.MaxPrefillTokens = 4096, 4096
	p.Prefill = profile.PrefillCost{PerTokenS: 1e-4}
	p.Decode = profile.DecodeCost{StepOverheadS: 0.001}
	p.FlushBusyAfterFinishS = 0
	p.HiCache = &profile.HiCache{
		Enable: true, WritePolicy: policy, StorageBackend: storage,
		KV:                profile.KVShape{Layers: 4, KVHeads: 1, HeadDim: 1, DTypeBytes: 1},
		HostGBps:          8e-4, // 8 bytes in 1e-5 s
		TransferOverheadS: 0.001,
		StorageReadGBps:   8e-6, // 8 bytes in 1 ms
		StorageWriteGBps:  8e-6,
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	return p
}

func tiersOf(ev Event) CacheTiers {
	if ev.Tiers == nil {
		return CacheTiers{Device: -1}
	}
	return *ev.Tiers
}

// ttft runs r to its end and returns its last event and TTFT.
func ttft(t *testing.T, e *Engine, r Request) (Event, time.Duration) {
	t.Helper()
	ev, _ := run(t, e, r)
	return ev, ev.Truth.TTFT()
}

// After other traffic evicts a prompt from the device, a write-through
// kept it on the host: its repeat is a host hit, loaded back layer by layer
// under the prefill of the one token left. A GPU-only server recomputes it.
func TestHostHitAfterDeviceEviction(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := startEngine(t, Config{Profile: hiProfile(t, "write_through", "")})
		defer e.Close()
		a := prompt(1, 1000)
		ev, got := ttft(t, e, Request{InputIDs: a, MaxNewTokens: 1})
		if want := 100 * time.Millisecond; got != want || ev.CachedTokens != 0 {
			t.Fatalf("leg a: TTFT %v cached %d, want %v and 0", got, ev.CachedTokens, want)
		}
		// 2500 tokens need a's 1000: a's write-through (1 ms + 10 ms) locks
		// them until it ends, and the request waits for it.
		ev, got = ttft(t, e, Request{InputIDs: prompt(2, 2500), MaxNewTokens: 1})
		if want := 11*time.Millisecond + 250*time.Millisecond; got != want {
			t.Fatalf("the evicting request: TTFT %v, want %v (waits for the write-through)", got, want)
		}
		st := e.HiCache()
		if st.HostOnlyTokens != 1000 || st.HostTotalTokens != 6001 {
			t.Fatalf("host pool: %d host-only of %d, want 1000 of 6001", st.HostOnlyTokens, st.HostTotalTokens)
		}
		ev, got = ttft(t, e, Request{InputIDs: a, MaxNewTokens: 1})
		// It waits for the other request's write-through (1 ms + 25 ms),
		// which holds the device it needs; then 999 tokens load over 4
		// layers (2.4975 ms each) while one token computes (0.025 ms a
		// layer): 1 ms + 4 x 2.4975 + 0.025 ms.
		if want := 26*time.Millisecond + 11015*time.Microsecond; got != want {
			t.Fatalf("leg b: TTFT %v, want %v", got, want)
		}
		if tiers := tiersOf(ev); ev.CachedTokens != 999 || tiers != (CacheTiers{Host: 999}) {
			t.Fatalf("leg b: cached %d tiers %+v, want 999 from the host", ev.CachedTokens, tiers)
		}
		if tr := ev.Truth; tr.LoadBackTokens != 999 || tr.Prefill[0].LoadBack != 999 {
			t.Fatalf("truth: load back %d, chunk %d, want 999", tr.LoadBackTokens, tr.Prefill[0].LoadBack)
		}
		if st := e.HiCache(); st.LoadBackTokens != 999 || st.LoadBacks != 1 {
			t.Fatalf("load back counters: %d tokens in %d, want 999 in 1", st.LoadBackTokens, st.LoadBacks)
		}
		if c := e.Stats().Counters; c.CachedTokens != 999 || c.CachedHost != 999 || c.CachedDevice != 0 {
			t.Fatalf("cached_tokens_total by source: %+v, want 999 from the host", c)
		}
	})
}

// write_through_selective backs a node up on its second hit: a prompt seen
// once is deleted on eviction, one seen twice survives on the host.
// write_back writes the evicted node to the host first, and the iteration
// that evicts waits for it.
func TestWritePolicyDecidesTheHostHit(t *testing.T) {
	for _, tc := range []struct {
		policy   string
		repeats  int
		wantHost int
		evictTT  time.Duration // the evicting request's TTFT
	}{
		{"write_through_selective", 1, 0, 250 * time.Millisecond},
		// The second run's finish backs up the 999 tokens it hit twice
		// (11 ms), then the one token after them (1.01 ms).
		{"write_through_selective", 2, 999, 12*time.Millisecond + 250*time.Millisecond},
		{"write_back", 1, 999, 250*time.Millisecond + 11*time.Millisecond},
	} {
		synctest.Test(t, func(t *testing.T) {
			e := startEngine(t, Config{Profile: hiProfile(t, tc.policy, "")})
			defer e.Close()
			a := prompt(1, 1000)
			for range tc.repeats {
				run(t, e, Request{InputIDs: a, MaxNewTokens: 1})
			}
			_, got := ttft(t, e, Request{InputIDs: prompt(2, 2500), MaxNewTokens: 1})
			if got != tc.evictTT {
				t.Errorf("%s x%d: the evicting request's TTFT %v, want %v", tc.policy, tc.repeats, got, tc.evictTT)
			}
			ev, _ := run(t, e, Request{InputIDs: a, MaxNewTokens: 1})
			if tiers := tiersOf(ev); tiers.Host != tc.wantHost {
				t.Errorf("%s x%d: host hit %d, want %d", tc.policy, tc.repeats, tiers.Host, tc.wantHost)
			}
		})
	}
}

// A host hit under the load-back threshold (10 tokens) is recomputed, and
// SGLang still counts it as host in cached_tokens_details: cached_tokens 0,
// host 8.
func TestHostHitBelowLoadBackThreshold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := startEngine(t, Config{Profile: hiProfile(t, "write_through", "")})
		defer e.Close()
		a := prompt(1, 9)
		run(t, e, Request{InputIDs: a, MaxNewTokens: 1})
		run(t, e, Request{InputIDs: prompt(2, 2993), MaxNewTokens: 1})
		ev, _ := run(t, e, Request{InputIDs: a, MaxNewTokens: 1})
		if tiers := tiersOf(ev); ev.CachedTokens != 0 || tiers != (CacheTiers{Host: 8}) || ev.Truth.LoadBackTokens != 0 {
			t.Fatalf("cached %d tiers %+v loaded %d, want 0, {host 8}, 0", ev.CachedTokens, tiers, ev.Truth.LoadBackTokens)
		}
	})
}

// A flush right after a response is refused while its write-through is in
// flight (SGLang's is_fully_idle waits for HiCache's transfers); a flush
// with a timeout waits for it. The flush empties the device and host tiers
// and leaves storage: the repeat is prefetched from storage (the timeout
// policy waits for all of it: 999 pages at 1 ms), then loaded back.
func TestFlushDoesNotClearStorage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := startEngine(t, Config{Profile: hiProfile(t, "write_through", "memory")})
		defer e.Close()
		a := prompt(1, 1000)
		run(t, e, Request{InputIDs: a, MaxNewTokens: 1})
		if err := e.Flush(context.Background(), 0, "test"); !errors.Is(err, ErrFlushBusy) {
			t.Fatalf("flush during the write-through: got %v, want busy", err)
		}
		start := time.Now()
		if err := e.Flush(context.Background(), time.Minute, "test"); err != nil {
			t.Fatal(err)
		}
		// The write ends at 11 ms, then 1000 pages go to storage at 1 ms each.
		if waited := time.Since(start); waited != 1011*time.Millisecond {
			t.Fatalf("the flush waited %v, want 1.011 s (write-through, then the backup)", waited)
		}
		ev, got := ttft(t, e, Request{InputIDs: a, MaxNewTokens: 1})
		if tiers := tiersOf(ev); ev.CachedTokens != 999 || tiers != (CacheTiers{Storage: 999, Backend: "MockMemoryStorage"}) {
			t.Fatalf("after the flush: cached %d tiers %+v, want 999 from storage", ev.CachedTokens, tiers)
		}
		// 1000 pages read (the prefetch takes the whole prompt), then the
		// load back under one token's prefill.
		if want := time.Second + 11015*time.Microsecond; got != want {
			t.Fatalf("after the flush: TTFT %v, want %v", got, want)
		}
		if p := ev.Truth.Prefetch; p == nil || p.Pages != 1000 || p.Fetched != 1000 || p.Tokens != 1000 || p.Terminated {
			t.Fatalf("prefetch record: %+v", p)
		}
		// Clearing storage leaves nothing to reuse once the tiers flush.
		if err := e.Flush(context.Background(), time.Minute, "test"); err != nil {
			t.Fatal(err)
		}
		if on, cleared, err := e.ClearStorage(); !on || !cleared || err != nil {
			t.Fatalf("ClearStorage: %v %v %v", on, cleared, err)
		}
		ev, _ = run(t, e, Request{InputIDs: a, MaxNewTokens: 1})
		if ev.CachedTokens != 0 {
			t.Fatalf("after clearing storage: cached %d, want 0", ev.CachedTokens)
		}
	})
}

// repeatFromStorage runs a prompt of n tokens on a fresh engine of p, lets
// its pages reach storage, flushes the device and host tiers, and runs it
// again: the repeat's last event and TTFT.
func repeatFromStorage(t *testing.T, p *profile.Profile, n int) (Event, time.Duration) {
	t.Helper()
	e := startEngine(t, Config{Profile: p, HiCacheStorageDir: t.TempDir()})
	defer e.Close()
	a := prompt(1, n)
	run(t, e, Request{InputIDs: a, MaxNewTokens: 1})
	if err := e.Flush(context.Background(), time.Minute, "test"); err != nil {
		t.Fatal(err)
	}
	return ttft(t, e, Request{InputIDs: a, MaxNewTokens: 1})
}

// The prefetch policies: best_effort takes what is read when the request
// is scheduled (nothing, on an idle server), wait_complete all of it, and
// timeout what is read when its limit passes (here 0.5 s: 500 pages).
func TestPrefetchPolicies(t *testing.T) {
	const halfSecond = `{"prefetch_timeout_base": 0.5, "prefetch_timeout_per_ki_token": 0}`
	for _, tc := range []struct {
		policy, backend, extra string
		storage                int
		ttft                   time.Duration
	}{
		{"best_effort", "memory", "", 0, 100 * time.Millisecond},
		{"wait_complete", "memory", "", 999, time.Second + 11015*time.Microsecond},
		// By 0.5 s (and 1 ns) the file backend read 500 pages, one at a
		// time; a zero-copy backend counts whole batches of 128: 384.
		{"timeout", "file", halfSecond, 500, 0},
		{"timeout", "memory", halfSecond, 384, 0},
	} {
		synctest.Test(t, func(t *testing.T) {
			p := hiProfile(t, "write_through", tc.backend)
			p.HiCache.PrefetchPolicy, p.HiCache.StorageExtraConfig = tc.policy, tc.extra
			ev, got := repeatFromStorage(t, p, 1000)
			if tiers := tiersOf(ev); tiers.Storage != tc.storage {
				t.Errorf("%s: storage hit %d, want %d", tc.policy, tiers.Storage, tc.storage)
			}
			if tc.ttft != 0 && got != tc.ttft {
				t.Errorf("%s: TTFT %v, want %v", tc.policy, got, tc.ttft)
			}
			if tc.policy == "timeout" {
				if p := ev.Truth.Prefetch; !p.Terminated || p.Fetched != tc.storage || p.Ended-p.Issued != 500*time.Millisecond+1 {
					t.Errorf("timeout: prefetch %+v, want %d pages, stopped at 0.5 s", p, tc.storage)
				}
			}
		})
	}
}

// The prefetch timeout is the release's (compat's prefetch-timeout rule,
// PR #23309). A 2000-token prompt read back from the file backend at 1 ms
// a page takes 2 s: 0.5.12's default policy, timeout, allows 2 s + 0.1 s x
// 2000/1024 = 2.195 s and reads it all; 0.5.11's default, best_effort,
// takes nothing, and its timeout policy allows 1 s + 0.25 s x 2000/1024 =
// 1.488 s, by which 1488 pages are read.
func TestPrefetchTimeoutByRelease(t *testing.T) {
	for _, tc := range []struct {
		release, policy string
		fetched         int
		stopped         time.Duration // the prefetch's end after its start; 0: not checked
	}{
		{"0.5.12", "", 2000, 0},
		{"0.5.11", "", 0, 0},
		{"0.5.11", "timeout", 1488, 1488281250 + 1},
	} {
		synctest.Test(t, func(t *testing.T) {
			p := hiProfile(t, "write_through", "file")
			p.SGLangVersion, p.HiCache.PrefetchPolicy = tc.release, tc.policy
			ev, _ := repeatFromStorage(t, p, 2000)
			if got := tiersOf(ev).Storage; got != min(tc.fetched, 1999) {
				t.Errorf("%s %q: storage hit %d, want %d", tc.release, tc.policy, got, min(tc.fetched, 1999))
			}
			pf := ev.Truth.Prefetch
			if pf == nil || pf.Pages != 2000 || pf.Fetched != tc.fetched || pf.Terminated != (tc.fetched < 2000) {
				t.Fatalf("%s %q: prefetch %+v, want %d of 2000 pages", tc.release, tc.policy, pf, tc.fetched)
			}
			if tc.stopped != 0 && pf.Ended-pf.Issued != tc.stopped {
				t.Errorf("%s %q: the prefetch stopped after %v, want %v", tc.release, tc.policy, pf.Ended-pf.Issued, tc.stopped)
			}
		})
	}
}

// The file backend keeps its pages in a directory: a second engine on the
// same directory (a restart) finds them, keyed by SGLang's page hashes.
func TestFileBackendSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	a := prompt(1, 1000)
	synctest.Test(t, func(t *testing.T) {
		e := startEngine(t, Config{Profile: hiProfile(t, "write_through", "file"), HiCacheStorageDir: dir})
		run(t, e, Request{InputIDs: a, MaxNewTokens: 1})
		if err := e.Flush(context.Background(), time.Minute, "test"); err != nil {
			t.Fatal(err)
		}
		e.Close()
	})
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1000 {
		t.Fatalf("page files: %d (%v), want 1000", len(entries), err)
	}
	if want := "_sglmock-small-1b_0_1.bin"; filepath.Ext(entries[0].Name()) != ".bin" || entries[0].Name()[64:] != want {
		t.Fatalf("page file name %q, want 64 hex digits then %q", entries[0].Name(), want)
	}
	synctest.Test(t, func(t *testing.T) {
		e := startEngine(t, Config{Profile: hiProfile(t, "write_through", "file"), HiCacheStorageDir: dir})
		defer e.Close()
		ev, _ := run(t, e, Request{InputIDs: a, MaxNewTokens: 1})
		if tiers := tiersOf(ev); tiers.Storage != 999 {
			t.Fatalf("restarted: storage hit %d, want 999", tiers.Storage)
		}
	})
}

// A shared store (DP ranks, a fleet) serves every engine given it.
func TestSharedStore(t *testing.T) {
	store := hicache.NewMemory("MooncakeStore", hicache.MemoryPages)
	a := prompt(1, 1000)
	synctest.Test(t, func(t *testing.T) {
		e1 := startEngine(t, Config{Profile: hiProfile(t, "write_through", "mooncake"), HiCacheStore: store})
		defer e1.Close()
		e2 := startEngine(t, Config{Profile: hiProfile(t, "write_through", "mooncake"), HiCacheStore: store})
		defer e2.Close()
		run(t, e1, Request{InputIDs: a, MaxNewTokens: 1})
		if err := e1.Flush(context.Background(), time.Minute, "test"); err != nil { // it waits for the backup
			t.Fatal(err)
		}
		ev, _ := run(t, e2, Request{InputIDs: a, MaxNewTokens: 1})
		if tiers := tiersOf(ev); tiers.Storage != 999 {
			t.Fatalf("the other engine: storage hit %d, want 999", tiers.Storage)
		}
		if e2.HiCache().StorageClass != "MooncakeStore" {
			t.Fatal(e2.HiCache().StorageClass)
		}
	})
}

// HiCache needs the radix cache, as SGLang refuses the pair of flags.
func TestHiCacheRefusesDisabledRadixCache(t *testing.T) {
	_, err := New(Config{Profile: hiProfile(t, "write_through", ""), DisableRadixCache: true})
	if !errors.Is(err, profile.ErrHiCacheWithoutRadixCache) {
		t.Fatalf("got %v, want ErrHiCacheWithoutRadixCache", err)
	}
	_, err = New(Config{Profile: hiProfile(t, "write_through", "file")})
	if !errors.Is(err, errStorageDir) {
		t.Fatalf("file backend without a directory: got %v", err)
	}
}

// A load back that must evict for its host hit counts that eviction in the
// eviction counters, as HiRadixCache.load_back's evict calls
// update_eviction_metrics: the 2500-token prompt evicts a's 1000 tokens
// (the shortfall, 501, takes the whole leaf), and a's repeat evicts the
// 2500 tokens, backed up by then, to load its 999 back into a pool with
// 500 free.
func TestLoadBackEvictionIsCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := startEngine(t, Config{Profile: hiProfile(t, "write_through", "")})
		defer e.Close()
		a := prompt(1, 1000)
		run(t, e, Request{InputIDs: a, MaxNewTokens: 1})
		run(t, e, Request{InputIDs: prompt(2, 2500), MaxNewTokens: 1})
		if c := e.Stats().Counters; c.Evictions != 1 || c.EvictedTokens != 1000 {
			t.Fatalf("after the evicting request: %d evictions of %d tokens, want 1 of 1000", c.Evictions, c.EvictedTokens)
		}
		ev, _ := run(t, e, Request{InputIDs: a, MaxNewTokens: 1})
		if ev.Truth.LoadBackTokens != 999 {
			t.Fatalf("a's repeat loaded back %d tokens, want 999", ev.Truth.LoadBackTokens)
		}
		if c := e.Stats().Counters; c.Evictions != 2 || c.EvictedTokens != 3500 {
			t.Fatalf("after the load back: %d evictions of %d tokens, want 2 of 3500", c.Evictions, c.EvictedTokens)
		}
	})
}

// DP ranks share one storage tier, and each rank's backup thread writes to
// it on its own: a prefetch on rank 1 finds every page rank 0's backup has
// written by then, even while an iteration runs. Rank 0 backs a's 1000
// pages up from 0.111 s to 1.111 s; c keeps the ranks busy from 1 s to
// 1.2 s; a's repeat on rank 1 arrives at 1.15 s and finds all 1000 pages
// (not the 768 rank 0 had put by the last boundary, at 1 s: 889 written,
// put 128 at a time), reads them in 1 s
// (wait_complete) and loads 999 back under one token's prefill.
func TestDPRanksShareTheStoreAsItIsWritten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := hiProfile(t, "write_through", "memory")
		p.DPSize, p.TPSize, p.EnableDPAttention = 2, 2, true
		p.HiCache.PrefetchPolicy = "wait_complete"
		if err := p.Validate(); err != nil {
			t.Fatal(err)
		}
		e := startEngine(t, Config{Profile: p})
		defer e.Close()
		a := prompt(1, 1000)
		run(t, e, Request{InputIDs: a, MaxNewTokens: 1, RoutedDPRank: rank(0)})
		time.Sleep(900 * time.Millisecond)
		c := submit(t, e, Request{InputIDs: prompt(2, 2000), MaxNewTokens: 1, RoutedDPRank: rank(1)})
		time.Sleep(150 * time.Millisecond)
		ev, got := ttft(t, e, Request{InputIDs: a, MaxNewTokens: 1, RoutedDPRank: rank(1)})
		drain(t, c)
		if pf := ev.Truth.Prefetch; ev.Truth.DPRank != 1 || pf == nil || pf.Issued != 1150*time.Millisecond || pf.Pages != 1000 || pf.Fetched != 1000 {
			t.Fatalf("a's repeat on rank %d: prefetch %+v, want 1000 pages found at 1.15 s", ev.Truth.DPRank, pf)
		}
		if tiers := tiersOf(ev); tiers != (CacheTiers{Storage: 999, Backend: "MockMemoryStorage"}) {
			t.Fatalf("a's repeat: tiers %+v, want 999 from storage", tiers)
		}
		if want := time.Second + 11015*time.Microsecond; got != want {
			t.Fatalf("a's repeat: TTFT %v, want %v", got, want)
		}
	})
}

// The file backend names a page for the attention group's tensor-parallel
// rank 0 and size, as HiCacheStorageConfig carries them: tp_size without
// DP attention, tp_size / dp_size under it.
func TestFilePagesNamedForTheAttentionGroup(t *testing.T) {
	for _, tc := range []struct {
		dp, tp    int
		attention bool
		suffix    string
	}{
		{1, 2, false, "_sglmock-small-1b_0_2.bin"},
		{2, 4, true, "_sglmock-small-1b_0_2.bin"},
		{2, 2, true, "_sglmock-small-1b_0_1.bin"},
	} {
		dir := t.TempDir()
		synctest.Test(t, func(t *testing.T) {
			p := hiProfile(t, "write_through", "file")
			p.DPSize, p.TPSize, p.EnableDPAttention = tc.dp, tc.tp, tc.attention
			if err := p.Validate(); err != nil {
				t.Fatal(err)
			}
			e := startEngine(t, Config{Profile: p, HiCacheStorageDir: dir})
			defer e.Close()
			run(t, e, Request{InputIDs: prompt(1, 10), MaxNewTokens: 1})
			if err := e.Flush(context.Background(), time.Minute, "test"); err != nil { // after the backup
				t.Fatal(err)
			}
		})
		entries, err := os.ReadDir(dir)
		if err != nil || len(entries) != 10 {
			t.Fatalf("dp %d tp %d: %d page files (%v), want 10", tc.dp, tc.tp, len(entries), err)
		}
		if got := entries[0].Name()[64:]; got != tc.suffix {
			t.Errorf("dp %d tp %d attention %v: page file suffix %q, want %q", tc.dp, tc.tp, tc.attention, got, tc.suffix)
		}
	}
}

// hostAndDevicePrefixes leaves, on e (hiProfile, write_through), a
// 1000-token prompt only on the host (evicted from the device by a
// 2500-token one) and a 300-token prompt on the device, and returns them.
func hostAndDevicePrefixes(t *testing.T, e *Engine) (host, dev []int32) {
	t.Helper()
	host, dev = prompt(1, 1000), prompt(3, 300)
	run(t, e, Request{InputIDs: host, MaxNewTokens: 1})
	run(t, e, Request{InputIDs: prompt(2, 2500), MaxNewTokens: 1})
	run(t, e, Request{InputIDs: dev, MaxNewTokens: 1})
	if st := e.HiCache(); st.HostOnlyTokens != 1000 {
		t.Fatalf("host-only tokens %d, want 1000 (the first prompt evicted from the device)", st.HostOnlyTokens)
	}
	return host, dev
}

// Without chunked prefill a request that cannot join a batch (its extend
// less its host hit reaches what max_prefill_tokens leaves) is refused
// before its host hit is loaded back, as add_one_req tests it first: the
// next batch loads it back and counts it from the host, once. Two requests
// of 200 new tokens each queue behind a blocker, max_prefill_tokens 256.
func TestNoLoadBackForARequestTheBatchRefuses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := hiProfile(t, "write_through", "")
		p.ChunkedPrefillSize, p.MaxPrefillTokens = -1, 256
		if err := p.Validate(); err != nil {
			t.Fatal(err)
		}
		e := startEngine(t, Config{Profile: p})
		defer e.Close()
		host, dev := hostAndDevicePrefixes(t, e)
		before := e.HiCache().LoadBacks
		streams := []*Stream{submit(t, e, Request{RID: "B", InputIDs: prompt(4, 500), MaxNewTokens: 1})}
		synctest.Wait() // the blocker's prefill is in flight
		streams = append(streams,
			submit(t, e, Request{RID: "DD", InputIDs: joinIDs(dev, prompt(5, 200)), MaxNewTokens: 1}),
			submit(t, e, Request{RID: "HH", InputIDs: joinIDs(host, prompt(6, 200)), MaxNewTokens: 1}))
		last := map[string]Event{}
		for _, st := range streams {
			evs := drain(t, st)
			last[st.RID()] = evs[len(evs)-1]
		}
		dd, hh := last["DD"], last["HH"]
		if hh.Truth.Admitted <= dd.Truth.Admitted {
			t.Fatalf("HH admitted at %v, DD at %v: want HH in a later batch", hh.Truth.Admitted, dd.Truth.Admitted)
		}
		if tiers := tiersOf(hh); tiers != (CacheTiers{Host: 1000}) || hh.Truth.LoadBackTokens != 1000 {
			t.Errorf("HH: tiers %+v, loaded back %d, want 1000 from the host, loaded back in its own batch", tiers, hh.Truth.LoadBackTokens)
		}
		if n := e.HiCache().LoadBacks - before; n != 1 {
			t.Errorf("%d load backs, want 1", n)
		}
	})
}

// tierLog is a CacheEvents that logs the radix cache's page events with
// their media, as "stored GPU 1000": the tree's calls, before the
// publisher's coalescing.
type tierLog struct{ log []string }

func (l *tierLog) Stored(parent int64, hasParent bool, pages []radixcache.Page) {
	l.StoredOn(radixcache.Device, parent, hasParent, pages)
}
func (l *tierLog) Removed(pages []radixcache.Page) { l.RemovedFrom(radixcache.Device, pages) }
func (l *tierLog) Cleared()                        { l.log = append(l.log, "cleared") }
func (l *tierLog) Publish(time.Time)               {}
func (l *tierLog) StoredOn(m radixcache.Medium, _ int64, _ bool, pages []radixcache.Page) {
	l.log = append(l.log, fmt.Sprintf("stored %s %d", tierName[m], len(pages)))
}
func (l *tierLog) RemovedFrom(m radixcache.Medium, pages []radixcache.Page) {
	l.log = append(l.log, fmt.Sprintf("removed %s %d", tierName[m], len(pages)))
}

// tierName is a medium as KV events name it.
var tierName = map[radixcache.Medium]string{radixcache.Device: "GPU", radixcache.Host: "CPU_PINNED"}

// HiCache's KV events by release (the host-kv-events rule, SGLang PR
// #22894), as the tree reports them. Without storage: a (1000 tokens) and
// each later prompt are written through and stored on the host once
// written; b (2500) evicts a from the device; a's repeat loads back its
// first 999 tokens (the match stops one short of the prompt, splitting a),
// evicting b, and its insert puts the last token back on the device
// unannounced (SGLang's insert of an evicted node); c (2500) evicts both
// parts of a; d (2500) evicts c and, for its own write-through, b from the
// host (used before a's repeat, so least recently). With storage: after
// a flush a's repeat is prefetched from storage onto the host (1000 pages)
// and its first 999 tokens are loaded back. From 0.5.11 every step names
// its tier. 0.5.10 and 0.5.10.post1 tell only each prompt's insertion and
// a node's leaving the tree, from the GPU though it leaves from the host;
// the prefetch and the load back send nothing.
func TestHostKVEventsByRelease(t *testing.T) {
	tiered := []string{
		"cleared", "stored GPU 1000", "stored CPU_PINNED 1000", // a
		"removed GPU 1000", "stored GPU 2500", "stored CPU_PINNED 2500", // b
		"removed GPU 2500", "stored GPU 999", // a's load back
		"removed GPU 1", "removed GPU 999", "stored GPU 2500", "stored CPU_PINNED 2500", // c
		"removed GPU 2500", "stored GPU 2500", // d
		"removed CPU_PINNED 2500", "stored CPU_PINNED 2500",
	}
	untiered := []string{
		"cleared", "stored GPU 1000", // a
		"stored GPU 2500",                     // b
		"stored GPU 2500",                     // c
		"stored GPU 2500", "removed GPU 2500", // d
	}
	tieredStorage := []string{"cleared", "stored GPU 1000", "stored CPU_PINNED 1000", "cleared", "stored CPU_PINNED 1000", "stored GPU 999"}
	untieredStorage := []string{"cleared", "stored GPU 1000", "cleared"}
	for _, tc := range []struct {
		release       string
		want, storage []string
	}{
		{"0.5.10", untiered, untieredStorage}, {"0.5.10.post1", untiered, untieredStorage},
		{"0.5.11", tiered, tieredStorage}, {"0.5.12", tiered, tieredStorage},
		{"0.5.17", tiered, tieredStorage}, {"0.5.18", tiered, tieredStorage},
	} {
		t.Run(tc.release, func(t *testing.T) {
			check := func(what string, got, want []string) {
				t.Helper()
				if g, w := strings.Join(got, "; "), strings.Join(want, "; "); g != w {
					t.Errorf("%s: events:\n got %s\nwant %s", what, g, w)
				}
			}
			synctest.Test(t, func(t *testing.T) {
				p := hiProfile(t, "write_through", "")
				p.SGLangVersion = tc.release
				events := &tierLog{}
				e := startEngine(t, Config{Profile: p, CacheEvents: events})
				defer e.Close()
				a := prompt(1, 1000)
				for _, ids := range [][]int32{a, prompt(2, 2500), a, prompt(3, 2500), prompt(4, 2500)} {
					run(t, e, Request{InputIDs: ids, MaxNewTokens: 1})
				}
				if err := e.Flush(context.Background(), time.Minute, "test"); err != nil {
					t.Fatal(err)
				}
				check("without storage", events.log[:len(events.log)-1], tc.want)
			})
			synctest.Test(t, func(t *testing.T) {
				p := hiProfile(t, "write_through", "memory")
				p.SGLangVersion, p.HiCache.PrefetchPolicy = tc.release, "wait_complete"
				events := &tierLog{}
				e := startEngine(t, Config{Profile: p, CacheEvents: events})
				defer e.Close()
				a := prompt(1, 1000)
				run(t, e, Request{InputIDs: a, MaxNewTokens: 1})
				if err := e.Flush(context.Background(), time.Minute, "test"); err != nil {
					t.Fatal(err)
				}
				ev, _ := run(t, e, Request{InputIDs: a, MaxNewTokens: 1})
				if tiers := tiersOf(ev); tiers.Storage != 999 {
					t.Fatalf("a after the flush: tiers %+v, want 999 from storage", tiers)
				}
				check("with storage", events.log, tc.storage)
			})
		})
	}
}

package engine

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglmock/sglmock/mockserver/hicache"
	"github.com/sglmock/sglmock/mockserver/profile"
)

// bigPageProfile is hiProfile with a token of 8 MiB of KV (4 layers, 1024
// heads of 1024 bytes, K and V), moved at the same times: a page (one
// token) read from or written to storage in 1 ms, 7.8125 GiB/s, over the
// host link in 1e-5 s.
func bigPageProfile(t *testing.T, storage, layout string) *profile.Profile {
	t.Helper()
	p := hiProfile(t, "write_through", storage)
	h := p.HiCache
	h.MemLayout = layout
	h.KV = profile.KVShape{Layers: 4, KVHeads: 1024, HeadDim: 1024, DTypeBytes: 1}
	h.StorageReadGBps, h.StorageWriteGBps = 8.388608, 8.388608
	h.HostGBps = 838.8608
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	return p
}

// hist is a histogram's buckets, count and sum as a test states them.
type hist struct {
	buckets []uint64
	count   uint64
	sum     float64
}

func (h hist) equal(got Histogram) bool {
	return slices.Equal(h.buckets, got.Buckets) && h.count == got.Count && h.sum == got.Sum
}

// A prompt of 1000 pages backed up to storage and, after a flush,
// prefetched from it goes in 8 storage batches each way: 7 of 128 pages
// and one of 104, each batch 1 ms a page. Each backend reports them as its
// get and set calls do: the memory store and 3FS with a layer_first pool
// the pages and 8 MiB / 2^30 / 1 ms = 7.8125 GiB/s; Mooncake the K half of
// each page (3.90625); 3FS with a page_first pool K and V as two objects
// (256 and 208 a batch, 7.8125); HiCacheFile nothing.
func TestStorageHistogramsOfABackupAndAPrefetch(t *testing.T) {
	pages := hist{[]uint64{0, 0, 0, 0, 0}, 8, 1000}
	full := hist{[]uint64{0, 0, 0, 0, 8, 8, 8}, 8, 62.5}
	for _, tc := range []struct {
		backend, layout string
		pages, bw       hist
	}{
		{"memory", "layer_first", pages, full},
		{"hf3fs", "layer_first", pages, full},
		{"mooncake", "layer_first", pages, hist{[]uint64{0, 0, 0, 8, 8, 8, 8}, 8, 31.25}},
		{"hf3fs", "page_first", hist{[]uint64{0, 0, 0, 0, 0}, 8, 2000}, full},
		{"file", "layer_first", hist{}, hist{}},
	} {
		t.Run(tc.backend+"/"+tc.layout, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := startEngine(t, Config{Profile: bigPageProfile(t, tc.backend, tc.layout), HiCacheStorageDir: t.TempDir()})
				defer e.Close()
				a := prompt(1, 1000)
				run(t, e, Request{InputIDs: a, MaxNewTokens: 1})
				if err := e.Flush(context.Background(), time.Minute, "test"); err != nil {
					t.Fatal(err)
				}
				st := e.HiCache().Storage
				if !tc.pages.equal(st.BackupPages) || !tc.bw.equal(st.BackupBandwidth) {
					t.Errorf("after the backup: pages %+v, bandwidth %+v; want %+v, %+v", st.BackupPages, st.BackupBandwidth, tc.pages, tc.bw)
				}
				if st.PrefetchPages.Count != 0 {
					t.Errorf("before the prefetch: %d prefetch batches", st.PrefetchPages.Count)
				}
				ev, _ := run(t, e, Request{InputIDs: a, MaxNewTokens: 1})
				if pf := ev.Truth.Prefetch; pf == nil || pf.Fetched != 1000 {
					t.Fatalf("prefetch %+v, want 1000 pages read", pf)
				}
				st = e.HiCache().Storage
				if !tc.pages.equal(st.PrefetchPages) || !tc.bw.equal(st.PrefetchBandwidth) {
					t.Errorf("after the prefetch: pages %+v, bandwidth %+v; want %+v, %+v", st.PrefetchPages, st.PrefetchBandwidth, tc.pages, tc.bw)
				}
			})
		})
	}
}

// A batch shows in the histograms as its I/O ends, as SGLang's scheduler
// loop logs the backend's lists on every pass. a's backup runs from 11 ms
// after its answer for 1 s: 311 ms after, 300 pages are written, 2 batches
// of them done. Its repeat under the timeout policy (0.5 s) is stopped
// with 3 batches read (384 pages at 0.5 s); the I/O thread ends the batch
// it reads, the fourth, at 0.512 s, which shows too when the answer is
// done (0.564 s): 4 batches, 512 pages.
func TestStorageHistogramsFollowEachBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := bigPageProfile(t, "memory", "layer_first")
		p.HiCache.PrefetchPolicy = "timeout"
		p.HiCache.StorageExtraConfig = `{"prefetch_timeout_base": 0.5, "prefetch_timeout_per_ki_token": 0}`
		if err := p.Validate(); err != nil {
			t.Fatal(err)
		}
		e := startEngine(t, Config{Profile: p})
		defer e.Close()
		a := prompt(1, 1000)
		run(t, e, Request{InputIDs: a, MaxNewTokens: 1})
		time.Sleep(311 * time.Millisecond)
		if got := e.HiCache().Storage.BackupPages; got.Count != 2 || got.Sum != 256 {
			t.Fatalf("300 pages into the backup: %d batches of %v pages, want 2 of 256", got.Count, got.Sum)
		}
		if err := e.Flush(context.Background(), time.Minute, "test"); err != nil {
			t.Fatal(err)
		}
		issued := time.Now()
		ev, _ := run(t, e, Request{InputIDs: a, MaxNewTokens: 1})
		if pf := ev.Truth.Prefetch; pf == nil || !pf.Terminated || pf.Fetched != 384 {
			t.Fatalf("prefetch %+v, want 384 pages read when the timeout stops it", pf)
		}
		want := hist{[]uint64{0, 0, 0, 0, 0}, 4, 512}
		if got := e.HiCache().Storage.PrefetchPages; !want.equal(got) {
			t.Fatalf("after the answer, at %v: %+v, want %+v", time.Since(issued), got, want)
		}
	})
}

// A backup puts only the pages the store lacks, a storage batch at a
// time: with a's first 200 pages stored (by another server sharing the
// store), its 1000-page node goes in batches of 0, 56, 5 x 128 and 104
// pages to put. Mooncake counts the batches it puts (7); 3FS counts the
// empty one too, at 0 GiB/s.
func TestStorageHistogramsCountOnlyThePagesToPut(t *testing.T) {
	for _, tc := range []struct {
		backend   string
		pages, bw hist
	}{
		{"mooncake", hist{[]uint64{0, 0, 0, 0, 1}, 7, 800}, hist{[]uint64{0, 0, 0, 7, 7, 7, 7}, 7, 27.34375}},
		{"hf3fs", hist{[]uint64{1, 1, 1, 1, 2}, 8, 800}, hist{[]uint64{1, 1, 1, 1, 8, 8, 8}, 8, 54.6875}},
	} {
		t.Run(tc.backend, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := hicache.NewMemory(hicache.Classes[tc.backend], hicache.MemoryPages)
				a := prompt(1, 1000)
				other := startEngine(t, Config{Profile: bigPageProfile(t, "memory", "layer_first"), HiCacheStore: store})
				run(t, other, Request{InputIDs: a[:200], MaxNewTokens: 1})
				if err := other.Flush(context.Background(), time.Minute, "test"); err != nil {
					t.Fatal(err)
				}
				other.Close()
				e := startEngine(t, Config{Profile: bigPageProfile(t, tc.backend, "layer_first"), HiCacheStore: store})
				defer e.Close()
				run(t, e, Request{InputIDs: a, MaxNewTokens: 1})
				if err := e.Flush(context.Background(), time.Minute, "test"); err != nil {
					t.Fatal(err)
				}
				st := e.HiCache().Storage
				if !tc.pages.equal(st.BackupPages) || !tc.bw.equal(st.BackupBandwidth) {
					t.Errorf("pages %+v, bandwidth %+v; want %+v, %+v", st.BackupPages, st.BackupBandwidth, tc.pages, tc.bw)
				}
				if got := store.Len(); got != 1000 {
					t.Errorf("the store holds %d pages, want 1000", got)
				}
			})
		})
	}
}

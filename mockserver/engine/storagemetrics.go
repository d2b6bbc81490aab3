package engine

import (
	"slices"
	"time"

	"github.com/sglmock/sglmock/mockserver/hicache"
)

// The bucket bounds of SGLang's StorageMetricsCollector: pages (I/Os) a
// batch, and GB/s (the backends' 1 << 30 bytes).
var (
	storagePagesBounds     = []float64{1, 5, 10, 50, 100}
	storageBandwidthBounds = []float64{0.1, 0.5, 1, 5, 10, 50, 100}
)

// Histogram is a Prometheus histogram's state: the count of observations
// at most each bound (cumulative, as the exposition writes them), their
// count and sum.
type Histogram struct {
	Bounds  []float64
	Buckets []uint64
	Count   uint64
	Sum     float64
}

func newHistogram(bounds []float64) Histogram {
	return Histogram{Bounds: bounds, Buckets: make([]uint64, len(bounds))}
}

// Observe adds v.
func (h *Histogram) Observe(v float64) {
	for i, b := range h.Bounds {
		if v <= b {
			h.Buckets[i]++
		}
	}
	h.Count++
	h.Sum += v
}

// Add adds o's observations; a zero Histogram takes o's bounds.
func (h *Histogram) Add(o Histogram) {
	switch {
	case o.Bounds == nil:
		return
	case h.Bounds == nil:
		*h = o.clone()
		return
	}
	for i := range h.Buckets {
		h.Buckets[i] += o.Buckets[i]
	}
	h.Count += o.Count
	h.Sum += o.Sum
}

func (h Histogram) clone() Histogram {
	h.Buckets = slices.Clone(h.Buckets)
	return h
}

// StorageMetrics are SGLang's storage histograms (StorageMetricsCollector):
// one observation a storage batch (HiCacheController.storage_batch_size
// pages) a prefetch read or a backup wrote, of its pages and of its
// bandwidth over the batch's I/O time, for the backends that report them
// (hicache.Metrics).
type StorageMetrics struct {
	PrefetchPages, BackupPages         Histogram // sglang:prefetch_pgs, backup_pgs
	PrefetchBandwidth, BackupBandwidth Histogram // sglang:prefetch_bandwidth, backup_bandwidth
}

func newStorageMetrics() StorageMetrics {
	return StorageMetrics{
		PrefetchPages: newHistogram(storagePagesBounds), BackupPages: newHistogram(storagePagesBounds),
		PrefetchBandwidth: newHistogram(storageBandwidthBounds), BackupBandwidth: newHistogram(storageBandwidthBounds),
	}
}

// Add adds o's observations.
func (m *StorageMetrics) Add(o StorageMetrics) {
	m.PrefetchPages.Add(o.PrefetchPages)
	m.BackupPages.Add(o.BackupPages)
	m.PrefetchBandwidth.Add(o.PrefetchBandwidth)
	m.BackupBandwidth.Add(o.BackupBandwidth)
}

func (m StorageMetrics) clone() StorageMetrics {
	return StorageMetrics{PrefetchPages: m.PrefetchPages.clone(), BackupPages: m.BackupPages.clone(),
		PrefetchBandwidth: m.PrefetchBandwidth.clone(), BackupBandwidth: m.BackupBandwidth.clone()}
}

// batchObservation is one batch a backend appended to its lists
// (prefetch_pgs and prefetch_bandwidth, or backup_pgs and
// backup_bandwidth), which the scheduler logs at its next
// check_hicache_events.
type batchObservation struct {
	pages     float64
	bandwidth float64
}

// storageRecorder is the backend's side of SGLang's storage metrics: the
// batches it timed since the scheduler last took them (get_stats).
type storageRecorder struct {
	rule             hicache.BatchMetrics
	prefetch, backup []batchObservation
}

// recordPrefetch and recordBackup append a batch of pages whose I/O took
// d; a backup batch with nothing to write counts only where the backend
// counts it.
func (r *storageRecorder) recordPrefetch(pages int, d time.Duration) {
	r.prefetch = append(r.prefetch, r.observation(pages, d))
}

func (r *storageRecorder) recordBackup(pages int, d time.Duration) {
	if pages > 0 || r.rule.EmptyBackups {
		r.backup = append(r.backup, r.observation(pages, d))
	}
}

func (r *storageRecorder) observation(pages int, d time.Duration) batchObservation {
	return batchObservation{pages: float64(pages * r.rule.IOsPerPage), bandwidth: r.rule.Bandwidth(pages, d.Seconds())}
}

// drain is log_storage_metrics(storage_backend.get_stats()): the batches
// recorded go into m's histograms and the lists empty.
func (r *storageRecorder) drain(m *StorageMetrics) {
	for _, o := range r.prefetch {
		m.PrefetchPages.Observe(o.pages)
		m.PrefetchBandwidth.Observe(o.bandwidth)
	}
	for _, o := range r.backup {
		m.BackupPages.Observe(o.pages)
		m.BackupBandwidth.Observe(o.bandwidth)
	}
	r.prefetch, r.backup = r.prefetch[:0], r.backup[:0]
}

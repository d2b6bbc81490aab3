package hicache

// gib is the unit of SGLang's storage bandwidth histograms: a backend
// divides its bytes by 1 << 30 (gb_per_page) and labels the result GB/s.
const gib = 1 << 30

// BatchMetrics is what a backend reports of each batch it reads or writes
// to SGLang's storage histograms (sglang:prefetch_pgs, backup_pgs,
// prefetch_bandwidth, backup_bandwidth). Only the backends whose get_stats
// returns StorageMetrics report any: MooncakeStore and HiCacheHF3FS, which
// time each batch's get or set call (time.perf_counter around it) and
// append its I/O count and count / seconds x gb_per_page; the mock's memory
// store reports like them, with the page's whole KV. HiCacheFile and the
// others inherit HiCacheStorage.get_stats, which returns None: no series.
type BatchMetrics struct {
	// IOsPerPage is what a page counts for in the pages histograms: 2 for
	// 3FS's zero-copy MHA pages, whose K and V are separate objects.
	IOsPerPage int
	// GiBPerIO is gb_per_page: one object's bytes over 1 << 30.
	GiBPerIO float64
	// EmptyBackups: a backup batch whose pages are all stored already is
	// observed too (3FS appends its 0 I/Os; Mooncake appends only a batch
	// with a page to put).
	EmptyBackups bool
}

// Metrics returns how backend reports its batches for a model whose page
// holds pageBytes of KV (K and V, or MLA's latent), in the host pool's
// memLayout, and false for a backend that reports none.
func Metrics(backend, memLayout string, mla bool, pageBytes float64) (BatchMetrics, bool) {
	// get_ksize_per_token: an MHA host pool's K half, an MLA pool's all.
	kBytes := pageBytes / 2
	if mla {
		kBytes = pageBytes
	}
	switch backend {
	case "mooncake":
		// register_mem_pool_host: gb_per_page from get_ksize_per_token,
		// counted once a page although a page moves K and V.
		return BatchMetrics{IOsPerPage: 1, GiBPerIO: kBytes / gib}, true
	case "hf3fs":
		// StorageBackendFactory sizes a page_first page by its K half, a
		// layer_first one whole (it sizes no other layout: SGLang fails to
		// start, the mock takes the whole page); a zero-copy (page_first) MHA
		// page is two objects, K and V.
		if memLayout == "page_first" || memLayout == "page_first_direct" {
			ios := 2
			if mla {
				ios = 1
			}
			return BatchMetrics{IOsPerPage: ios, GiBPerIO: kBytes / gib, EmptyBackups: true}, true
		}
		return BatchMetrics{IOsPerPage: 1, GiBPerIO: pageBytes / gib, EmptyBackups: true}, true
	case "memory":
		return BatchMetrics{IOsPerPage: 1, GiBPerIO: pageBytes / gib}, true
	}
	return BatchMetrics{}, false
}

// Bandwidth is a batch's figure for a bandwidth histogram: pages moved in
// seconds, as the backend computes it (ionum / (end - start) x
// gb_per_page); 0 for a batch that moved nothing.
func (m BatchMetrics) Bandwidth(pages int, seconds float64) float64 {
	ios := pages * m.IOsPerPage
	if ios == 0 {
		return 0
	}
	return float64(ios) / seconds * m.GiBPerIO
}

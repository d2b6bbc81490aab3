package api

import (
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sglmock/sglmock/mockserver/engine"
	"github.com/sglmock/sglmock/mockserver/profile"
	"github.com/sglmock/sglmock/sim"
)

// hicacheArgs are SGLang's HiCache server args as /server_info reports
// them.
type hicacheArgs struct {
	EnableHierarchicalCache          bool    `json:"enable_hierarchical_cache"`
	HiCacheRatio                     float64 `json:"hicache_ratio"`
	HiCacheSize                      int     `json:"hicache_size"`
	HiCacheWritePolicy               string  `json:"hicache_write_policy"`
	HiCacheIOBackend                 string  `json:"hicache_io_backend"`
	HiCacheMemLayout                 string  `json:"hicache_mem_layout"`
	HiCacheStorageBackend            *string `json:"hicache_storage_backend"`
	HiCacheStoragePrefetchPolicy     string  `json:"hicache_storage_prefetch_policy"`
	HiCacheStorageBackendExtraConfig *string `json:"hicache_storage_backend_extra_config"`
}

// hicacheServerArgs fills the HiCache args from the profile: SGLang's
// defaults when HiCache is off, else the flags as _handle_hicache
// normalized them.
func hicacheServerArgs(p *profile.Profile) hicacheArgs {
	h := p.HiCacheConfig()
	if h == nil {
		off := profile.HiCache{}
		if p.HiCache != nil {
			off = *p.HiCache
		}
		off.Enable = true // for its defaults only
		p2 := &profile.Profile{HiCache: &off}
		h = p2.HiCacheConfig()
		h.Enable = false
	}
	a := hicacheArgs{
		EnableHierarchicalCache: h.Enable, HiCacheRatio: h.Ratio, HiCacheSize: h.SizeGB,
		HiCacheWritePolicy: h.WritePolicy, HiCacheIOBackend: h.IOBackend, HiCacheMemLayout: h.MemLayout,
		HiCacheStoragePrefetchPolicy: h.PrefetchPolicy,
	}
	if h.StorageBackend != "" {
		a.HiCacheStorageBackend = &h.StorageBackend
	}
	if h.StorageExtraConfig != "" {
		a.HiCacheStorageBackendExtraConfig = &h.StorageExtraConfig
	}
	return a
}

// hicacheRoutes serves SGLang's storage-tier admin routes.
func (s *Server) hicacheRoutes(r *router) {
	r.handle([]string{http.MethodPost}, "/hicache/storage-backend/clear", s.sameOriginOnly,
		func(c *exchange) { s.clearHiCacheStorage(c, false) })
	r.handle([]string{http.MethodGet, http.MethodPost}, "/clear_hicache_storage_backend", s.sameOriginOnly,
		func(c *exchange) { s.clearHiCacheStorage(c, true) })
}

// clearHiCacheStorage is /hicache/storage-backend/clear and its deprecated
// route: the storage tier is emptied, whatever runs (SGLang does not wait
// for idle). SGLang answers 200 whenever HiCache is on, with a storage
// backend or without, and 400 with the same text when it is off.
func (s *Server) clearHiCacheStorage(c *exchange, deprecated bool) {
	on, _, _ := s.eng.ClearStorage()
	body := "Hierarchical cache storage backend cleared.\n"
	if deprecated {
		body = "Deprecated endpoint. Use POST /hicache/storage-backend/clear.\n" + body
	}
	code := http.StatusOK
	if !on {
		code = http.StatusBadRequest
	}
	c.Writer.Header()["Content-Type"] = nil
	c.Status(code)
	c.Writer.WriteString(body)
}

// cachedDetails is output_streamer.py's get_cached_tokens_details: a
// breakdown when any tier has tokens (with storage and its backend's
// class when a storage tier is on), else all device when something is
// cached, else null.
func cachedDetails(ev *engine.Event) *cachedTokensDetails {
	if t := ev.Tiers; t != nil && (t.Device > 0 || t.Host > 0 || t.Storage > 0) {
		d := &cachedTokensDetails{Device: t.Device, Host: t.Host}
		if t.Backend != "" {
			storage, backend := t.Storage, t.Backend
			d.Storage, d.StorageBackend = &storage, &backend
		}
		return d
	}
	if ev.CachedTokens > 0 {
		return &cachedTokensDetails{Device: ev.CachedTokens}
	}
	return nil
}

func tiersJSON(t *engine.Truth) *sim.CacheTiers {
	if t.Tiers == nil {
		return nil
	}
	return &sim.CacheTiers{Device: t.Tiers.Device, Host: t.Tiers.Host, Storage: t.Tiers.Storage,
		StorageBackend: t.Tiers.Backend, LoadBackTokens: t.LoadBackTokens}
}

func prefetchJSON(p *engine.PrefetchRecord) *sim.Prefetch {
	if p == nil {
		return nil
	}
	return &sim.Prefetch{Issued: p.Issued.Seconds(), Ended: p.Ended.Seconds(), Pages: p.Pages,
		FetchedPages: p.Fetched, Tokens: p.Tokens, Terminated: p.Terminated}
}

// hicacheCollector exposes the storage tier's counters and histograms
// with StorageMetricsCollector's labels: one series an attention-DP rank
// (its dp_rank; every rank is attention-DP rank 0 without DP attention, so
// their counts add up in one series, as SGLang's multiprocess registry
// adds them), each appearing with its first increment or observation (the
// histograms only for a backend that reports them, engine.StorageMetrics). The host pool's
// gauges are the schedulers' (collectScheduler), the load backs the radix
// cache's (collectRadixCache).
type hicacheCollector struct {
	eng *engine.Engine
}

var (
	storageLabels = []string{"attn_cp_rank", "attn_cp_size", "dp_rank", "pp_rank", "pp_size", "storage_backend", "tp_rank"}

	descPrefetched = desc(storageLabels, "sglang:prefetched_tokens_total", "Number of prefetched prompt tokens.")
	descBackedUp   = desc(storageLabels, "sglang:backuped_tokens_total", "Number of backuped tokens.")

	// The storage histograms, each with what it reads of the storage
	// metrics.
	storageHistograms = []struct {
		desc *prometheus.Desc
		of   func(*engine.StorageMetrics) *engine.Histogram
	}{
		{desc(storageLabels, "sglang:prefetch_pgs", "Histogram of prefetch pages of batches."),
			func(m *engine.StorageMetrics) *engine.Histogram { return &m.PrefetchPages }},
		{desc(storageLabels, "sglang:backup_pgs", "Histogram of backup pages of batches."),
			func(m *engine.StorageMetrics) *engine.Histogram { return &m.BackupPages }},
		{desc(storageLabels, "sglang:prefetch_bandwidth", "Histogram of prefetch bandwidth in GB/s."),
			func(m *engine.StorageMetrics) *engine.Histogram { return &m.PrefetchBandwidth }},
		{desc(storageLabels, "sglang:backup_bandwidth", "Histogram of backup bandwidth in GB/s."),
			func(m *engine.StorageMetrics) *engine.Histogram { return &m.BackupBandwidth }},
	}
)

func (c *hicacheCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descPrefetched
	ch <- descBackedUp
	for _, h := range storageHistograms {
		ch <- h.desc
	}
}

func (c *hicacheCollector) Collect(ch chan<- prometheus.Metric) {
	p := c.eng.Profile()
	if h := p.HiCacheConfig(); h == nil || h.StorageBackend == "" {
		return
	}
	ranks := c.eng.HiCacheRanks()
	sums := make([]engine.HiCacheStats, p.AttnDPRank(len(ranks)-1)+1)
	for r, st := range ranks {
		sum := &sums[p.AttnDPRank(r)]
		sum.PrefetchedTokens += st.PrefetchedTokens
		sum.BackedUpTokens += st.BackedUpTokens
		sum.Storage.Add(st.Storage)
	}
	for dp, st := range sums {
		storage := []string{"0", "1", strconv.Itoa(dp), "0", "1", p.HiCache.StorageBackend, "0"}
		lazyCounter(ch, descPrefetched, st.PrefetchedTokens, storage)
		lazyCounter(ch, descBackedUp, st.BackedUpTokens, storage)
		for _, h := range storageHistograms {
			if v := h.of(&st.Storage); v.Count > 0 {
				buckets := make(map[float64]uint64, len(v.Bounds))
				for i, b := range v.Bounds {
					buckets[b] = v.Buckets[i]
				}
				ch <- prometheus.MustNewConstHistogram(h.desc, v.Count, v.Sum, buckets, storage...)
			}
		}
	}
}

package api_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
	"github.com/sglmock/sglmock/mockserver/profile"
)

// parseScrape parses a /metrics body as Prometheus does and fails on a
// series that appears twice (the same name and labels).
func parseScrape(t *testing.T, body string) map[string]*dto.MetricFamily {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("the scrape does not parse: %v", err)
	}
	for name, f := range families {
		seen := map[string]bool{}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			slices.Sort(labels)
			key := strings.Join(labels, ",")
			if seen[key] {
				t.Errorf("%s{%s} appears twice", name, key)
			}
			seen[key] = true
		}
	}
	return families
}

// dpHiSpecProfile is the EAGLE3 profile on two DP-attention ranks (tp 2)
// with HiCache and an in-process storage tier, in round figures: a
// 3000-token pool a rank, 0.1 ms a prefill token, 1e-5 s a token over the
// host link plus 1 ms a transfer, 1 ms a one-token page to or from
// storage.
func dpHiSpecProfile(t *testing.T) *profile.Profile {
	t.Helper()
	p := mocktest.Profile(t, "llama-8b-eagle3-h100")
	p.DPSize, p.TPSize, p.EnableDPAttention = 2, 2, true
	p.ContextLength, p.MaxTotalTokens, p.FlushBusyAfterFinishS = 3000, 3000, 0
	p.Prefill = profile.PrefillCost{PerTokenS: 1e-4}
	p.HiCache = &profile.HiCache{Enable: true, StorageBackend: "memory", PrefetchPolicy: "wait_complete",
		KV:       profile.KVShape{Layers: 4, KVHeads: 1, HeadDim: 1, DTypeBytes: 1},
		HostGBps: 8e-4, TransferOverheadS: 0.001, StorageReadGBps: 8e-6, StorageWriteGBps: 8e-6}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	return p
}

// Where DP ranks, HiCache and speculative decoding meet in /metrics, as
// SGLang's collectors keep each series: the host pool's gauges and the
// queue time are each rank's scheduler's (dp_rank and its tp_rank); the
// radix cache's evictions and load backs are one series labelled with the
// tree's class, HiRadixCache, the ranks' sum; the storage counters are one
// series an attention-DP rank. Rank 0 prefills a (1000 tokens) and backs
// it up; after a flush, a on rank 1 is prefetched from storage (999
// tokens: EAGLE's bigram keys leave one) and loaded back; b (2500 tokens)
// on rank 1 then evicts it. The storage histograms count a batch of up
// to 128 pages an observation. The scrape parses, with no series twice.
func TestMetricsOfDPRanksWithHiCache(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{Profile: dpHiSpecProfile(t), EnableMetrics: true})
		gen := func(seed, n, rank int) {
			t.Helper()
			body := fmt.Sprintf(`{"input_ids": %s, "routed_dp_rank": %d, "sampling_params": {"max_new_tokens": 4}}`, jsonOf(ids(seed, n)), rank)
			if code, out, _ := ts.Do(t, "POST", "/generate", body); code != 200 {
				t.Fatalf("generate: %d %s", code, out)
			}
		}
		body := getOK(t, ts, "/metrics")
		if strings.Contains(body, "sglang:hicache_host_total_tokens{") || strings.Contains(body, "sglang:prefetched_tokens_total{") ||
			strings.Contains(body, "sglang:load_back_tokens_total{") || strings.Contains(body, "sglang:backup_pgs_count{") {
			t.Fatalf("a fresh server has HiCache series before their first log point or increment:\n%s", sglangSeries(body))
		}
		gen(0, 1000, 0)
		if code, out, _ := ts.Do(t, "POST", "/flush_cache?timeout=60", ""); code != 200 {
			t.Fatalf("flush: %d %s", code, out)
		}
		gen(0, 1000, 1)
		gen(5000, 2500, 1)
		code, body, _ := ts.Do(t, "GET", "/metrics", "")
		if code != 200 {
			t.Fatalf("/metrics: %d %s", code, body)
		}
		parseScrape(t, body)
		rank := func(r int) string {
			return fmt.Sprintf(`{dp_rank="%d",engine_type="unified",model_name="meta-llama/Llama-3.1-8B-Instruct",moe_ep_rank="0",pp_rank="0",tp_rank="%d"}`, r, r)
		}
		storage := func(r int) string {
			return fmt.Sprintf(`{attn_cp_rank="0",attn_cp_size="1",dp_rank="%d",pp_rank="0",pp_size="1",storage_backend="memory",tp_rank="0"}`, r)
		}
		mustContain(t, "/metrics", body,
			// Each rank's host pool, 2 x 3000 + 1 tokens.
			"\nsglang:hicache_host_total_tokens"+rank(0)+" 6001\n",
			"\nsglang:hicache_host_total_tokens"+rank(1)+" 6001\n",
			// a's queue time on rank 0; a's and b's on rank 1.
			"\nsglang:queue_time_seconds_count"+rank(0)+" 1\n",
			"\nsglang:queue_time_seconds_count"+rank(1)+" 2\n",
			// b evicts a's 1002 bigrams (1003 tokens) on rank 1.
			"\nsglang:evicted_tokens_total{cache_type=\"HiRadixCache\"} 1002\n",
			"\nsglang:eviction_duration_seconds_count{cache_type=\"HiRadixCache\"} 1\n",
			"\nsglang:load_back_tokens_total{cache_type=\"HiRadixCache\"} 998\n",
			"\nsglang:load_back_duration_seconds_count{cache_type=\"HiRadixCache\"} 1\n",
			"\nsglang:backuped_tokens_total"+storage(0)+" 1002\n",
			"\nsglang:prefetched_tokens_total"+storage(1)+" 999\n",
			// The storage batches: rank 0's backups of 999 and 3 pages (7 x
			// 128 + 103, and 3), rank 1's prefetch of 999 (7 x 128 + 103);
			// rank 1's backup finds its 3 pages stored and puts none.
			"\nsglang:backup_pgs_count"+storage(0)+" 9\n",
			"\nsglang:backup_pgs_sum"+storage(0)+" 1002\n",
			"\nsglang:prefetch_pgs_count"+storage(1)+" 8\n",
			"\nsglang:prefetch_pgs_sum"+storage(1)+" 999\n",
		)
		for _, absent := range []string{"sglang:prefetched_tokens_total" + storage(0), "sglang:backup_pgs_count" + storage(1), "sglang:hicache_host_total_tokens{engine_type",
			`sglang:evicted_tokens_total{cache_type="RadixCache"}`, `sglang:evicted_tokens_total{cache_type="HiRadixCache",dp_rank`} {
			if strings.Contains(body, absent) {
				t.Errorf("/metrics has %s", absent)
			}
		}
		mocktest.Golden(t, "metrics/dp_hicache_spec.txt", []byte(sglangSeries(body)))
	})
}

// Without DP attention every rank is attention-DP rank 0, so the storage
// counters of both ranks are one series, their sum.
func TestStorageMetricsOfReplicasAddUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := dpHiSpecProfile(t)
		p.TPSize, p.EnableDPAttention = 1, false
		ts := mocktest.Start(t, api.Config{Profile: p, EnableMetrics: true})
		for r, seed := range []int{0, 5000} {
			body := fmt.Sprintf(`{"input_ids": %s, "routed_dp_rank": %d, "sampling_params": {"max_new_tokens": 4}}`, jsonOf(ids(seed, 100)), r)
			if code, out, _ := ts.Do(t, "POST", "/generate", body); code != 200 {
				t.Fatalf("generate: %d %s", code, out)
			}
		}
		if code, out, _ := ts.Do(t, "POST", "/flush_cache?timeout=60", ""); code != 200 { // after both backups
			t.Fatalf("flush: %d %s", code, out)
		}
		body := getOK(t, ts, "/metrics")
		parseScrape(t, body)
		// Each rank backs up its 102 bigrams (103 tokens).
		mustContain(t, "/metrics", body, `sglang:backuped_tokens_total{attn_cp_rank="0",attn_cp_size="1",dp_rank="0",pp_rank="0",pp_size="1",storage_backend="memory",tp_rank="0"} 204`+"\n")
		if strings.Contains(body, `dp_rank="1",pp_rank="0",pp_size="1",storage_backend`) {
			t.Errorf("a replica's storage series carries dp_rank 1:\n%s", sglangSeries(body))
		}
	})
}

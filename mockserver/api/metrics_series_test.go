package api_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
)

// sglangSeries keeps the lines of a scrape that are SGLang's series, their
// HELP and TYPE lines included.
func sglangSeries(body string) string {
	var out []string
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "sglang:") || strings.HasPrefix(line, "# HELP sglang:") || strings.HasPrefix(line, "# TYPE sglang:") {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n") + "\n"
}

// The series a cache benchmark reads to know that nothing was retracted or
// evicted between its legs, with SGLang's names, labels and buckets
// (metrics_collector.py), on virtual time: three 300-token prompts fill a
// 10000-token pool's cache (and a repeat of the first reuses 299 tokens), then two 200-token requests for 6000 tokens
// each evict it and outgrow the pool once the token ratio has decayed, so
// retract_decode frees one of them. The scrape is golden (testdata/metrics/retract_evict.txt); the
// figures a harness would check are asserted here too.
func TestMetricsOfRetractionsAndEvictions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mocktest.Profile(t, "default")
		p.ContextLength, p.MaxTotalTokens, p.FlushBusyAfterFinishS = 10000, 10000, 0
		ts := mocktest.Start(t, api.Config{Profile: p, EnableMetrics: true})
		for i := range 4 { // the fourth repeats the first: 299 of its 300 tokens cached
			ts.Do(t, "POST", "/generate", fmt.Sprintf(`{"input_ids": %s, "sampling_params": {"max_new_tokens": 1}}`, jsonOf(ids(i%3*1000, 300))))
		}
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Go(func() {
				code, body, _, err := ts.Send("POST", "/generate",
					fmt.Sprintf(`{"input_ids": %s, "sampling_params": {"max_new_tokens": 6000}}`, jsonOf(ids(5000+i*1000, 200))))
				if err != nil || code != 200 {
					t.Errorf("request %d: %d %s %v", i, code, body, err)
				}
			})
		}
		wg.Wait()
		body := getOK(t, ts, "/metrics")
		series := sglangSeries(body)
		sched := `{engine_type="unified",model_name="sglmock/small-1b",moe_ep_rank="0",pp_rank="0",tp_rank="0"}`
		st := ts.Engine().Stats()
		if st.RetractedRequests == 0 || st.Evictions == 0 {
			t.Fatalf("the load retracted %d requests and evicted %d times; want both", st.RetractedRequests, st.Evictions)
		}
		for _, want := range []string{
			fmt.Sprintf("sglang:num_retracted_requests_total%s %d\n", sched, st.RetractedRequests),
			fmt.Sprintf("sglang:num_retracted_input_tokens_total%s %d\n", sched, st.RetractedInputTokens),
			fmt.Sprintf("sglang:num_retracted_output_tokens_total%s %d\n", sched, st.RetractedOutputTokens),
			fmt.Sprintf(`sglang:evicted_tokens_total{cache_type="RadixCache"} %d`+"\n", st.EvictedTokens),
			fmt.Sprintf(`sglang:eviction_duration_seconds_count{cache_type="RadixCache"} %d`+"\n", st.Evictions),
			`sglang:eviction_duration_seconds_sum{cache_type="RadixCache"} 0` + "\n",
			`sglang:prompt_tokens_histogram_count{engine_type="unified",model_name="sglmock/small-1b"} 6` + "\n",
			`sglang:prompt_tokens_histogram_sum{engine_type="unified",model_name="sglmock/small-1b"} 1600` + "\n",
			`sglang:uncached_prompt_tokens_histogram_sum{engine_type="unified",model_name="sglmock/small-1b"} 1301` + "\n",
			`sglang:generation_tokens_histogram_sum{engine_type="unified",model_name="sglmock/small-1b"} 12004` + "\n",
		} {
			if !strings.Contains(series, want) {
				t.Errorf("/metrics lacks %q", want)
			}
		}
		mocktest.Golden(t, "metrics/retract_evict.txt", []byte(series))
	})
}

// Before any retraction, eviction or speculative round SGLang has no such
// series: it creates a labelled counter's series at its first increment.
// The logged gauges come with the first log point.
func TestMetricsSeriesAbsentUntilTheirFirstIncrement(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{EnableMetrics: true})
		body := getOK(t, ts, "/metrics")
		for _, absent := range []string{"sglang:num_retracted_requests_total{", "sglang:evicted_tokens_total{",
			"sglang:spec_verify_calls_total{", "sglang:kv_used_tokens{", "sglang:num_running_reqs{"} {
			if strings.Contains(body, absent) {
				t.Errorf("a fresh server has %s", absent)
			}
		}
		ts.Do(t, "POST", "/generate", fmt.Sprintf(`{"input_ids": %s, "sampling_params": {"max_new_tokens": 1}}`, jsonOf(ids(1, 100))))
		_, body, _ = ts.Do(t, "GET", "/metrics", "")
		if !strings.Contains(body, "sglang:kv_used_tokens{") || strings.Contains(body, "sglang:num_retracted_requests_total{") {
			t.Errorf("after one request: want the logged gauges and no retraction series:\n%s", sglangSeries(body))
		}
	})
}

// Under speculative decoding each finished request adds its verify rounds
// (spec_verify_ct) to spec_verify_calls_total.
func TestMetricsSpecVerifyCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{Profile: mocktest.Profile(t, "llama-8b-eagle3-h100"), EnableMetrics: true})
		total := 0
		for i := range 2 {
			code, body, _ := ts.Do(t, "POST", "/generate", fmt.Sprintf(`{"input_ids": %s, "sampling_params": {"max_new_tokens": 40}}`, jsonOf(ids(i*100, 50))))
			var r generateResponse
			if err := json.Unmarshal([]byte(body), &r); code != 200 || err != nil || r.MetaInfo.SpecVerifyCt == nil {
				t.Fatalf("%d %s", code, body)
			}
			total += *r.MetaInfo.SpecVerifyCt
		}
		body := getOK(t, ts, "/metrics")
		want := fmt.Sprintf(`sglang:spec_verify_calls_total{engine_type="unified",model_name="meta-llama/Llama-3.1-8B-Instruct"} %d`+"\n", total)
		if total == 0 || !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	})
}

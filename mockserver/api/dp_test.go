package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
	"github.com/sglmock/sglmock/mockserver/profile"
	"github.com/sglmock/sglmock/sim"
)

// dpProfile is the default profile on two DP-attention ranks (tp 2).
func dpProfile(t *testing.T) *profile.Profile {
	p := mocktest.Profile(t, "default")
	p.DPSize, p.TPSize, p.EnableDPAttention = 2, 2, true
	return p
}

// generateMeta posts body to /generate and returns the answer's meta_info.
func generateMeta(t *testing.T, ts *mocktest.Mock, body string, header ...string) (int, map[string]any, string) {
	t.Helper()
	code, out, _ := ts.Do(t, "POST", "/generate", body, header...)
	if code != 200 {
		return code, nil, out
	}
	var resp struct {
		MetaInfo map[string]any `json:"meta_info"`
	}
	if err := json.Unmarshal([]byte(out), &resp); err != nil {
		t.Fatal(err)
	}
	return code, resp.MetaInfo, out
}

// TestGenerateNamesAndPinsTheRank: meta_info carries the rank that ran the
// request; routed_dp_rank pins it, data_parallel_rank is its deprecated
// name, which routed_dp_rank wins over; a rank the deployment lacks is
// refused with the tokenizer manager's message. The warmup is a batch of
// its prompt once a rank (SGLang's _execute_server_warmup), which the
// controller spreads over the ranks like any other requests: every rank
// holds the prompt, and the round robin is back at rank 0.
func TestGenerateNamesAndPinsTheRank(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{Profile: dpProfile(t)})
		if err := ts.Warmup(context.Background()); err != nil {
			t.Fatal(err)
		}
		for r, st := range ts.Engine().RankStats() {
			if st.Requests != 1 || st.CacheTokens == 0 {
				t.Fatalf("rank %d after the warmup: %d requests, %d tokens cached; want 1 and the warmup prompt", r, st.Requests, st.CacheTokens)
			}
		}
		for i, tc := range []struct {
			fields string
			want   float64
		}{
			{``, 0}, // the warmup took ranks 0 and 1
			{``, 1},
			{`, "routed_dp_rank": 1`, 1},
			{`, "data_parallel_rank": 1`, 1},
			{`, "routed_dp_rank": 0, "data_parallel_rank": 1`, 0},
			{``, 0}, // pinned requests do not move the round robin
		} {
			body := fmt.Sprintf(`{"input_ids": %s, "sampling_params": {"max_new_tokens": 2}%s}`, jsonOf(ids(i, 20)), tc.fields)
			code, meta, out := generateMeta(t, ts, body)
			if code != 200 || meta["dp_rank"] != tc.want {
				t.Fatalf("request %d%s: got %d, dp_rank %v (%s), want rank %v", i+1, tc.fields, code, meta["dp_rank"], out, tc.want)
			}
		}
		code, body, _ := ts.Do(t, "POST", "/generate", `{"text": "hi", "routed_dp_rank": 2}`)
		if want := `{"error":{"message":"routed_dp_rank=2 out of range [0, 2)"}}`; code != 400 || body != want {
			t.Fatalf("rank 2 of 2: got %d %s, want 400 %s", code, body, want)
		}
	})
}

// TestOneRankDPRankIsNull: a deployment of one rank says "dp_rank": null
// in meta_info (its scheduler's dp_rank is None; PR #19268, in every known
// release), and takes routed_dp_rank 0 (SGLang ignores it) but not 1.
func TestOneRankDPRankIsNull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{})
		code, meta, out := generateMeta(t, ts, `{"text": "hi", "routed_dp_rank": 0, "sampling_params": {"max_new_tokens": 1}}`)
		if rank, has := meta["dp_rank"]; code != 200 || !has || rank != nil {
			t.Fatalf("one rank: got %d %s, want \"dp_rank\": null", code, out)
		}
		code, body, _ := ts.Do(t, "POST", "/generate", `{"text": "hi", "routed_dp_rank": 1}`)
		if want := `{"error":{"message":"routed_dp_rank=1 out of range [0, 1)"}}`; code != 400 || body != want {
			t.Fatalf("rank 1 of 1: got %d %s, want 400 %s", code, body, want)
		}
	})
}

// TestOpenAIRankHeader: on the OpenAI routes X-Data-Parallel-Rank wins over
// the body's routed_dp_rank, read as Python's int() reads it (white space,
// a sign, underscores between digits), and a header that is no integer is
// refused with SGLang's detail.
func TestOpenAIRankHeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{Profile: dpProfile(t)})
		for i, tc := range []struct {
			path, body string
			header     []string
			want       int
		}{
			{"/v1/completions", `{"prompt": "one", "max_tokens": 1, "routed_dp_rank": 1}`, nil, 1},
			{"/v1/completions", `{"prompt": "two", "max_tokens": 1, "routed_dp_rank": 1}`, []string{"X-Data-Parallel-Rank", "0"}, 0},
			{"/v1/chat/completions", `{"messages": [{"role": "user", "content": "three"}], "max_tokens": 1, "data_parallel_rank": 1}`, nil, 1},
			{"/v1/chat/completions", `{"messages": [{"role": "user", "content": "four"}], "max_tokens": 1}`, []string{"x-data-parallel-rank", " 1 "}, 1},
			{"/v1/completions", `{"prompt": "five", "max_tokens": 1}`, []string{"X-Data-Parallel-Rank", "0_1"}, 1}, // int("0_1") is 1
		} {
			if code, body, _ := ts.Do(t, "POST", tc.path, tc.body, tc.header...); code != 200 {
				t.Fatalf("request %d: got %d %s", i+1, code, body)
			}
			truths := ts.Engine().Truths()
			if got := truths[len(truths)-1].DPRank; got != tc.want {
				t.Fatalf("request %d: ran on rank %d, want %d", i+1, got, tc.want)
			}
		}
		for _, bad := range []string{"one", "", "_1", "1_", "1__0", "+_1", "1.0"} {
			code, body, _ := ts.Do(t, "POST", "/v1/completions", `{"prompt": "x", "max_tokens": 1}`, "X-Data-Parallel-Rank", bad)
			if want := `{"detail":"Invalid X-Data-Parallel-Rank header: must be an integer, got '` + bad + `'"}`; code != 400 || body != want {
				t.Fatalf("header %q: got %d %s, want 400 %s", bad, code, body, want)
			}
		}
	})
}

// TestLoadsPerRank: /v1/loads and /get_load give one entry a rank, in
// rank order; ?dp_rank= keeps one (none for a rank the server lacks; the
// last when given twice; read as pydantic reads an int: "+1", " 1\t" and
// "0_1" are 1, and an empty one is refused), and
// the Prometheus form has a line a rank under each gauge. Each rank runs
// max_running_requests / dp_size requests. The default release's loads are
// the schedulers' snapshots (PR #26348): no dp_rank_count and no
// aggregate; a release before it (0.5.12) adds them, the aggregate summing
// and averaging over the entries kept.
func TestLoadsPerRank(t *testing.T) {
	for _, release := range []string{"0.5.18", "0.5.12"} {
		synctest.Test(t, func(t *testing.T) {
			p := dpProfile(t)
			p.SGLangVersion = release
			ts := mocktest.Start(t, api.Config{Profile: p})
			go ts.Send("POST", "/generate", fmt.Sprintf(`{"input_ids": %s, "routed_dp_rank": 1, "sampling_params": {"max_new_tokens": 10000}}`, jsonOf(ids(1, 100))))
			time.Sleep(100 * time.Millisecond) // virtual: it decodes on rank 1
			body := getOK(t, ts, "/v1/loads?include=core")
			mocktest.Golden(t, "loads/dp-"+release+".json", []byte(body+"\n"))
			type answer struct {
				Count *int `json:"dp_rank_count"`
				Loads []struct {
					Rank       int `json:"dp_rank"`
					Running    int `json:"num_running_reqs"`
					MaxRunning int `json:"max_running_requests"`
				} `json:"loads"`
				Aggregate *struct {
					Running int `json:"total_running_reqs"`
				} `json:"aggregate"`
			}
			var loads answer
			json.Unmarshal([]byte(body), &loads)
			if len(loads.Loads) != 2 || loads.Loads[0].Rank != 0 || loads.Loads[1].Rank != 1 || loads.Loads[0].Running != 0 ||
				loads.Loads[1].Running != 1 || loads.Loads[1].MaxRunning != 128 {
				t.Fatalf("%s /v1/loads: %s", release, body)
			}
			if old := release == "0.5.12"; (loads.Count != nil) != old || (loads.Aggregate != nil) != old ||
				old && (*loads.Count != 2 || loads.Aggregate.Running != 1) {
				t.Fatalf("%s /v1/loads: got count %v aggregate %v, want them only before PR #26348", release, loads.Count, loads.Aggregate)
			}
			for _, tc := range []struct {
				query string
				want  []int
			}{{"?dp_rank=1", []int{1}}, {"?dp_rank=0", []int{0}}, {"?dp_rank=2", nil}, {"?dp_rank=-1", nil}, {"?dp_rank=0&dp_rank=1", []int{1}},
				{"?dp_rank=+1", []int{1}}, {"?dp_rank=%201%09", []int{1}}, {"?dp_rank=0_1", []int{1}}, {"?dp_rank=99999999999999999999", nil}} {
				code, body, _ := ts.Do(t, "GET", "/v1/loads"+tc.query, "")
				var kept answer
				if err := json.Unmarshal([]byte(body), &kept); code != 200 || err != nil {
					t.Fatalf("%s /v1/loads%s: got %d %s (%v), want 200 and loads", release, tc.query, code, body, err)
				}
				var got []int
				for _, l := range kept.Loads {
					got = append(got, l.Rank)
				}
				if fmt.Sprint(got) != fmt.Sprint(tc.want) || kept.Count != nil && *kept.Count != len(tc.want) {
					t.Fatalf("%s /v1/loads%s: got ranks %v (count %v), want %v", release, tc.query, got, kept.Count, tc.want)
				}
			}
			code, body, _ := ts.Do(t, "GET", "/v1/loads?dp_rank=", "")
			if want := `{"object":"error","message":"dp_rank: Input should be a valid integer, got \"\"","type":"Bad Request","param":null,"code":400}`; code != 400 || body != want {
				t.Fatalf("%s /v1/loads?dp_rank=: got %d %s, want 400 %s", release, code, body, want)
			}
			_, body, _ = ts.Do(t, "GET", "/v1/loads?format=prometheus&include=core", "")
			mocktest.Golden(t, "loads/dp-"+release+".prom", []byte(body))
			_, body, _ = ts.Do(t, "GET", "/get_load", "")
			var gl []struct {
				Rank int `json:"dp_rank"`
				Reqs int `json:"num_reqs"`
			}
			json.Unmarshal([]byte(body), &gl)
			if len(gl) != 2 || gl[0].Rank != 0 || gl[0].Reqs != 0 || gl[1].Rank != 1 || gl[1].Reqs != 1 {
				t.Fatalf("%s /get_load: %s", release, body)
			}
			ts.Engine().AbortAll()
		})
	}
}

// TestServerInfoPerRank: internal_states has one state a rank, each with
// the requests a rank may run; the args say the parallelism, the chunked
// prefill size as SGLang divides it (max_running_requests, not given at
// launch, is null as SGLang's argument), and kv_events the ranks a router
// subscribes to.
func TestServerInfoPerRank(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{Profile: dpProfile(t),
			KVEvents: &api.KVEventsInfo{Publisher: "zmq", Endpoint: "tcp://*:5557"}})
		body := getOK(t, ts, "/server_info")
		var info struct {
			TP         int    `json:"tp_size"`
			DP         int    `json:"dp_size"`
			Attention  bool   `json:"enable_dp_attention"`
			Method     string `json:"load_balance_method"`
			Chunked    int    `json:"chunked_prefill_size"`
			MaxRunning *int   `json:"max_running_requests"`
			MaxTotal   int    `json:"max_total_num_tokens"`
			KVEvents   struct {
				DPSize int `json:"dp_size"`
			} `json:"kv_events"`
			Internal []struct {
				PerDP    int `json:"effective_max_running_requests_per_dp"`
				Capacity struct {
					Tokens int `json:"token_capacity"`
				} `json:"memory_usage"`
			} `json:"internal_states"`
		}
		if err := json.Unmarshal([]byte(body), &info); err != nil {
			t.Fatal(err)
		}
		if info.TP != 2 || info.DP != 2 || !info.Attention || info.Method != "round_robin" || info.Chunked != 4096 ||
			info.MaxRunning != nil || info.MaxTotal != 262144 || info.KVEvents.DPSize != 2 || len(info.Internal) != 2 ||
			info.Internal[1].PerDP != 128 || info.Internal[1].Capacity.Tokens != 262144 {
			t.Fatalf("/server_info: %+v", info)
		}
	})
}

// TestMetricsPerRank: each rank's scheduler gauges carry its dp_rank and
// tp_rank; the tokenizer's counters are the deployment's.
func TestMetricsPerRank(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{Profile: dpProfile(t), EnableMetrics: true})
		if code, out, _ := ts.Do(t, "POST", "/generate", fmt.Sprintf(`{"input_ids": %s, "routed_dp_rank": 1, "sampling_params": {"max_new_tokens": 3}}`, jsonOf(ids(1, 40)))); code != 200 {
			t.Fatalf("/generate: %d %s", code, out)
		}
		body := getOK(t, ts, "/metrics")
		for _, want := range []string{
			`sglang:max_total_num_tokens{dp_rank="0",engine_type="unified",model_name="sglmock/small-1b",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 262144`,
			`sglang:realtime_tokens_total{dp_rank="1",engine_type="unified",mode="prefill_compute",model_name="sglmock/small-1b",moe_ep_rank="0",pp_rank="0",tp_rank="1"} 40`,
			`sglang:realtime_tokens_total{dp_rank="0",engine_type="unified",mode="prefill_compute",model_name="sglmock/small-1b",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0`,
			`sglang:prompt_tokens_total{engine_type="unified",model_name="sglmock/small-1b"} 40`,
		} {
			if !strings.Contains(body, want+"\n") {
				t.Fatalf("/metrics lacks %s:\n%s", want, body)
			}
		}
	})
}

// TestSimShowsRanks: /sim/requests and /sim/requests/{rid} name the rank
// of each request, and /sim/flushes each rank's answer: the flush answered
// 200 while rank 1, busy, refused it.
func TestSimShowsRanks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := dpProfile(t)
		p.FlushBusyAfterFinishS = 0 // an idle rank flushes while the other runs
		ts := mocktest.Start(t, api.Config{Profile: p})
		if code, out, _ := ts.Do(t, "POST", "/generate", `{"text": "a", "rid": "r0", "sampling_params": {"max_new_tokens": 1}}`); code != 200 {
			t.Fatalf("/generate: %d %s", code, out)
		}
		go ts.Send("POST", "/generate", `{"text": "b", "rid": "r1", "sampling_params": {"max_new_tokens": 200}}`)
		time.Sleep(50 * time.Millisecond)
		if code, body, _ := ts.Do(t, "POST", "/flush_cache", ""); code != 200 {
			t.Fatalf("flush: got %d %s, want rank 0's 200", code, body)
		}
		body := getOK(t, ts, "/sim/flushes")
		var flushes []sim.Flush
		json.Unmarshal([]byte(body), &flushes)
		if len(flushes) != 1 || !flushes[0].OK || len(flushes[0].Ranks) != 2 || !flushes[0].Ranks[0].OK || flushes[0].Ranks[1].OK ||
			flushes[0].Ranks[1].Outcome != "Cache not flushed because there are pending requests." || flushes[0].Ranks[1].Running != 1 {
			t.Fatalf("/sim/flushes: %s", body)
		}
		ts.Engine().AbortAll()
		_, body, _ = ts.Do(t, "GET", "/sim/requests/r0", "")
		if !strings.HasSuffix(body, `,"dp_rank":0}`) {
			t.Fatalf("/sim/requests/r0: %s", body)
		}
		time.Sleep(time.Second)
		_, body, _ = ts.Do(t, "GET", "/sim/requests", "")
		var reqs []sim.RequestSummary
		json.Unmarshal([]byte(body), &reqs)
		if len(reqs) != 2 || *reqs[0].DPRank != 0 || *reqs[1].DPRank != 1 {
			t.Fatalf("/sim/requests: %s", body)
		}
	})
}

// TestBuiltinDPProfile: the built-in DP-attention profile serves eight
// ranks, each with its own pool, a share of the running requests and of
// the chunked prefill.
func TestBuiltinDPProfile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{Profile: mocktest.Profile(t, "deepseek-v3-h200x8-dp8")})
		body := getOK(t, ts, "/v1/loads?include=core")
		var loads struct {
			Count int `json:"dp_rank_count"`
			Loads []struct {
				Rank       int `json:"dp_rank"`
				Pool       int `json:"max_total_num_tokens"`
				MaxRunning int `json:"max_running_requests"`
			} `json:"loads"`
		}
		json.Unmarshal([]byte(body), &loads)
		if loads.Count != 0 || len(loads.Loads) != 8 { // no dp_rank_count from the snapshots
			t.Fatalf("/v1/loads: %s", body)
		}
		for r, l := range loads.Loads {
			if l.Rank != r || l.Pool != 500000 || l.MaxRunning != 128 {
				t.Fatalf("/v1/loads rank %d: %+v", r, l)
			}
		}
		_, body, _ = ts.Do(t, "GET", "/server_info", "")
		if !strings.Contains(body, `"chunked_prefill_size":1024,`) {
			t.Fatalf("/server_info: want chunked_prefill_size 1024 (8192 / 8): %s", body)
		}
	})
}

// TestParallelSamplingSpreadsOverRanks: SGLang's parallel sampling sends
// the prompt's prefill and then each copy as requests of their own, which
// the controller dispatches one by one: on two ranks the prefill runs on
// rank 0, the first copy on rank 1, cold, and the second on rank 0, where
// the prompt is cached.
func TestParallelSamplingSpreadsOverRanks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{Profile: dpProfile(t)})
		body := fmt.Sprintf(`{"input_ids": %s, "sampling_params": {"max_new_tokens": 2, "n": 2}}`, jsonOf(ids(0, 100)))
		code, out, _ := ts.Do(t, "POST", "/generate", body)
		var resp []struct {
			MetaInfo struct {
				DPRank       int `json:"dp_rank"`
				CachedTokens int `json:"cached_tokens"`
			} `json:"meta_info"`
		}
		if err := json.Unmarshal([]byte(out), &resp); code != 200 || err != nil || len(resp) != 2 {
			t.Fatalf("got %d %s (%v)", code, out, err)
		}
		for i, want := range []struct{ rank, cached int }{{1, 0}, {0, 99}} {
			if got := resp[i].MetaInfo; got.DPRank != want.rank || got.CachedTokens != want.cached {
				t.Fatalf("copy %d: rank %d, %d cached; want rank %d, %d cached", i+1, got.DPRank, got.CachedTokens, want.rank, want.cached)
			}
		}
	})
}

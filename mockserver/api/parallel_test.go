package api_test

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
	"github.com/sglmock/sglmock/sim"
)

var uuidHex = regexp.MustCompile(`^[0-9a-f]{32}$`)

// simRequests returns the finished requests the mock recorded, but the
// named ones.
func simRequests(t *testing.T, ts *mocktest.Mock, except ...string) []sim.RequestSummary {
	t.Helper()
	body := getOK(t, ts, "/sim/requests")
	var all, out []sim.RequestSummary
	if err := json.Unmarshal([]byte(body), &all); err != nil {
		t.Fatal(err)
	}
next:
	for _, r := range all {
		for _, rid := range except {
			if r.RID == rid {
				continue next
			}
		}
		out = append(out, r)
	}
	return out
}

// n > 1 first prefills the prompt with a hidden max_new_tokens=0 request and
// waits for it; then every copy, under a fresh rid, finds the whole prompt
// cached, whether the engine is idle or busy.
func TestParallelSamplingCachesThePromptFirst(t *testing.T) {
	tests := []struct {
		name       string
		page       int
		busy       bool
		wantCached int
	}{
		{"idle", 1, false, 399},
		{"busy", 1, true, 399},
		{"page 16", 16, false, 384},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := mocktest.Profile(t, "default")
				p.PageSize = tt.page
				ts := mocktest.Start(t, api.Config{Profile: p, EnableMetrics: true})
				if tt.busy {
					go ts.Send("POST", "/generate", fmt.Sprintf(`{"input_ids": %s, "rid": "bg", "sampling_params": {"max_new_tokens": 100000}}`, jsonOf(ids(90, 50))))
					time.Sleep(50 * time.Millisecond) // virtual: bg is decoding
				}
				code, body, _ := ts.Do(t, "POST", "/generate", fmt.Sprintf(
					`{"input_ids": %s, "rid": "mine", "sampling_params": {"max_new_tokens": 4, "n": 3}}`, jsonOf(ids(91, 400))))
				var list []generateResponse
				if err := json.Unmarshal([]byte(body), &list); code != 200 || err != nil || len(list) != 3 {
					t.Fatalf("n=3: %d %s", code, body)
				}
				seen := map[string]bool{}
				for i, r := range list {
					m := r.MetaInfo
					if m.CachedTokens != tt.wantCached || m.CompletionTokens != 4 || !uuidHex.MatchString(m.ID) || seen[m.ID] {
						t.Fatalf("copy %d: id %q cached %d completion %d; want a fresh rid, cached %d, completion 4",
							i, m.ID, m.CachedTokens, m.CompletionTokens, tt.wantCached)
					}
					seen[m.ID] = true
				}
				reqs := simRequests(t, ts, "bg")
				if len(reqs) != 4 {
					t.Fatalf("/sim/requests: got %d requests, want the prefill and 3 copies: %+v", len(reqs), reqs)
				}
				pre := reqs[0]
				if pre.CompletionTokens != 0 || pre.CachedTokens != 0 || seen[pre.RID] || !uuidHex.MatchString(pre.RID) {
					t.Fatalf("the hidden prefill: %+v", pre)
				}
				for _, r := range reqs[1:] {
					if !seen[r.RID] || r.Arrival != pre.Finished || r.ReusedFrom != pre.RID {
						t.Fatalf("copy %+v: want it sent when the prefill %s finished (%v) and reusing it", r, pre.RID, pre.Finished)
					}
				}
				if tt.busy {
					ts.Do(t, "POST", "/abort_request", `{"abort_all": true}`)
					return
				}
				_, metrics, _ := ts.Do(t, "GET", "/metrics", "")
				label := `{engine_type="unified",model_name="sglmock/small-1b"}`
				for _, want := range []string{
					"sglang:num_requests_total" + label + " 4",
					"sglang:prompt_tokens_total" + label + " 1600",
					fmt.Sprintf(`sglang:cached_tokens_total{cache_source="device",engine_type="unified",model_name="sglmock/small-1b"} %d`, 3*tt.wantCached),
				} {
					if !strings.Contains(metrics, want) {
						t.Errorf("/metrics lacks %q: the prefill counts as a request", want)
					}
				}
			})
		})
	}
}

// A batch of prompts with n > 1: one prefill per prompt, one after the
// other, then every copy; stream events are indexed prompt-major.
func TestParallelSamplingBatchStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{})
		a, b := ids(92, 300), ids(93, 200)
		_, body, _ := ts.Do(t, "POST", "/generate", fmt.Sprintf(
			`{"input_ids": [%s, %s], "stream": true, "sampling_params": {"max_new_tokens": 3, "n": 2}}`, jsonOf(a), jsonOf(b)))
		final := map[int]generateResponse{}
		for _, e := range sseEvents(t, body) {
			if e == "[DONE]" {
				continue
			}
			var ev generateResponse
			if err := json.Unmarshal([]byte(e), &ev); err != nil || ev.Index == nil {
				t.Fatalf("event without index: %s", e)
			}
			final[*ev.Index] = ev
		}
		for i, want := range []int{299, 299, 199, 199} {
			if got := final[i]; got.MetaInfo.CachedTokens != want || got.MetaInfo.CompletionTokens != 3 {
				t.Fatalf("index %d: cached %d completion %d, want %d and 3", i, got.MetaInfo.CachedTokens, got.MetaInfo.CompletionTokens, want)
			}
		}
		reqs := simRequests(t, ts)
		if len(reqs) != 6 || reqs[0].PromptTokens != 300 || reqs[1].PromptTokens != 200 || reqs[1].Arrival != reqs[0].Finished {
			t.Fatalf("want the two prefills first, the second sent when the first finished: %+v", reqs)
		}
		for _, r := range reqs[2:] {
			if r.Arrival != reqs[1].Finished {
				t.Fatalf("copy %+v sent before the last prefill finished (%v)", r, reqs[1].Finished)
			}
		}
	})
}

// The OpenAI routes do the same: usage counts the prompt once, and under
// --enable-cache-report its cached tokens once, from the first choice.
func TestParallelSamplingOpenAI(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{EnableCacheReport: true})
		code, body, _ := ts.Do(t, "POST", "/v1/completions", fmt.Sprintf(`{"prompt": %s, "max_tokens": 2, "n": 3, "rid": "c"}`, jsonOf(ids(94, 250))))
		var resp struct {
			ID      string `json:"id"`
			Choices []struct {
				Index int `json:"index"`
			} `json:"choices"`
			Usage struct {
				PromptTokens        int `json:"prompt_tokens"`
				CompletionTokens    int `json:"completion_tokens"`
				PromptTokensDetails struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(body), &resp); code != 200 || err != nil {
			t.Fatalf("%d %s", code, body)
		}
		reqs := simRequests(t, ts)
		if len(resp.Choices) != 3 || resp.Usage.PromptTokens != 250 || resp.Usage.CompletionTokens != 6 ||
			resp.Usage.PromptTokensDetails.CachedTokens != 249 || len(reqs) != 4 || resp.ID != reqs[1].RID {
			t.Fatalf("completion n=3: %s; requests %+v", body, reqs)
		}
		_, body, _ = ts.Do(t, "POST", "/v1/chat/completions",
			`{"messages": [{"role": "user", "content": "Say something long enough to cache."}], "max_tokens": 2, "n": 2, "stream": true, "stream_options": {"include_usage": true}}`)
		events := sseEvents(t, body)
		usageChunk := events[len(events)-2]
		var chunk struct {
			Usage struct {
				PromptTokens        int `json:"prompt_tokens"`
				PromptTokensDetails struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(usageChunk), &chunk); err != nil || chunk.Usage.PromptTokensDetails.CachedTokens != chunk.Usage.PromptTokens-1 {
			t.Fatalf("chat n=2 usage chunk: %s", usageChunk)
		}
	})
}

// A refused n > 1 request runs nothing: every copy is checked before the
// prompt is cached.
func TestParallelSamplingRefusedBeforeAnythingRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mocktest.Profile(t, "default")
		p.ContextLength = 1000
		ts := mocktest.Start(t, api.Config{Profile: p})
		tests := []struct{ body, want string }{
			{fmt.Sprintf(`{"input_ids": %s, "sampling_params": {"max_new_tokens": 600, "n": 2}}`, jsonOf(ids(95, 500))),
				`{"error":{"message":"Requested token count exceeds the model's maximum context length of 1000 tokens.`},
			{`{"text": ["a", "b"], "sampling_params": [{"n": 2}, {"n": 3}]}`,
				`{"error":{"message":"The parallel_sample_num should be the same for all samples in sample params."}}`},
		}
		for _, tt := range tests {
			code, body, _ := ts.Do(t, "POST", "/generate", tt.body)
			if code != 400 || !strings.HasPrefix(body, tt.want) {
				t.Fatalf("got %d %s, want 400 %s", code, body, tt.want)
			}
		}
		if reqs := simRequests(t, ts); len(reqs) != 0 {
			t.Fatalf("a refused request ran: %+v", reqs)
		}
		mocktest.CheckIdle(t, ts.Engine())
	})
}

package api_test

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
	"github.com/sglmock/sglmock/sim"
)

// TestSimGolden pins the /sim/ wire contract: every key snake_case, the
// harness's sim types decode every body without unknown keys, and the bytes
// match the golden files.
func TestSimGolden(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{Profile: mocktest.Profile(t, "kimi-k2.6-rtx6000")})
		prompt := jsonOf(ids(0, 1407))
		for i, rid := range []string{"a", "b"} {
			body := fmt.Sprintf(`{"input_ids": %s, "sampling_params": {"max_new_tokens": %d}, "rid": %q}`, prompt, 1+16*i, rid)
			if code, resp, _ := ts.Do(t, "POST", "/generate", body); code != 200 {
				t.Fatalf("generate %s: %d %s", rid, code, resp)
			}
		}
		// Right after b's response the server has not settled (the kimi
		// profile's flush_busy_after_finish_s): the first flush is refused,
		// the second waits for it.
		ts.Do(t, "POST", "/flush_cache", "")
		ts.Do(t, "POST", "/flush_cache?timeout=1", "")
		for _, tt := range []struct {
			path, golden string
			into         any
		}{
			{"/sim/profile", "sim/profile.json", &sim.Profile{}},
			{"/sim/expect?prompt_tokens=45507&cached_tokens=0&completion_tokens=17", "sim/expect.json", &sim.Expectation{}},
			{"/sim/requests", "sim/requests.json", &[]sim.RequestSummary{}},
			{"/sim/requests/b", "sim/request_b.json", &sim.Truth{}},
			{"/sim/flushes", "sim/flushes.json", &[]sim.Flush{}},
		} {
			code, body, _ := ts.Do(t, "GET", tt.path, "")
			if code != 200 {
				t.Fatalf("%s: got %d %s", tt.path, code, body)
			}
			mocktest.Golden(t, tt.golden, []byte(body+"\n"))
			if err := mocktest.DecodeStrict([]byte(body), tt.into); err != nil {
				t.Fatalf("%s does not decode into %T: %v", tt.path, tt.into, err)
			}
		}
	})
}

// The profile inside /sim/profile has the keys of the profile's YAML file.
func TestSimProfileKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{Profile: mocktest.Profile(t, "llama-8b-eagle3-h100")})
		body := getOK(t, ts, "/sim/profile")
		var p sim.Profile
		if err := json.Unmarshal([]byte(body), &p); err != nil {
			t.Fatal(err)
		}
		var prof struct {
			ContextLength int `json:"context_length"`
			Speculative   struct {
				Algorithm string `json:"algorithm"`
			} `json:"speculative"`
		}
		if err := json.Unmarshal(p.Profile, &prof); err != nil || prof.ContextLength != 131072 || prof.Speculative.Algorithm != "EAGLE3" {
			t.Fatalf("got %+v (%v), want context_length 131072 and algorithm EAGLE3", prof, err)
		}
	})
}

// Every /sim/expect count is bounded by the profile's context length before
// the evaluator sizes anything by it.
func TestSimExpectBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{}) // context length 32768
		tests := []struct {
			query string
			code  int
		}{
			{"prompt_tokens=100&completion_tokens=32668", 200},
			{"prompt_tokens=100&completion_tokens=32669", 400},
			{"prompt_tokens=100&completion_tokens=2000000000", 400},
			{"prompt_tokens=32768", 400},
			{"prompt_tokens=9223372036854775807&completion_tokens=9223372036854775807", 400},
			{"prompt_tokens=99999999999999999999", 400},
		}
		for _, tt := range tests {
			code, body, _ := ts.Do(t, "GET", "/sim/expect?"+tt.query, "")
			if code != tt.code || code == 400 && !strings.Contains(body, `"type":"Bad Request"`) {
				t.Errorf("%s: got %d %s, want %d", tt.query, code, body, tt.code)
			}
		}
		code, body, _ := ts.Do(t, "GET", "/sim/expect?prompt_tokens=100&completion_tokens=2000000000", "")
		if want := `need prompt_tokens < the context length (32768) and prompt_tokens + completion_tokens <= it, got 100 and 2000000000`; code != 400 || !strings.Contains(body, want) {
			t.Errorf("message: %d %s, want 400 and %q", code, body, want)
		}
	})
}

// SimTruthBytes bounds what /sim/requests keeps: the oldest truths go
// first, and the store's accounting stays within the bound.
func TestSimTruthBytes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{SimTruthBytes: 2000})
		for i := range 20 {
			if code, body, _ := ts.Do(t, "POST", "/generate", fmt.Sprintf(`{"text": "hello %d", "rid": "r%02d", "sampling_params": {"max_new_tokens": 4}}`, i, i)); code != 200 {
				t.Fatalf("generate: %d %s", code, body)
			}
			if n, bytes := ts.Engine().TruthUsage(); bytes > 2000 || n == 0 {
				t.Fatalf("after %d requests: %d truths in %d bytes, want within 2000", i+1, n, bytes)
			}
		}
		var reqs []sim.RequestSummary
		body := getOK(t, ts, "/sim/requests")
		if err := json.Unmarshal([]byte(body), &reqs); err != nil {
			t.Fatal(err)
		}
		n, _ := ts.Engine().TruthUsage()
		if len(reqs) != n || len(reqs) >= 20 || reqs[len(reqs)-1].RID != "r19" || reqs[0].RID != fmt.Sprintf("r%02d", 20-n) {
			t.Fatalf("/sim/requests lists %d (store %d): want the newest, oldest gone", len(reqs), n)
		}
		if code, _, _ := ts.Do(t, "GET", "/sim/requests/r00", ""); code != 404 {
			t.Fatalf("/sim/requests/r00: %d, want 404 (evicted)", code)
		}
	})
}

// A truth's decode rounds come as runs: a request that decodes alone, then
// beside another one, then alone again has three, and their counts and
// durations sum to its rounds and decode time.
func TestSimRunsGolden(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			ts.Send("POST", "/generate", `{"input_ids": `+jsonOf(ids(1, 100))+`, "rid": "a", "sampling_params": {"max_new_tokens": 300}}`)
		}()
		time.Sleep(50 * time.Millisecond) // virtual: a decodes
		if code, body, _ := ts.Do(t, "POST", "/generate", `{"input_ids": `+jsonOf(ids(2, 100))+`, "rid": "b", "sampling_params": {"max_new_tokens": 20}}`); code != 200 {
			t.Fatalf("b: %d %s", code, body)
		}
		<-done
		code, body, _ := ts.Do(t, "GET", "/sim/requests/a", "")
		var truth sim.Truth
		if code != 200 || mocktest.DecodeStrict([]byte(body), &truth) != nil {
			t.Fatalf("/sim/requests/a: %d %s", code, body)
		}
		mocktest.Golden(t, "sim/request_runs.json", []byte(body+"\n"))
		rounds, tokens := 0, 1 // the prefill's token
		for _, r := range truth.Rounds {
			rounds += r.Count
			tokens += r.Count * r.Gained
		}
		if len(truth.Rounds) != 3 || rounds != 299 || tokens != truth.CompletionTokens {
			t.Fatalf("runs %+v: %d rounds, %d tokens; want 3 runs, 299 rounds, %d tokens", truth.Rounds, rounds, tokens, truth.CompletionTokens)
		}
	})
}

// /sim/requests labels each request with the route and prompt form that
// sent it, tells repeated prompts by their hash, and carries each
// request's modelled prefill cost as it ran beside its cost with nothing
// cached: a chunked cold prompt costs the same both ways, its repeat only
// its last token's chunk.
func TestSimRequestsRoutesAndCosts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mocktest.Profile(t, "default") // chunked_prefill_size 8192
		ts := mocktest.Start(t, api.Config{Profile: p})
		long := jsonOf(ids(0, 20000))
		bodies := []struct{ path, body, route string }{
			{"/generate", `{"rid": "cold", "input_ids": ` + long + `, "sampling_params": {"max_new_tokens": 2}}`, sim.RouteGenerateIDs},
			{"/generate", `{"rid": "repeat", "input_ids": ` + long + `, "sampling_params": {"max_new_tokens": 2}}`, sim.RouteGenerateIDs},
			{"/generate", `{"rid": "text", "text": "Hello there", "sampling_params": {"max_new_tokens": 2}}`, sim.RouteGenerate},
			{"/v1/completions", `{"rid": "comp", "model": "m", "prompt": "Hello there", "max_tokens": 2}`, sim.RouteCompletions},
			{"/v1/completions", `{"rid": "compids", "model": "m", "prompt": [5, 6, 7], "max_tokens": 2}`, sim.RouteCompletionsTokens},
			{"/v1/chat/completions", `{"rid": "chat", "model": "m", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 2}`, sim.RouteChat},
		}
		for _, b := range bodies {
			if code, resp, _ := ts.Do(t, "POST", b.path, b.body); code != 200 {
				t.Fatalf("%s: %d %s", b.path, code, resp)
			}
		}
		var reqs []sim.RequestSummary
		body := getOK(t, ts, "/sim/requests")
		if err := json.Unmarshal([]byte(body), &reqs); err != nil || len(reqs) != len(bodies) {
			t.Fatalf("got %d requests (%v), want %d", len(reqs), err, len(bodies))
		}
		for i, b := range bodies {
			if reqs[i].Route != b.route {
				t.Errorf("%s: route %q, want %q", reqs[i].RID, reqs[i].Route, b.route)
			}
			if reqs[i].TTFT == nil || *reqs[i].TTFT != reqs[i].PrefillCost {
				t.Errorf("%s: ttft %v, want its prefill cost %v (alone on an idle server)", reqs[i].RID, reqs[i].TTFT, reqs[i].PrefillCost)
			}
		}
		cold, repeat := reqs[0], reqs[1]
		var want time.Duration
		done := 0
		for _, m := range p.Chunks(20000) {
			want += time.Duration(math.Round(p.PrefillChunkSeconds(done, m) * 1e9))
			done += m
		}
		if len(p.Chunks(20000)) != 3 || cold.PrefillCost != want.Seconds() || cold.ColdPrefillCost != want.Seconds() {
			t.Errorf("cold: prefill %v and cold %v, want both %v over 3 chunks", cold.PrefillCost, cold.ColdPrefillCost, want.Seconds())
		}
		last := time.Duration(math.Round(p.PrefillChunkSeconds(19999, 1) * 1e9)).Seconds()
		if repeat.CachedTokens != 19999 || repeat.PrefillCost != last || repeat.ColdPrefillCost != want.Seconds() {
			t.Errorf("repeat: cached %d, prefill %v, cold %v; want 19999, %v, %v", repeat.CachedTokens, repeat.PrefillCost, repeat.ColdPrefillCost, last, want.Seconds())
		}
		if cold.PromptHash != repeat.PromptHash || cold.PromptHash == reqs[2].PromptHash || reqs[2].PromptHash != reqs[3].PromptHash {
			t.Errorf("prompt hashes %q %q %q %q: the same prompt must hash alike, another differently", cold.PromptHash, repeat.PromptHash, reqs[2].PromptHash, reqs[3].PromptHash)
		}
	})
}

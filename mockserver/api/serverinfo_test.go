package api_test

import (
	"encoding/json"
	"testing"
	"testing/synctest"

	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
)

// /server_info dumps the launch arguments as SGLang's ServerArgs holds
// them: context_length, max_total_tokens and max_running_requests are null
// unless the launch gives them, but max_running_requests is 48 under
// speculative decoding (speculative_hook.py sets it); the effective values
// are in max_total_num_tokens, internal_states and /v1/models.
func TestServerInfoReportsLaunchArgumentsAsGiven(t *testing.T) {
	given := func(n int) *int { return &n }
	for _, tc := range []struct {
		name                           string
		profile                        string
		args                           api.ServerArgs
		contextLength, total, running  any // JSON values
		effectiveRunning               float64
		disableOverlap                 bool
		release                        string
		setRelease, speculativeAlgoArg string
	}{
		{name: "nothing given", profile: "default", contextLength: nil, total: nil, running: nil, effectiveRunning: 256, release: "0.5.18"},
		{name: "given", profile: "default", args: api.ServerArgs{ContextLength: given(32768), MaxTotalTokens: given(262144), MaxRunningRequests: given(256)},
			contextLength: 32768.0, total: 262144.0, running: 256.0, effectiveRunning: 256, release: "0.5.18"},
		{name: "speculative: SGLang's 48", profile: "llama-8b-eagle3-h100", running: 48.0, effectiveRunning: 48, release: "0.5.18"},
		{name: "speculative, given by the profile", profile: "kimi-k2.6-rtx6000", running: 32.0, effectiveRunning: 32, release: "0.5.18"},
		{name: "an older release", profile: "llama-8b-eagle3-h100", setRelease: "0.5.12", running: 48.0, effectiveRunning: 48, release: "0.5.12"},
		{name: "a release that runs DFLASH without overlap", profile: "llama-8b-eagle3-h100", setRelease: "0.5.12", speculativeAlgoArg: "DFLASH",
			running: 48.0, effectiveRunning: 48, disableOverlap: true, release: "0.5.12"},
		{name: "DFLASH keeps overlap from 0.5.17", profile: "llama-8b-eagle3-h100", setRelease: "0.5.17", speculativeAlgoArg: "DFLASH",
			running: 48.0, effectiveRunning: 48, release: "0.5.17"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := mocktest.Profile(t, tc.profile)
				p.SGLangVersion = tc.setRelease
				if tc.speculativeAlgoArg != "" {
					p.Speculative.Algorithm = tc.speculativeAlgoArg
				}
				ts := mocktest.Start(t, api.Config{Profile: p, Args: tc.args})
				info := getJSON(t, ts, "/server_info")
				state := info["internal_states"].([]any)[0].(map[string]any)
				for key, want := range map[string]any{
					"context_length": tc.contextLength, "max_total_tokens": tc.total, "max_running_requests": tc.running,
					"max_total_num_tokens": float64(p.MaxTotalTokens), "max_req_input_len": float64(p.ContextLength - 6),
					"disable_overlap_schedule": tc.disableOverlap, "version": tc.release,
				} {
					if info[key] != want {
						t.Errorf("%s: got %v, want %v", key, info[key], want)
					}
				}
				if got := state["effective_max_running_requests_per_dp"]; got != tc.effectiveRunning {
					t.Errorf("effective_max_running_requests_per_dp: got %v, want %v", got, tc.effectiveRunning)
				}
				models := getJSON(t, ts, "/v1/models")
				if got := models["data"].([]any)[0].(map[string]any)["max_model_len"]; got != float64(p.ContextLength) {
					t.Errorf("/v1/models max_model_len: got %v, want %d", got, p.ContextLength)
				}
				if got := getJSON(t, ts, "/v1/loads")["version"]; got != tc.release {
					t.Errorf("/v1/loads version: got %v, want %s", got, tc.release)
				}
			})
		})
	}
}

func getJSON(t *testing.T, ts *mocktest.Mock, path string) map[string]any {
	t.Helper()
	code, body, _ := ts.Do(t, "GET", path, "")
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); code != 200 || err != nil {
		t.Fatalf("%s: %d %s", path, code, body)
	}
	return m
}

// A flush right after a response is refused while SGLang's overlap
// scheduler holds the last batch; releases before the speculative-overlap
// rule (0.5.12) run DFLASH, NGRAM, FROZEN_KV_MTP and EAGLE with
// eagle_topk > 1 without it, so there the same flush succeeds.
func TestFlushRightAfterAResponseBySpeculativeAlgorithm(t *testing.T) {
	for _, tc := range []struct {
		release, algorithm string
		topk, draft        int
		code               int
	}{
		{"0.5.18", "DFLASH", 1, 4, 400},
		{"0.5.12", "DFLASH", 1, 4, 200},
		{"0.5.12", "NGRAM", 1, 4, 200},
		{"0.5.12", "EAGLE", 4, 8, 200},
		{"0.5.12", "EAGLE", 1, 4, 400},
		{"0.5.18", "EAGLE", 4, 8, 400},
	} {
		t.Run(tc.release+"/"+tc.algorithm, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := mocktest.Profile(t, "llama-8b-eagle3-h100")
				p.SGLangVersion = tc.release
				p.Speculative.Algorithm, p.Speculative.EagleTopK, p.Speculative.NumDraftTokens = tc.algorithm, tc.topk, tc.draft
				ts := mocktest.Start(t, api.Config{Profile: p})
				if code, body, _ := ts.Do(t, "POST", "/generate", `{"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 4}}`); code != 200 {
					t.Fatalf("/generate: %d %s", code, body)
				}
				if code, body, _ := ts.Do(t, "POST", "/flush_cache", ""); code != tc.code {
					t.Errorf("/flush_cache right after the response: got %d %q, want %d", code, body, tc.code)
				}
				want := tc.code == 200
				if got := getJSON(t, ts, "/server_info")["disable_overlap_schedule"]; got != want {
					t.Errorf("disable_overlap_schedule: got %v, want %v", got, want)
				}
			})
		})
	}
}

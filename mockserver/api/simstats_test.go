package api_test

import (
	"net/http"
	"testing"
	"testing/synctest"

	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
	"github.com/sglmock/sglmock/sim"
)

func TestSimStats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{})
		const req = `{"input_ids": [1100, 1101, 1102, 1103, 1104, 1105, 1106, 1107, 1108, 1109], "sampling_params": {"max_new_tokens": 2}}`
		for range 2 {
			if code, body, _ := m.Do(t, http.MethodPost, "/generate", req); code != http.StatusOK {
				t.Fatalf("generate: %d %s", code, body)
			}
		}
		code, body, _ := m.Do(t, http.MethodGet, "/sim/stats", "")
		var st sim.Stats
		if err := mocktest.DecodeStrict([]byte(body), &st); code != http.StatusOK || err != nil {
			t.Fatalf("/sim/stats: %d %s %v", code, body, err)
		}
		// The second request reuses 9 of its 10 prompt tokens; the cache
		// holds the prompt and the first output token (11).
		p := mocktest.Profile(t, "default")
		// Each request held its body and 512 bytes more of the body
		// budget, and of the answer budget its write buffer (64 KiB), its
		// 10 prompt tokens twice (the engine's copy and its own, 4 bytes
		// each) and its 2 output tokens (128 bytes each), until answered.
		want := sim.Stats{Now: st.Now, KVCapacity: p.MaxTotalTokens, CacheTokens: 11, CacheEvictable: 11,
			Requests: 2, PromptTokens: 20, CachedTokens: 9, HitRate: 0.45,
			Memory: sim.Memory{BodyBudget: api.DefaultBodyBudget, BodyPeak: int64(len(req)) + 512,
				AnswerBudget: api.DefaultAnswerBudget, AnswerPeak: 65536 + 2*10*4 + 2*128}}
		if st != want {
			t.Errorf("/sim/stats:\n got %+v\nwant %+v", st, want)
		}
	})
}

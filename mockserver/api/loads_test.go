package api_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
)

// The load endpoints with one request decoding, one prefilled in chunks and
// one queued: /get_load's list and /v1/loads' object (JSON and Prometheus)
// as SGLang's scheduler fills them.
func TestLoads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mocktest.Profile(t, "default")
		p.ChunkedPrefillSize, p.MaxPrefillTokens = 64, 64
		ts := mocktest.Start(t, api.Config{Profile: p})
		send := func(rid string, prompt, maxNew int) {
			go ts.Send("POST", "/generate", fmt.Sprintf(`{"input_ids": %s, "rid": %q, "sampling_params": {"max_new_tokens": %d}}`,
				jsonOf(ids(100+prompt, prompt)), rid, maxNew))
		}
		send("decoding", 50, 10000)
		time.Sleep(10 * time.Millisecond) // virtual: it decodes
		send("chunked", 1000, 10)
		time.Sleep(time.Millisecond) // virtual: in this order
		send("queued", 30, 10)
		time.Sleep(20 * time.Millisecond) // virtual: the long prompt is a few chunks in
		st := ts.Engine().Stats()
		if st.Running != 2 || st.Prefilling != 1 || st.Queued != 1 || st.ChunkedPending == 0 || st.QueuedTokens != 30 {
			t.Fatalf("scenario not reached: %+v", st)
		}
		_, body, _ := ts.Do(t, "GET", "/get_load", "")
		want := fmt.Sprintf(`[{"dp_rank":0,"num_reqs":2,"num_waiting_reqs":1,"num_tokens":%d,"num_pending_tokens":%d,"ts_tic":%s}]`,
			st.KVUsed+30, 30+st.ChunkedPending, jsonOf(st.Now.Seconds()))
		if body != want {
			t.Fatalf("/get_load:\n%s\nwant\n%s", body, want)
		}
		_, body, _ = ts.Do(t, "GET", "/v1/loads", "")
		mocktest.Golden(t, "loads/loads.json", []byte(body+"\n"))
		var loads struct {
			DPRankCount int `json:"dp_rank_count"`
			Loads       []struct {
				NumRunningReqs int `json:"num_running_reqs"`
				NumUsedTokens  int `json:"num_used_tokens"`
				NumTotalTokens int `json:"num_total_tokens"`
				NumTotalReqs   int `json:"num_total_reqs"`
			} `json:"loads"`
			Aggregate struct {
				TotalReqs int `json:"total_reqs"`
			} `json:"aggregate"`
		}
		if err := json.Unmarshal([]byte(body), &loads); err != nil {
			t.Fatal(err)
		}
		l := loads.Loads[0]
		if loads.DPRankCount != 1 || l.NumRunningReqs != 1 || l.NumUsedTokens != st.KVUsed || l.NumTotalTokens != st.KVUsed+30 ||
			l.NumTotalReqs != 2 || loads.Aggregate.TotalReqs != 2 {
			t.Fatalf("/v1/loads: the chunked request is outside the running batch: %s", body)
		}
		_, body, _ = ts.Do(t, "GET", "/v1/loads?format=prometheus", "")
		mocktest.Golden(t, "loads/loads.prom", []byte(body))
		_, body, _ = ts.Do(t, "GET", "/v1/loads?include=core,queues", "")
		mocktest.Golden(t, "loads/loads_queues.json", []byte(body+"\n"))
		for _, tt := range []struct{ query, want string }{
			{"?include=core,bogus", `{"detail":"Invalid include sections: {'bogus'}. Valid options: ['all', 'core', 'disagg', 'lora', 'memory', 'queues', 'spec']"}`},
		} {
			if code, body, _ := ts.Do(t, "GET", "/v1/loads"+tt.query, ""); code != 400 || body != tt.want {
				t.Errorf("/v1/loads%s: got %d %s, want 400 %s", tt.query, code, body, tt.want)
			}
		}
		// A rank the server does not have leaves no load, as SGLang's
		// filter does.
		if code, body, _ := ts.Do(t, "GET", "/v1/loads?dp_rank=1", ""); code != 200 || !strings.Contains(body, `"dp_rank_count":0,"loads":[],"aggregate":{"total_running_reqs":0,`) {
			t.Errorf("/v1/loads?dp_rank=1: got %d %s, want no load", code, body)
		}
		// A long list of unknown sections is repeated cut, as every error
		// repeats a client's value (errors.go's maxEcho).
		long := strings.Repeat("abcdefgh,", 3000)
		if code, body, _ := ts.Do(t, "GET", "/v1/loads?include="+long, ""); code != 400 || len(body) > 600 || !strings.Contains(body, "... (36002 bytes)") {
			t.Errorf("/v1/loads?include= 3000 unknown sections: got %d and %d bytes (%.300s), want 400 and the list cut", code, len(body), body)
		}
		ts.Do(t, "POST", "/abort_request", `{"abort_all": true}`)
	})
}

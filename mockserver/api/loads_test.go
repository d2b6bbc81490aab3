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
// as SGLang's scheduler fills them. A server of one DP rank runs its
// scheduler with dp_rank None: the default release's snapshots report it as
// rank 0 (PR #26348), which ?dp_rank=0 keeps; 0.5.12 leaves it out of the
// load, labels its gauges dp_rank="None", keeps nothing for ?dp_rank=0 and
// says "dp_rank": null in /get_load.
func TestLoads(t *testing.T) {
	for _, tc := range []struct {
		release, rank, label string
		kept                 string // ?dp_rank=0
	}{
		{"0.5.18", "0", "0", `"loads":[{"dp_rank":0,"num_running_reqs":1,`},
		{"0.5.12", "null", "None", `"dp_rank_count":0,"loads":[],"aggregate":{"total_running_reqs":0,`},
	} {
		synctest.Test(t, func(t *testing.T) {
			p := mocktest.Profile(t, "default")
			p.ChunkedPrefillSize, p.MaxPrefillTokens = 64, 64
			p.SGLangVersion = tc.release
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
			body := getOK(t, ts, "/get_load")
			want := fmt.Sprintf(`[{"dp_rank":%s,"num_reqs":2,"num_waiting_reqs":1,"num_tokens":%d,"num_pending_tokens":%d,"ts_tic":%s}]`,
				tc.rank, st.KVUsed+30, 30+st.ChunkedPending, jsonOf(st.Now.Seconds()))
			if body != want {
				t.Fatalf("%s /get_load:\n%s\nwant\n%s", tc.release, body, want)
			}
			_, body, _ = ts.Do(t, "GET", "/v1/loads", "")
			mocktest.Golden(t, "loads/loads-"+tc.release+".json", []byte(body+"\n"))
			var loads struct {
				Loads []struct {
					DPRank         *int `json:"dp_rank"`
					NumRunningReqs int  `json:"num_running_reqs"`
					NumUsedTokens  int  `json:"num_used_tokens"`
					NumTotalTokens int  `json:"num_total_tokens"`
				} `json:"loads"`
			}
			if err := json.Unmarshal([]byte(body), &loads); err != nil {
				t.Fatal(err)
			}
			l := loads.Loads[0]
			if len(loads.Loads) != 1 || l.NumRunningReqs != 1 || l.NumUsedTokens != st.KVUsed || l.NumTotalTokens != st.KVUsed+30 {
				t.Fatalf("%s /v1/loads: the chunked request is outside the running batch: %s", tc.release, body)
			}
			if got := fmt.Sprint(l.DPRank != nil); got != fmt.Sprint(tc.rank == "0") {
				t.Fatalf("%s /v1/loads: dp_rank in the load %s, want %s", tc.release, got, tc.rank)
			}
			_, body, _ = ts.Do(t, "GET", "/v1/loads?format=prometheus", "")
			mocktest.Golden(t, "loads/loads-"+tc.release+".prom", []byte(body))
			if line := `sglang_num_running_reqs{dp_rank="` + tc.label + `"} 1` + "\n"; !strings.Contains(body, line) {
				t.Errorf("%s Prometheus: no line %q in\n%s", tc.release, line, body)
			}
			if code, body, _ := ts.Do(t, "GET", "/v1/loads?dp_rank=0", ""); code != 200 || !strings.Contains(body, tc.kept) {
				t.Errorf("%s /v1/loads?dp_rank=0: got %d %s, want %s", tc.release, code, body, tc.kept)
			}
			_, body, _ = ts.Do(t, "GET", "/v1/loads?include=core,queues", "")
			mocktest.Golden(t, "loads/loads_queues-"+tc.release+".json", []byte(body+"\n"))
			if code, body, _ := ts.Do(t, "GET", "/v1/loads?include=core,bogus", ""); code != 400 ||
				body != `{"detail":"Invalid include sections: {'bogus'}. Valid options: ['all', 'core', 'disagg', 'lora', 'memory', 'queues', 'spec']"}` {
				t.Errorf("/v1/loads?include=core,bogus: got %d %s", code, body)
			}
			// A rank the server does not have leaves no load, as SGLang's
			// filter does.
			if code, body, _ := ts.Do(t, "GET", "/v1/loads?dp_rank=1", ""); code != 200 || !strings.Contains(body, `"loads":[]`) {
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
}

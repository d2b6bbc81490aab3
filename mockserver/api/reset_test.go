package api_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
)

// vLLM's POST /reset_prefix_cache empties the cache and answers
// {"success": bool}: true when no request runs, even right after one
// finished on a profile whose SGLang flush would still be refused; false
// while a request runs; 501 for the preemption the mock does not model;
// 422 for a query that is not a bool, in FastAPI's shape.
func TestResetPrefixCacheOverHTTP(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mocktest.Profile(t, "default")
		p.FlushBusyAfterFinishS = 0.05
		ts := mocktest.Start(t, api.Config{Profile: p})
		prompt := jsonOf(ids(2, 500))
		gen := func(rid string) int {
			code, body, _ := ts.Do(t, "POST", "/generate", fmt.Sprintf(`{"input_ids": %s, "sampling_params": {"max_new_tokens": 1}, "rid": %q}`, prompt, rid))
			var r generateResponse
			if err := json.Unmarshal([]byte(body), &r); err != nil || code != 200 {
				t.Fatalf("generate: %d %s", code, body)
			}
			return r.MetaInfo.CachedTokens
		}
		if a, b := gen("a"), gen("b"); a != 0 || b != 499 {
			t.Fatalf("cached: %d then %d, want 0 then 499", a, b)
		}
		if code, body, _ := ts.Do(t, "POST", "/flush_cache", ""); code != 400 {
			t.Fatalf("SGLang's flush right after a response: %d %q, want 400 (the profile's settling window)", code, body)
		}
		for _, query := range []string{"", "?reset_external=true", "?reset_running_requests=1"} {
			gen("warm" + query)
			if code, body, resp := ts.Do(t, "POST", "/reset_prefix_cache"+query, ""); code != 200 || body != `{"success":true}` ||
				resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("reset%s when idle: got %d %q %q, want 200 {\"success\":true}", query, code, body, resp.Header.Get("Content-Type"))
			}
			if c := gen("after" + query); c != 0 {
				t.Fatalf("after reset%s: cached %d, want 0", query, c)
			}
		}
		long := make(chan struct{})
		go func() {
			ts.Send("POST", "/generate", fmt.Sprintf(`{"input_ids": %s, "sampling_params": {"max_new_tokens": 300}}`, jsonOf(ids(3, 400))))
			close(long)
		}()
		time.Sleep(50 * time.Millisecond)
		tests := []struct {
			method, query string
			code          int
			body          string
		}{
			{"POST", "", 200, `{"success":false}`},
			{"POST", "?reset_external=true", 200, `{"success":false}`},
			{"POST", "?reset_running_requests=true", 501, `{"object":"error","message":"reset_running_requests: sglmock does not model vLLM's preemption of running requests; reset when they have finished","type":"Not Implemented","param":null,"code":501}`},
			{"POST", "?reset_external=maybe", 422, `{"detail":[{"input":"maybe","loc":["query","reset_external"],"msg":"Input should be a valid boolean, unable to interpret input","type":"bool_parsing"}]}`},
			{"GET", "", 405, `{"detail":"Method Not Allowed"}`},
		}
		for _, tt := range tests {
			if code, body, _ := ts.Do(t, tt.method, "/reset_prefix_cache"+tt.query, ""); code != tt.code || body != tt.body {
				t.Errorf("%s reset%s while a request runs: got %d %s, want %d %s", tt.method, tt.query, code, body, tt.code, tt.body)
			}
		}
		body := getOK(t, ts, "/sim/flushes")
		var hist []map[string]any
		json.Unmarshal([]byte(body), &hist)
		var oks []bool
		for _, h := range hist {
			oks = append(oks, h["ok"] == true)
		}
		if want := "[false true true true false false]"; fmt.Sprint(oks) != want {
			t.Errorf("/sim/flushes ok: got %v, want %s (SGLang's refused flush, three resets, two refused)", oks, want)
		}
		<-long
		mocktest.CheckIdle(t, ts.Engine())
	})
}

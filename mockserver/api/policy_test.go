package api_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
	"github.com/sglmock/sglmock/mockserver/profile"
	"github.com/sglmock/sglmock/sim"
)

// TestServerInfoSchedulePolicy: /server_info reports the schedule policy
// and the priority flags as SGLang's server args name them.
func TestServerInfoSchedulePolicy(t *testing.T) {
	five := 5
	three := 3
	for _, tc := range []struct {
		set  func(p *profile.Profile)
		want string
	}{
		{func(p *profile.Profile) {}, `"schedule_policy":"fcfs" false false null false false 10`},
		{func(p *profile.Profile) { p.SchedulePolicy = profile.LPM }, `"schedule_policy":"lpm" false false null false false 10`},
		{func(p *profile.Profile) {
			p.SchedulePolicy, p.EnablePriorityScheduling, p.DisablePriorityPreemption = profile.LOF, true, true
			p.DefaultPriorityValue, p.ScheduleLowPriorityValuesFirst, p.PriorityPreemptionThreshold = &five, true, &three
			p.AbortOnPriorityWhenDisabled = true
		}, `"schedule_policy":"lof" true true 5 true true 3`},
	} {
		synctest.Test(t, func(t *testing.T) {
			p := mocktest.Profile(t, "default")
			tc.set(p)
			ts := mocktest.Start(t, api.Config{Profile: p})
			body := getOK(t, ts, "/server_info")
			var info map[string]json.RawMessage
			if err := json.Unmarshal([]byte(body), &info); err != nil {
				t.Fatal(err)
			}
			got := `"schedule_policy":` + string(info["schedule_policy"])
			for _, k := range []string{"enable_priority_scheduling", "disable_priority_preemption", "default_priority_value",
				"abort_on_priority_when_disabled", "schedule_low_priority_values_first", "priority_scheduling_preemption_threshold"} {
				got += " " + string(info[k])
			}
			if got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

// TestPriorityField: /generate's priority and the OpenAI routes' reach the
// scheduler: with abort_on_priority_when_disabled and no priority
// scheduling it aborts them with 503 and SGLang's message; without a
// priority they run.
func TestPriorityField(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mocktest.Profile(t, "default")
		p.AbortOnPriorityWhenDisabled = true
		ts := mocktest.Start(t, api.Config{Profile: p})
		want := `{"detail":"Using priority is disabled for this server. Please send a new request without a priority."}`
		for _, tc := range []struct{ path, body string }{
			{"/generate", `{"text": "hello", "priority": 3, "sampling_params": {"max_new_tokens": 2}}`},
			{"/v1/completions", `{"prompt": "hello", "priority": -1, "max_tokens": 2}`},
			{"/v1/chat/completions", `{"messages": [{"role": "user", "content": "hello"}], "priority": 0, "max_tokens": 2}`},
		} {
			if code, body, _ := ts.Do(t, "POST", tc.path, tc.body); code != 503 || strings.TrimSpace(body) != want {
				t.Errorf("%s with a priority: got %d %s, want 503 %s", tc.path, code, body, want)
			}
			plain := strings.Replace(strings.Replace(strings.Replace(tc.body, `"priority": 3, `, "", 1), `"priority": -1, `, "", 1), `"priority": 0, `, "", 1)
			if code, body, _ := ts.Do(t, "POST", tc.path, plain); code != 200 {
				t.Errorf("%s without: got %d %s", tc.path, code, body)
			}
		}
		if code, body, _ := ts.Do(t, "POST", "/generate", `{"text": "hello", "priority": 1.5}`); code != 400 {
			t.Errorf("a priority that is no integer: got %d %s, want 400", code, body)
		}
	})
}

// TestRoutingKeyOverHTTP: the routing-key policy reads /generate's
// routing_key and the OpenAI routes' x-smg-routing-key header. While a
// request with key x decodes, the queued requests with key x go first.
func TestRoutingKeyOverHTTP(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mocktest.Profile(t, "default")
		p.SchedulePolicy, p.ChunkedPrefillSize, p.MaxPrefillTokens = profile.RoutingKey, -1, 512
		ts := mocktest.Start(t, api.Config{Profile: p})
		send := func(path, body string, header ...string) chan int {
			done := make(chan int, 1)
			go func() {
				code, _, _, _ := ts.Send("POST", path, body, header...)
				done <- code
			}()
			synctest.Wait() // queued, or running
			return done
		}
		gen := func(rid, key string, maxNew int) string {
			k := ""
			if key != "" {
				k = fmt.Sprintf(`"routing_key": %q, `, key)
			}
			return fmt.Sprintf(`{"rid": %q, %s"input_ids": %s, "sampling_params": {"max_new_tokens": %d}}`, rid, k, jsonOf(ids(len(rid)*1000+int(rid[len(rid)-1]), 300)), maxNew)
		}
		running := send("/v1/completions", fmt.Sprintf(`{"prompt": %s, "max_tokens": 300, "rid": "run"}`, jsonOf(ids(50000, 300))), "x-smg-routing-key", "x")
		blocker := send("/generate", gen("blocker", "", 1))
		queued := []chan int{
			send("/generate", gen("q0", "", 1)),
			send("/v1/completions", fmt.Sprintf(`{"prompt": %s, "max_tokens": 1, "rid": "q1"}`, jsonOf(ids(51000, 300))), "x-smg-routing-key", "x"),
			send("/generate", gen("q2", "x", 1)),
		}
		for _, c := range append(queued, running, blocker) {
			if code := <-c; code != 200 {
				t.Fatalf("got HTTP %d", code)
			}
		}
		admitted := map[string]float64{}
		for _, rid := range []string{"q0", "q1", "q2"} {
			body := getOK(t, ts, "/sim/requests/"+rid)
			var tr sim.Truth
			if err := json.Unmarshal([]byte(body), &tr); err != nil {
				t.Fatal(err)
			}
			admitted[rid] = tr.Admitted
		}
		if !(admitted["q1"] < admitted["q2"] && admitted["q2"] < admitted["q0"]) {
			t.Fatalf("admitted at %v: want q1, q2 (key x), then q0", admitted)
		}
	})
}

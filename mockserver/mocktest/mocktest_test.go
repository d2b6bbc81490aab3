package mocktest_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
	"github.com/sglmock/sglmock/mockserver/profile"
)

// A mock on virtual time answers over the pipe listener with exactly the
// modelled latency, and holds nothing afterwards.
func TestStartServesOnVirtualTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{})
		start := time.Now()
		code, body, _ := m.Do(t, "POST", "/generate", `{"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 1}}`)
		if code != 200 {
			t.Fatalf("got %d %s, want 200", code, body)
		}
		p := m.Engine().Profile()
		if got, want := time.Since(start), profile.Duration(p.PrefillChunkSeconds(0, 3)); got != want {
			t.Fatalf("latency: got %v, want the modelled %v", got, want)
		}
		mocktest.CheckIdle(t, m.Engine())
	})
}

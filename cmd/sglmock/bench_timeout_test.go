package main

import (
	"io"
	"testing"
	"time"

	"github.com/sglmock/sglmock/harness"
)

// bench gives up on a request after ten minutes unless told otherwise: a
// server that never answers ends the run (harness.TestServerThatNeverAnswers
// shows it does, at that timeout); 0 waits forever.
func TestBenchRequestTimeoutDefault(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want time.Duration
	}{
		{[]string{"twopoint"}, harness.DefaultRequestTimeout},
		{[]string{"stream"}, harness.DefaultRequestTimeout},
		{[]string{"twopoint", "--request-timeout", "0"}, 0},
		{[]string{"twopoint", "--request-timeout", "2.5"}, 2500 * time.Millisecond},
	} {
		o, err := parseBenchFlags(tt.args, io.Discard)
		if err != nil || o.httpTimeout != tt.want {
			t.Errorf("%q: got %v, %v; want a timeout of %v", tt.args, o.httpTimeout, err, tt.want)
		}
	}
	if harness.DefaultRequestTimeout != 10*time.Minute {
		t.Errorf("the default request timeout is %v, want 10m", harness.DefaultRequestTimeout)
	}
}

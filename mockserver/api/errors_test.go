package api

import (
	"errors"
	"fmt"
	"testing"

	"github.com/sglmock/sglmock/mockserver/engine"
)

// Each flush outcome maps to SGLang's text for /sim/flushes and to its
// /flush_cache reply.
func TestFlushOutcomesAreSGLangs(t *testing.T) {
	tests := []struct {
		err        error
		message    string
		status     int
		replyIsMsg bool
	}{
		{nil, "flushed", 200, false},
		{engine.ErrFlushBusy, "Cache not flushed because there are pending requests.", 400, false},
		{engine.ErrFlushSettling, "Cache not flushed because there are pending requests. (The last batch is still settling: flush_busy_after_finish_s.)", 400, false},
		{engine.ErrFlushTimeout, "Timed out waiting for idle state.", 400, true},
		{engine.ErrFlushInProgress, "Another flush_cache is already in progress.", 400, true},
		{engine.ErrClosed, "engine: closed", 400, false},
	}
	for _, tt := range tests {
		if got := flushMessage(tt.err); got != tt.message {
			t.Errorf("flushMessage(%v): got %q, want %q", tt.err, got, tt.message)
		}
		status, body := flushReply(tt.err)
		want := "Flush cache failed.\n"
		switch {
		case tt.err == nil:
			want = flushedText
		case tt.replyIsMsg:
			want = tt.message
		}
		if status != tt.status || body != want {
			t.Errorf("flushReply(%v): got %d %q, want %d %q", tt.err, status, body, tt.status, want)
		}
	}
}

// A malformed body is of the errMalformed kind, wrapped or not; a refusal
// is not.
func TestMalformedIsAKind(t *testing.T) {
	m := malformed("text: must be a string or a list of strings")
	if !errors.Is(m, errMalformed) || !errors.Is(fmt.Errorf("decoding: %w", m), errMalformed) {
		t.Fatalf("%v: want an errMalformed", m)
	}
	if m.Error() != "text: must be a string or a list of strings" {
		t.Fatalf("message: got %q", m.Error())
	}
	for _, r := range []error{errNoInput, errEmptyBatch, &engine.InvalidRequestError{Message: "x"}} {
		if errors.Is(r, errMalformed) {
			t.Fatalf("%v: a refusal, want no errMalformed", r)
		}
	}
}

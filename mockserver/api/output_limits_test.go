package api_test

import (
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/sglmock/sglmock/internal/norace"
	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
	"github.com/sglmock/sglmock/mockserver/profile"
)

// zeroCost is the default profile with every cost zero: a request's whole
// output exists at once, the worst case for what it holds.
func zeroCost(t *testing.T) *profile.Profile {
	p := mocktest.Profile(t, "default")
	p.Prefill, p.Decode = profile.PrefillCost{}, profile.DecodeCost{}
	return p
}

// liveHeap is the heap in use after a collection.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// pinnedBy sends body to path and, once the server has the whole answer and
// waits for the client to read it (the pipe holds nothing), measures the
// heap the request holds; then it reads the answer and returns its status.
func pinnedBy(t *testing.T, m *mocktest.Mock, path, body string) (pinned int64, status int) {
	t.Helper()
	base := liveHeap()
	req, _ := http.NewRequest("POST", m.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := m.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	synctest.Wait() // the handler is blocked writing the answer
	pinned = liveHeap() - base
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return pinned, resp.StatusCode
}

// One request's output is bounded in bytes, not only in sequences: the
// tokens summed over prompts x n x max_new_tokens, and the logprob entries.
// The heap a request holds at its largest is measured on a sixteenth of the
// bound and scaled: at most 128 MiB of output, 320 MiB of logprobs.
func TestRequestOutputIsBoundedInBytes(t *testing.T) {
	norace.Skip(t, "checks the output's bounds")
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{Profile: zeroCost(t)})
		const outputBudget, logprobBudget = 128 << 20, 320 << 20
		const maxTokens, maxLogprobs = 1 << 20, 1 << 21

		pinned, code := pinnedBy(t, m, "/generate", `{"text": "hello", "sampling_params": {"n": 64, "max_new_tokens": 1024}}`)
		perToken := float64(pinned) / (64 * 1024)
		t.Logf("output: %d bytes pinned for 65536 tokens, %.1f bytes a token, %.0f MiB at the bound", pinned, perToken, perToken*maxTokens/(1<<20))
		if code != 200 || perToken*maxTokens > outputBudget {
			t.Errorf("got %d and %.1f bytes a token (%.0f MiB at %d tokens), want 200 and at most %d MiB", code, perToken,
				perToken*maxTokens/(1<<20), maxTokens, outputBudget>>20)
		}

		promptText := strings.Repeat("word ", 1500)
		pinned, code = pinnedBy(t, m, "/generate", fmt.Sprintf(`{"text": %q, "sampling_params": {"n": 4, "max_new_tokens": 1024},
			"return_logprob": true, "logprob_start_len": 0, "top_logprobs_num": 20, "return_text_in_logprobs": true}`, promptText))
		entries := float64(4*(1500+1+1024)) * 21
		perEntry := float64(pinned) / entries
		t.Logf("logprobs: %d bytes pinned for %.0f entries, %.1f bytes an entry, %.0f MiB at the bound", pinned, entries, perEntry, perEntry*maxLogprobs/(1<<20))
		if code != 200 || perEntry*maxLogprobs > logprobBudget {
			t.Errorf("got %d and %.1f bytes a logprob entry (%.0f MiB at %d), want 200 and at most %d MiB", code, perEntry,
				perEntry*maxLogprobs/(1<<20), maxLogprobs, logprobBudget>>20)
		}
		mocktest.CheckIdle(t, m.Engine())
	})
}

// The request: 16 prompts x n=128 x 16000 tokens is refused before
// anything runs, with the bound named, on every generation endpoint.
func TestTooMuchOutputRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{Profile: zeroCost(t)})
		prompts := `["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p"]`
		for _, tt := range []struct{ path, body, want string }{
			{"/generate", `{"text": ` + prompts + `, "sampling_params": {"n": 128, "max_new_tokens": 16000}}`,
				`{"error":{"message":"The request may generate 32768000 tokens (2048 sequences of up to 16000): sglmock serves at most 1048576 output tokens a request`},
			{"/generate", `{"text": "a", "stream": true, "sampling_params": {"n": 128, "max_new_tokens": 16000}}`,
				`data: {"error":{"message":"The request may generate 2048000 tokens (128 sequences of up to 16000)`},
			{"/v1/completions", `{"prompt": ` + prompts + `, "n": 128, "max_tokens": 16000}`,
				`"type":"BadRequestError","param":null,"code":400}`},
			{"/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "n": 128, "max_tokens": 16000}`,
				`The request may generate 2048000 tokens`},
			{"/generate", `{"text": "` + strings.Repeat("w ", 8000) + `", "sampling_params": {"n": 128, "max_new_tokens": 16},
				"return_logprob": true, "logprob_start_len": 0, "top_logprobs_num": 20}`,
				`The request asks for 21549696 logprob entries (positions x (1 + top_logprobs_num) over 128 sequences): sglmock returns at most 2097152 a request.`},
		} {
			code, body, _ := m.Do(t, "POST", tt.path, tt.body)
			wantCode := 400
			if strings.Contains(tt.body, `"stream": true`) {
				wantCode = 200 // SGLang's streaming /generate refuses in an event
			}
			if code != wantCode || !strings.Contains(body, tt.want) {
				t.Errorf("%s: got %d %.400s, want %d with %q", tt.path, code, body, wantCode, tt.want)
			}
		}
		// At the bounds the request passes this check and is refused by the
		// next one (an id outside the vocabulary), one token over it is not.
		ids := func(n int) string {
			return "[" + strings.Repeat("1024,", n-1) + "2147483647]"
		}
		for _, tt := range []struct {
			body string
			over bool
		}{
			{`{"input_ids": [1024, 2147483647], "sampling_params": {"n": 128, "max_new_tokens": 8192}}`, false},
			{`{"input_ids": [1024, 2147483647], "sampling_params": {"n": 128, "max_new_tokens": 8193}}`, true},
			{`{"input_ids": ` + ids(8192) + `, "sampling_params": {"n": 128, "max_new_tokens": 8192}, "return_logprob": true, "logprob_start_len": 0}`, false},
			{`{"input_ids": ` + ids(8193) + `, "sampling_params": {"n": 128, "max_new_tokens": 8192}, "return_logprob": true, "logprob_start_len": 0}`, true},
		} {
			code, body, _ := m.Do(t, "POST", "/generate", tt.body)
			vocab := strings.Contains(body, "outside the vocabulary") || strings.Contains(body, "greater than the vocab size")
			if code != 400 || vocab == tt.over {
				t.Errorf("%.120s: got %d %.300s, want 400 from the %s", tt.body, code, body, map[bool]string{true: "output bound", false: "vocabulary check"}[tt.over])
			}
		}
		if st := m.Engine().Stats(); st.Requests != 0 {
			t.Fatalf("got %d requests run, want none", st.Requests)
		}
		mocktest.CheckIdle(t, m.Engine())
	})
}

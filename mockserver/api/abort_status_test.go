package api_test

import (
	"fmt"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/engine"
	"github.com/sglmock/sglmock/mockserver/mocktest"
)

// A prompt within 6 tokens of the context (max_req_input_len or more) is
// refused by SGLang's scheduler, which queues it already aborted with
// status 400 and its prompt cut to one token: an OpenAI stream, already
// started, answers HTTP 200 with an error event (type BAD_REQUEST), the
// usage chunk if asked for and [DONE]; a /generate stream yields the abort
// as an ordinary event, finish_reason {"type": "abort", "status_code":
// 400, "err_type": "BadRequestError"}, then [DONE] (the tokenizer
// manager's _handle_abort_finish_reason returns it to a stream). Refused
// before the stream starts (past the context itself) or not streaming, it
// is HTTP 400.
func TestNearContextLimitOnOpenAIStreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mocktest.Profile(t, "default")
		p.ContextLength = 1000
		ts := mocktest.Start(t, api.Config{Profile: p})
		prompt := jsonOf(ids(71, 994))
		for _, tt := range []struct{ golden, path, body string }{
			{"openai/completion_stream_near_limit.txt", "/v1/completions",
				`{"model": "m", "prompt": ` + prompt + `, "max_tokens": 1, "stream": true, "stream_options": {"include_usage": true}, "rid": "w1"}`},
			{"openai/chat_stream_near_limit.txt", "/v1/chat/completions",
				`{"model": "m", "input_ids": ` + prompt + `, "max_tokens": 1, "stream": true, "rid": "w2"}`},
			{"generate/stream_near_limit.txt", "/generate",
				`{"input_ids": ` + prompt + `, "sampling_params": {"max_new_tokens": 1}, "stream": true, "rid": "w3"}`},
		} {
			code, body, _ := ts.Do(t, "POST", tt.path, tt.body)
			if code != 200 {
				t.Fatalf("%s: %d %s", tt.golden, code, body)
			}
			mocktest.Golden(t, tt.golden, []byte(body))
		}
		if code, body, _ := ts.Do(t, "POST", "/v1/completions", `{"prompt": `+jsonOf(ids(71, 1000))+`, "max_tokens": 1, "stream": true}`); code != 400 {
			t.Errorf("a stream past the context: %d %s, want 400 before it starts", code, body)
		}
		want := `{"error":{"message":"Input length (994 tokens) exceeds the maximum allowed length (994 tokens). Use a shorter input or enable --allow-auto-truncate."}}`
		if code, body, _ := ts.Do(t, "POST", "/generate", `{"input_ids": `+prompt+`, "sampling_params": {"max_new_tokens": 1}}`); code != 400 || body != want {
			t.Errorf("/generate, not streaming: %d %s, want 400 %s", code, body, want)
		}
		mocktest.CheckIdle(t, ts.Engine())
	})
}

// The last request of a decode batch that does not fit even alone is
// aborted by SGLang with status 500: /generate and the OpenAI routes
// answer 500 {"detail": ...} (FastAPI's HTTPException, raised by
// _handle_abort_finish_reason); a /generate stream ends with the abort's
// finish_reason, status_code 500; an OpenAI stream with an error event,
// type INTERNAL_SERVER_ERROR. EAGLE3 reserves 8 slots a round, which a
// 100-token prompt asking for all 898 tokens of a 1000-token pool runs out
// of near the end.
func TestOutOfMemoryAbortAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mocktest.Profile(t, "llama-8b-eagle3-h100")
		p.ContextLength, p.MaxTotalTokens = 1000, 1000
		ts := mocktest.Start(t, api.Config{Profile: p})
		prompt := jsonOf(ids(3, 100))
		detail := `{"detail":"` + engine.OutOfMemoryMessage + `"}`
		if code, body, _ := ts.Do(t, "POST", "/generate", `{"input_ids": `+prompt+`, "sampling_params": {"max_new_tokens": 898}}`); code != 500 || body != detail {
			t.Errorf("/generate: got %d %s, want 500 %s", code, body, detail)
		}
		if code, body, _ := ts.Do(t, "POST", "/v1/completions", `{"prompt": `+prompt+`, "max_tokens": 898}`); code != 500 || body != detail {
			t.Errorf("/v1/completions: got %d %s, want 500 %s", code, body, detail)
		}
		_, body, _ := ts.Do(t, "POST", "/generate", `{"input_ids": `+prompt+`, "sampling_params": {"max_new_tokens": 898}, "stream": true}`)
		events := strings.Split(strings.TrimSpace(body), "\n\n")
		want := fmt.Sprintf(`"finish_reason":{"type":"abort","message":"%s","status_code":500,"err_type":null}`, engine.OutOfMemoryMessage)
		if n := len(events); n < 2 || !strings.Contains(events[n-2], want) || events[n-1] != "data: [DONE]" {
			t.Errorf("/generate stream ends %q, want the abort's finish_reason %s and [DONE]", events[max(0, n-2):], want)
		}
		_, body, _ = ts.Do(t, "POST", "/v1/completions", `{"prompt": `+prompt+`, "max_tokens": 898, "stream": true}`)
		events = strings.Split(strings.TrimSpace(body), "\n\n")
		errEvent := `data: {"error": {"object": "error", "message": "` + engine.OutOfMemoryMessage + `", "type": "INTERNAL_SERVER_ERROR", "param": null, "code": 500}}`
		if n := len(events); n < 2 || events[n-2] != errEvent || events[n-1] != "data: [DONE]" || strings.Contains(body, `"finish_reason":"abort"`) {
			t.Errorf("/v1/completions stream ends %q, want %s and [DONE], no finish chunk", events[max(0, n-2):], errEvent)
		}
		mocktest.CheckIdle(t, ts.Engine())
	})
}

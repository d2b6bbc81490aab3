package api_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
)

func TestChatContentParts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{})
		_, plain, _ := ts.Do(t, "POST", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "Hi there"}], "max_tokens": 3}`)
		_, parts, _ := ts.Do(t, "POST", "/v1/chat/completions", `{"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}]}], "max_tokens": 3}`)
		if !strings.Contains(plain, `"prompt_tokens":`) || !strings.Contains(parts, `"content":`) {
			t.Fatalf("chat: %s / %s", plain, parts)
		}
		// Both render to the same prompt (SGLang joins text parts with a
		// space), so they generate the same answer.
		cut := func(s string) string { return s[strings.Index(s, `"choices"`):strings.Index(s, `"usage"`)] }
		if cut(plain) != cut(parts) {
			t.Fatalf("content parts differ from the plain string:\n%s\n%s", plain, parts)
		}
		// Usage has no prompt_tokens_details without --enable-cache-report.
		if !strings.Contains(plain, `"prompt_tokens_details":null`) {
			t.Fatalf("usage without cache report: %s", plain)
		}
	})
}

func TestCompletionStreamHasNoErrorKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{})
		_, body, _ := ts.Do(t, "POST", "/v1/completions", `{"prompt": "x", "max_tokens": 3, "stream": true, "stream_options": {"include_usage": true}}`)
		events := sseEvents(t, body)
		if len(events) != 5 {
			t.Fatalf("want 3 content chunks, a usage chunk and [DONE], got %d: %s", len(events), body)
		}
		for _, e := range events {
			if strings.Contains(e, `"error"`) {
				t.Fatalf("chunk with an error key: %s", e)
			}
		}
		if !strings.Contains(events[2], `"finish_reason":"length"`) || !strings.Contains(events[3], `"choices":[]`) {
			t.Fatalf("last content chunk or usage chunk: %s", body)
		}
	})
}

// A stream holds back an event whose tail could be the start of a stop
// string, so no text is ever taken back: a native stream's cumulative text
// never shrinks, and an OpenAI stream's deltas add up to the trimmed answer.
func TestStreamHoldsBackAStopStringPrefix(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{})
		prompt := ids(9, 30)
		toks, _ := expectedOutput(ts.Engine().Profile(), prompt, 12)
		full := builtinTok.Decode(toks, false)
		stopStr := builtinTok.Decode(toks[5:7], false) // spans two tokens
		trimmed := full[:strings.Index(full, stopStr)]

		_, body, _ := ts.Do(t, "POST", "/v1/completions", fmt.Sprintf(`{"prompt": %s, "max_tokens": 12, "stop": %q, "stream": true}`, jsonOf(prompt), stopStr))
		if got := streamText(t, body); got != trimmed {
			t.Fatalf("streamed %q, want exactly the trimmed answer %q", got, trimmed)
		}

		_, body, _ = ts.Do(t, "POST", "/generate", fmt.Sprintf(`{"input_ids": %s, "sampling_params": {"max_new_tokens": 12, "stop": %q}, "stream": true}`, jsonOf(prompt), stopStr))
		events := sseEvents(t, body)
		prev := ""
		for i, e := range events[:len(events)-1] {
			var ev generateResponse
			json.Unmarshal([]byte(e), &ev)
			if !strings.HasPrefix(ev.Text, prev) {
				t.Fatalf("event %d: text %q shrank from %q", i, ev.Text, prev)
			}
			prev = ev.Text
		}
		// Tokens 1-5 go out; the 6th starts the stop string and is held
		// back; the 7th completes it and finishes.
		if prev != trimmed || len(events)-1 != 6 {
			t.Fatalf("native stream: %d events ending in %q, want 6 ending in %q", len(events)-1, prev, trimmed)
		}

		_, nonStream, _ := ts.Do(t, "POST", "/v1/completions", fmt.Sprintf(`{"prompt": %s, "max_tokens": 12, "stop": %q}`, jsonOf(prompt), stopStr))
		if !strings.Contains(nonStream, `"text":`+jsonOf(trimmed)+`,`) || !strings.Contains(nonStream, `"matched_stop":`+jsonOf(stopStr)) {
			t.Fatalf("non-stream with stop: %s, want text %q", nonStream, trimmed)
		}
	})
}

// return_cached_tokens_details works without --enable-cache-report, as
// SGLang's serving_completions.py and serving_chat.py read it from
// meta_info: sglext appears when asked for and something is cached.
func TestCachedTokensDetailsWithoutCacheReport(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{})
		for _, tt := range []struct {
			name, fields, want string
		}{
			{"cold, asked for", `, "return_cached_tokens_details": true`, ""},
			{"cached, not asked for", ``, ""},
			{"cached, asked for", `, "return_cached_tokens_details": true`, `"sglext":{"cached_tokens_details":{"device":19,"host":0}}`},
		} {
			code, body, _ := ts.Do(t, "POST", "/v1/completions", `{"prompt": `+jsonOf(ids(9, 20))+`, "max_tokens": 1`+tt.fields+`}`)
			if code != 200 || strings.Contains(body, "prompt_tokens_details\":{") {
				t.Fatalf("%s: %d %s", tt.name, code, body)
			}
			if tt.want == "" && strings.Contains(body, "sglext") || tt.want != "" && !strings.Contains(body, tt.want) {
				t.Errorf("%s: %s, want sglext %q", tt.name, body, tt.want)
			}
		}
	})
}

// A message's content parts reach the template as SGLang flattens them for
// a template that takes a string: the text parts ("text" and "input_text")
// joined with a space, the others left out.
func TestChatContentPartsJoinWithASpace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{})
		render := func(content string) string {
			body := `{"model": "sglmock/small-1b", "messages": [{"role": "user", "content": ` + content + `}]}`
			code, resp, _ := m.Do(t, "POST", "/v1/chat/completions/render", body, "Content-Type", "application/json")
			if code != 200 {
				t.Fatalf("%s: %d %s", content, code, resp)
			}
			return resp[strings.Index(resp, `"token_ids"`):strings.Index(resp, `"features"`)]
		}
		parts := render(`[{"type": "text", "text": "Hello"}, {"type": "image_url", "image_url": {"url": "x"}}, {"type": "input_text", "text": "world"}]`)
		if want := render(`"Hello world"`); parts != want {
			t.Errorf("parts render %s, want the same as the string \"Hello world\": %s", parts, want)
		}
	})
}

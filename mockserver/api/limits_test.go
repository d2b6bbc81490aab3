package api_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"sglmock/mockserver/api"
	"sglmock/mockserver/mocktest"
	"sglmock/mockserver/tokenizer"
)

// completionTokens posts body and returns the response's
// usage.completion_tokens and first finish_reason.
func completionTokens(t *testing.T, ts *mocktest.Mock, path, body string) (int, string) {
	t.Helper()
	code, resp, _ := ts.Do(t, "POST", path, body)
	var r struct {
		Choices []struct {
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(resp), &r); code != 200 || err != nil || len(r.Choices) == 0 {
		t.Fatalf("%s %s: %d %s", path, body, code, resp)
	}
	return r.Usage.CompletionTokens, r.Choices[0].FinishReason
}

// Output defaults as SGLang's: /v1/completions 16 tokens; chat without
// max_tokens to the context budget (ctx - 2 - prompt), capped by the
// profile's max_output_tokens; max_completion_tokens before max_tokens,
// unless it is 0.
func TestOpenAIOutputDefaults(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mocktest.Profile(t, "default")
		p.ContextLength = 300
		p.MaxOutputTokens = 200
		ts := mocktest.Start(t, api.Config{Profile: p})
		if n, _ := completionTokens(t, ts, "/v1/completions", `{"prompt": "Hello there"}`); n != 16 {
			t.Errorf("completions without max_tokens: %d tokens, want 16", n)
		}
		chat := func(prompt int, extra string) (int, string) {
			return completionTokens(t, ts, "/v1/chat/completions", fmt.Sprintf(
				`{"messages": [{"role": "user", "content": "x"}], "input_ids": %s%s}`, jsonOf(ids(70, prompt)), extra))
		}
		tests := []struct {
			name   string
			prompt int
			extra  string
			want   int
		}{
			{"capped by max_output_tokens", 50, ``, 200},
			{"to the context budget", 150, ``, 300 - 2 - 150},
			{"max_tokens", 50, `, "max_tokens": 7`, 7},
			{"max_completion_tokens first", 50, `, "max_tokens": 7, "max_completion_tokens": 5`, 5},
			{"a zero max_completion_tokens falls through", 50, `, "max_tokens": 7, "max_completion_tokens": 0`, 7},
			{"max_tokens 0", 50, `, "max_tokens": 0`, 0},
		}
		for _, tt := range tests {
			if n, reason := chat(tt.prompt, tt.extra); n != tt.want || reason != "length" {
				t.Errorf("%s: %d tokens (%s), want %d (length)", tt.name, n, reason, tt.want)
			}
		}
	})
}

// Limits and their messages, as SGLang words them.
func TestLimitMessages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mocktest.Profile(t, "default")
		p.ContextLength = 1000
		ts := mocktest.Start(t, api.Config{Profile: p})
		if _, body, _ := ts.Do(t, "GET", "/server_info", ""); !strings.Contains(body, `"max_req_input_len":994`) {
			t.Fatalf("/server_info: want max_req_input_len = ctx - 6: %s", body)
		}
		maxInput := "Input length (994 tokens) exceeds the maximum allowed length (994 tokens). Use a shorter input or enable --allow-auto-truncate."
		vocab := tokenizer.VocabSize
		tests := []struct {
			name, path, body string
			want             string
		}{
			{"max_req_input_len", "/generate", `{"input_ids": ` + jsonOf(ids(71, 994)) + `, "sampling_params": {"max_new_tokens": 0}}`,
				`{"error":{"message":` + jsonOf(maxInput) + `}}`},
			{"max_req_input_len, OpenAI", "/v1/completions", `{"prompt": ` + jsonOf(ids(71, 994)) + `, "max_tokens": 1}`,
				`{"object":"error","message":` + jsonOf(maxInput) + `,"type":"BadRequestError","param":null,"code":400}`},
			{"out of the vocabulary", "/generate", fmt.Sprintf(`{"input_ids": [1, %d]}`, vocab),
				fmt.Sprintf(`{"error":{"message":"The input_ids [1, %d] contains values greater than the vocab size (%d)."}}`, vocab, vocab)},
			{"max_completion_tokens past the context", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 1001, "stream": true}`,
				`{"object":"error","message":"max_completion_tokens is too large: 1001.This model supports at most 1000 completion tokens.","type":"BadRequestError","param":null,"code":400}`},
		}
		for _, tt := range tests {
			if code, body, _ := ts.Do(t, "POST", tt.path, tt.body); code != 400 || body != tt.want {
				t.Errorf("%s: got %d %s\nwant 400 %s", tt.name, code, body, tt.want)
			}
		}
		// A rid already running.
		go ts.Send("POST", "/generate", `{"text": "x", "rid": "d", "sampling_params": {"max_new_tokens": 900}}`)
		time.Sleep(10 * time.Millisecond) // virtual: it runs
		if code, body, _ := ts.Do(t, "POST", "/generate", `{"text": "y", "rid": "d"}`); code != 400 || body != `{"error":{"message":"Duplicate request ID detected: d"}}` {
			t.Errorf("duplicate rid: %d %s", code, body)
		}
		ts.Do(t, "POST", "/abort_request", `{"abort_all": true}`)
	})
}

package api_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglmock/sglmock/internal/norace"
	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
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

// Limits and their messages, as SGLang words them. The server is launched
// with --context-length 1000, which serving_chat.py checks
// max_completion_tokens against.
func TestLimitMessages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mocktest.Profile(t, "default")
		p.ContextLength = 1000
		launched := 1000
		ts := mocktest.Start(t, api.Config{Profile: p, Args: api.ServerArgs{ContextLength: &launched}})
		if body := getOK(t, ts, "/server_info"); !strings.Contains(body, `"max_req_input_len":994`) {
			t.Fatalf("/server_info: want max_req_input_len = ctx - 6: %s", body)
		}
		maxInput := "Input length (994 tokens) exceeds the maximum allowed length (994 tokens). Use a shorter input or enable --allow-auto-truncate."
		vocab := builtinTok.VocabSize()
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

// Output lengths near and past 2^63 are refused, never wrapped: a length
// that fits int64 gets SGLang's context message with the exact total
// (Python's ints do not overflow), a literal past int64 a message that
// names the field and the bound. Nothing runs.
func TestHugeOutputLengths(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{})
		tooMany := func(total, asked string) string {
			return "Requested token count exceeds the model's maximum context length of 32768 tokens. " +
				"You requested a total of " + total + " tokens: 1 tokens from the input messages and " + asked +
				" tokens for the completion. Please reduce the number of tokens in the input messages or the completion to fit within the limit."
		}
		generateError := func(msg string) string { return `{"error":{"message":` + jsonOf(msg) + `}}` }
		openAIError := func(msg string) string {
			return `{"object":"error","message":` + jsonOf(msg) + `,"type":"BadRequestError","param":null,"code":400}`
		}
		validationError := func(msg string) string {
			return `{"object":"error","message":` + jsonOf(msg) + `,"type":"Bad Request","param":null,"code":400}`
		}
		chat := func(field, value string) string {
			return `{"messages": [{"role": "user", "content": "hi"}], "` + field + `": ` + value + `}`
		}
		tests := []struct {
			name, path, body, want string
		}{
			{"max int64", "/generate", `{"text": "hi", "sampling_params": {"max_new_tokens": 9223372036854775807}}`,
				generateError(tooMany("9223372036854775808", "9223372036854775807"))},
			{"one below", "/generate", `{"text": "hi", "sampling_params": {"max_new_tokens": 9223372036854775806}}`,
				generateError(tooMany("9223372036854775807", "9223372036854775806"))},
			{"2^63", "/generate", `{"text": "hi", "sampling_params": {"max_new_tokens": 9223372036854775808}}`,
				validationError("sampling_params: max_new_tokens must be at most 9223372036854775807, got 9223372036854775808.")},
			{"19 nines", "/generate", `{"text": "hi", "sampling_params": {"max_new_tokens": 9999999999999999999}}`,
				validationError("sampling_params: max_new_tokens must be at most 9223372036854775807, got 9999999999999999999.")},
			{"2^64", "/generate", `{"text": "hi", "sampling_params": {"max_new_tokens": 18446744073709551616}}`,
				validationError("sampling_params: max_new_tokens must be at most 9223372036854775807, got 18446744073709551616.")},
			{"below int64", "/generate", `{"text": "hi", "sampling_params": {"max_new_tokens": -9223372036854775809}}`,
				validationError("sampling_params: max_new_tokens must be at least -9223372036854775808, got -9223372036854775809.")},
			{"60 digits", "/generate", `{"text": "hi", "sampling_params": {"max_new_tokens": ` + strings.Repeat("9", 60) + `}}`,
				validationError("sampling_params: max_new_tokens must be at most 9223372036854775807, got " + strings.Repeat("9", 40) + "... (60 digits).")},
			{"n past int64", "/generate", `{"text": "hi", "sampling_params": {"n": 9223372036854775808}}`,
				validationError("sampling_params: n must be at most 9223372036854775807, got 9223372036854775808.")},
			{"top_logprobs_num past int64", "/generate", `{"text": "hi", "return_logprob": true, "top_logprobs_num": 9223372036854775808}`,
				validationError("top_logprobs_num: The value must be at most 9223372036854775807, got 9223372036854775808.")},
			{"completions, max int64", "/v1/completions", `{"prompt": "hi", "max_tokens": 9223372036854775807}`,
				openAIError(tooMany("9223372036854775808", "9223372036854775807"))},
			{"completions, 2^63", "/v1/completions", `{"prompt": "hi", "max_tokens": 9223372036854775808}`,
				validationError("max_tokens must be at most 9223372036854775807, got 9223372036854775808.")},
			// Without --context-length serving_chat.py has no context to
			// check max_completion_tokens against: the tokenizer manager's
			// check answers, for the templated prompt's 10 tokens.
			{"chat, max int64", "/v1/chat/completions", chat("max_tokens", "9223372036854775807"),
				openAIError(strings.Replace(tooMany("9223372036854775817", "9223372036854775807"), " 1 tokens from", " 10 tokens from", 1))},
			{"chat, 2^63", "/v1/chat/completions", chat("max_completion_tokens", "9223372036854775808"),
				validationError("max_completion_tokens must be at most 9223372036854775807, got 9223372036854775808.")},
			{"chat n, 2^63", "/v1/chat/completions", chat("n", "9223372036854775808"),
				validationError("n must be at most 9223372036854775807, got 9223372036854775808.")},
		}
		for _, tt := range tests {
			if code, body, _ := ts.Do(t, "POST", tt.path, tt.body); code != 400 || body != tt.want {
				t.Errorf("%s: got %d %s\nwant 400 %s", tt.name, code, body, tt.want)
			}
		}
		mocktest.CheckIdle(t, ts.Engine())
		if st := ts.Engine().Stats(); st.Requests != 0 {
			t.Errorf("%d requests ran, want none", st.Requests)
		}
	})
}

// What one request may ask for is bounded before anything is sized by it:
// prompts x n, stop strings, rids and cache namespaces, each refused with
// a 400 that says the bound.
func TestRequestBounds(t *testing.T) {
	norace.Skip(t, "checks what each bound refuses")
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{})
		generateError := func(msg string) string { return `{"error":{"message":` + jsonOf(msg) + `}}` }
		openAIError := func(msg string) string {
			return `{"object":"error","message":` + jsonOf(msg) + `,"type":"BadRequestError","param":null,"code":400}`
		}
		texts := func(n int) string { return jsonOf(slices.Repeat([]string{"x"}, n)) }
		tests := []struct {
			name, path, body, want string
		}{
			{"2049 prompts", "/generate", `{"text": ` + texts(2049) + `}`,
				generateError("A request may ask for at most 2048 sequences (prompts x n), got 2049 prompts x 1.")},
			{"17 prompts x 128", "/generate", `{"text": ` + texts(17) + `, "sampling_params": {"n": 128}}`,
				generateError("A request may ask for at most 2048 sequences (prompts x n), got 17 prompts x 128.")},
			{"completions, 17 prompts x 128", "/v1/completions", `{"prompt": ` + texts(17) + `, "n": 128}`,
				openAIError("A request may ask for at most 2048 sequences (prompts x n), got 17 prompts x 128.")},
			{"a million stop strings", "/generate", `{"text": "x", "sampling_params": {"stop": ` + texts(1_000_000) + `}}`,
				generateError("stop must have at most 32 strings, got 1000000.")},
			{"a long stop string", "/v1/completions", `{"prompt": "x", "stop": ` + jsonOf(strings.Repeat("s", 257)) + `}`,
				openAIError("Each stop string must be at most 256 bytes, got one of 257.")},
			{"a long rid", "/generate", `{"text": "x", "rid": ` + jsonOf(strings.Repeat("r", 513)) + `}`,
				generateError("The rid must be at most 512 bytes, got 513.")},
			{"a long salt", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "cache_salt": ` + jsonOf(strings.Repeat("s", 1024)) + `}`,
				openAIError("The cache namespace (extra_key, cache_salt and lora_path together) must be at most 1024 bytes, got 1025.")},
		}
		for _, tt := range tests {
			if code, body, _ := ts.Do(t, "POST", tt.path, tt.body); code != 400 || body != tt.want {
				t.Errorf("%s: got %d %.300s\nwant 400 %s", tt.name, code, body, tt.want)
			}
		}
		if st := ts.Engine().Stats(); st.Requests != 0 {
			t.Errorf("%d requests ran, want none", st.Requests)
		}
		// At the bound, a batch runs.
		if n, _ := completionTokens(t, ts, "/v1/completions", `{"prompt": `+texts(16)+`, "n": 128, "max_tokens": 1}`); n != 2048 {
			t.Errorf("16 prompts x 128: %d completion tokens, want 2048", n)
		}
		mocktest.CheckIdle(t, ts.Engine())
	})
}

// /tokenize and /detokenize answer at most maxTokenizeTokens (1<<20)
// tokens: a large body is refused, counted without being tokenized.
func TestTokenizeBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{})
		text := strings.Repeat("a ", 1<<20+1)
		code, body, _ := ts.Do(t, "POST", "/tokenize", fmt.Sprintf(`{"prompt": %q}`, text))
		want := fmt.Sprintf("The text is %d tokens; /tokenize takes at most 1048576.", builtinTok.Count(text))
		if code != 400 || !strings.Contains(body, want) {
			t.Fatalf("got %d %.200s, want 400 naming the bound", code, body)
		}
		ids := strings.Repeat("7,", 1<<20) + "7"
		code, body, _ = ts.Do(t, "POST", "/detokenize", `{"tokens": [`+ids+`]}`)
		if code != 400 || !strings.Contains(body, "tokens: 1048577 ids; /detokenize takes at most 1048576.") {
			t.Fatalf("got %d %.200s, want 400 naming the bound", code, body)
		}
		if code, _, _ := ts.Do(t, "POST", "/tokenize", `{"prompt": "a small text"}`); code != 200 {
			t.Fatalf("a small text: got %d, want 200", code)
		}
	})
}

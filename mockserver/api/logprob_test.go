package api_test

import (
	"encoding/json"
	"fmt"
	"math"
	"testing"
	"testing/synctest"

	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
)

// Requests with return_logprob get SGLang's logprob lists in meta_info and
// OpenAI's logprobs objects; the bytes are golden files.
func TestLogprobBytes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{})
		chat := `"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "logprobs": true`
		for _, tt := range []struct{ golden, path, body string }{
			{"logprobs/generate.json", "/generate", `{"text": "Hello world again", "rid": "g", "return_logprob": true, "logprob_start_len": 0, "top_logprobs_num": 2, "return_text_in_logprobs": true, "sampling_params": {"max_new_tokens": 2}}`},
			{"logprobs/generate_default.json", "/generate", `{"text": "Hello world again", "rid": "g2", "return_logprob": true, "sampling_params": {"max_new_tokens": 2}}`},
			{"logprobs/completion.json", "/v1/completions", `{"model": "m", "prompt": "Hello world", "rid": "c", "max_tokens": 2, "logprobs": 2}`},
			{"logprobs/completion_echo.json", "/v1/completions", `{"model": "m", "prompt": "Hello world", "rid": "e", "max_tokens": 2, "logprobs": 1, "echo": true}`},
			{"logprobs/completion_stream.txt", "/v1/completions", `{"model": "m", "prompt": "Hello world", "rid": "cs", "max_tokens": 2, "logprobs": 2, "echo": true, "stream": true}`},
			{"logprobs/chat.json", "/v1/chat/completions", `{"model": "m", ` + chat + `, "top_logprobs": 2, "rid": "k"}`},
			{"logprobs/chat_stream.txt", "/v1/chat/completions", `{"model": "m", ` + chat + `, "rid": "ks", "stream": true}`},
		} {
			code, body, _ := ts.Do(t, "POST", tt.path, tt.body)
			if code != 200 {
				t.Fatalf("%s: %d %s", tt.golden, code, body)
			}
			if body[len(body)-1] != '\n' {
				body += "\n"
			}
			mocktest.Golden(t, tt.golden, []byte(body))
		}
	})
}

// The lists are well formed and deterministic: one entry per position, the
// first prompt token's logprob null, every top list sorted with
// probabilities summing below 1, the same numbers for the same request.
func TestLogprobsAreWellFormed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{})
		prompt := jsonOf(ids(80, 12))
		req := `{"input_ids": ` + prompt + `, "return_logprob": true, "logprob_start_len": %d, "top_logprobs_num": 5, "sampling_params": {"max_new_tokens": 6}}`
		type entry [3]any
		var first []entry
		for _, start := range []int{0, 4} {
			_, body, _ := ts.Do(t, "POST", "/generate", fmt.Sprintf(req, start))
			var r struct {
				OutputIDs []int32 `json:"output_ids"`
				MetaInfo  struct {
					Input     []entry   `json:"input_token_logprobs"`
					Output    []entry   `json:"output_token_logprobs"`
					InputTop  [][]entry `json:"input_top_logprobs"`
					OutputTop [][]entry `json:"output_top_logprobs"`
				} `json:"meta_info"`
			}
			if err := json.Unmarshal([]byte(body), &r); err != nil {
				t.Fatal(err)
			}
			m := r.MetaInfo
			if len(m.Input) != 12-start || len(m.Output) != 6 || len(m.InputTop) != 12-start || len(m.OutputTop) != 6 {
				t.Fatalf("start %d: lengths %d %d %d %d", start, len(m.Input), len(m.Output), len(m.InputTop), len(m.OutputTop))
			}
			if (start == 0) != (m.Input[0][0] == nil) || (start == 0) != (m.InputTop[0] == nil) {
				t.Fatalf("start %d: the first prompt token has no logprob exactly when it is listed: %v", start, m.Input[0])
			}
			for i, e := range m.Output {
				if int32(e[1].(float64)) != r.OutputIDs[i] {
					t.Fatalf("output entry %d is of token %v, want %d", i, e[1], r.OutputIDs[i])
				}
			}
			for _, top := range append(m.InputTop, m.OutputTop...) {
				if top == nil {
					continue
				}
				sum, prev := 0.0, 0.0
				for j, alt := range top {
					lp := alt[0].(float64)
					if lp >= 0 || j > 0 && lp > prev {
						t.Fatalf("top list not sorted or not a logprob: %v", top)
					}
					sum += math.Exp(lp)
					prev = lp
				}
				if len(top) != 5 || sum >= 1 {
					t.Fatalf("top list of %d sums to %v: %v", len(top), sum, top)
				}
			}
			if start == 0 {
				first = m.Output
			} else if fmt.Sprint(first) != fmt.Sprint(m.Output) {
				t.Fatalf("same output, different logprobs: %v vs %v", first, m.Output)
			}
		}
	})
}

// /v1/completions maps logprobs and echo as SGLang does: echo with
// logprobs starts them at the prompt's first token, so nothing is reused.
func TestEchoWithLogprobsReusesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{})
		prompt := jsonOf(ids(81, 200))
		tests := []struct {
			name, fields string
			want         int
		}{
			{"warm the cache", ``, 0},
			{"plain", ``, 199},
			{"logprobs", `, "logprobs": 1`, 199},
			{"echo", `, "echo": true`, 199},
			{"echo with logprobs 0 (falsy)", `, "echo": true, "logprobs": 0`, 199},
			{"echo with logprobs", `, "echo": true, "logprobs": 1`, 0},
		}
		for i, tt := range tests {
			rid := fmt.Sprintf("r%d", i)
			if code, body, _ := ts.Do(t, "POST", "/v1/completions", fmt.Sprintf(`{"prompt": %s, "max_tokens": 1, "rid": %q%s}`, prompt, rid, tt.fields)); code != 200 {
				t.Fatalf("%s: %d %s", tt.name, code, body)
			}
			body := getOK(t, ts, "/sim/requests/"+rid)
			var truth struct {
				CachedTokens int `json:"cached_tokens"`
			}
			if err := json.Unmarshal([]byte(body), &truth); err != nil || truth.CachedTokens != tt.want {
				t.Errorf("%s: cached %d, want %d", tt.name, truth.CachedTokens, tt.want)
			}
		}
	})
}

// Top logprob counts are bounded before anything is built.
func TestTopLogprobsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{})
		tests := []struct{ path, body, want string }{
			{"/generate", `{"text": "x", "return_logprob": true, "top_logprobs_num": 21}`,
				`{"error":{"message":"top_logprobs_num must be between 0 and 20, got 21."}}`},
			{"/generate", `{"text": "x", "return_logprob": true, "top_logprobs_num": -1}`,
				`{"error":{"message":"top_logprobs_num must be between 0 and 20, got -1."}}`},
			{"/v1/completions", `{"prompt": "x", "logprobs": 1000000}`,
				`{"object":"error","message":"logprobs must be between 0 and 20, got 1000000.","type":"BadRequestError","param":null,"code":400}`},
			{"/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 21}`,
				`{"object":"error","message":"top_logprobs must be between 0 and 20, got 21.","type":"BadRequestError","param":null,"code":400}`},
		}
		for _, tt := range tests {
			if code, body, _ := ts.Do(t, "POST", tt.path, tt.body); code != 400 || body != tt.want {
				t.Errorf("%s %s: got %d %s, want 400 %s", tt.path, tt.body, code, body, tt.want)
			}
		}
	})
}

package api_test

import (
	"strconv"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
)

// SGLang verifies the sampling parameters before it queues a request
// (SamplingParams.verify, after the context-length checks) and refuses a
// value out of range with its message: 400 in each endpoint's envelope.
// /generate's sampling_params is a plain dict, so an integer stays an int
// in the message; the OpenAI routes' float fields print as floats. The
// engine holds nothing afterwards.
func TestSamplingParameterValidation(t *testing.T) {
	generate := func(params string) string {
		return `{"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 4, ` + params + `}}`
	}
	gen := func(msg string) string { return `{"error":{"message":"` + msg + `"}}` }
	openai := func(msg string) string {
		return `{"object":"error","message":"` + msg + `","type":"BadRequestError","param":null,"code":400}`
	}
	for _, tc := range []struct {
		name, path, body string
		code             int
		want             string
	}{
		{"negative temperature, an int", "/generate", generate(`"temperature": -1`), 400, gen("temperature must be non-negative, got -1.")},
		{"negative temperature, a float", "/generate", generate(`"temperature": -0.5`), 400, gen("temperature must be non-negative, got -0.5.")},
		{"top_p 0", "/generate", generate(`"top_p": 0`), 400, gen("top_p must be in (0, 1], got 0.")},
		{"top_p above 1", "/generate", generate(`"top_p": 1.5`), 400, gen("top_p must be in (0, 1], got 1.5.")},
		{"min_p", "/generate", generate(`"min_p": 2e-300, "min_p": -1e-7`), 400, gen("min_p must be in [0, 1], got -1e-07.")},
		{"top_k 0", "/generate", generate(`"top_k": 0`), 400, gen("top_k must be -1 (disable) or at least 1, got 0.")},
		{"top_k 0 is greedy at temperature 0", "/generate", generate(`"top_k": 0, "temperature": 0`), 200, `"finish_reason"`},
		{"top_k -1 is the whole vocabulary", "/generate", generate(`"top_k": -1`), 200, `"finish_reason"`},
		{"frequency_penalty", "/generate", generate(`"frequency_penalty": 2.5`), 400, gen("frequency_penalty must be in [-2, 2], got 2.5.")},
		{"presence_penalty", "/generate", generate(`"presence_penalty": -3`), 400, gen("presence_penalty must be in [-2, 2], got -3.")},
		{"repetition_penalty 0", "/generate", generate(`"repetition_penalty": 0.0`), 400,
			gen("repetition_penalty must be in (0, 2] (1.0 = no penalty), got 0.0.")},
		{"min_new_tokens below 0", "/generate", generate(`"min_new_tokens": -1`), 400, gen("min_new_tokens must be in [0, max_new_tokens], got -1.")},
		{"min_new_tokens above max", "/generate", generate(`"min_new_tokens": 5`), 400, gen("min_new_tokens must be in [0, max_new_tokens(4)], got 5.")},
		{"max_new_tokens below 0", "/generate", `{"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": -2}}`, 400,
			gen("max_new_tokens must be at least 0, got -2.")},
		// VOCAB is the tokenizer's vocabulary size, LAST the largest id.
		{"logit_bias outside the vocabulary", "/generate", generate(`"logit_bias": {"5": 1, "LAST": 0, "VOCAB": -1}`), 400,
			gen("logit_bias must has keys in [0, LAST], got VOCAB.")},
		{"logit_bias key no int", "/generate", generate(`"logit_bias": {"x": 1}`), 400, gen("invalid literal for int() with base 10: 'x'")},
		{"two grammars", "/generate", generate(`"regex": "a+", "ebnf": "root ::= x"`), 400, gen("Only one of regex, json_schema, or ebnf can be set.")},
		{"the first refusal in SGLang's order", "/generate", generate(`"top_p": 5, "temperature": -1`), 400, gen("temperature must be non-negative, got -1.")},
		{"in range", "/generate", generate(`"temperature": 0.7, "top_p": 0.9, "top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1`), 200, `"finish_reason"`},
		{"completions: a float field", "/v1/completions", `{"prompt": "x", "temperature": -1}`, 400, openai("temperature must be non-negative, got -1.0.")},
		{"completions: an int field", "/v1/completions", `{"prompt": "x", "top_k": 0}`, 400, openai("top_k must be -1 (disable) or at least 1, got 0.")},
		{"completions: min_tokens", "/v1/completions", `{"prompt": "x", "max_tokens": 2, "min_tokens": 3}`, 400,
			openai("min_new_tokens must be in [0, max_new_tokens(2)], got 3.")},
		{"chat: top_p", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "top_p": 2}`, 400,
			openai("top_p must be in (0, 1], got 2.0.")},
		{"chat: in range", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "max_tokens": 2, "temperature": 0}`, 200, `"finish_reason"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ts := mocktest.Start(t, api.Config{})
				vocab := ts.Engine().Tokenizer().VocabSize()
				sizes := strings.NewReplacer("VOCAB", strconv.FormatInt(vocab, 10), "LAST", strconv.FormatInt(vocab-1, 10))
				tc.body, tc.want = sizes.Replace(tc.body), sizes.Replace(tc.want)
				code, body, _ := ts.Do(t, "POST", tc.path, tc.body)
				if code != tc.code || (tc.code == 400 && body != tc.want) || (tc.code == 200 && !strings.Contains(body, tc.want)) {
					t.Errorf("got %d %s\nwant %d %s", code, body, tc.code, tc.want)
				}
				mocktest.CheckIdle(t, ts.Engine())
			})
		})
	}
}

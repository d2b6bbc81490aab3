package api_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"testing/synctest"

	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
	"github.com/sglmock/sglmock/mockserver/tokenizer"
)

// With a model's own tokenizer, every endpoint counts as the model does:
// /tokenize gives the oracle's ids (the tokenizer as SGLang loads it
// through Python's transformers), /generate reports as many
// prompt_tokens, a chat renders with the model's template and counts its
// tokens, and /detokenize gives the text back.
func TestOracleOverHTTP(t *testing.T) {
	o := mocktest.NewOracle(t)
	for _, model := range []string{"llama3_1", "qwen3", "llama2", "deepseek_v3"} {
		t.Run(model, func(t *testing.T) {
			tok, err := tokenizer.Load(o.Models(model))
			if err != nil {
				t.Fatal(err)
			}
			want := o.Run(t, model, mocktest.OracleCorpus, mocktest.OracleChats)
			synctest.Test(t, func(t *testing.T) {
				ts := mocktest.Start(t, api.Config{Profile: mocktest.Profile(t, "default"), Tokenizer: tok})
				for i, text := range mocktest.OracleCorpus {
					ids := want.Prompt[i]
					code, body, _ := ts.Do(t, "POST", "/tokenize", jsonOf(map[string]string{"prompt": text}))
					if w := fmt.Sprintf(`{"count":%d,"max_model_len":32768,"tokens":%s}`, len(ids), jsonOf(ids)); code != 200 || body != w {
						t.Errorf("/tokenize %q: got %d %s, want %s", text, code, body, w)
					}
					if len(ids) == 0 {
						continue
					}
					code, body, _ = ts.Do(t, "POST", "/generate", jsonOf(map[string]any{"text": text, "sampling_params": map[string]int{"max_new_tokens": 1}}))
					var g struct {
						MetaInfo struct {
							PromptTokens int `json:"prompt_tokens"`
						} `json:"meta_info"`
					}
					if err := json.Unmarshal([]byte(body), &g); code != 200 || err != nil || g.MetaInfo.PromptTokens != len(ids) {
						t.Errorf("/generate %q: got %d %s, want prompt_tokens %d", text, code, body, len(ids))
					}
					code, body, _ = ts.Do(t, "POST", "/detokenize", jsonOf(map[string]any{"tokens": want.Prompt[i], "skip_special_tokens": false}))
					if w := jsonOf(map[string]string{"text": want.Decoded[i]}); code != 200 || body != w {
						t.Errorf("/detokenize %v: got %d %s, want %s", want.Prompt[i], code, body, w)
					}
				}
				for i, chat := range mocktest.OracleChats {
					if want.Chat[i] == nil {
						code, body, _ := ts.Do(t, "POST", "/v1/chat/completions", jsonOf(map[string]any{"model": "m", "messages": chat, "max_tokens": 1}))
						if code != 400 {
							t.Errorf("chat %d without a template: got %d %s, want 400", i, code, body)
						}
						continue
					}
					ids := want.ChatIDs[i]
					code, body, _ := ts.Do(t, "POST", "/tokenize", jsonOf(map[string]any{"messages": chat}))
					if w := fmt.Sprintf(`{"count":%d,"max_model_len":32768,"tokens":%s}`, len(ids), jsonOf(ids)); code != 200 || body != w {
						t.Errorf("/tokenize chat %d: got %d %s, want %s", i, code, body, w)
					}
					code, body, _ = ts.Do(t, "POST", "/v1/chat/completions", jsonOf(map[string]any{"model": "m", "messages": chat, "max_tokens": 1}))
					var c struct {
						Usage usage `json:"usage"`
					}
					if err := json.Unmarshal([]byte(body), &c); code != 200 || err != nil || c.Usage.PromptTokens != len(ids) {
						t.Errorf("chat %d: got %d %s, want prompt_tokens %d", i, code, body, len(ids))
					}
				}
				mocktest.CheckIdle(t, ts.Engine())
			})
		})
	}
}

// The output of a loaded tokenizer is its vocabulary's: /generate's text
// is the ids decoded, and sent back as a chat's assistant turn it extends
// the cached prompt by exactly the answer (all of it but the last token,
// which the cache never holds).
func TestLoadedTokenizerOutputHitsTheCache(t *testing.T) {
	o := mocktest.NewOracle(t)
	tok, err := tokenizer.Load(o.Models("qwen3"))
	if err != nil {
		t.Fatal(err)
	}
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{Profile: mocktest.Profile(t, "default"), Tokenizer: tok, EnableCacheReport: true})
		type chatResponse struct {
			Choices []struct {
				Message struct {
					Content string `json:"content"`
				} `json:"message"`
			} `json:"choices"`
			Usage usage `json:"usage"`
		}
		chat := func(msgs []mocktest.Message) chatResponse {
			code, body, _ := ts.Do(t, "POST", "/v1/chat/completions", jsonOf(map[string]any{"model": "m", "messages": msgs, "max_tokens": 40}))
			var r chatResponse
			if err := json.Unmarshal([]byte(body), &r); code != 200 || err != nil || len(r.Choices) != 1 {
				t.Fatalf("chat: %d %s", code, body)
			}
			return r
		}
		turn1 := []mocktest.Message{{Role: "user", Content: "Tell me about prefix caches."}}
		r1 := chat(turn1)
		answer := r1.Choices[0].Message.Content
		if ids := tok.Encode(nil, answer); len(ids) != 40 || answer == "" {
			t.Fatalf("the answer %q re-tokenizes to %d tokens, want 40", answer, len(ids))
		}
		turn2 := append(turn1, mocktest.Message{Role: "assistant", Content: answer}, mocktest.Message{Role: "user", Content: "And flushing?"})
		r2 := chat(turn2)
		if got, want := r2.Usage.PromptTokensDetails.CachedTokens, r1.Usage.PromptTokens+40-1; got != want {
			t.Fatalf("turn 2 reused %d tokens, want %d (turn 1's prompt and answer but its last token)", got, want)
		}
		mocktest.CheckIdle(t, ts.Engine())
	})
}

// oracleChatCase is a chat request's fields and what SGLang hands the
// template for it: the messages (with a content list for an "openai"
// template), the tools, and the text it puts after the rendered prompt.
type oracleChatCase struct {
	name, request string
	// messages and openaiMessages are the template's messages for a
	// "string" and an "openai" template ("" for the same).
	messages, openaiMessages, tools, suffix string
}

// oracleChatCases are the held-out check's chat classes that differed:
// a continued assistant message (c14), a last assistant message without
// the flag (c13), content parts (c10, c12) and tools.
var oracleChatCases = []oracleChatCase{
	{name: "continue_final_message",
		request:  `"messages": [{"role": "user", "content": "Say hi in French"}, {"role": "assistant", "content": "Bonjour"}], "continue_final_message": true`,
		messages: `[{"role": "user", "content": "Say hi in French"}]`, suffix: "Bonjour"},
	{name: "a last assistant message",
		request:  `"messages": [{"role": "user", "content": "Say hi in French"}, {"role": "assistant", "content": "Bonjour"}]`,
		messages: `[{"role": "user", "content": "Say hi in French"}, {"role": "user", "content": "Bonjour"}]`},
	{name: "text parts",
		request:        `"messages": [{"role": "user", "content": [{"type": "text", "text": "Describe"}, {"type": "text", "text": "this text."}]}]`,
		messages:       `[{"role": "user", "content": "Describe this text."}]`,
		openaiMessages: `[{"role": "user", "content": [{"type": "text", "text": "Describe"}, {"type": "text", "text": "this text."}]}]`},
	{name: "mixed parts",
		request: `"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "Look:"}, ` +
			`{"type": "image_url", "image_url": {"url": "data:x"}}, {"type": "input_text", "text": "   \n  and this"}]}]`,
		messages:       `[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Look:    \n  and this"}]`,
		openaiMessages: `[{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "Look:"}, {"type": "image"}, {"type": "text", "text": "   \n  and this"}]}]`},
	{name: "tools",
		request: `"tools": [{"type": "function", "function": {"name": "weather", "description": "Weather in a city.", "parameters": {"type": "object", ` +
			`"properties": {"city": {"type": "string"}}, "required": ["city"]}}}], "messages": [{"role": "user", "content": "Paris?"}, ` +
			`{"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\": \"Paris\"}"}}]}, ` +
			`{"role": "tool", "tool_call_id": "c1", "name": "weather", "content": "18 C"}, {"role": "user", "content": "Thanks"}]`,
		messages: `[{"role": "user", "content": "Paris?"}, {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "index": null, "type": "function", ` +
			`"function": {"name": "weather", "arguments": {"city": "Paris"}}}]}, {"role": "tool", "content": "18 C", "tool_call_id": "c1", "name": "weather"}, {"role": "user", "content": "Thanks"}]`,
		tools: `[{"type": "function", "function": {"description": "Weather in a city.", "name": "weather", "parameters": {"type": "object", ` +
			`"properties": {"city": {"type": "string"}}, "required": ["city"]}, "strict": false}, "defer_loading": null}]`},
}

// Chats reach the real models' templates as SGLang hands them: the
// render route's ids are those of the prompt Python's jinja2 renders from
// what SGLang passes (see oracleChatCases), encoded by the model's
// tokenizer; a chat the template refuses is 400 on both.
func TestOracleChatCases(t *testing.T) {
	o := mocktest.NewOracle(t)
	for _, model := range []string{"llama3_1", "qwen3", "deepseek_v3", "gemma3"} {
		t.Run(model, func(t *testing.T) {
			tok, err := tokenizer.Load(o.Models(model))
			if err != nil {
				t.Fatal(err)
			}
			var cfg struct {
				ChatTemplate string `json:"chat_template"`
			}
			b, err := os.ReadFile(filepath.Join(o.Models(model), tokenizer.TokenizerConfig))
			if err != nil || json.Unmarshal(b, &cfg) != nil {
				t.Fatal(err)
			}
			specials := map[string]string{}
			var raw map[string]json.RawMessage
			json.Unmarshal(b, &raw)
			for _, k := range []string{"bos_token", "eos_token", "unk_token", "pad_token"} {
				var s string
				var obj struct{ Content string }
				if json.Unmarshal(raw[k], &s) != nil && json.Unmarshal(raw[k], &obj) == nil {
					s = obj.Content
				}
				if s != "" {
					specials[k] = s
				}
			}
			openai := tok.ChatContentFormat() == "openai"
			cases := make([]mocktest.JinjaCase, len(oracleChatCases))
			for i, c := range oracleChatCases {
				msgs := c.messages
				if openai && c.openaiMessages != "" {
					msgs = c.openaiMessages
				}
				tools := c.tools
				if tools == "" {
					tools = "null"
				}
				ctx := map[string]json.RawMessage{"messages": json.RawMessage(msgs), "tools": json.RawMessage(tools),
					"documents": json.RawMessage("null"), "add_generation_prompt": json.RawMessage("true")}
				for k, v := range specials {
					ctx[k] = json.RawMessage(jsonOf(v))
				}
				cases[i] = mocktest.JinjaCase{Template: cfg.ChatTemplate, Context: json.RawMessage(jsonOf(ctx))}
			}
			want := mocktest.RenderJinja(t, cases)
			synctest.Test(t, func(t *testing.T) {
				ts := mocktest.Start(t, api.Config{Profile: mocktest.Profile(t, "default"), Tokenizer: tok})
				for i, c := range oracleChatCases {
					code, body, _ := ts.Do(t, "POST", "/v1/chat/completions/render", `{"model": "sglmock/small-1b", `+c.request+`}`)
					if want[i].Text == nil {
						if code != 400 {
							t.Errorf("%s: got %d %s, want 400 (jinja2: %s)", c.name, code, body, want[i].Error)
						}
						continue
					}
					wantIDs := tok.Encode(nil, *want[i].Text+c.suffix)
					var r struct {
						TokenIDs []int32 `json:"token_ids"`
					}
					if err := json.Unmarshal([]byte(body), &r); code != 200 || err != nil || !slices.Equal(r.TokenIDs, wantIDs) {
						t.Errorf("%s: got %d, %d tokens %q\nwant %d tokens %q", c.name, code, len(r.TokenIDs), tok.Decode(r.TokenIDs, false),
							len(wantIDs), *want[i].Text+c.suffix)
						continue
					}
					t.Logf("%s: %d tokens, as jinja2 renders it", c.name, len(wantIDs))
				}
				mocktest.CheckIdle(t, ts.Engine())
			})
		})
	}
}

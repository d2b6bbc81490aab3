package api_test

import (
	"encoding/json"
	"fmt"
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

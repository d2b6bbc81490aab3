package api_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
	"github.com/sglmock/sglmock/mockserver/tokenizer"
)

// usage is an OpenAI response's usage.
type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// Each built-in profile renders chats with its model family's template, so
// two unrelated chats share what they share on a real server: Llama
// 3.1-Instruct's BOS, system block (knowledge cut-off and date) and user
// header; Kimi K2's default system prompt and user marker; ChatML's role
// marker alone. A chat prompt carries one BOS, the template's.
func TestProfileChatTemplates(t *testing.T) {
	tests := []struct {
		profile, shared string
		bos             bool
	}{
		{"llama-8b-eagle3-h100", "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n" +
			"Today Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n", true},
		{"kimi-k2.6-rtx6000", "<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI.<|im_end|><|im_user|>user<|im_middle|>", false},
		{"default", "<|im_start|>user\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.profile, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := mocktest.Profile(t, tt.profile)
				ts := mocktest.Start(t, api.Config{Profile: p, EnableCacheReport: true})
				chat := func(content string) (prompt, cached int) {
					code, body, _ := ts.Do(t, "POST", "/v1/chat/completions",
						jsonOf(map[string]any{"model": "m", "messages": []map[string]string{{"role": "user", "content": content}}, "max_tokens": 1}))
					var r struct {
						Usage usage `json:"usage"`
					}
					if err := json.Unmarshal([]byte(body), &r); code != 200 || err != nil {
						t.Fatalf("chat: %d %s", code, body)
					}
					return r.Usage.PromptTokens, r.Usage.PromptTokensDetails.CachedTokens
				}
				shared := len(builtinTok.Encode(nil, tt.shared))
				if p.BigramKeys() { // EAGLE's cache keys on bigrams: one less
					shared--
				}
				if _, cached := chat("Tell me about prefix caches."); cached != 0 {
					t.Fatalf("first chat: %d tokens cached, want 0", cached)
				}
				prompt, cached := chat("Write a short poem.")
				if cached != shared {
					t.Errorf("an unrelated chat reused %d tokens, want the %d the template's opening has", cached, shared)
				}
				code, body, _ := ts.Do(t, "POST", "/tokenize", `{"messages": [{"role": "user", "content": "Write a short poem."}]}`)
				var tok struct{ Tokens []int32 }
				if err := json.Unmarshal([]byte(body), &tok); code != 200 || err != nil || len(tok.Tokens) != prompt {
					t.Fatalf("/tokenize of the chat: %d %s, want %d tokens", code, body, prompt)
				}
				bos := 0
				for _, id := range tok.Tokens {
					if id == tokenizer.BOS {
						bos++
					}
				}
				if want := map[bool]int{true: 1, false: 0}[tt.bos]; bos != want || (tt.bos && tok.Tokens[0] != tokenizer.BOS) {
					t.Errorf("the chat prompt has %d BOS (first token %d), want %d", bos, tok.Tokens[0], want)
				}
				if !strings.HasPrefix(builtinTok.Decode(tok.Tokens, false), tt.shared) {
					t.Errorf("the chat prompt %q does not open with %q", builtinTok.Decode(tok.Tokens, false), tt.shared)
				}
				mocktest.CheckIdle(t, ts.Engine())
			})
		})
	}
}

// A template that cannot render a chat answers 400 with the template's
// error, on the chat route, its render route and /tokenize; the server
// keeps serving.
func TestChatTemplateError(t *testing.T) {
	dir := t.TempDir()
	mocktest.WriteTokenizer(t, dir, `{% if messages | length > 1 %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{{ messages[0].content }}`)
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{Profile: mocktest.Profile(t, "default"), Tokenizer: tok})
		two := `{"model": "sglmock/small-1b", "messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], "max_tokens": 1}`
		const msg = "chat template: Conversation roles must alternate user/assistant/user/assistant/..."
		for _, path := range []string{"/v1/chat/completions", "/v1/chat/completions/render", "/tokenize"} {
			code, body, _ := ts.Do(t, "POST", path, two)
			if code != 400 || !strings.Contains(body, msg) {
				t.Errorf("%s: got %d %s, want 400 with %q", path, code, body, msg)
			}
		}
		code, body, _ := ts.Do(t, "POST", "/v1/chat/completions", `{"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}`)
		if code != 200 {
			t.Fatalf("a chat the template renders: %d %s", code, body)
		}
		mocktest.CheckIdle(t, ts.Engine())
	})
}

// Two servers in one process keep their own tokenizers: a profile's
// tokenizer_path is loaded and reported by /model_info, and the other
// server keeps the built-in one.
func TestTwoServersTwoTokenizers(t *testing.T) {
	dir := t.TempDir()
	mocktest.WriteTokenizer(t, dir, "")
	synctest.Test(t, func(t *testing.T) {
		p := mocktest.Profile(t, "default")
		p.TokenizerPath = dir
		loaded := mocktest.Start(t, api.Config{Profile: p})
		builtin := mocktest.Start(t, api.Config{Profile: mocktest.Profile(t, "default")})
		want, err := tokenizer.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, tt := range []struct {
			ts   *mocktest.Mock
			tok  *tokenizer.Tokenizer
			path string
		}{{loaded, want, dir}, {builtin, builtinTok, "sglmock/small-1b"}} {
			code, body, _ := tt.ts.Do(t, "POST", "/tokenize", `{"prompt": "Hello world, the"}`)
			ids := tt.tok.EncodePrompt(nil, "Hello world, the")
			if w := jsonOf(map[string]any{"count": len(ids), "max_model_len": 32768, "tokens": ids}); code != 200 || body != w {
				t.Errorf("%s: /tokenize: got %d %s, want %s", tt.path, code, body, w)
			}
			code, body, _ = tt.ts.Do(t, "GET", "/model_info", "")
			if code != 200 || !strings.Contains(body, `"tokenizer_path":"`+tt.path+`"`) {
				t.Errorf("%s: /model_info: %d %s", tt.path, code, body)
			}
		}
		p.TokenizerPath = filepath.Join(dir, "missing")
		if _, err := api.New(api.Config{Profile: p}); err == nil || !strings.Contains(err.Error(), `profile "default": tokenizer_path:`) {
			t.Errorf("a profile whose tokenizer_path has no tokenizer: got %v", err)
		}
	})
}

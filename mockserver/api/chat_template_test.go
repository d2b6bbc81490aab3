package api_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
	"github.com/sglmock/sglmock/mockserver/tokenizer"
)

// chatTemplateCase is a chat request's fields (beside model and
// max_tokens) and the text SGLang renders for it.
type chatTemplateCase struct {
	name, fields, want string
}

// checkChatText serves a tokenizer whose template is template and checks
// that every chat route prefills each case's text: /tokenize's ids, the
// render route's ids and the chat's prompt_tokens. A want starting with
// "400 " is the error the routes answer instead.
func checkChatText(t *testing.T, template string, cases []chatTemplateCase) {
	t.Helper()
	dir := t.TempDir()
	mocktest.WriteTokenizer(t, dir, template)
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{Profile: mocktest.Profile(t, "default"), Tokenizer: tok})
		for _, c := range cases {
			body := `{"model": "sglmock/small-1b", "max_tokens": 1, ` + c.fields + `}`
			if msg, ok := strings.CutPrefix(c.want, "400 "); ok {
				for _, path := range []string{"/v1/chat/completions", "/v1/chat/completions/render", "/tokenize"} {
					if code, resp, _ := ts.Do(t, "POST", path, body); code != 400 || !strings.Contains(resp, msg) {
						t.Errorf("%s %s: got %d %s, want 400 with %q", c.name, path, code, resp, msg)
					}
				}
				continue
			}
			want := tok.Encode(nil, c.want)
			var tokenized struct{ Tokens []int32 }
			code, resp, _ := ts.Do(t, "POST", "/tokenize", body)
			if err := json.Unmarshal([]byte(resp), &tokenized); code != 200 || err != nil || !slices.Equal(tokenized.Tokens, want) {
				t.Errorf("%s: /tokenize: got %d %s\nwant the ids of %q", c.name, code, resp, c.want)
				if code == 200 {
					t.Errorf("%s: /tokenize's text: %q", c.name, tok.Decode(tokenized.Tokens, false))
				}
			}
			var rendered struct {
				TokenIDs []int32 `json:"token_ids"`
			}
			code, resp, _ = ts.Do(t, "POST", "/v1/chat/completions/render", body)
			if err := json.Unmarshal([]byte(resp), &rendered); code != 200 || err != nil || !slices.Equal(rendered.TokenIDs, want) {
				t.Errorf("%s: render: got %d %s, want %v", c.name, code, resp, want)
			}
			var chat struct {
				Usage usage `json:"usage"`
			}
			code, resp, _ = ts.Do(t, "POST", "/v1/chat/completions", body)
			if err := json.Unmarshal([]byte(resp), &chat); code != 200 || err != nil || chat.Usage.PromptTokens != len(want) {
				t.Errorf("%s: chat: got %d %s, want prompt_tokens %d", c.name, code, resp, len(want))
			}
		}
		mocktest.CheckIdle(t, ts.Engine())
	})
}

// A template that prints every message's role and content.
const plainTemplate = `{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}`

// continue_final_message continues a last assistant message, as SGLang's
// _handle_last_assistant_message does: the message is left out of the
// chat and its text follows the generation prompt, unclosed. Without the
// flag a last assistant message becomes a user message.
func TestContinueFinalMessage(t *testing.T) {
	prefill := `"messages": [{"role": "user", "content": "Say hi in French"}, {"role": "assistant", "content": "Bonjour", "name": "x"}]`
	checkChatText(t, plainTemplate, []chatTemplateCase{
		{"continued", prefill + `, "continue_final_message": true`, "<|user|>Say hi in French<|end|><|assistant|>Bonjour"},
		{"a new user turn", prefill, "<|user|>Say hi in French<|end|><|user|>Bonjour<|end|><|assistant|>"},
		{"an empty prefill", `"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": null}], "continue_final_message": true`,
			"<|user|>Hi<|end|><|assistant|>"},
		{"a last user message", `"messages": [{"role": "user", "content": "Hi"}], "continue_final_message": true`, "<|user|>Hi<|end|><|assistant|>"},
	})
}

// A template that loops over a message's content gets the parts as
// SGLang hands them ("openai" format: an image as {"type": "image"}, text
// and input_text as {"type": "text", "text": ...}, the content key last);
// a tool result of text parts is their text joined with a space. Any
// other template gets the text parts joined with a space.
func TestContentParts(t *testing.T) {
	parts := `"messages": [{"role": "user", "content": [{"type": "text", "text": "Describe"}, {"type": "image_url", "image_url": {"url": "data:x"}},` +
		` {"type": "input_text", "text": "this text."}]}, {"role": "tool", "name": "t", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]`
	openai := `{% for m in messages %}{{ m | tojson }}{% if m.content is not string %}{% for p in m['content'] %}[{{ p.type }}:{{ p.text | trim }}]{% endfor %}{% endif %}{% endfor %}`
	checkChatText(t, openai, []chatTemplateCase{{"openai", parts,
		`{"role": "user", "content": [{"type": "text", "text": "Describe"}, {"type": "image"}, {"type": "text", "text": "this text."}]}` +
			`[text:Describe][image:][text:this text.]{"role": "tool", "content": "a b", "name": "t"}`}})
	checkChatText(t, `{% for m in messages %}{{ m | tojson }}{% endfor %}`, []chatTemplateCase{{"string", parts,
		`{"role": "user", "content": "Describe this text."}{"role": "tool", "content": "a b", "name": "t"}`}})
}

// Tools, tool calls, tool call ids and names reach the template as SGLang
// passes them: the tools as Tool.model_dump gives them (nulls kept), all
// of them, none for tool_choice "none", the named one alone; an
// assistant's tool call arguments parsed from their JSON string; a user
// message's extra keys dropped. A template that fails with the tools is
// tried with each tool's function alone.
func TestToolsReachTheTemplate(t *testing.T) {
	tools := `"tools": [{"type": "function", "function": {"name": "look", "parameters": {"type": "object"}}},` +
		` {"type": "function", "function": {"name": "find", "description": "Finds.", "strict": true}, "defer_loading": true}]`
	dumped := `[{"type": "function", "function": {"description": null, "name": "look", "parameters": {"type": "object"}, "strict": false}, "defer_loading": null}, ` +
		`{"type": "function", "function": {"description": "Finds.", "name": "find", "parameters": null, "strict": true, "defer_loading": true}, "defer_loading": true}]`
	msgs := `"messages": [{"role": "user", "content": "Hi", "name": "dropped"}, {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",` +
		` "function": {"name": "look", "arguments": "{\"q\": \"cats\", \"n\": 2}"}}]}, {"role": "tool", "content": "a cat", "tool_call_id": "call_1", "name": "look"}]`
	calls := `{"role": "user", "content": "Hi"}{"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "index": null, "type": "function", ` +
		`"function": {"name": "look", "arguments": {"q": "cats", "n": 2}}}]}{"role": "tool", "content": "a cat", "tool_call_id": "call_1", "name": "look"}`
	template := `{{ tools | tojson }}|{% for m in messages %}{{ m | tojson }}{% endfor %}`
	checkChatText(t, template, []chatTemplateCase{
		{"tools", tools + ", " + msgs, dumped + "|" + calls},
		{"tool_choice none", tools + `, "tool_choice": "none", ` + msgs, "null|" + calls},
		{"a named tool", tools + `, "tool_choice": {"type": "function", "function": {"name": "find"}}, ` + msgs,
			"[" + dumped[strings.Index(dumped, `{"type": "function", "function": {"description": "Finds.`):] + "|" + calls},
		{"no tools", msgs, "null|" + calls},
		{"arguments that are not JSON", `"messages": [{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": "{"}}]}]`,
			"400 Assistant tool call function.arguments must be valid JSON."},
		{"arguments that are not an object", `"messages": [{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]}]`,
			"400 Assistant tool call function.arguments must be a JSON object."},
		{"a tool without a name", `"tools": [{"type": "function", "function": {}}], "messages": [{"role": "user", "content": "Hi"}]`,
			"400 tools.0.function.name: Field required"},
	})
	flat := `{% for t in tools %}{% if t.function is defined %}{{ raise_exception('flat tools only') }}{% endif %}{{ t.name }};{% endfor %}`
	checkChatText(t, flat, []chatTemplateCase{{"flat tools", tools + `, "messages": [{"role": "user", "content": "Hi"}]`, "look;find;"}})
}

// reasoning_effort and chat_template_kwargs are the template's variables,
// in order; reasoning_effort "none" turns thinking off unless the kwargs
// say otherwise; a kwarg apply_chat_template takes itself is SGLang's 400.
func TestTemplateKwargs(t *testing.T) {
	template := `{{ reasoning_effort }}|{{ thinking }}|{{ enable_thinking }}|{{ extra | tojson if extra is defined }}`
	msgs := `"messages": [{"role": "user", "content": "Hi"}]`
	checkChatText(t, template, []chatTemplateCase{
		{"effort", msgs + `, "reasoning_effort": "low", "chat_template_kwargs": {"extra": {"b": 1, "a": [2.5, null]}}`, `low|||{"b": 1, "a": [2.5, null]}`},
		{"effort none", msgs + `, "reasoning_effort": "none", "chat_template_kwargs": {"enable_thinking": true}`, `none|False|True|`},
		{"a kwarg named tools", msgs + `, "chat_template_kwargs": {"tools": []}`, "400 got multiple values for keyword argument 'tools'"},
		{"a bad effort", msgs + `, "reasoning_effort": "lots"`, "400 reasoning_effort: Input should be"},
	})
}

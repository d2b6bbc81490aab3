package tokenizer

import "testing"

// Kimi K2.6 is a thinking model: its template is K2-Instruct's but for the
// reasoning block, an empty one before an earlier assistant turn's content,
// and a generation prompt that opens it ("<think>", one built-in token), or
// closes it at once when chat_template_kwargs say thinking is false. So a
// chat's prompt is one token longer than under K2-Instruct's template (two
// with thinking off), as SGLang counts it with the model's own template.
func TestKimiK26ThinkingTemplate(t *testing.T) {
	msgs := []Message{{Role: "user", Content: "Hi"}, {Role: "assistant", Content: "Hello"}, {Role: "user", Content: "Thanks"}}
	k26 := mustBuiltin(BuiltinOptions{ChatTemplate: KimiK26})
	got, err := k26.ApplyChatTemplate(msgs, true, nil)
	want := "<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>" +
		"<|im_user|>user<|im_middle|>Hi<|im_end|>" +
		"<|im_assistant|>assistant<|im_middle|><think></think>Hello<|im_end|>" +
		"<|im_user|>user<|im_middle|>Thanks<|im_end|>" +
		"<|im_assistant|>assistant<|im_middle|><think>"
	if err != nil || got != want {
		t.Fatalf("render:\n got %q, %v\nwant %q", got, err, want)
	}
	one := []Message{{Role: "user", Content: "Hi"}}
	count := func(tok *Tokenizer, kwargs map[string]any) int {
		text, err := tok.ApplyChatTemplate(one, true, kwargs)
		if err != nil {
			t.Fatal(err)
		}
		return len(tok.Encode(nil, text))
	}
	k2 := mustBuiltin(BuiltinOptions{ChatTemplate: KimiK2})
	base := count(k2, nil)
	for _, tc := range []struct {
		kwargs map[string]any
		extra  int
	}{
		{nil, 1},                               // <think>
		{map[string]any{"thinking": true}, 1},  // the same
		{map[string]any{"thinking": false}, 2}, // <think></think>
	} {
		if got := count(k26, tc.kwargs); got != base+tc.extra {
			t.Errorf("thinking %v: %d tokens, want K2-Instruct's %d + %d", tc.kwargs, got, base, tc.extra)
		}
	}
	if ids := k26.Encode(nil, "<think></think>"); len(ids) != 2 || ids[0] != Think || ids[1] != ThinkEnd {
		t.Errorf("the reasoning markers: %v, want the special tokens %d and %d", ids, Think, ThinkEnd)
	}
}

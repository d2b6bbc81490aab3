package tokenizer

import "strings"

// Message is one chat turn.
type Message struct {
	Role    string // system, user, assistant, tool or developer
	Content string
}

// chatTemplate renders a conversation into a prompt's text.
type chatTemplate struct {
	name   string
	render func(msgs []Message, addGenerationPrompt bool) (string, error)
}

// ApplyChatTemplate renders msgs with the tokenizer's chat template. With
// addGenerationPrompt the text ends with the opening of an assistant turn,
// where the model's answer goes. The text carries its own special tokens:
// tokenize it with Encode, as SGLang's apply_chat_template does.
func (t *Tokenizer) ApplyChatTemplate(msgs []Message, addGenerationPrompt bool) (string, error) {
	return t.chat.render(msgs, addGenerationPrompt)
}

// chatML is ChatML, the template of the Qwen family:
//
//	<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n
//
// An answer sent back as the assistant message of the next request renders
// to the same tokens it was generated as, so the next turn's prompt
// extends the previous prompt plus answer.
var chatML = &chatTemplate{name: "chatml", render: func(msgs []Message, addGenerationPrompt bool) (string, error) {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString("<|im_start|>")
		b.WriteString(m.Role)
		b.WriteByte('\n')
		b.WriteString(m.Content)
		b.WriteString("<|im_end|>\n")
	}
	if addGenerationPrompt {
		b.WriteString("<|im_start|>assistant\n")
	}
	return b.String(), nil
}}

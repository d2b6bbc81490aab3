package tokenizer

import "strings"

// Message is one chat turn.
type Message struct {
	Role    string // system, user, assistant, tool or developer
	Content string
}

// ApplyChatTemplate renders messages in ChatML, the template of the Qwen and
// Kimi families:
//
//	<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n
//
// With addGenerationPrompt the text ends with the opening of an assistant
// turn, where the model's answer goes. An answer sent back as the assistant
// message of the next request renders to the same tokens it was generated
// as, so the next turn's prompt extends the previous prompt plus answer.
func ApplyChatTemplate(msgs []Message, addGenerationPrompt bool) string {
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
	return b.String()
}

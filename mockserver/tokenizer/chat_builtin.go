package tokenizer

import (
	"fmt"
	"slices"
	"strings"
)

// The built-in chat templates, which a profile names (chat_template) for
// the built-in tokenizer. Each renders the conversation the way the model
// family's own template does for plain text messages, so a chat's prompt
// has that family's length and shared prefix: Llama 3.1-Instruct opens
// every chat with a system block that carries the knowledge cut-off, Kimi
// K2 with its default system prompt, so two unrelated chats share far
// more than a role header.
var builtinTemplates = map[string]string{
	// ChatML, the template of the Qwen family.
	ChatML: `{%- for m in messages -%}
{{- '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}`,

	// Llama 3.1-Instruct: BOS, a system block that always states the
	// knowledge cut-off and the date (then the system message, if any),
	// and each turn between header tokens, its content trimmed; a tool
	// result is an ipython turn whose content is JSON (the real template
	// passes anything iterable, a string too, through tojson).
	Llama31: `{{- bos_token -}}
{%- if messages and messages[0].role == 'system' -%}
{%- set system = messages[0].content | trim -%}{%- set turns = messages[1:] -%}
{%- else -%}
{%- set system = '' -%}{%- set turns = messages -%}
{%- endif -%}
{%- if date_string is not defined -%}{%- set date_string = '26 Jul 2024' -%}{%- endif -%}
{{- '<|start_header_id|>system<|end_header_id|>\n\n' -}}
{{- 'Cutting Knowledge Date: December 2023\nToday Date: ' + date_string + '\n\n' -}}
{{- system + '<|eot_id|>' -}}
{%- for m in turns -%}
{%- if m.role == 'tool' or m.role == 'ipython' -%}
{{- '<|start_header_id|>ipython<|end_header_id|>\n\n' + (m.content | tojson) + '<|eot_id|>' -}}
{%- else -%}
{{- '<|start_header_id|>' + m.role + '<|end_header_id|>\n\n' + (m.content | trim) + '<|eot_id|>' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}{%- endif -%}`,

	// Kimi K2-Instruct: a default system prompt when the chat has no
	// system message, each turn as a role marker (user, assistant, and
	// the system one for every other role), its name, a middle marker and
	// the content, no separators; a tool result opens with the line
	// "## Return of " and the call's id (none here).
	KimiK2: `{%- for m in messages -%}
{%- if loop.first and m.role != 'system' -%}
{{- '<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>' -}}
{%- endif -%}
{%- if m.role == 'user' -%}{{- '<|im_user|>user<|im_middle|>' -}}
{%- elif m.role == 'assistant' -%}{{- '<|im_assistant|>assistant<|im_middle|>' -}}
{%- else -%}{{- '<|im_system|>' + m.role + '<|im_middle|>' -}}
{%- endif -%}
{%- if m.role == 'tool' -%}{{- '## Return of \n' -}}{%- endif -%}
{{- m.content + '<|im_end|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_assistant|>assistant<|im_middle|>' -}}{%- endif -%}`,

	// Kimi K2.6, a thinking model: K2-Instruct's turns, an earlier
	// assistant turn with an empty reasoning block before its content,
	// and a generation prompt that opens the reasoning block ("<think>"),
	// or closes it at once with chat_template_kwargs {"thinking": false}.
	KimiK26: `{%- for m in messages -%}
{%- if loop.first and m.role != 'system' -%}
{{- '<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>' -}}
{%- endif -%}
{%- if m.role == 'user' -%}{{- '<|im_user|>user<|im_middle|>' -}}
{%- elif m.role == 'assistant' -%}{{- '<|im_assistant|>assistant<|im_middle|><think></think>' -}}
{%- else -%}{{- '<|im_system|>' + m.role + '<|im_middle|>' -}}
{%- endif -%}
{%- if m.role == 'tool' -%}{{- '## Return of \n' -}}{%- endif -%}
{{- m.content + '<|im_end|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_assistant|>assistant<|im_middle|>' -}}
{%- if thinking is defined and thinking is false -%}{{- '<think></think>' -}}{%- else -%}{{- '<think>' -}}{%- endif -%}
{%- endif -%}`,
}

// The built-in chat templates' names.
const (
	ChatML  = "chatml"
	Llama31 = "llama-3.1"
	KimiK2  = "kimi-k2"
	KimiK26 = "kimi-k2.6"
)

// ChatTemplates lists the built-in chat templates' names, sorted.
func ChatTemplates() []string {
	names := make([]string, 0, len(builtinTemplates))
	for n := range builtinTemplates {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// compiledBuiltins are the built-in templates, compiled once: they are
// part of the program, so one that does not compile is a bug.
var compiledBuiltins = func() map[string]*chatTemplate {
	m := make(map[string]*chatTemplate, len(builtinTemplates))
	for name, src := range builtinTemplates {
		c, err := compileTemplate(name, src, builtinBOSText, builtinEOSText)
		if err != nil {
			panic(fmt.Sprintf("built-in chat template %s: %v", name, err))
		}
		m[name] = c
	}
	return m
}()

// builtinTemplate returns a built-in template by name ("" is ChatML).
func builtinTemplate(name string) (*chatTemplate, error) {
	if name == "" {
		name = ChatML
	}
	c, ok := compiledBuiltins[name]
	if !ok {
		return nil, fmt.Errorf("no built-in chat template %q (built-ins: %s)", name, strings.Join(ChatTemplates(), ", "))
	}
	return c, nil
}

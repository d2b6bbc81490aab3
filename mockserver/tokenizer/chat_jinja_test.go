package tokenizer_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglmock/sglmock/mockserver/mocktest"
	. "github.com/sglmock/sglmock/mockserver/tokenizer"
)

// templateCase is a template and a chat to render it with.
type templateCase struct {
	name, template string
	chat           Chat
}

// toolChat has everything SGLang hands a template beside plain text: a
// tool list, an assistant turn with tool calls (arguments parsed, id and
// index null), a tool result with its call's id and name, content as
// parts, and extra variables.
var toolChat = Chat{
	Messages: []Message{
		{Role: "system", Content: "Be brief.", Fields: []Field{{"name", json.RawMessage(`"ops"`)}}},
		{Role: "user", Parts: json.RawMessage(`[{"type":"image"},{"type":"text","text":"  What is this?  "}]`)},
		{Role: "assistant", Content: "", Fields: []Field{{"tool_calls", json.RawMessage(
			`[{"id":null,"index":null,"type":"function","function":{"name":"look","arguments":{"q":"é","n":2,"x":1.5}}}]`)}}},
		{Role: "tool", Content: "a cat", Fields: []Field{{"tool_call_id", json.RawMessage(`"call_1"`)}, {"name", json.RawMessage(`"look"`)}}},
	},
	AddGenerationPrompt: true,
	Tools: json.RawMessage(`[{"type":"function","function":{"description":null,"name":"look","parameters":{"type":"object",` +
		`"properties":{"q":{"type":"string"}}},"strict":false},"defer_loading":null}]`),
	Kwargs: []Field{{"reasoning_effort", json.RawMessage(`"low"`)}, {"enable_thinking", json.RawMessage(`false`)}},
}

// The engine renders chat templates as Python's jinja2 does under
// transformers: line breaks read as \n and one trailing newline dropped,
// Python's string escapes, None and floats printed as str() prints them,
// the format filter, strftime_now's unquoted date, and the variables
// SGLang passes (tools, tool_calls, tool_call_id, name, content parts,
// extra variables), and detects each template's content format as SGLang
// does.
func TestChatTemplatesAsJinja2(t *testing.T) {
	hi := Chat{Messages: []Message{{Role: "user", Content: "Hi"}, {Role: "assistant", Content: "Yo"}}, AddGenerationPrompt: true}
	cases := []templateCase{
		{"escapes", `{{ '\u00e9\x41\r\101\q\\' }}|{{ "tab\there\u4e2d\U0001F600" }}|{{ '\é' }}`, hi},
		{"none and floats", `{% set ns = namespace(x=none) %}{{ none }}|{{ ns.x }}|{{ 1.0 }}|{{ 1e20 }}|{{ 0.00001 }}|{{ 2.5 }}|{{ 3 }}|{{ true }}|{{ [1, none, 'a'] }}|{{ undefined_name }}`, hi},
		{"containers", `{{ [1.0, -0.5] }}|{{ {'a': 1.0, "it's": [none, true, 2]} }}|{{ ['a', "b'c", 'd"e'] }}|{{ messages[0] }}|` +
			`{% for m in messages %}{% for c in m.tool_calls or [] %}{{ c.function.arguments }}{% endfor %}{% endfor %}`, toolChat},
		{"format", `{{ '%s-%05.1f-%d-%r-%x' | format('a', 3.14159, 7.9, 'q', 255) }}|{{ '%(a)s=%(b)d' | format(a='k', b=3) }}|` +
			`{{ "%-6s|%6s|%.2s" | format('ab', 'cd', 'xyz') }}|{{ '%e %g %G %c%%' | format(12345.678, 0.0001234, 1e20, 65) }}|{{ "%s %s" | format(none, true) }}`, hi},
		{"strftime_now", `{{ strftime_now('%d %b %Y') }}|{{ strftime_now("%Y-%m-%d") }}|{{ strftime_now('%-d %B %A %j %U %W %c %x %X %H:%M:%S %p %y') }}|{{ strftime_now('%Y') | length }}`, hi},
		{"Llama 3.2 date", "{%- if not date_string is defined %}\n    {%- if strftime_now is defined %}\n        {%- set date_string = strftime_now(\"%d %b %Y\") %}\n" +
			"    {%- else %}\n        {%- set date_string = \"26 Jul 2024\" %}\n    {%- endif %}\n{%- endif %}\n{{- \"Today Date: \" + date_string + \"\\n\\n\" }}", hi},
		{"CRLF", "{% for m in messages %}\r\n<|{{ m.role }}|>\r\n{{ m.content }}\r{% endfor %}\r\n{% if add_generation_prompt %}\r\n<|assistant|>\r\n{% endif %}\r\n", hi},
		{"trailing newlines", "{{ messages[0].content }}\n\n", hi},
		{"one trailing newline", "{{ messages[0].content }}\n", hi},
		{"tools and messages", `{{ tools | tojson }}|{% for m in messages %}{{ m | tojson }}/{% endfor %}|{{ reasoning_effort }} {{ enable_thinking }} {{ documents }}`, toolChat},
		{"tool calls", `{% for m in messages %}{% if m.tool_calls %}{% for c in m.tool_calls %}{{ c.function.name }}({{ c.function.arguments | tojson }}) {{ c.id }}{% endfor %}` +
			`{% elif m.role == 'tool' %}[{{ m.tool_call_id }} {{ m.name }}: {{ m.content }}]{% elif m.content is string %}{{ m.content }}` +
			`{% else %}{% for p in m.content %}{% if p.type == 'text' %}{{ p.text | trim }}{% else %}<{{ p.type }}>{% endif %}{% endfor %}{% endif %}{% endfor %}`, toolChat},
		{"raw", `{% raw %}{{ '\n' }}{% endraw %}{{ '\x41' }}`, hi},
		{"content loop", `{% for message in messages %}{% for x in message['content'] | selectattr('type') %}{% endfor %}{% endfor %}`, hi},
		{"content slice", `{% for msg in messages %}{%- for x in msg.content[1:] %}{{ x }}{% endfor %}{% endfor %}`, hi},
		{"content of m", `{% for m in messages %}{% for c in m.content if c != 'H' %}{{ c }}{% endfor %}{% endfor %}`, hi},
		{"content split", `{% for message in messages %}{% for w in message.content.split() %}{{ w }}{% endfor %}{% endfor %}`, hi},
		{"messages loop", `{% for message in messages %}{% for k in message %}{% endfor %}{% endfor %}`, hi},
		{"tojson", `{{ {'b': 1, 'a': [1.5, none, 'é\n']} | tojson(indent=2) }}|{{ {'b': 1, 'a': {}} | tojson(sort_keys=true) }}|` +
			`{{ ['é', '😀'] | tojson(ensure_ascii=true) }}|{{ [1, 2] | tojson(separators=(',', ':')) }}|{{ 'a<b' | tojson }}|{{ [] | tojson(indent=4) }}`, hi},
		{"string", `{{ none | string }}|{{ 1.0 | string }}|{{ [1, 'a'] | string }}|{{ nothing | string }}`, hi},
		{"tojson of an undefined value", `{{ nothing | tojson }}`, hi},
		{"modality", `{# images go here #}{{ messages[0].content }}`, hi},
	}
	jc := make([]mocktest.JinjaCase, len(cases))
	for i, c := range cases {
		jc[i] = mocktest.JinjaCase{Template: c.template, Context: pythonContext(t, c.chat, "<|begin_of_text|>", "<|begin_of_text|>")}
	}
	want := mocktest.RenderJinja(t, jc)
	for i, c := range cases {
		tok, err := withTemplate(t, c.template)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		got, err := tok.RenderChat(c.chat)
		switch {
		case want[i].Text == nil && err == nil:
			t.Errorf("%s: got %q, want an error as jinja2's (%s)", c.name, got, want[i].Error)
		case want[i].Text == nil:
		case err != nil || got != *want[i].Text:
			t.Errorf("%s:\n got %q, %v\nwant %q", c.name, got, err, *want[i].Text)
		}
		if f := tok.ChatContentFormat(); f != want[i].ContentFormat {
			t.Errorf("%s: content format %q, want %q", c.name, f, want[i].ContentFormat)
		}
	}
}

// withTemplate loads a small tokenizer whose chat template is template,
// read from chat_template.jinja as written (CRLF kept).
func withTemplate(t *testing.T, template string) (*Tokenizer, error) {
	t.Helper()
	dir := t.TempDir()
	mocktest.WriteTokenizer(t, dir, "")
	if err := os.WriteFile(filepath.Join(dir, ChatTemplateFile), []byte(template), 0o644); err != nil {
		t.Fatal(err)
	}
	return Load(dir)
}

// pythonContext is the variables transformers renders a chat with, as a
// JSON object.
func pythonContext(t *testing.T, c Chat, bos, eos string) json.RawMessage {
	t.Helper()
	var b bytes.Buffer
	field := func(k string, v []byte) {
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		kj, _ := json.Marshal(k)
		b.Write(kj)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('{')
	field("bos_token", mustJSON(t, bos))
	field("eos_token", mustJSON(t, eos))
	for _, f := range c.Kwargs {
		field(f.Key, f.Value)
	}
	var msgs bytes.Buffer
	msgs.WriteByte('[')
	for i, m := range c.Messages {
		if i > 0 {
			msgs.WriteByte(',')
		}
		msgs.WriteString(`{"role":` + string(mustJSON(t, m.Role)))
		if m.Parts == nil {
			msgs.WriteString(`,"content":` + string(mustJSON(t, m.Content)))
		}
		for _, f := range m.Fields {
			msgs.WriteString(`,` + string(mustJSON(t, f.Key)) + `:` + string(f.Value))
		}
		if m.Parts != nil {
			msgs.WriteString(`,"content":` + string(m.Parts))
		}
		msgs.WriteByte('}')
	}
	msgs.WriteByte(']')
	field("messages", msgs.Bytes())
	tools := c.Tools
	if tools == nil {
		tools = json.RawMessage("null")
	}
	field("tools", tools)
	field("documents", []byte("null"))
	field("add_generation_prompt", mustJSON(t, c.AddGenerationPrompt))
	b.WriteByte('}')
	return b.Bytes()
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A template whose brackets nest deeper than jinja2's parser can follow
// (it runs out of recursion at about 75) is refused when it is loaded,
// with the reason; one jinja2 renders, the engine renders alike.
func TestDeeplyNestedTemplates(t *testing.T) {
	hi := Chat{Messages: []Message{{Role: "user", Content: "Hi"}}, AddGenerationPrompt: true}
	nested := func(n int) string { return "{{ " + strings.Repeat("(", n) + "1" + strings.Repeat(")", n) + " }}" }
	want := mocktest.RenderJinja(t, []mocktest.JinjaCase{
		{Template: nested(60), Context: pythonContext(t, hi, "", "")},
		{Template: nested(101), Context: pythonContext(t, hi, "", "")},
	})
	tok, err := withTemplate(t, nested(60))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := tok.RenderChat(hi); want[0].Text == nil || err != nil || got != *want[0].Text {
		t.Errorf("60 deep: got %q, %v; want jinja2's %v", got, err, want[0])
	}
	if want[1].Text != nil {
		t.Fatalf("jinja2 rendered 101 deep: %q", *want[1].Text)
	}
	if _, err := withTemplate(t, nested(101)); err == nil || !strings.Contains(err.Error(), "brackets nested more than 100 deep") {
		t.Errorf("101 deep: got %v, want the template refused for its nesting (jinja2: %s)", err, want[1].Error)
	}
}

// tojson of a value nested deeper than Python's recursion allows (json.dumps
// fails past 990 levels from a template, fewer under SGLang's deeper
// stack) is the template's RecursionError: a request's tools nested
// thousands deep, dumped with an indent (Llama 3.1's template dumps each
// tool with indent=4), would otherwise grow with the square of the depth
// (10 kB of brackets, 100 MB of spaces). Python's json.loads refuses such
// a value before it reaches the template, so jinja2 is the reference at
// 900 levels only.
func TestToJSONDepth(t *testing.T) {
	deep := func(n int) Chat {
		return Chat{Messages: []Message{{Role: "user", Content: "Hi"}}, AddGenerationPrompt: true,
			Tools: json.RawMessage(strings.Repeat("[", n) + strings.Repeat("]", n))}
	}
	const template = `{{ tools | tojson(indent=4) }}`
	want := mocktest.RenderJinja(t, []mocktest.JinjaCase{{Template: template, Context: pythonContext(t, deep(900), "", "")}})
	tok, err := withTemplate(t, template)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := tok.RenderChat(deep(900)); want[0].Text == nil || err != nil || got != *want[0].Text {
		t.Errorf("900 deep: got %d bytes, %v; want jinja2's %v", len(got), err, want[0].Error)
	}
	for _, n := range []int{991, 5000} {
		if got, err := tok.RenderChat(deep(n)); err == nil || !strings.Contains(err.Error(), "RecursionError: maximum recursion depth exceeded while encoding a JSON object") {
			t.Errorf("%d deep: got %d bytes, %v; want json.dumps's RecursionError", n, len(got), err)
		}
	}
}

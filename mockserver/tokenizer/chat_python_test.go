package tokenizer

import "testing"

// The template engine prints as Python's jinja2 does under transformers
// (the oracle test TestChatTemplatesAsJinja2 checks these against jinja2
// itself, where Python is installed): string escapes, None, floats, the
// format filter, strftime_now, line breaks and the trailing newline.
func TestTemplatePythonRules(t *testing.T) {
	tests := []struct{ name, template, want string }{
		{"escapes", `{{ '\u00e9\x41\r\101\q\\' }}|{{ '\é' }}|{{ "\U0001F600\0" }}`, "éA\rA\\q\\|\\xe9|😀\x00"},
		{"escape in a statement", `{% set s = '\x41\n' %}{{ s }}`, "A\n"},
		{"none", `{{ none }}|{{ [none, 'a'] }}|{{ x }}`, "None|[None, 'a']|"},
		{"floats", `{{ 1.0 }}|{{ 1e20 }}|{{ 1_000 }}|{{ 0.00001 }}|{{ 2.50 }}`, "1.0|1e+20|1000|1e-05|2.5"},
		{"format", `{{ '%s-%05.1f-%d-%r-%x' | format('a', 3.14159, 7.9, 'q', 255) }}|{{ '%(a)s=%(b)d' | format(a='k', b=3) }}`, "a-003.1-7-'q'-ff|k=3"},
		{"format filter after a pipe only", `{% set format = 'x' %}{{ format }}{{ '%s'|format(format) }}`, "xx"},
		{"strftime_now", `{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%Y') | length }}|{{ strftime_now('%-d %A %j') }}`, "26 Jul 2024|4|26 Friday 208"},
		{"tojson", `{{ {'b': 1, 'a': [1.5, none]} | tojson(indent=2) }}|{{ {'b': 1, 'a': {}} | tojson(sort_keys=true) }}|{{ [1, 2] | tojson(separators=(',', ':')) }}`,
			"{\n  \"b\": 1,\n  \"a\": [\n    1.5,\n    null\n  ]\n}|{\"a\": {}, \"b\": 1}|[1,2]"},
		{"string", `{{ none | string }}|{{ 1.0 | string }}`, "None|1.0"},
		{"CRLF", "a\r\n{{ 'b' }}\rc\r\n", "a\nb\nc"},
		{"trailing newline", "a\n\n", "a\n"},
	}
	for _, tt := range tests {
		c, err := compileTemplate(tt.name, tt.template, "", "")
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if got, err := c.render(Chat{}); err != nil || got != tt.want {
			t.Errorf("%s: got %q, %v, want %q", tt.name, got, err, tt.want)
		}
	}
}

// A string literal Python cannot decode is the template's error.
func TestTemplateBadEscape(t *testing.T) {
	for _, src := range []string{`{{ '\x4' }}`, `{{ '\u12' }}`, `{{ '\U00110000' }}`, `{{ '\N{BULLET}' }}`} {
		if _, err := compileTemplate("bad", src, "", ""); err == nil {
			t.Errorf("%s compiled", src)
		}
	}
	// tojson of an undefined value is Python's TypeError, which SGLang
	// answers 400.
	c, err := compileTemplate("undefined", `{{ nothing | tojson }}`, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.render(Chat{}); err == nil {
		t.Errorf("tojson of an undefined value: got %q, want an error", got)
	}
}

// SGLang hands a template a message's content parts as a list when the
// template names a modality or loops over a message's content.
func TestDetectContentFormat(t *testing.T) {
	tests := []struct{ template, want string }{
		{`{{ messages[0].content }}`, contentString},
		{`{% for m in messages %}{{ m.content }}{% endfor %}`, contentString},
		{`{% if image %}{% endif %}`, contentOpenAI},
		{`{%- for item in message['content'] %}{% endfor %}`, contentOpenAI},
		{`{% for item in message.content | selectattr('type', 'equalto', 'text') %}{% endfor %}`, contentOpenAI},
		{`{% for item in msg.content[1:] %}{% endfor %}`, contentOpenAI},
		{`{% for item in m['content'] if item.type == 'text' %}{% endfor %}`, contentOpenAI},
		{`{% for item in message.content.split() %}{% endfor %}`, contentString},
		{`{% for item in turn.content %}{% endfor %}`, contentString},
		{`{% for item in message.contents %}{% endfor %}`, contentString},
	}
	for _, tt := range tests {
		if got := detectContentFormat(tt.template); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.template, got, tt.want)
		}
	}
}

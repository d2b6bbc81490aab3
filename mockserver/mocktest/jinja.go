package mocktest

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"os/exec"
	"testing"
)

//go:embed oracle/jinja_oracle.py
var jinjaOracleScript string

// JinjaCase is a chat template and the variables it is rendered with (a
// JSON object, keys in order).
type JinjaCase struct {
	Template string          `json:"template"`
	Context  json.RawMessage `json:"context"`
}

// JinjaResult is what Python's jinja2 makes of a case: the text, or the
// error ("TemplateError: ..."); and SGLang's content format of the
// template ("string" or "openai").
type JinjaResult struct {
	Text          *string `json:"text"`
	Error         string  `json:"error"`
	ContentFormat string  `json:"content_format"`
}

// RenderJinja renders chat templates with Python's jinja2 set up as
// transformers' apply_chat_template sets it up (trim_blocks,
// lstrip_blocks, loop controls, {% generation %}, its tojson,
// raise_exception, strftime_now at 26 Jul 2024): the reference the chat
// template tests compare the mock's engine with. It skips the test,
// saying why, without a python3 that has jinja2 (Debian's python3-jinja2;
// .ci/run installs it).
func RenderJinja(t testing.TB, cases []JinjaCase) []JinjaResult {
	t.Helper()
	python := ""
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		if exec.Command(p, "-c", "import jinja2").Run() == nil {
			python = p
			break
		}
	}
	if python == "" {
		t.Skip("the chat template oracle needs python3 with jinja2 (Debian's python3-jinja2)")
	}
	in, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, "-c", jinjaOracleScript)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("jinja2: %v\n%s", err, stderr.Bytes())
	}
	var res []JinjaResult
	if err := json.Unmarshal(out, &res); err != nil || len(res) != len(cases) {
		t.Fatalf("jinja2: %d results for %d cases: %v", len(res), len(cases), err)
	}
	return res
}

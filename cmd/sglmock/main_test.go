package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestRunExitCodes(t *testing.T) {
	tests := []struct {
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{nil, 2, "", "Usage: sglmock <command>"},
		{[]string{"help"}, 0, "Commands:", ""},
		{[]string{"--help"}, 0, "Commands:", ""},
		{[]string{"nosuch"}, 2, "", `unknown command "nosuch"`},
		{[]string{"demo", "extra"}, 2, "", "takes no arguments"},
		{[]string{"demo", "--help"}, 0, "Usage: sglmock demo", ""},
		{[]string{"profiles"}, 0, "kimi-k2.6-rtx6000", ""},
		{[]string{"profiles", "kimi-k2.6-rtx6000"}, 0, "algorithm: DDTREE", ""},
		{[]string{"profiles", "nosuch"}, 1, "", `no built-in profile "nosuch"`},
		{[]string{"profiles", "/nonexistent/p.yaml"}, 1, "", "no such file"},
		{[]string{"profiles", "a", "b"}, 2, "", "at most one profile"},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := run(tt.args, &stdout, &stderr)
		if code != tt.wantCode {
			t.Errorf("run(%q): got exit %d, want %d", tt.args, code, tt.wantCode)
		}
		if !strings.Contains(stdout.String(), tt.wantStdout) {
			t.Errorf("run(%q): stdout %q lacks %q", tt.args, stdout.String(), tt.wantStdout)
		}
		if !strings.Contains(stderr.String(), tt.wantStderr) {
			t.Errorf("run(%q): stderr %q lacks %q", tt.args, stderr.String(), tt.wantStderr)
		}
	}
}

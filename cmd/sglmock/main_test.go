package main

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// Each command's exit code, and what it writes where: a want of "" means
// that stream stays empty.
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
		for _, out := range []struct {
			name      string
			got, want string
		}{{"stdout", stdout.String(), tt.wantStdout}, {"stderr", stderr.String(), tt.wantStderr}} {
			if out.want == "" && out.got != "" || !strings.Contains(out.got, out.want) {
				t.Errorf("run(%q): %s %q, want %s", tt.args, out.name, out.got, describeWant(out.want))
			}
		}
	}
}

func describeWant(want string) string {
	if want == "" {
		return "nothing"
	}
	return fmt.Sprintf("it to contain %q", want)
}

// Every subcommand with flags follows one rule (parseFlags, flagExit): a
// bad flag exits 2 with the flag package's message, once; a stray argument
// or a bad value exits 2 with the command's message; --help exits 0.
func TestFlagRule(t *testing.T) {
	for _, cmd := range [][]string{{"serve"}, {"bench", "twopoint"}, {"bench", "stream"}, {"audit"}, {"calibrate"}, {"health"},
		{"scenario", "run"}, {"fleet", "status"}} {
		var stdout, stderr bytes.Buffer
		if code := run(append(slices.Clone(cmd), "--nope"), &stdout, &stderr); code != 2 ||
			strings.Count(stderr.String(), "flag provided but not defined: -nope") != 1 {
			t.Errorf("%q --nope: got exit %d and stderr %q, want 2 and the flag package's message once", cmd, code, stderr.String())
		}
		stderr.Reset()
		if code := run(append(slices.Clone(cmd), "--help"), &stdout, &stderr); code != 0 || !strings.Contains(stderr.String(), "Usage") {
			t.Errorf("%q --help: got exit %d and stderr %q, want 0 and the usage", cmd, code, stderr.String())
		}
		if cmd[0] == "audit" || cmd[0] == "scenario" {
			continue // its arguments are the command to run, or the scenario
		}
		stderr.Reset()
		if code := run(append(slices.Clone(cmd), "stray"), &stdout, &stderr); code != 2 ||
			!strings.Contains(stderr.String(), `unexpected argument "stray"`) {
			t.Errorf("%q stray: got exit %d and stderr %q, want 2 and the stray argument named", cmd, code, stderr.String())
		}
	}
}

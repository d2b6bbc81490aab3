package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
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
		{[]string{"profiles", "--help"}, 0, "sglmock profiles --fields     what every field of a profile file means", ""},
		{[]string{"profiles", "--fields"}, 0, "\n  decode.ctx_table (list of [tokens, seconds])\n", ""},
		{[]string{"profiles", "--feilds"}, 2, "", "unknown flag --feilds: did you mean --fields?"},
		{[]string{"version"}, 0, "follows SGLang", ""},
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
// bad flag exits 2 with one line that names it and points at --help, never
// the usage; a stray argument or a bad value exits 2 with the command's
// message; --help exits 0 with the usage.
func TestFlagRule(t *testing.T) {
	for _, cmd := range [][]string{{"serve"}, {"bench", "twopoint"}, {"bench", "stream"}, {"audit"}, {"calibrate"}, {"health"},
		{"scenario", "run"}, {"fleet", "status"}} {
		var stdout, stderr bytes.Buffer
		want := "unknown flag --nope (sglmock " + strings.Join(cmd, " ") + " --help lists the flags)\n"
		if code := run(append(slices.Clone(cmd), "--nope"), &stdout, &stderr); code != 2 ||
			strings.Count(stderr.String(), "\n") != 1 || !strings.HasSuffix(stderr.String(), want) {
			t.Errorf("%q --nope: got exit %d and stderr %q, want 2 and one line ending %q", cmd, code, stderr.String(), want)
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

// A typo gets the nearest flag; a bad value one line with the flag spelled
// as a user types it.
func TestFlagMistakes(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--page-sise", "16"}, "sglmock serve: unknown flag --page-sise: did you mean --page-size? (sglmock serve --help lists the flags)\n"},
		{[]string{"bench", "twopoint", "--repet", "3"}, "sglmock bench: unknown flag --repet: did you mean --repeat? (sglmock bench twopoint --help lists the flags)\n"},
		{[]string{"health", "--prot", "1"}, "sglmock health: unknown flag --prot: did you mean --port? (sglmock health --help lists the flags)\n"},
		{[]string{"audit", "--metrics", "--", "true"}, "sglmock audit: unknown flag --metrics: did you mean --enable-metrics? (sglmock audit --help lists the flags)\n"},
		{[]string{"health", "--port", "x"}, "sglmock health: invalid value \"x\" for flag --port: parse error (sglmock health --help lists the flags)\n"},
		{[]string{"health", "--port"}, "sglmock health: flag needs an argument: --port (sglmock health --help lists the flags)\n"},
	}
	for _, tt := range tests {
		var stderr bytes.Buffer
		if code := run(tt.args, io.Discard, &stderr); code != 2 || stderr.String() != tt.want {
			t.Errorf("%q: got exit %d and %q, want 2 and %q", tt.args, code, stderr.String(), tt.want)
		}
	}
}

func TestNearestFlag(t *testing.T) {
	known := []string{"page-size", "port", "enable-metrics", "enable-cache-report", "host"}
	tests := []struct{ name, want string }{
		{"page-size", "page-size"},
		{"pagesize", "page-size"},
		{"prot", "port"},
		{"metrics", "enable-metrics"},
		{"enable", ""},   // in two flags: no guess
		{"nope", ""},     // three edits from host: too far
		{"x", ""},        // too short to guess
		{"hots", "host"}, // a swap is one edit
		{"cache-report", "enable-cache-report"},
	}
	for _, tt := range tests {
		if got := nearestFlag(tt.name, known); got != tt.want {
			t.Errorf("nearestFlag(%q): got %q, want %q", tt.name, got, tt.want)
		}
	}
}

// version and --version print sglmock's version, the SGLang releases it
// follows with the rules that tell them apart (testdata/version.txt), and
// the build; they take no arguments.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 0 || stderr.Len() > 0 {
			t.Fatalf("%q: exit %d, stderr %q", args, code, stderr.String())
		}
		lines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
		last := len(lines) - 1
		if lines[0] != "sglmock "+api.SimVersion || !strings.HasPrefix(lines[last], "  built from github.com/sglmock/sglmock") {
			t.Errorf("%q: got %q, want the version first and the build last", args, stdout.String())
		}
		mocktest.Golden(t, "version.txt", []byte(strings.Join(lines[1:last], "\n")+"\n"))
	}
	if code := run([]string{"version", "x"}, io.Discard, io.Discard); code != 2 {
		t.Errorf("version x: exit %d, want 2", code)
	}
	var help bytes.Buffer
	if code := run([]string{"version", "--help"}, &help, io.Discard); code != 0 || !strings.HasPrefix(help.String(), "Usage: sglmock version") {
		t.Errorf("version --help: exit %d, %q", code, help.String())
	}
}

func TestSGLMockVersion(t *testing.T) {
	installed := &debug.BuildInfo{Main: debug.Module{Path: "github.com/sglmock/sglmock", Version: "v0.3.0"}, GoVersion: "go1.26.8",
		Settings: []debug.BuildSetting{{Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "amd64"}}}
	checkout := &debug.BuildInfo{Main: debug.Module{Path: "github.com/sglmock/sglmock", Version: "(devel)"}, GoVersion: "go1.26.8",
		Settings: []debug.BuildSetting{{Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "arm64"},
			{Key: "vcs.revision", Value: "4db5e06aaaabbbbccccdddd"}, {Key: "vcs.modified", Value: "true"}}}
	tests := []struct {
		set       string
		bi        *debug.BuildInfo
		want, how string
	}{
		{"v9.9.9", installed, "v9.9.9", "github.com/sglmock/sglmock v0.3.0, go1.26.8 linux/amd64"},
		{"", installed, "v0.3.0", "github.com/sglmock/sglmock v0.3.0, go1.26.8 linux/amd64"},
		{"", checkout, api.SimVersion, "github.com/sglmock/sglmock (devel), commit 4db5e06aaaab (modified), go1.26.8 linux/arm64"},
		{"", nil, api.SimVersion, "no build information"},
	}
	for _, tt := range tests {
		if got := sglmockVersion(tt.set, tt.bi); got != tt.want {
			t.Errorf("sglmockVersion(%q, ...): got %q, want %q", tt.set, got, tt.want)
		}
		if got := buildSummary(tt.bi); got != tt.how {
			t.Errorf("buildSummary: got %q, want %q", got, tt.how)
		}
	}
}

// A profile file with an unknown key is refused with its line and the keys
// it could have been.
func TestProfileKeyError(t *testing.T) {
	file := filepath.Join(t.TempDir(), "mine.yaml")
	os.WriteFile(file, []byte("name: mine\nprefill:\n  overhead_s: 0.01\n  per_tok_s: 1e-5\n"), 0o600)
	var stderr bytes.Buffer
	want := `sglmock profiles: profile "mine": line 4: prefill.per_tok_s: unknown profile key (want one of overhead_s, per_token_s, attention_s, table)` + "\n"
	if code := run([]string{"profiles", file}, io.Discard, &stderr); code != 1 || stderr.String() != want {
		t.Errorf("got exit %d and %q, want 1 and %q", code, stderr.String(), want)
	}
}

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglmock/sglmock/scenarios"
)

// scenarioFile is a quick scenario on the default profile: the naive pair
// at 1024 tokens, poisoned, at a speedup where it takes a few milliseconds.
const scenarioFile = `description: the naive pair, poisoned
profile: default
speedup: 20
steps:
  - name: naive
    twopoint:
      method: naive
      ctx: 1024
    expect:
      - verdict: %s
        cause: leg b reused
`

func writeScenario(t *testing.T, name, level string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(path, []byte(strings.Replace(scenarioFile, "%s", level, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// `scenario list` names every built-in on a line of its own; `scenario
// run` exits 0 when every expectation holds, 1 when one fails, 2 for a
// usage error or a broken file, and prints the tables and outcomes.
func TestScenarioCommand(t *testing.T) {
	holds, fails := writeScenario(t, "holds", "POISONED"), writeScenario(t, "fails", "ok")
	broken := filepath.Join(t.TempDir(), "broken.yaml")
	if err := os.WriteFile(broken, []byte("description: x\nprofile: default\nspeedup: 1\nsteps:\n  - name: a\n    wait: {second: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{[]string{"scenario"}, 2, "", "Usage: sglmock scenario list"},
		{[]string{"scenario", "--help"}, 0, "-speedup", ""},
		{[]string{"scenario", "list", "x"}, 2, "", "takes no arguments"},
		{[]string{"scenario", "format"}, 0, scenarios.Format, ""},
		{[]string{"scenario", "format", "x"}, 2, "", "takes no arguments"},
		{[]string{"scenario", "format", "--help"}, 0, "sglmock scenario format", ""},
		{[]string{"scenario", "play"}, 2, "", `unknown subcommand "play"`},
		{[]string{"scenario", "run"}, 2, "", "which scenario?"},
		{[]string{"scenario", "run", "no-such"}, 2, "", `no built-in scenario "no-such"`},
		{[]string{"scenario", "run", "a", "b"}, 2, "", "one scenario at a time"},
		{[]string{"scenario", "run", "--speedup", "-1", "cache-poisoning"}, 2, "", "--speedup -1"},
		{[]string{"scenario", "run", broken}, 2, "", broken + ":6: steps[0].wait.second: unknown key"},
		{[]string{"scenario", "run", holds}, 0, "  PASS  verdict POISONED, cause \"leg b reused\": POISONED (1024)\n\nscenario holds: PASS, 1 of 1 expectations hold", ""},
		{[]string{"scenario", "run", "--speedup", "10", fails}, 1, "  FAIL  verdict ok, cause \"leg b reused\"", ""},
		{[]string{"scenario", "run", fails, "--speedup", "10"}, 1, "speedup x10", ""},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := run(tt.args, &stdout, &stderr)
		if code != tt.wantCode {
			t.Errorf("run(%q): got exit %d, want %d\nstdout: %s\nstderr: %s", tt.args, code, tt.wantCode, stdout.String(), stderr.String())
		}
		if !strings.Contains(stdout.String(), tt.wantStdout) {
			t.Errorf("run(%q): stdout %q lacks %q", tt.args, stdout.String(), tt.wantStdout)
		}
		if !strings.Contains(stderr.String(), tt.wantStderr) {
			t.Errorf("run(%q): stderr %q lacks %q", tt.args, stderr.String(), tt.wantStderr)
		}
	}

	var stdout, stderr bytes.Buffer
	if code := run([]string{"scenario", "list"}, &stdout, &stderr); code != 0 {
		t.Fatalf("list: exit %d: %s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
	names := scenarios.Names()
	if len(lines) != len(names) {
		t.Fatalf("list: got %d lines, want one for each of %d scenarios:\n%s", len(lines), len(names), stdout.String())
	}
	// The summaries start in one column, past the longest name.
	column := -1
	for i, name := range names {
		sc, err := scenarios.Builtin(name)
		if err != nil {
			t.Fatal(err)
		}
		at := strings.Index(lines[i], "  "+sc.Summary())
		if f := strings.Fields(lines[i]); len(f) < 2 || f[0] != name || at < len(name) || column >= 0 && at != column {
			t.Errorf("list line %d: got %q, want %s and its summary from column %d", i, lines[i], name, column)
		}
		column = at
	}
}

// A restart step in real time: the command restarts its mock on the same
// page directory, a private one it removes afterwards, and the flush method
// finds its prompt in storage again, leg a too.
func TestScenarioRestartKeepsFileStorage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "restart.yaml")
	text := `description: the flush method under HiCache file storage, across a restart
profile: {base: default, hicache: {enable: true, storage_backend: file}}
speedup: 10
steps:
  - name: flush
    twopoint: {method: flush, ctx: 1024, flush: {timeout_s: 60}}
    expect:
      - verdict: POISONED
        cause: leg b reused 1023 of 1024 prompt tokens (cached_tokens) although the flush before it was accepted, all from the storage tier
  - name: restart
    restart: {}
  - name: again
    twopoint: {method: flush, ctx: 1024, flush: {timeout_s: 60}}
    expect:
      - verdict: POISONED
        cause: leg a reused 1023 of 1024
`
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(hicacheDirEnv, "")
	before, _ := filepath.Glob(filepath.Join(os.TempDir(), "sglmock-hicache-*"))
	var stdout, stderr bytes.Buffer
	if code := run([]string{"scenario", "run", path}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "restarted: a new server on the same profile and storage directory") {
		t.Errorf("stdout lacks the restart:\n%s", stdout.String())
	}
	if after, _ := filepath.Glob(filepath.Join(os.TempDir(), "sglmock-hicache-*")); len(after) != len(before) {
		t.Errorf("page directories: %d before, %d after: the run's own was not removed", len(before), len(after))
	}
}

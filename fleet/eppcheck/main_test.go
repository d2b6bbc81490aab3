package main

import (
	"bytes"
	"testing"
)

// Counts that leave a check nothing to count are refused before anything
// is sent: --probes 0 would pass the flush check having probed nothing,
// --chat-sends 0 would crash it.
func TestRunRefusesEmptyChecks(t *testing.T) {
	for _, tt := range []struct {
		flag, value, want string
	}{
		{"--prompts", "0", "eppcheck: --prompts 0: must be at least 1\n"},
		{"--sends", "1", "eppcheck: --sends 1: must be at least 2\n"},
		{"--words", "0", "eppcheck: --words 0: must be at least 1\n"},
		{"--flush-prompts", "0", "eppcheck: --flush-prompts 0: must be at least 1\n"},
		{"--probes", "0", "eppcheck: --probes 0: must be at least 1\n"},
		{"--chat-sends", "0", "eppcheck: --chat-sends 0: must be at least 2\n"},
	} {
		var stdout, stderr bytes.Buffer
		code := run([]string{"--endpoints", "/nonexistent/endpoints.yaml", "--model", "m", tt.flag, tt.value}, &stdout, &stderr)
		if code != 2 || stderr.String() != tt.want {
			t.Errorf("%s %s: exit %d, stderr %q; want 2, %q", tt.flag, tt.value, code, stderr.String(), tt.want)
		}
	}
}

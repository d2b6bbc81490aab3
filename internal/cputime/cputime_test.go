//go:build unix

package cputime

import "testing"

// The process's CPU time is positive and only grows, also across work.
func TestProcessGrows(t *testing.T) {
	before, err := Process()
	if err != nil || before <= 0 {
		t.Fatalf("got %v, %v, want a positive CPU time", before, err)
	}
	x := 0
	for i := range 10_000_000 {
		x ^= i
	}
	after, err := Process()
	if err != nil || after < before {
		t.Fatalf("after work: got %v, %v, want at least %v (%d)", after, err, before, x)
	}
}

// Package norace lets a test that the race detector makes slow, and whose
// subject is not concurrency, skip under -race; CI (.ci/run) runs every
// package that has one again without -race, so each such test still runs
// once (docs/testing.md). It has no dependencies, so any package's tests,
// internal ones included, may use it.
package norace

import "testing"

// Skip skips t under the race detector, saying why: what the test checks
// (long simulated sweeps, real-time loopback runs, a build, pure
// computation), which is not goroutines. A test about goroutines, locks or
// shutdown never calls it.
func Skip(t testing.TB, why string) {
	t.Helper()
	if enabled {
		t.Skipf("%s, not goroutines: it runs without -race (.ci/run)", why)
	}
}

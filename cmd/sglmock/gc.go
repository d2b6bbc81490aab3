package main

import "runtime/debug"

// The server's garbage collector. A mock serving at a benchmark's pace
// allocates fast (every request's body, prompt tokens and answer) while
// what it keeps live is small: a few MB of truth records and open
// requests. At Go's default (GOGC=100) the heap is collected each time it
// doubles from that small base, dozens of times a second, and marking
// costs a fifth of a short request's CPU. serve collects at five times the
// live heap instead (GOGC=400), under a soft memory limit of its own byte
// budgets plus headroom: a server whose budgets fill collects as often as
// it must to stay near them (the runtime gives the collector at most half
// the CPU), instead of growing to twice what they hold as at GOGC=100.
// GOGC and GOMEMLIMIT set in the environment win.

const (
	serveGCPercent = 400
	// gcHeadroom is memory beyond the byte budgets: the radix trees, the
	// KV-event queues, the connections' buffers.
	gcHeadroom = 512 << 20
)

// gcSettings are the collector settings serve runs with; a zero field
// leaves the runtime's (the environment's) setting alone.
type gcSettings struct {
	percent     int
	memoryLimit int64
}

// serveGC returns the settings for a server whose byte budgets (bodies,
// answers and truth records together) are budgets, as getenv reads the
// environment.
func serveGC(budgets int64, getenv func(string) string) gcSettings {
	var s gcSettings
	if getenv("GOGC") == "" {
		s.percent = serveGCPercent
	}
	if getenv("GOMEMLIMIT") == "" {
		s.memoryLimit = budgets + gcHeadroom
	}
	return s
}

// apply sets s and returns a function that restores what was set before.
func (s gcSettings) apply() (restore func()) {
	prevPercent, prevLimit := -2, int64(-1)
	if s.percent != 0 {
		prevPercent = debug.SetGCPercent(s.percent)
	}
	if s.memoryLimit != 0 {
		prevLimit = debug.SetMemoryLimit(s.memoryLimit)
	}
	return func() {
		if prevPercent != -2 {
			debug.SetGCPercent(prevPercent)
		}
		if prevLimit >= 0 {
			debug.SetMemoryLimit(prevLimit)
		}
	}
}

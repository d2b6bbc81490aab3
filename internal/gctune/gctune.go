package gctune

import "runtime/debug"

const (
	// ServerPercent is a server's GOGC.
	ServerPercent = 400
	// Headroom is the memory limit's margin beyond the byte budgets: the
	// radix trees, the KV-event queues, the connections' buffers.
	Headroom = 512 << 20
)

// Settings are collector settings; a zero field leaves the runtime's (the
// environment's) setting alone.
type Settings struct {
	Percent     int
	MemoryLimit int64
}

// ForServer returns the settings for a server whose byte budgets (bodies,
// answers and truth records together) are budgets, as getenv reads the
// environment.
func ForServer(budgets int64, getenv func(string) string) Settings {
	var s Settings
	if getenv("GOGC") == "" {
		s.Percent = ServerPercent
	}
	if getenv("GOMEMLIMIT") == "" {
		s.MemoryLimit = budgets + Headroom
	}
	return s
}

// Apply sets s and returns a function that restores what was set before.
func (s Settings) Apply() (restore func()) {
	prevPercent, prevLimit := -2, int64(-1)
	if s.Percent != 0 {
		prevPercent = debug.SetGCPercent(s.Percent)
	}
	if s.MemoryLimit != 0 {
		prevLimit = debug.SetMemoryLimit(s.MemoryLimit)
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

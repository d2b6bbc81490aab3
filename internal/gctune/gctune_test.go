package gctune

import (
	"runtime/debug"
	"testing"
)

func TestForServer(t *testing.T) {
	env := func(vars map[string]string) func(string) string {
		return func(k string) string { return vars[k] }
	}
	const budgets = 1 << 30
	for _, tc := range []struct {
		name string
		env  map[string]string
		want Settings
	}{
		{"defaults", nil, Settings{Percent: ServerPercent, MemoryLimit: budgets + Headroom}},
		{"GOGC set", map[string]string{"GOGC": "100"}, Settings{MemoryLimit: budgets + Headroom}},
		{"GOMEMLIMIT set", map[string]string{"GOMEMLIMIT": "4GiB"}, Settings{Percent: ServerPercent}},
		{"both set", map[string]string{"GOGC": "off", "GOMEMLIMIT": "4GiB"}, Settings{}},
	} {
		if got := ForServer(budgets, env(tc.env)); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestApplyRestores checks that Apply sets the collector and that
// its restore puts back what was there.
func TestApplyRestores(t *testing.T) {
	beforePercent := debug.SetGCPercent(-1)
	debug.SetGCPercent(beforePercent)
	beforeLimit := debug.SetMemoryLimit(-1) // a negative limit only reads it
	restore := Settings{Percent: 321, MemoryLimit: 3 << 30}.Apply()
	gotPercent := debug.SetGCPercent(beforePercent)
	gotLimit := debug.SetMemoryLimit(-1)
	debug.SetGCPercent(321) // back to what Apply set, for restore to undo
	restore()
	if gotPercent != 321 || gotLimit != 3<<30 {
		t.Errorf("applied: got GOGC %d and limit %d, want 321 and %d", gotPercent, gotLimit, 3<<30)
	}
	if p, l := debug.SetGCPercent(beforePercent), debug.SetMemoryLimit(-1); p != beforePercent || l != beforeLimit {
		t.Errorf("restored: got GOGC %d and limit %d, want %d and %d", p, l, beforePercent, beforeLimit)
	}
	// A zero setting leaves the runtime's alone.
	restore = Settings{}.Apply()
	restore()
	if p, l := debug.SetGCPercent(beforePercent), debug.SetMemoryLimit(-1); p != beforePercent || l != beforeLimit {
		t.Errorf("zero settings: got GOGC %d and limit %d, want %d and %d", p, l, beforePercent, beforeLimit)
	}
}

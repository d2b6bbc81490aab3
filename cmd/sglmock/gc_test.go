package main

import (
	"runtime/debug"
	"testing"
)

func TestServeGC(t *testing.T) {
	env := func(vars map[string]string) func(string) string {
		return func(k string) string { return vars[k] }
	}
	const budgets = 1 << 30
	for _, tc := range []struct {
		name string
		env  map[string]string
		want gcSettings
	}{
		{"defaults", nil, gcSettings{percent: serveGCPercent, memoryLimit: budgets + gcHeadroom}},
		{"GOGC set", map[string]string{"GOGC": "100"}, gcSettings{memoryLimit: budgets + gcHeadroom}},
		{"GOMEMLIMIT set", map[string]string{"GOMEMLIMIT": "4GiB"}, gcSettings{percent: serveGCPercent}},
		{"both set", map[string]string{"GOGC": "off", "GOMEMLIMIT": "4GiB"}, gcSettings{}},
	} {
		if got := serveGC(budgets, env(tc.env)); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestServeGCApplyRestores checks that apply sets the collector and that
// its restore puts back what was there.
func TestServeGCApplyRestores(t *testing.T) {
	beforePercent := debug.SetGCPercent(-1)
	debug.SetGCPercent(beforePercent)
	beforeLimit := debug.SetMemoryLimit(-1) // a negative limit only reads it
	restore := gcSettings{percent: 321, memoryLimit: 3 << 30}.apply()
	gotPercent := debug.SetGCPercent(beforePercent)
	gotLimit := debug.SetMemoryLimit(-1)
	debug.SetGCPercent(321) // back to what apply set, for restore to undo
	restore()
	if gotPercent != 321 || gotLimit != 3<<30 {
		t.Errorf("applied: got GOGC %d and limit %d, want 321 and %d", gotPercent, gotLimit, 3<<30)
	}
	if p, l := debug.SetGCPercent(beforePercent), debug.SetMemoryLimit(-1); p != beforePercent || l != beforeLimit {
		t.Errorf("restored: got GOGC %d and limit %d, want %d and %d", p, l, beforePercent, beforeLimit)
	}
	// A zero setting leaves the runtime's alone.
	restore = gcSettings{}.apply()
	restore()
	if p, l := debug.SetGCPercent(beforePercent), debug.SetMemoryLimit(-1); p != beforePercent || l != beforeLimit {
		t.Errorf("zero settings: got GOGC %d and limit %d, want %d and %d", p, l, beforePercent, beforeLimit)
	}
}

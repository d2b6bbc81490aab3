package engine

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/sglmock/sglmock/mockserver/profile"
)

// The decode line comes every decode-log interval, as SGLang's, but at
// most once per 50 ms of wall time at the engine's speedup: a profile that
// costs nothing writes one line, not one per 40 rounds at the same instant,
// while a real profile's lines are SGLang's.
func TestDecodeLinesAreRateLimited(t *testing.T) {
	for _, tt := range []struct {
		name      string
		zero      bool
		speedup   float64
		wantLines int
	}{
		{"default profile: every 40 rounds of 4 ms", false, 1, 16000 / 40},
		{"zero cost: one line at the one instant", true, 1, 1},
		{"default profile at speedup 10: 50 ms wall is 500 ms modelled", false, 10, 0}, // computed below
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var buf bytes.Buffer
				p := loadProfile(t, "default")
				if tt.zero {
					p.Prefill, p.Decode = profile.PrefillCost{}, profile.DecodeCost{}
				}
				e := startEngine(t, Config{Profile: p, Speedup: tt.speedup, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
				defer e.Close()
				last, _ := run(t, e, Request{InputIDs: prompt(1, 16), MaxNewTokens: 16001})
				synctest.Wait() // the engine has logged the last round and is idle
				lines := strings.Count(buf.String(), "Decode batch")
				want := tt.wantLines
				if tt.speedup == 10 {
					// A line every 40 rounds that are at least 500 ms past
					// the last line: count them from the truth.
					want, lastLine, rounds := 0, -1.0, 0
					for _, r := range last.Truth.Rounds {
						for range r.Count {
							rounds++
							end := (r.Start + r.Duration).Seconds()
							if rounds%40 == 0 && (lastLine < 0 || end-lastLine >= 0.5) {
								want++
								lastLine = end
							}
						}
					}
					if lines != want || want >= 16000/40 {
						t.Fatalf("got %d decode lines, want %d (fewer than %d)", lines, want, 16000/40)
					}
					return
				}
				if lines != want {
					t.Fatalf("got %d decode lines, want %d", lines, want)
				}
			})
		})
	}
}

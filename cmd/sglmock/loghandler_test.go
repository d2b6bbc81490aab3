package main

import (
	"bytes"
	"log/slog"
	"regexp"
	"testing"
	"testing/synctest"

	"github.com/sglmock/sglmock/mockserver/engine"
	"github.com/sglmock/sglmock/mockserver/profile"
)

// A DP rank's scheduler lines carry its rank after the time, as SGLang's
// scheduler processes prefix theirs: " DP1 TP1" under DP attention on
// tp 2, " DP1" alone with one GPU a rank, " TP0" on one rank of tp 2; one
// rank on one GPU carries none.
func TestLogLinesNameTheRank(t *testing.T) {
	for _, tc := range []struct {
		dp, tp    int
		attention bool
		want      string
	}{
		{2, 2, true, `^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d DP1 TP1\] Prefill batch, `},
		{2, 1, false, `^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d DP1\] Prefill batch, `},
		{1, 2, false, `^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d TP0\] Prefill batch, `},
		{1, 1, false, `^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] Prefill batch, `},
	} {
		synctest.Test(t, func(t *testing.T) {
			var out bytes.Buffer
			p, err := profile.Load("default")
			if err != nil {
				t.Fatal(err)
			}
			p.DPSize, p.TPSize, p.EnableDPAttention = tc.dp, tc.tp, tc.attention
			e, err := engine.New(engine.Config{Profile: p, Logger: slog.New(newSGLangHandler(&out, "info"))})
			if err != nil {
				t.Fatal(err)
			}
			r := tc.dp - 1
			st, err := e.Submit(engine.Request{InputIDs: []int32{1100, 1101}, MaxNewTokens: 1, RoutedDPRank: &r})
			if err != nil {
				t.Fatal(err)
			}
			for ev, err := st.Next(t.Context()); ev.Finish == nil; ev, err = st.Next(t.Context()) {
				if err != nil {
					t.Fatal(err)
				}
			}
			e.Close() // the prefill line is written after the batch's events
			if !regexp.MustCompile(tc.want).MatchString(out.String()) {
				t.Fatalf("dp %d tp %d: log %q, want %s", tc.dp, tc.tp, out.String(), tc.want)
			}
		})
	}
}

package mocktest

import (
	"math"
	"testing"

	"github.com/sglmock/sglmock/mockserver/profile"
)

// CheckCosts fails t unless got's prefill and decode costs are want's
// within rel (relative): the five numbers a calibration fits, with
// step_overhead_s and per_seq_s together (one sequence a round cannot
// tell them apart).
func CheckCosts(t testing.TB, got, want *profile.Profile, rel float64) {
	t.Helper()
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"prefill.overhead_s", got.Prefill.OverheadS, want.Prefill.OverheadS},
		{"prefill.per_token_s", got.Prefill.PerTokenS, want.Prefill.PerTokenS},
		{"prefill.attention_s", got.Prefill.AttentionS, want.Prefill.AttentionS},
		{"decode.step_overhead_s + per_seq_s", got.Decode.StepOverheadS + got.Decode.PerSeqS, want.Decode.StepOverheadS + want.Decode.PerSeqS},
		{"decode.per_ctx_token_s", got.Decode.PerCtxTokenS, want.Decode.PerCtxTokenS},
	} {
		if math.Abs(c.got-c.want) > rel*c.want {
			t.Errorf("%s: got %.9g, want %.9g", c.name, c.got, c.want)
		}
	}
}

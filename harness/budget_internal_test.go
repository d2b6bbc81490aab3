package harness

import (
	"fmt"
	"testing"
)

// A figure is ok only when its error bound is within Tolerance: a part
// past it alone that no finding made SUSPECT (the spread of TTFT over
// repeats; the prefill rate's share of a TTFT error of -4.8 %, +5.04 %)
// gets the budget's finding, and one whose own finding says it (context
// growth past 5 %) gets no second one.
func TestErrorBudgetLeavesNoFigureOkPastTolerance(t *testing.T) {
	for _, tt := range []struct {
		name     string
		parts    map[Figure][]ErrorPart
		findings []Cause
		want     map[Figure]Level
		texts    []string
	}{
		{
			name:  "TTFT spread over repeats",
			parts: map[Figure][]ErrorPart{FigureTTFT: {{partSpread, 0.08}}, FigurePrefill: {{partSpread, 0.075}}},
			want:  map[Figure]Level{FigureTTFT: Suspect, FigurePrefill: Suspect, FigureDecode: OK},
			texts: []string{"TTFT (and so the prefill rate) is known to ±8.0 % only, adding up what is known of its error (spread over the runs ±8 %): --repeat 31 narrows the spread over the runs to ±2.5 %"},
		},
		{
			name:  "prefill's share of a TTFT error under 5 %",
			parts: map[Figure][]ErrorPart{FigureTTFT: {{partLateness, -0.048}}, FigurePrefill: {{partLateness, 1/(1-0.048) - 1}}},
			want:  map[Figure]Level{FigureTTFT: OK, FigurePrefill: Suspect, FigureDecode: OK},
			texts: []string{"the prefill rate is known to ±5.0 % only, adding up what is known of its error (lateness +5.0 %): the lateness is the client's"},
		},
		{
			name:     "growth past 5 % with its own finding",
			parts:    map[Figure][]ErrorPart{FigureDecode: {{partGrowth, -0.06}}},
			findings: []Cause{{Suspect, "decode_bias is -6.0 % by construction", decodeOnly}},
			want:     map[Figure]Level{FigureTTFT: OK, FigurePrefill: OK, FigureDecode: Suspect},
			texts:    []string{"decode_bias is -6.0 % by construction"},
		},
		{
			name:  "scatter and growth each within 5 %",
			parts: map[Figure][]ErrorPart{FigureDecode: {{partScatter, 0.044}, {partGrowth, -0.010}}},
			want:  map[Figure]Level{FigureTTFT: OK, FigurePrefill: OK, FigureDecode: Suspect},
			texts: []string{"decode is known to ±5.4 % only, adding up what is known of its error (acceptance scatter ±4.4 %, context growth -1.0 %), each within 5 % alone: --repeat 10 narrows the acceptance scatter to ±2.5 %"},
		},
	} {
		v := Verdict{Causes: tt.findings}
		fv, _ := judgeFigures(&v, errorBudget(tt.parts), budgetFix{n: 3, flag: "--b", speedup: 1})
		for f, want := range tt.want {
			got := fv.Of(f)
			if got.Bound == nil {
				t.Errorf("%s: %s: no bound, want %v", tt.name, f, total(tt.parts[f]))
			} else if got.Level != want || *got.Bound != total(tt.parts[f]) {
				t.Errorf("%s: %s: got %v bound %v, want %v bound %v", tt.name, f, got.Level, *got.Bound, want, total(tt.parts[f]))
			}
		}
		var texts []string
		for _, c := range v.Causes {
			texts = append(texts, c.Text)
		}
		if fmt.Sprint(texts) != fmt.Sprint(tt.texts) {
			t.Errorf("%s: causes\n got %q\nwant %q", tt.name, texts, tt.texts)
		}
	}
}

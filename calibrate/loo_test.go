package calibrate

import (
	"math"
	"slices"
	"testing"
)

// A leg's leave-one-out error is the error of the fit that never saw its
// prompt size: not its time, and not its runs' spread in the noise the
// other legs are weighed by. Each size's error equals what a fit of the
// other rows alone predicts for it, for the formulas (the H200 flush+nonce
// rows, each with the spread of its own decode) and for the tables
// (--table on synthetic rows whose legs each show their noise).
func TestLeaveOneOutIsAFitWithoutTheSize(t *testing.T) {
	for _, tt := range []struct {
		name string
		rows []Row
		opt  Options
	}{
		{"formulas", h200Rows(t, "flush+nonce"), Options{}},
		{"tables", noisyRows(h200Like(t), []int{1024, 2048, 4096, 8192, 16384, 32768}, 3, 0.02, 0.05, 7, false), Options{Table: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			all, err := Fit(tt.rows, h200Base(t), tt.opt)
			if err != nil {
				t.Fatal(err)
			}
			for _, size := range promptSizes(observationsOf(all)) {
				rest := slices.DeleteFunc(slices.Clone(tt.rows), func(r Row) bool { return r.PromptTokens == size })
				without, err := Fit(rest, h200Base(t), tt.opt)
				if err != nil {
					t.Fatal(err)
				}
				if without.PrefillForm != all.PrefillForm || without.DecodeForm != all.DecodeForm {
					t.Fatalf("without %d: %s/%s, want the forms of the whole fit, %s/%s", size, without.PrefillForm, without.DecodeForm, all.PrefillForm, all.DecodeForm)
				}
				for _, l := range all.Legs {
					if l.Prompt != size {
						continue
					}
					// Within a nanosecond, the evaluator's resolution.
					want := legSeconds(without.Profile, l.Prompt, l.Cached, l.Completion)/l.Seconds - 1
					if l.LOO == nil || math.Abs(*l.LOO-want)*l.Seconds > 1e-9 {
						t.Errorf("ctx %d leg %s: leave-one-out %v, want %+.6f %% (a fit without ctx %d)", size, l.Leg, pctOf(l.LOO), 100*want, size)
					}
				}
			}
		})
	}
}

// observationsOf is the legs a result used, as observations (their prompt
// sizes are all the test needs).
func observationsOf(r *Result) []observation {
	var obs []observation
	for _, l := range r.Legs {
		obs = append(obs, observation{prompt: l.Prompt})
	}
	return obs
}

func pctOf(x *float64) string {
	if x == nil {
		return "none"
	}
	return signedPct(*x)
}

// Leave-one-out refits the rest for every size whose legs show their own
// spread; past maxLOOWork legs weighed over all the refits it is not
// known, and the report says why, while a sweep whose rows show no spread
// of their own (their noise pooled from nothing they hold) is still left
// out size by size by subtracting each size's legs.
func TestLeaveOneOutBound(t *testing.T) {
	truth := h200Like(t)
	var prompts []int
	for i := range 3000 {
		prompts = append(prompts, 1024+7*i)
	}
	spread := rowsFrom(truth, prompts, false)
	for i := range spread {
		spread[i].Runs, spread[i].Spread, spread[i].SpreadOf = 3, 0.02, SpreadOfDecode
	}
	res, err := Fit(spread, h200Base(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := "not known: leave-one-out would refit the rest 3000 times over 6000 legs, more than the 16777216 legs it weighs at most"
	if got := res.AccuracyText(); res.Accuracy.Known() || got != want {
		t.Errorf("accuracy %q, want %q", got, want)
	}
	res, err = Fit(rowsFrom(truth, prompts, false), h200Base(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if a := res.Accuracy; a.Sizes != 3000 || a.Max > 1e-6 {
		t.Errorf("no spreads: accuracy %+v, want 3000 sizes, each predicted exactly by the others", a)
	}
}

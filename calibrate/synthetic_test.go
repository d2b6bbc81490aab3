package calibrate

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sglmock/sglmock/harness"
	"github.com/sglmock/sglmock/mockserver/profile"
)

// h200Like is a profile whose costs are those the chunk grid of the H200
// rows measured (testdata/README.md): the truth the synthetic rows come
// from.
func h200Like(t testing.TB) *profile.Profile {
	p := load(t, "default")
	p.ChunkedPrefillSize, p.ContextLength = 16384, 65536
	p.Prefill = profile.PrefillCost{OverheadS: 0.0136, PerTokenS: 2.06e-5, AttentionS: 1.83e-9}
	p.Decode = profile.DecodeCost{StepOverheadS: 0.0155, PerSeqS: 2e-5, PerCtxTokenS: 5e-7}
	return p
}

// noisyRows measures truth at sizes, runs times each, every leg's time
// bent by seeded normal noise of relative standard deviation sdA (leg a)
// and sdB (leg b). asCSV leaves the rows as bench's CSV has them (medians,
// runs, the spread of the decode rate), else as its JSON (every run's legs).
func noisyRows(truth *profile.Profile, sizes []int, runs int, sdA, sdB float64, seed uint64, asCSV bool) []Row {
	rng := rand.New(rand.NewPCG(seed, 25))
	const a, b = 1, 129
	var rows []Row
	for _, n := range sizes {
		ta, tb := legSeconds(truth, n, 0, a), legSeconds(truth, n, 0, b)
		row := Row{CtxReq: n, PromptTokens: n, A: a, B: b, Runs: runs}
		var tas, tbs, decodes []float64
		for range runs {
			x, y := ta*(1+sdA*rng.NormFloat64()), tb*(1+sdB*rng.NormFloat64())
			tas, tbs = append(tas, x), append(tbs, y)
			decodes = append(decodes, float64(b-a)/(y-x))
			row.RunsA, row.RunsB = append(row.RunsA, LegRun{Seconds: x}), append(row.RunsB, LegRun{Seconds: y})
		}
		row.TA, row.TB = harness.Median(tas), harness.Median(tbs)
		if asCSV {
			row.RunsA, row.RunsB = nil, nil
			if runs > 1 {
				lo, hi := math.Inf(1), math.Inf(-1)
				for _, d := range decodes {
					lo, hi = min(lo, d), max(hi, d)
				}
				row.Spread, row.SpreadOf = (hi-lo)/harness.Median(decodes), SpreadOfDecode
			}
		}
		rows = append(rows, row)
	}
	return rows
}

// Rows from a known profile with seeded noise (2 % on leg a, 4 % on leg
// b, one standard deviation; five runs a context, as bench's JSON and as
// its CSV give them): over 60 sweeps the fitted coefficients fall within
// their stated 95 % half-widths of the truth as often as a 95 % interval
// should (93-99 % of the 300), those half-widths are narrow enough to
// mean something, and the formulas are judged within the noise in 57 of
// 60 sweeps or more (99 % is the level).
func TestRecoversCoefficientsWithinTheNoise(t *testing.T) {
	truth := h200Like(t)
	want := []float64{truth.Prefill.OverheadS, truth.Prefill.PerTokenS, truth.Prefill.AttentionS,
		truth.Decode.StepOverheadS + truth.Decode.PerSeqS, truth.Decode.PerCtxTokenS}
	for _, asCSV := range []bool{false, true} {
		const sweeps = 60
		covered, within := 0, 0
		var widths [5]float64
		for seed := range uint64(sweeps) {
			rows := noisyRows(truth, []int{1024, 2048, 4096, 8192, 16384, 32768}, 5, 0.02, 0.04, seed, asCSV)
			res, err := Fit(rows, h200Like(t), Options{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Within() {
				within++
			}
			for j, c := range res.Coefficients {
				widths[j] += c.Half / sweeps
				if math.Abs(c.Value-want[j]) <= c.Half*c.Value {
					covered++
				}
			}
		}
		share := float64(covered) / (5 * sweeps)
		if share < 0.93 || share > 0.99 || within < 57 || slices.Max(widths[:]) > 0.25 {
			t.Errorf("csv %v: %d of %d coefficients within their 95 %% half-widths of the truth (mean half-widths %.3f), "+
				"formulas within the noise in %d of %d sweeps; want 93-99 %%, half-widths under 25 %%, 57 or more",
				asCSV, covered, 5*sweeps, widths, within, sweeps)
		}
	}
}

package calibrate

import (
	"fmt"
	"math"
	"slices"

	"github.com/sglmock/sglmock/mockserver/profile"
)

// Tolerance is the largest relative residual the formulas may leave on any
// leg before the fit switches that part of the model to a table.
const Tolerance = 0.05

// Form says how a part of the cost model is expressed.
type Form string

// The forms of the prefill and decode costs.
const (
	Formula Form = "formula"
	Table   Form = "table"
)

// Result is a fitted profile and how well it reproduces each row.
type Result struct {
	Profile     *profile.Profile
	PrefillForm Form
	DecodeForm  Form
	Rows        []Residual
	// MaxError is the largest relative residual over both legs of every
	// row; above Tolerance no form fitted.
	MaxError float64
}

// Residual is a row with the fitted profile's predictions of its legs.
type Residual struct {
	Row
	TAFit, TBFit float64
}

// ErrA and ErrB are the relative residuals of the legs.
func (r Residual) ErrA() float64 { return r.TAFit/r.TA - 1 }
func (r Residual) ErrB() float64 { return r.TBFit/r.TB - 1 }

// Fit fits the base profile's prefill and decode costs to rows and returns
// the fitted profile, named name. The rows must hold at least three prompt
// sizes: prefill has three coefficients.
func Fit(rows []Row, base *profile.Profile, name string) (*Result, error) {
	if err := base.Validate(); err != nil {
		return nil, err
	}
	if err := check(rows, base.ContextLength); err != nil {
		return nil, err
	}
	sizes := map[int]bool{}
	for _, r := range rows {
		sizes[r.PromptTokens] = true
	}
	if len(sizes) < 3 {
		return nil, fmt.Errorf("%w: %d row(s) at %d prompt size(s); the prefill cost has three coefficients "+
			"(per-chunk overhead, per token, attention), so rows at 3 or more prompt sizes are needed", ErrTooFewRows, len(rows), len(sizes))
	}
	f := fitter{rows: rows, base: base}
	formula := f.formula()
	if formula == nil {
		return nil, fmt.Errorf("%w: the rows do not determine the coefficients (are the prompt sizes too alike?)", ErrTooFewRows)
	}
	var best *Result
	for _, forms := range [][2]Form{{Formula, Formula}, {Formula, Table}, {Table, Formula}, {Table, Table}} {
		p := formula.Clone()
		if forms[0] == Table {
			f.prefillTable(p)
		}
		// The joint fit bent the prefill coefficients towards the decode
		// formula's misfit: with a decode table, fit prefill again against
		// it, and the table against that, until they agree.
		ok := true
		for i := 0; forms[1] == Table && i < 4 && ok; i++ {
			f.decodeTable(p)
			if forms[0] == Table {
				f.prefillTable(p)
			} else {
				ok = f.prefillFormula(p)
			}
		}
		if !ok {
			continue
		}
		if p.Validate() != nil {
			continue
		}
		res := f.evaluate(p, forms)
		if best == nil || res.MaxError < best.MaxError {
			best = res
		}
		if res.MaxError <= Tolerance {
			best = res
			break
		}
	}
	if best == nil {
		return nil, fmt.Errorf("no valid profile fits these rows")
	}
	best.Profile.Name = name
	best.Profile.Description = fmt.Sprintf("fitted by sglmock calibrate to %d rows (base %s): prefill %s, decode %s",
		len(rows), base.Name, best.PrefillForm, best.DecodeForm)
	return best, nil
}

type fitter struct {
	rows []Row
	base *profile.Profile
}

// cachedLen is what leg b reused when b_cached: what the row says it
// reused, else the prompt's reusable prefix under the base profile.
func (f *fitter) cachedLen(r Row) int {
	switch {
	case !r.BCached:
		return 0
	case r.CachedB != nil:
		return *r.CachedB
	}
	return f.base.ReusablePrefixLen(r.PromptTokens)
}

// prefillFeatures are the multipliers of overhead_s, per_token_s and
// attention_s in the prefill of prompt tokens after cached ones.
func (f *fitter) prefillFeatures(prompt, cached int) [3]float64 {
	var x [3]float64
	done := float64(cached)
	for _, m := range f.base.Chunks(prompt - cached) {
		fm := float64(m)
		x[0]++
		x[1] += fm
		x[2] += fm * (done + fm/2)
		done += fm
	}
	return x
}

// unit returns the base with every cost 0 but one decode coefficient 1:
// its expected decode time is that coefficient's multiplier.
func (f *fitter) unit(d profile.DecodeCost) *profile.Profile {
	u := f.base.Clone()
	u.Prefill = profile.PrefillCost{}
	u.Decode = d
	return u
}

// decodeFeatures are the multipliers of the per-round overhead (step
// overhead plus one sequence) and per_ctx_token_s in the expected decode
// time of completion tokens after a prompt.
func (f *fitter) decodeFeatures(prompt, completion int) [2]float64 {
	return [2]float64{
		f.unit(profile.DecodeCost{StepOverheadS: 1}).Expect(prompt, 0, completion).DecodeSeconds,
		f.unit(profile.DecodeCost{PerCtxTokenS: 1}).Expect(prompt, 0, completion).DecodeSeconds,
	}
}

// formula fits the five coefficients by weighted non-negative least
// squares over both legs of every row.
func (f *fitter) formula() *profile.Profile {
	var a [][]float64
	var y []float64
	leg := func(prompt, cached, completion int, t float64) {
		p := f.prefillFeatures(prompt, cached)
		d := f.decodeFeatures(prompt, completion)
		w := 1 / t
		a = append(a, []float64{p[0] * w, p[1] * w, p[2] * w, d[0] * w, d[1] * w})
		y = append(y, 1)
	}
	for _, r := range f.rows {
		leg(r.PromptTokens, 0, r.A, r.TA)
		leg(r.PromptTokens, f.cachedLen(r), r.B, r.TB)
	}
	x := nnls(a, y)
	if x == nil {
		return nil
	}
	p := f.base.Clone()
	p.Prefill = profile.PrefillCost{OverheadS: x[0], PerTokenS: x[1], AttentionS: x[2]}
	// One sequence per round cannot tell step overhead from per-sequence
	// cost: keep the base's per-sequence cost inside the fitted total.
	perSeq := min(f.base.Decode.PerSeqS, x[3])
	p.Decode = profile.DecodeCost{StepOverheadS: x[3] - perSeq, PerSeqS: perSeq, PerCtxTokenS: x[4]}
	return p
}

// prefillFormula fits p's three prefill coefficients to the a legs' times
// less p's decode prediction (nothing when a is 1), leaving the b legs to
// the decode table; it reports false when the rows do not determine them.
func (f *fitter) prefillFormula(p *profile.Profile) bool {
	var a [][]float64
	var y []float64
	leg := func(prompt, cached, completion int, t float64) {
		x := f.prefillFeatures(prompt, cached)
		w := 1 / t
		a = append(a, []float64{x[0] * w, x[1] * w, x[2] * w})
		y = append(y, (t-decodeSeconds(p, prompt, completion))*w)
	}
	for _, r := range f.rows {
		leg(r.PromptTokens, 0, r.A, r.TA)
	}
	x := nnls(a, y)
	if x == nil {
		return false
	}
	p.Prefill = profile.PrefillCost{OverheadS: x[0], PerTokenS: x[1], AttentionS: x[2]}
	return true
}

func legSeconds(p *profile.Profile, prompt, cached, completion int) float64 {
	e := p.Expect(prompt, cached, completion)
	return e.TTFT.Seconds() + e.DecodeSeconds
}

func prefillSeconds(p *profile.Profile, prompt, cached int) float64 {
	return p.Expect(prompt, cached, 0).TTFT.Seconds()
}

func decodeSeconds(p *profile.Profile, prompt, completion int) float64 {
	return p.Expect(prompt, 0, completion).DecodeSeconds
}

func (f *fitter) evaluate(p *profile.Profile, forms [2]Form) *Result {
	res := &Result{Profile: p, PrefillForm: forms[0], DecodeForm: forms[1]}
	for _, r := range f.rows {
		fit := Residual{Row: r,
			TAFit: legSeconds(p, r.PromptTokens, 0, r.A),
			TBFit: legSeconds(p, r.PromptTokens, f.cachedLen(r), r.B)}
		res.Rows = append(res.Rows, fit)
		res.MaxError = max(res.MaxError, math.Abs(fit.ErrA()), math.Abs(fit.ErrB()))
	}
	return res
}

// point is one observation for a table: y at x, with weight.
type point struct{ x, y, w float64 }

// table turns observations into a valid monotone table: equal x are
// averaged, y made non-decreasing and >= 0.
func table(pts []point) profile.Table {
	slices.SortFunc(pts, func(a, b point) int {
		switch {
		case a.x < b.x:
			return -1
		case a.x > b.x:
			return 1
		}
		return 0
	})
	var xs, ys, ws []float64
	for _, p := range pts {
		if n := len(xs); n > 0 && xs[n-1] == p.x {
			ys[n-1] = (ys[n-1]*ws[n-1] + p.y*p.w) / (ws[n-1] + p.w)
			ws[n-1] += p.w
			continue
		}
		xs, ys, ws = append(xs, p.x), append(ys, p.y), append(ws, p.w)
	}
	ys = isotonic(ys, ws)
	t := make(profile.Table, len(xs))
	for i := range xs {
		t[i] = [2]float64{xs[i], max(ys[i], 0)}
	}
	return t
}

// prefillTable replaces p's per-token and attention terms with a table of
// cold-prefill compute time through every cold leg's prompt size, keeping
// the per-chunk overhead and p's decode model.
func (f *fitter) prefillTable(p *profile.Profile) {
	overhead := p.Prefill.OverheadS
	var pts []point
	cold := func(prompt, completion int, t float64) {
		chunks := f.prefillFeatures(prompt, 0)[0]
		pts = append(pts, point{float64(prompt), t - decodeSeconds(p, prompt, completion) - chunks*overhead, 1})
	}
	for _, r := range f.rows {
		cold(r.PromptTokens, r.A, r.TA)
		if !r.BCached {
			cold(r.PromptTokens, r.B, r.TB)
		}
	}
	p.Prefill = profile.PrefillCost{OverheadS: overhead, Table: table(pts)}
}

// decodeObservation is a measured decode time and the rounds it took.
type decodeObservation struct {
	prompt, from, to int // decode from output token from to to
	seconds          float64
}

// decodeTable replaces p's decode cost with a table of per-round cost
// against context through every row's decode time, on top of the base
// profile's step and per-sequence overheads (lowered as far as the
// cheapest round requires), and keeps p's prefill model.
func (f *fitter) decodeTable(p *profile.Profile) {
	var obs []decodeObservation
	for _, r := range f.rows {
		if r.BCached {
			obs = append(obs, decodeObservation{r.PromptTokens, 0, r.B,
				r.TB - prefillSeconds(p, r.PromptTokens, f.cachedLen(r))})
		} else {
			obs = append(obs, decodeObservation{r.PromptTokens, r.A, r.B, r.TB - r.TA})
		}
	}
	factor := 1.0
	if p.Speculative != nil {
		factor = p.Speculative.RoundCostFactor
	}
	rounds := func(o decodeObservation) float64 {
		u := f.unit(profile.DecodeCost{StepOverheadS: 1})
		return (decodeSeconds(u, o.prompt, o.to) - decodeSeconds(u, o.prompt, o.from)) / factor
	}
	measured := func(q *profile.Profile, o decodeObservation) float64 {
		return decodeSeconds(q, o.prompt, o.to) - decodeSeconds(q, o.prompt, o.from)
	}
	perSeq := f.base.Decode.PerSeqS
	overhead := f.base.Decode.StepOverheadS
	perRound := make([]float64, len(obs))
	for i, o := range obs {
		perRound[i] = o.seconds / rounds(o) / factor
		overhead = min(overhead, perRound[i]-perSeq)
	}
	if overhead < 0 {
		perSeq, overhead = max(perSeq+overhead, 0), 0
	}
	pts := make([]point, len(obs))
	for i, o := range obs {
		pts[i] = point{float64(o.prompt) + float64(o.from+o.to)/2, perRound[i] - overhead - perSeq, 1}
	}
	p.Decode = profile.DecodeCost{StepOverheadS: overhead, PerSeqS: perSeq, CtxTable: table(slices.Clone(pts))}
	// The table's points stand for a leg's mean context; the context grows
	// during the leg, so correct each point by what its leg still misses.
	for range 4 {
		for i, o := range obs {
			pts[i].y += (o.seconds - measured(p, o)) / (factor * rounds(o))
		}
		p.Decode.CtxTable = table(slices.Clone(pts))
	}
}

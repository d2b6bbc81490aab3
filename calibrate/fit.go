package calibrate

import (
	"cmp"
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
	// Parameters is the numbers the fitted forms set (three for the
	// prefill formula, two for the decode formula, a table's points) and
	// Legs the distinct legs they were fitted to: with no more legs than
	// parameters the fit passes through every row by construction, and
	// MaxError checks nothing (Exact).
	Parameters, Legs int
}

// Exact tells whether the fit has as many parameters as legs or more: its
// residual is then 0 by construction, not a check of the model.
func (r *Result) Exact() bool { return r.Legs <= r.Parameters }

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
	f := newFitter(rows, base)
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
	// unitStep and unitCtx are the base with every cost 0 but one decode
	// coefficient 1 (unit); decode memoizes their decode times by
	// completion tokens.
	unitStep, unitCtx *profile.Profile
	decode            map[int]unitDecode
}

// unitDecode is a completion's expected decode time under the unit
// profiles: rounds (unitStep's, whatever the prompt) and, under unitCtx,
// slope*prompt + intercept (the context of every round grows with the
// prompt, one for one).
type unitDecode struct{ rounds, slope, intercept float64 }

func newFitter(rows []Row, base *profile.Profile) *fitter {
	f := &fitter{rows: rows, base: base, decode: map[int]unitDecode{}}
	f.unitStep = f.unit(profile.DecodeCost{StepOverheadS: 1})
	f.unitCtx = f.unit(profile.DecodeCost{PerCtxTokenS: 1})
	return f
}

// unitDecodeOf is the memoized unit decode times of a completion.
func (f *fitter) unitDecodeOf(completion int) unitDecode {
	if u, ok := f.decode[completion]; ok {
		return u
	}
	const far = 1 << 20
	at0 := f.unitCtx.Expect(0, 0, completion).DecodeSeconds
	atFar := f.unitCtx.Expect(far, 0, completion).DecodeSeconds
	u := unitDecode{rounds: f.unitStep.Expect(0, 0, completion).DecodeSeconds, slope: (atFar - at0) / far, intercept: at0}
	f.decode[completion] = u
	return u
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
	u := f.unitDecodeOf(completion)
	return [2]float64{u.rounds, u.slope*float64(prompt) + u.intercept}
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
	res := &Result{Profile: p, PrefillForm: forms[0], DecodeForm: forms[1], Parameters: 3 + 2}
	if forms[0] == Table {
		res.Parameters += len(p.Prefill.Table) + 1 - 3 // the points and the per-chunk overhead
	}
	if forms[1] == Table {
		res.Parameters += len(p.Decode.CtxTable) - 2
	}
	legs := map[[3]int]bool{}
	for _, r := range f.rows {
		legs[[3]int{r.PromptTokens, 0, r.A}] = true
		legs[[3]int{r.PromptTokens, f.cachedLen(r), r.B}] = true
	}
	res.Legs = len(legs)
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

// maxTablePoints bounds a fitted table: a sweep measures tens of sizes, and
// a table of a point per row of a large file would make every lookup (a
// scan of the table) and the profile's YAML as large as the file.
const maxTablePoints = 64

// table turns observations into a valid monotone table: equal x are
// averaged, beyond maxTablePoints neighbours are pooled into as many
// groups of equal weight, and y is made non-decreasing and >= 0.
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
	xs, ys, ws = pool(xs, ys, ws, maxTablePoints)
	ys = isotonic(ys, ws)
	t := make(profile.Table, len(xs))
	for i := range xs {
		t[i] = [2]float64{xs[i], max(ys[i], 0)}
	}
	return t
}

// pool merges sorted points into at most n groups of consecutive points of
// about equal weight, each at its weighted mean x and y.
func pool(xs, ys, ws []float64, n int) ([]float64, []float64, []float64) {
	if len(xs) <= n {
		return xs, ys, ws
	}
	total := 0.0
	for _, w := range ws {
		total += w
	}
	var px, py, pw []float64
	sx, sy, sw, before := 0.0, 0.0, 0.0, 0.0
	for i := range xs {
		sx, sy, sw = sx+xs[i]*ws[i], sy+ys[i]*ws[i], sw+ws[i]
		// A group closes once the weight so far reaches its share.
		if i == len(xs)-1 || before+sw >= total*float64(len(pw)+1)/float64(n) {
			px, py, pw = append(px, sx/sw), append(py, sy/sw), append(pw, sw)
			before += sw
			sx, sy, sw = 0, 0, 0
		}
	}
	return px, py, pw
}

// prefillTable replaces p's per-token and attention terms with a table of
// cold-prefill compute time through every cold leg's prompt size, keeping
// the per-chunk overhead and p's decode model.
func (f *fitter) prefillTable(p *profile.Profile) {
	overhead := p.Prefill.OverheadS
	var legs []observation
	for _, r := range f.rows {
		legs = append(legs, observation{prompt: r.PromptTokens, to: r.A, seconds: r.TA, weight: 1})
		if !r.BCached {
			legs = append(legs, observation{prompt: r.PromptTokens, to: r.B, seconds: r.TB, weight: 1})
		}
	}
	var pts []point
	for _, o := range aggregate(legs) {
		chunks := f.prefillFeatures(o.prompt, 0)[0]
		pts = append(pts, point{float64(o.prompt), o.seconds - decodeSeconds(p, o.prompt, o.to) - chunks*overhead, o.weight})
	}
	p.Prefill = profile.PrefillCost{OverheadS: overhead, Table: table(pts)}
}

// observation is a measured time of legs alike: decode from output token
// from to to after a prompt (the whole leg, for prefill), the mean seconds
// of weight legs.
type observation struct {
	prompt, from, to int
	seconds, weight  float64
}

// maxObservations bounds what the tables are fitted through: the legs of
// a large file are pooled into as many groups of neighbours (a table keeps
// at most maxTablePoints points), so the fit's cost does not grow with the
// legs' number beyond reading them.
const maxObservations = 1024

// aggregate merges legs of the same prompt and outputs into one of their
// mean time, and pools neighbours (by outputs, then prompt) beyond
// maxObservations, each group at its weighted mean prompt and time.
func aggregate(legs []observation) []observation {
	slices.SortFunc(legs, func(a, b observation) int {
		return cmp.Or(cmp.Compare(a.from, b.from), cmp.Compare(a.to, b.to), cmp.Compare(a.prompt, b.prompt))
	})
	var out []observation
	for _, o := range legs {
		if n := len(out); n > 0 && out[n-1].prompt == o.prompt && out[n-1].from == o.from && out[n-1].to == o.to {
			last := &out[n-1]
			last.seconds = (last.seconds*last.weight + o.seconds*o.weight) / (last.weight + o.weight)
			last.weight += o.weight
			continue
		}
		out = append(out, o)
	}
	if len(out) <= maxObservations {
		return out
	}
	group := (len(out) + maxObservations - 1) / maxObservations
	var pooled []observation
	var prompt, secs, weight float64
	for i, o := range out {
		prompt, secs, weight = prompt+float64(o.prompt)*o.weight, secs+o.seconds*o.weight, weight+o.weight
		last := i == len(out)-1 || out[i+1].from != o.from || out[i+1].to != o.to
		if last || (i+1)%group == 0 {
			pooled = append(pooled, observation{prompt: int(math.Round(prompt / weight)), from: o.from, to: o.to, seconds: secs / weight, weight: weight})
			prompt, secs, weight = 0, 0, 0
		}
	}
	return pooled
}

// decodeTable replaces p's decode cost with a table of per-round cost
// against context through every row's decode time, on top of the base
// profile's step and per-sequence overheads (lowered as far as the
// cheapest round requires), and keeps p's prefill model.
func (f *fitter) decodeTable(p *profile.Profile) {
	var legs []observation
	for _, r := range f.rows {
		if r.BCached {
			legs = append(legs, observation{r.PromptTokens, 0, r.B,
				r.TB - prefillSeconds(p, r.PromptTokens, f.cachedLen(r)), 1})
		} else {
			legs = append(legs, observation{r.PromptTokens, r.A, r.B, r.TB - r.TA, 1})
		}
	}
	obs := aggregate(legs)
	factor := 1.0
	if p.Speculative != nil {
		factor = p.Speculative.RoundCostFactor
	}
	rounds := func(o observation) float64 {
		return (f.unitDecodeOf(o.to).rounds - f.unitDecodeOf(o.from).rounds) / factor
	}
	measured := func(q *profile.Profile, o observation) float64 {
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
		pts[i] = point{float64(o.prompt) + float64(o.from+o.to)/2, perRound[i] - overhead - perSeq, o.weight}
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

package calibrate

import (
	"fmt"
	"math"
	"slices"

	"github.com/sglmock/sglmock/mockserver/profile"
)

// Tolerance is the resolution calibrate aims at, bench's own: a kind of
// leg whose noise no row measured is taken as known to ±Tolerance (95 %),
// and a prediction less certain than that names what to measure next.
const Tolerance = 0.05

// Confidence is the level at which the formulas are judged against the
// rows' noise: they are kept unless their residuals' χ² passes this
// quantile of the χ² distribution for their degrees of freedom, a misfit
// noise alone would leave once in a hundred sweeps.
const Confidence = 0.99

// Form says how a part of the cost model is expressed.
type Form string

// The forms of the prefill and decode costs.
const (
	Formula Form = "formula"
	Table   Form = "table"
)

// Options are what a fit is asked besides the rows.
type Options struct {
	// Name is the fitted profile's name.
	Name string
	// Table fits both costs as tables through the rows' points even where
	// the formulas are within the rows' noise, and even with as many
	// parameters as legs, when the profile passes through every row and
	// only its leave-one-out errors say how it predicts.
	Table bool
	// Predict lists prompt sizes the profile is to predict: the report
	// gives each one's predicted times, how sure they are, and how far
	// past the measured prompts it lies. Nil: the longest prompt the base
	// profile takes.
	Predict []int
}

// Result is a fitted profile and what the rows say of it.
type Result struct {
	Profile     *profile.Profile
	PrefillForm Form
	DecodeForm  Form
	// Rows are every row read, with what the fit took of each.
	Rows []RowUse
	// Legs are the legs the fit used, row by row.
	Legs []LegFit
	// Noise is what the legs' spreads say of their noise, by kind.
	Noise [2]NoiseKind
	// ChiSquare is Σ (residual / standard error)² over the legs, DoF the
	// legs less the parameters, and Limit the Confidence quantile of a χ²
	// of DoF degrees of freedom: the forms are within the rows' noise when
	// ChiSquare <= Limit (Within). With DoF 0 nothing is left to judge.
	ChiSquare, Limit float64
	DoF              int
	// Parameters is the numbers the fitted forms set (three for the
	// prefill formula, two for the decode formula, a table's points) and
	// Distinct the legs that measure different things: with no more legs
	// than parameters the fit passes through every row by construction
	// (Exact).
	Parameters, Distinct int
	// Coefficients are the formulas' coefficients with their 95 %
	// half-widths; nil for a part fitted as a table.
	Coefficients []Coefficient
	// Accuracy is what leaving each prompt size out says of predicting
	// one the fit has not seen.
	Accuracy Accuracy
	// MinPrompt and MaxPrompt bound the prompt sizes measured.
	MinPrompt, MaxPrompt int
	// Predictions are the times predicted at Options.Predict.
	Predictions []Prediction
	// Next says what to measure next: the rows that would determine what
	// the rows leave uncertain.
	Next []string
	// AlsoTried is the forms the rows' misfit made the fit try, with their
	// χ², when the formulas were not within the noise.
	AlsoTried []Tried

	cov    [][]float64 // the formulas' covariance on active, scaled
	active []int
}

// Tried is a form the fit tried besides the formulas.
type Tried struct {
	Prefill, Decode  Form
	Parameters, DoF  int
	ChiSquare, Limit float64
	// Allowed says it has fewer parameters than the rows distinct legs.
	Allowed bool
	// Gain is how much less its χ² is than the formulas', GainLimit what
	// its extra parameters would take from noise alone (the Confidence
	// quantile of a χ² of as many degrees of freedom).
	Gain, GainLimit float64
}

// Within tells whether the forms' residuals are within what the rows'
// noise explains (or nothing is left to judge them by).
func (r *Result) Within() bool { return r.DoF <= 0 || r.ChiSquare <= r.Limit }

// Exact tells whether the fit has as many parameters as distinct legs or
// more: its residual is then 0 by construction, not a check of the model.
func (r *Result) Exact() bool { return r.Distinct <= r.Parameters }

// LegFit is one leg the fit used.
type LegFit struct {
	Row                        int    // its row's index in Result.Rows
	Leg                        string // "a" or "b"
	Prompt, Cached, Completion int
	// Seconds is the measured time (the median of Runs runs), Fit the
	// fitted profile's prediction.
	Seconds, Fit float64
	Runs         int
	// Noise is the relative 95 % half-width of Seconds the leg is judged
	// by; NoiseAssumed says no leg of its kind measured it.
	Noise        float64
	NoiseAssumed bool
	// LOO is the relative error of its prediction by a fit without every
	// row at its prompt size; nil when the other rows cannot determine one.
	LOO *float64
}

// Err is the leg's relative residual.
func (l LegFit) Err() float64 { return l.Fit/l.Seconds - 1 }

// Coefficient is a fitted coefficient of a formula.
type Coefficient struct {
	Name  string
	Value float64
	// Half is its relative 95 % half-width; Held says the non-negative fit
	// held it at 0, where the rows put no uncertainty on it.
	Half float64
	Held bool
}

// Fit fits the base profile's prefill and decode costs to rows. Every leg
// is weighed by its own noise, and the formulas are kept unless their
// residuals are more than that noise explains; then the part that misfits
// becomes a table, when the rows have more legs than the table would have
// parameters. The rows must hold at least three prompt sizes: the prefill
// has three coefficients.
func Fit(rows []Row, base *profile.Profile, opt Options) (*Result, error) {
	if err := base.Validate(); err != nil {
		return nil, err
	}
	f := newFitter(base)
	obs, uses, err := f.observe(rows)
	if err != nil {
		return nil, err
	}
	sizes := promptSizes(obs)
	if len(sizes) < 3 {
		return nil, fmt.Errorf("%w: %d usable leg(s) at %d prompt size(s); the prefill cost has three coefficients "+
			"(per-chunk overhead, per token, attention), so rows at 3 or more prompt sizes are needed", ErrTooFewRows, len(obs), len(sizes))
	}
	res := &Result{Rows: uses, Distinct: distinctLegs(obs), MinPrompt: sizes[0], MaxPrompt: sizes[len(sizes)-1]}
	if _, b := res.legsAt(); opt.Predict != nil {
		if err := f.checkPredict(opt.Predict, b); err != nil {
			return nil, err
		}
	}
	res.Noise = assignNoise(obs)
	formula := f.fitForms(obs, [2]Form{Formula, Formula})
	if formula == nil {
		cold := map[int]bool{}
		for _, o := range obs {
			if o.cached == 0 {
				cold[o.prompt] = true
			}
		}
		if len(cold) < 3 {
			return nil, fmt.Errorf("%w: cold prefills at %d prompt size(s); the prefill's three coefficients need 3 or more "+
				"(a leg served from the cache measures the prefill of what it did not reuse, not of a whole prompt)", ErrTooFewRows, len(cold))
		}
		return nil, fmt.Errorf("%w: the legs do not tell the five coefficients apart (are the prompt sizes too alike?)", ErrTooFewRows)
	}
	chosen := formula
	if opt.Table {
		if c := f.fitForms(obs, [2]Form{Table, Table}); c != nil {
			chosen = c
		}
	} else if !formula.within() {
		chosen = f.choose(obs, formula, res)
	}
	p := chosen.profile
	res.Profile, res.PrefillForm, res.DecodeForm = p, chosen.forms[0], chosen.forms[1]
	res.ChiSquare, res.Limit, res.DoF, res.Parameters = chosen.chi2, chosen.limit, chosen.dof, chosen.params
	for _, o := range obs {
		res.Legs = append(res.Legs, LegFit{Row: o.row, Leg: o.leg, Prompt: o.prompt, Cached: o.cached, Completion: o.completion,
			Seconds: o.seconds, Fit: legSeconds(p, o.prompt, o.cached, o.completion), Runs: o.runs,
			Noise: z95 * o.sigma / o.seconds, NoiseAssumed: o.assumed})
	}
	if chosen.forms == [2]Form{Formula, Formula} {
		f.coefficients(res, obs, chosen)
	}
	f.leaveOneOut(res, obs, chosen)
	f.predict(res, opt.Predict)
	f.next(res, obs)
	name := opt.Name
	if name == "" {
		name = "calibrated"
	}
	p.Name = name
	p.Description = fmt.Sprintf("fitted by sglmock calibrate to %d rows (base %s): prefill %s, decode %s",
		len(rows)-res.dropped(), base.Name, res.PrefillForm, res.DecodeForm)
	p.Calibration = &profile.Calibration{MinPromptTokens: res.MinPrompt, MaxPromptTokens: res.MaxPrompt}
	if res.Accuracy.Known() {
		// Rounded up: the stated accuracy never claims more than was seen.
		p.Calibration.Accuracy = math.Ceil(res.Accuracy.Max*1e4) / 1e4
	}
	return res, nil
}

// dropped counts the rows left out whole.
func (r *Result) dropped() int {
	n := 0
	for _, u := range r.Rows {
		if u.Dropped != "" {
			n++
		}
	}
	return n
}

// candidate is a fitted profile in given forms and how it fits the legs.
type candidate struct {
	profile     *profile.Profile
	forms       [2]Form
	params, dof int
	chi2, limit float64
	theta       []float64 // the formulas' five coefficients, for Formula/Formula
}

// within tells whether the candidate's residuals are within the noise.
func (c *candidate) within() bool { return c.dof <= 0 || c.chi2 <= c.limit }

// choose picks the forms when the formulas are outside the rows' noise.
// A table is a candidate when the rows have more distinct legs than it has
// parameters, and when it takes more from the formulas' χ² than its extra
// parameters would take from noise alone (a likelihood-ratio test at
// Confidence: a table bends to anything, so it must earn its points).
// Among the candidates, the one with the fewest parameters that is within
// the noise wins; when none is, the closest to it; when no table is a
// candidate, the formulas stay.
func (f *fitter) choose(obs []observation, formula *candidate, res *Result) *candidate {
	best := formula
	ratio := func(c *candidate) float64 { return c.chi2 / c.limit }
	var better []*candidate
	for _, forms := range [][2]Form{{Formula, Table}, {Table, Formula}, {Table, Table}} {
		c := f.fitForms(obs, forms)
		if c == nil {
			continue
		}
		t := Tried{Prefill: forms[0], Decode: forms[1], Parameters: c.params, DoF: c.dof, ChiSquare: c.chi2, Limit: c.limit,
			Allowed: c.params < res.Distinct, Gain: formula.chi2 - c.chi2}
		if extra := c.params - formula.params; extra > 0 {
			t.GainLimit = chiSquareQuantile(Confidence, extra)
		}
		res.AlsoTried = append(res.AlsoTried, t)
		if t.Allowed && t.Gain > t.GainLimit {
			better = append(better, c)
		}
	}
	slices.SortStableFunc(better, func(a, b *candidate) int { return a.params - b.params })
	for _, c := range better {
		if c.within() {
			return c
		}
		if ratio(c) < ratio(best) {
			best = c
		}
	}
	return best
}

// fitForms fits the legs in the given forms; nil when the legs do not
// determine them.
func (f *fitter) fitForms(obs []observation, forms [2]Form) *candidate {
	theta := f.formula(obs)
	if theta == nil {
		return nil
	}
	p := f.profileOf(theta)
	if forms[0] == Table {
		f.prefillTable(p, obs)
	}
	// The joint fit bent the prefill coefficients towards the decode
	// formula's misfit: with a decode table, fit prefill again against
	// it, and the table against that, until they agree.
	for i := 0; forms[1] == Table && i < 4; i++ {
		f.decodeTable(p, obs)
		if forms[0] == Table {
			f.prefillTable(p, obs)
		} else if !f.prefillFormula(p, obs) {
			return nil
		}
	}
	if p.Validate() != nil {
		return nil
	}
	c := &candidate{profile: p, forms: forms, params: 5}
	if forms == [2]Form{Formula, Formula} {
		c.theta = theta
	}
	if forms[0] == Table {
		c.params += len(p.Prefill.Table) + 1 - 3 // the points and the per-chunk overhead
	}
	if forms[1] == Table {
		c.params += len(p.Decode.CtxTable) - 2
	}
	for _, o := range obs {
		r := (legSeconds(p, o.prompt, o.cached, o.completion) - o.seconds) / o.sigma
		c.chi2 += r * r
	}
	c.dof = len(obs) - c.params
	if c.dof > 0 {
		c.limit = chiSquareQuantile(Confidence, c.dof)
	}
	return c
}

type fitter struct {
	base *profile.Profile
	// unitStep and unitCtx are the base with every cost 0 but one decode
	// coefficient 1 (unit); decode memoizes their decode times by
	// completion tokens.
	unitStep, unitCtx *profile.Profile
	decode            map[int]unitDecode
	// d2 memoizes expectedRange by runs.
	d2 map[int]float64
}

// unitDecode is a completion's expected decode time under the unit
// profiles: rounds (unitStep's, whatever the prompt) and, under unitCtx,
// slope*prompt + intercept (the context of every round grows with the
// prompt, one for one).
type unitDecode struct{ rounds, slope, intercept float64 }

func newFitter(base *profile.Profile) *fitter {
	f := &fitter{base: base, decode: map[int]unitDecode{}, d2: map[int]float64{}}
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

// coefficientNames name the formulas' five coefficients in the order of
// features: the per-round one is step_overhead_s and per_seq_s together.
var coefficientNames = [5]string{"overhead_s", "per_token_s", "attention_s", "step_overhead_s+per_seq_s", "per_ctx_token_s"}

// features are a leg's multipliers of the five coefficients.
func (f *fitter) features(o observation) []float64 {
	p := f.prefillFeatures(o.prompt, o.cached)
	d := f.decodeFeatures(o.prompt, o.completion)
	return []float64{p[0], p[1], p[2], d[0], d[1]}
}

// gramOf is the normal equations of the legs' formula fit, each leg
// weighed by its standard error.
func (f *fitter) gramOf(obs []observation) *gram {
	g := newGram(5)
	x := make([]float64, 5)
	for _, o := range obs {
		for j, v := range f.features(o) {
			x[j] = v / o.sigma
		}
		g.add(x, o.seconds/o.sigma)
	}
	return g
}

// formula fits the five coefficients by weighted non-negative least
// squares over every leg; nil when the legs do not determine them (tell
// the five apart: a fit on fewer columns would pass for one).
func (f *fitter) formula(obs []observation) []float64 {
	g := f.gramOf(obs)
	if g.solve([]int{0, 1, 2, 3, 4}) == nil {
		return nil
	}
	return g.nonNegative()
}

// profileOf is the base with the formulas' five coefficients.
func (f *fitter) profileOf(x []float64) *profile.Profile {
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
// the decode table; it reports false when the legs do not determine them.
func (f *fitter) prefillFormula(p *profile.Profile, obs []observation) bool {
	g := newGram(3)
	for _, o := range obs {
		if o.leg != "a" {
			continue
		}
		x := f.prefillFeatures(o.prompt, o.cached)
		g.add([]float64{x[0] / o.sigma, x[1] / o.sigma, x[2] / o.sigma}, (o.seconds-decodeSeconds(p, o.prompt, o.completion))/o.sigma)
	}
	x := g.nonNegative()
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

// coefficients fills the formulas' coefficients and their covariance: the
// inverse of the normal equations on the coefficients the fit did not
// hold at 0, scaled up by χ²/DoF when the residuals are larger than the
// noise says (they then measure the noise better than the spreads).
func (f *fitter) coefficients(res *Result, obs []observation, c *candidate) {
	g := f.gramOf(obs)
	for j, v := range c.theta {
		if v > 0 {
			res.active = append(res.active, j)
		}
	}
	res.cov = scaleCovariance(g.covariance(res.active), c)
	f.contributions(res, obs, g, c)
	for j, name := range coefficientNames {
		co := Coefficient{Name: name, Value: c.theta[j], Held: c.theta[j] == 0}
		if n := slices.Index(res.active, j); n >= 0 && res.cov != nil {
			co.Half = z95 * math.Sqrt(res.cov[n][n]) / c.theta[j]
		}
		res.Coefficients = append(res.Coefficients, co)
	}
}

// scaleCovariance scales a covariance by χ²/DoF when the residuals are
// larger than the noise says: they then measure the noise better than
// the spreads do.
func scaleCovariance(cov [][]float64, c *candidate) [][]float64 {
	if cov != nil && c.dof > 0 && c.chi2 > float64(c.dof) {
		for _, row := range cov {
			for q := range row {
				row[q] *= c.chi2 / float64(c.dof)
			}
		}
	}
	return cov
}

// minContribution is the growth of a coefficient's uncertainty without a
// row below which the report does not name the row's contribution.
const minContribution = 1.1

// contributions finds, for each row, the coefficient whose uncertainty
// grows most without it: the covariance of the normal equations less the
// row's legs.
func (f *fitter) contributions(res *Result, obs []observation, g *gram, c *candidate) {
	if res.cov == nil {
		return
	}
	byRow := map[int][]observation{}
	for _, o := range obs {
		byRow[o.row] = append(byRow[o.row], o)
	}
	for i := range res.Rows {
		legs := byRow[i]
		if len(legs) == 0 {
			continue
		}
		without := scaleCovariance(g.minus(f.gramOf(legs)).covariance(res.active), c)
		if without == nil {
			res.Rows[i].Informs = &Contribution{Without: math.Inf(1)}
			continue
		}
		var best *Contribution
		growth := 0.0
		for n, j := range res.active {
			if r := math.Sqrt(without[n][n] / res.cov[n][n]); r >= minContribution && r > growth {
				growth = r
				best = &Contribution{Coefficient: coefficientNames[j],
					With: z95 * math.Sqrt(res.cov[n][n]) / c.theta[j], Without: z95 * math.Sqrt(without[n][n]) / c.theta[j]}
			}
		}
		res.Rows[i].Informs = best
	}
}

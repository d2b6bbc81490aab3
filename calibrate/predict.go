package calibrate

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/sglmock/sglmock/harness"
)

// Prediction is the fitted profile's times at a prompt size, with legs
// like the rows' (the a and b of the row at the largest prompt).
type Prediction struct {
	Prompt, A, B int
	TA, TB       float64
	// HalfA and HalfB are the relative 95 % half-widths the formulas'
	// covariance puts on TA and TB, and Term the coefficient that
	// contributes most to them; 0 and "" for a table, whose uncertainty
	// the rows do not say.
	HalfA, HalfB float64
	Term         string
	// Beyond is Prompt over the largest prompt measured when Prompt is
	// larger (an extrapolation), else 0.
	Beyond float64
}

// longestPrompt is the longest prompt a server of the base profile takes
// with b tokens to generate: SGLang refuses a prompt of context_length - 6
// tokens or more, and one whose prompt and output pass the context length.
func (f *fitter) longestPrompt(b int) int {
	return min(f.base.ContextLength-7, f.base.ContextLength-b)
}

// legsAt is the a and b of the used row at the largest prompt.
func (r *Result) legsAt() (a, b int) {
	prompt := 0
	for _, u := range r.Rows {
		if u.Dropped == "" && u.PromptTokens >= prompt {
			prompt, a, b = u.PromptTokens, u.Row.A, u.Row.B
		}
	}
	return a, b
}

// checkPredict refuses prompt sizes to predict that the base profile does
// not take.
func (f *fitter) checkPredict(sizes []int, b int) error {
	longest := f.longestPrompt(b)
	for _, n := range sizes {
		if n < 2 || n > longest {
			return badInput("predict %d: the base profile %s takes prompts of 2..%d tokens with b = %d (context_length %d)",
				n, f.base.Name, longest, b, f.base.ContextLength)
		}
	}
	return nil
}

// predict fills the predictions at sizes (default: the longest prompt the
// base takes, when it is past the largest measured).
func (f *fitter) predict(res *Result, sizes []int) {
	a, b := res.legsAt()
	if sizes == nil {
		if longest := f.longestPrompt(b); longest > res.MaxPrompt {
			sizes = []int{longest}
		}
	}
	for _, n := range sizes {
		pr := Prediction{Prompt: n, A: a, B: b, TA: legSeconds(res.Profile, n, 0, a), TB: legSeconds(res.Profile, n, 0, b)}
		if n > res.MaxPrompt {
			pr.Beyond = float64(n) / float64(res.MaxPrompt)
		}
		if res.cov != nil {
			var termA, termB float64
			pr.HalfA, termA, pr.Term = res.half(f.features(observation{prompt: n, completion: a}), pr.TA)
			var tb string
			pr.HalfB, termB, tb = res.half(f.features(observation{prompt: n, completion: b}), pr.TB)
			if termB > termA {
				pr.Term = tb
			}
		}
		res.Predictions = append(res.Predictions, pr)
	}
}

// half is the relative 95 % half-width the formulas' covariance puts on a
// prediction t with features x, the share of its variance the largest
// term alone gives, and that term's coefficient.
func (r *Result) half(x []float64, t float64) (half, share float64, term string) {
	v := 0.0
	for p, i := range r.active {
		for q, j := range r.active {
			v += x[i] * x[j] * r.cov[p][q]
		}
	}
	biggest := 0.0
	for p, i := range r.active {
		if c := x[i] * x[i] * r.cov[p][p]; c > biggest {
			biggest, term = c, coefficientNames[i]
		}
	}
	return z95 * math.Sqrt(max(v, 0)) / t, z95 * math.Sqrt(biggest) / t, term
}

// next says what to measure next: prompt sizes for a leave-one-out check
// the rows are too few for, the context that determines a prediction
// past the measured range, a cached prefill for the per-chunk overhead,
// and the repeats that narrow a noisy decode.
func (f *fitter) next(res *Result, obs []observation) {
	sizes := promptSizes(obs)
	var beyond []Prediction
	for _, pr := range res.Predictions {
		if pr.Beyond > 0 {
			beyond = append(beyond, pr)
		}
	}
	slices.SortFunc(beyond, func(x, y Prediction) int { return y.Prompt - x.Prompt })
	need := res.Accuracy.Need
	looNote := fmt.Sprintf("leave-one-out needs rows at %d prompt sizes or more (%d fit the prefill, 1 is predicted) to say how well the profile predicts a context it was not fitted to",
		minSizes+1, minSizes)
	if len(beyond) > 0 {
		pr := beyond[0]
		var text string
		switch {
		case res.cov != nil && max(pr.HalfA, pr.HalfB) > Tolerance:
			text = fmt.Sprintf("ctx %d, the largest to predict: predicted to ±%s (t_a) and ±%s (t_b) only, mostly from %s, "+
				"%.1fx past the largest prompt measured (%d)%s: a row there determines it",
				pr.Prompt, pctPlain(pr.HalfA), pctPlain(pr.HalfB), pr.Term, pr.Beyond, res.MaxPrompt, extrapolationWhy[pr.Term])
		case res.cov == nil:
			text = fmt.Sprintf("ctx %d, the largest to predict: the tables extend their last segment %.1fx past the largest prompt measured (%d): a row there measures it",
				pr.Prompt, pr.Beyond, res.MaxPrompt)
		}
		if text != "" {
			if need > 0 {
				text += "; and " + looNote
				need--
			}
			res.Next = append(res.Next, text)
		}
	}
	if need > 0 {
		var ctxs []string
		for _, n := range suggestSizes(sizes, nil, need) {
			ctxs = append(ctxs, fmt.Sprint(n))
		}
		res.Next = append(res.Next, fmt.Sprintf("ctx %s: %s", strings.Join(ctxs, ", "), looNote))
	}
	if !res.Within() {
		var legs []string
		for _, l := range res.Outside(3) {
			legs = append(legs, fmt.Sprintf("%s leg %s (%s)", res.Rows[l.Row].label(l.Row), l.Leg, signedPct(l.Err())))
		}
		res.Next = append(res.Next, fmt.Sprintf("%s: off by more than the rows' noise explains; measure again with more runs (--repeat), "+
			"in one sweep with the other rows, to tell a misfit of the formulas from a machine that ran at another speed for a while",
			strings.Join(legs, ", ")))
	}
	f.nextOverhead(res, obs)
	f.nextRepeats(res)
}

// extrapolationWhy says why a term's uncertainty grows past the measured
// prompts.
var extrapolationWhy = map[string]string{
	"attention_s":     ", where the quadratic term's error grows with the square of the context",
	"per_token_s":     ", where the per-token term's error grows with the context",
	"per_ctx_token_s": ", where decode's per-context term's error grows with the context",
}

// suggestSizes picks need prompt sizes to measure: the largest to predict
// past the measured ones first, then the middle (geometric) of the widest
// gap between sizes measured or picked.
func suggestSizes(sizes []int, beyond []Prediction, need int) []int {
	have := slices.Clone(sizes)
	var out []int
	for len(out) < need {
		var n int
		if len(out) == 0 && len(beyond) > 0 {
			n = beyond[0].Prompt
		} else {
			slices.Sort(have)
			widest := 1
			for i := 2; i < len(have); i++ {
				if float64(have[i])/float64(have[i-1]) > float64(have[widest])/float64(have[widest-1]) {
					widest = i
				}
			}
			n = int(math.Round(math.Sqrt(float64(have[widest]) * float64(have[widest-1]))))
		}
		out, have = append(out, n), append(have, n)
	}
	return out
}

// nextOverhead names a cached prefill when the per-chunk overhead is
// uncertain enough to move the shortest prompt's prefill by more than
// Tolerance: a leg that prefills one token after the cached rest costs
// little else.
func (f *fitter) nextOverhead(res *Result, obs []observation) {
	n := slices.Index(res.active, 0)
	if res.cov == nil || n < 0 {
		return
	}
	shortest := res.MinPrompt
	chunks := f.prefillFeatures(shortest, 0)[0]
	t := prefillSeconds(res.Profile, shortest, 0)
	half := z95 * math.Sqrt(res.cov[n][n]) * chunks / t
	if half <= Tolerance {
		return
	}
	text := fmt.Sprintf("the per-chunk overhead (overhead_s ±%s) moves the prefill of %d tokens by ±%s: ",
		pctPlain(res.Coefficients[0].Half), shortest, pctPlain(half))
	cachedAlone := slices.ContainsFunc(obs, func(o observation) bool { return o.cached > 0 && !o.decodes() })
	if cachedAlone {
		text += "more runs of the legs that prefill after a cached prefix narrow it (--repeat)"
	} else {
		text += "a prefill of one token after the cached rest costs about that overhead alone; " +
			"bench twopoint --method naive --repeat 2 --json measures one (the second run's leg a), and calibrate --json reads it"
	}
	res.Next = append(res.Next, text)
}

// nextRepeats names the rows whose runs leave their decode known to
// worse than ±Tolerance (95 %), with the runs that would know it to
// ±Tolerance/2, as bench's spread check does: from every run's decode rate
// when the rows come from bench's JSON, else from the CSV's spread. A row
// whose leg a was cached in some run has no decode rate of its own.
func (f *fitter) nextRepeats(res *Result) {
	for i, u := range res.Rows {
		n := u.runs()
		if u.Dropped != "" || n < 2 || u.ACached != nil && *u.ACached {
			continue
		}
		var sd float64
		switch {
		case len(u.RunsA) > 0:
			rates := make([]float64, n)
			for k := range n {
				rates[k] = float64(u.Row.B-u.Row.A) / (u.RunsB[k].Seconds - u.RunsA[k].Seconds)
			}
			if slices.ContainsFunc(rates, func(r float64) bool { return !(r > 0) }) {
				continue
			}
			sd = harness.StdDev(rates) / harness.Median(rates)
		case u.SpreadOf == SpreadOfDecode:
			sd = f.spreadSD(u.Spread, n)
		default:
			continue
		}
		half := z95 * medianFactor(n) * sd / math.Sqrt(float64(n))
		if half <= Tolerance {
			continue
		}
		need := min(maxRepeat, int(math.Ceil(float64(n)*math.Pow(half/(Tolerance/2), 2))))
		res.Next = append(res.Next, fmt.Sprintf("ctx %d (%s): its decode is known to ±%s from %d runs; about %d would know it to ±%s (--repeat %d)",
			u.CtxReq, u.where(i), pctPlain(half), n, need, pctPlain(Tolerance/2), need))
	}
}

// maxRepeat is the most runs bench takes (--repeat).
const maxRepeat = 10000

// pctPlain renders a relative figure as "6.6 %".
func pctPlain(x float64) string {
	return fmt.Sprintf("%.1f %%", 100*x)
}

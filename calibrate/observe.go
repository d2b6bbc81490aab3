package calibrate

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/sglmock/sglmock/harness"
)

// observation is one leg of one row as the fit models it: a prefill of
// prompt-cached tokens after cached ones, then completion-1 tokens
// decoded, measured as the median of runs runs.
type observation struct {
	row                        int    // the row's index among the fit's rows
	leg                        string // "a" or "b"
	prompt, cached, completion int
	seconds                    float64
	runs                       int
	// own is the relative variance of one run that the leg's own runs
	// show, over ownDoF degrees of freedom; ownDoF 0: they show none.
	own    float64
	ownDoF int
	// sigma is the standard error of seconds by which the fit weighs the
	// leg and judges its residual (noise.go); assumed says no leg of its
	// kind measured its noise.
	sigma   float64
	assumed bool
}

// key identifies what a leg measures: two legs of one key measure the
// same thing.
func (o observation) key() [3]int { return [3]int{o.prompt, o.cached, o.completion} }

// decodes tells whether the leg decodes (its noise is of decode's kind).
func (o observation) decodes() bool { return o.completion > 1 }

// RowUse says what the fit took of a row: what each leg measured, or why
// it was left out.
type RowUse struct {
	Row
	// Dropped says why the whole row was left out; "" when it was used.
	Dropped string
	// A and B are its legs.
	A, B LegUse
	// Informs is the coefficient of the formulas the row determines most;
	// nil for a table, and for a row whose absence changes no coefficient's
	// uncertainty by minContribution or more.
	Informs *Contribution
}

// LegUse is what a leg of a row measured, or why it was left out.
type LegUse struct {
	// What it measured ("cold prefill of 1024 tokens, 128 decoded");
	// "" when it was left out.
	What string
	// Why it was left out; "" when it was used.
	Why string
	// NoiseNote says why its spread was not used as its noise, when the
	// row has one that was not; "" otherwise.
	NoiseNote string
}

// Used tells whether the fit used the leg.
func (l LegUse) Used() bool { return l.What != "" }

// observe turns rows into the legs the fit models, and says what it took
// of each row. A leg is used for what it measured: a leg a served from
// the cache measures a prefill after its cached tokens, a naive leg b the
// cost of prefilling what it did not reuse before its decode. Only what
// cannot be told apart is left out: a median over runs some of which
// reused the prompt and some not, and a POISONED row whose server does not
// say what its legs reused.
//
// A row used is checked first (checkRow): its error is the fit's.
func (f *fitter) observe(rows []Row) (obs []observation, uses []RowUse, err error) {
	for i, r := range rows {
		u := RowUse{Row: r}
		if r.Verdict == "POISONED" && r.ACached == nil && len(r.RunsA) == 0 {
			u.Dropped = "bench's verdict is POISONED and the server did not say what its legs reused"
			if r.Cause != "" {
				u.Dropped += ": " + r.Cause
			}
		} else if err := checkRow(r, i, f.base.ContextLength); err != nil {
			return nil, nil, err
		}
		switch {
		case u.Dropped != "":
		case len(r.RunsA) > 0:
			var a, b []observation
			a, u.A = f.observeRuns(i, r, "a", r.A, r.RunsA)
			b, u.B = f.observeRuns(i, r, "b", r.B, r.RunsB)
			obs = append(append(obs, a...), b...)
		default:
			var a, b *observation
			a, b, u.A, u.B = f.observeMedians(i, r)
			for _, o := range []*observation{a, b} {
				if o != nil {
					obs = append(obs, *o)
				}
			}
		}
		uses = append(uses, u)
	}
	return obs, uses, nil
}

// observeMedians takes a row of bench's CSV (or a hand-written one): the
// medians of its legs, and, for the noise, its runs and spread.
func (f *fitter) observeMedians(i int, r Row) (a, b *observation, ua, ub LegUse) {
	n := r.runs()
	aCold := r.ACached == nil || !*r.ACached
	switch {
	case aCold:
		a = &observation{row: i, leg: "a", prompt: r.PromptTokens, completion: r.A, seconds: r.TA, runs: n}
	case n == 1 && r.CachedA != nil:
		a = &observation{row: i, leg: "a", prompt: r.PromptTokens, cached: *r.CachedA, completion: r.A, seconds: r.TA, runs: n}
	default:
		ua.Why = fmt.Sprintf("its %d runs reused up to %s of %d prompt tokens, so their median may mix cold legs and cached ones",
			n, countOrSome(r.CachedA), r.PromptTokens)
	}
	b = &observation{row: i, leg: "b", prompt: r.PromptTokens, cached: f.cachedLen(r), completion: r.B, seconds: r.TB, runs: n}
	if n > 1 {
		switch r.SpreadOf {
		case SpreadOfDecode:
			// The spread of the decode rate is that of t_b - t_a: leg b's
			// noise, in seconds, as long as every run's leg a was alike.
			if aCold {
				sd := f.spreadSD(r.Spread, n) * (r.TB - r.TA) / r.TB
				b.own, b.ownDoF = sd*sd, n-1
			} else {
				ub.NoiseNote = "its spread is of t_b - t_a over legs a some of which were cached: not leg b's noise"
			}
		case SpreadOfTA:
			if a != nil {
				sd := f.spreadSD(r.Spread, n)
				a.own, a.ownDoF = sd*sd, n-1
			}
		}
	}
	if a != nil {
		ua.What = f.describe(*a)
	}
	ub.What = f.describe(*b)
	return a, b, ua, ub
}

// countOrSome renders a count that may be unknown.
func countOrSome(n *int) string {
	if n == nil {
		return "some"
	}
	return fmt.Sprint(*n)
}

// observeRuns takes one leg of a row from bench's JSON: its runs, grouped
// by what they reused (a naive row's leg a is cold in its first run and
// cached in the next), each group one observation with its own spread.
func (f *fitter) observeRuns(i int, r Row, leg string, completion int, runs []LegRun) ([]observation, LegUse) {
	groups := map[int][]float64{}
	for _, run := range runs {
		groups[run.Cached] = append(groups[run.Cached], run.Seconds)
	}
	cached := make([]int, 0, len(groups))
	for c := range groups {
		cached = append(cached, c)
	}
	slices.Sort(cached)
	var obs []observation
	var what []string
	for _, c := range cached {
		secs := groups[c]
		o := observation{row: i, leg: leg, prompt: r.PromptTokens, cached: c, completion: completion, seconds: harness.Median(secs), runs: len(secs)}
		if len(secs) > 1 {
			sd := harness.StdDev(secs) / o.seconds
			o.own, o.ownDoF = sd*sd, len(secs)-1
		}
		obs = append(obs, o)
		d := f.describe(o)
		if len(cached) > 1 {
			d = fmt.Sprintf("%d of %d runs %s", len(secs), len(runs), d)
		}
		what = append(what, d)
	}
	return obs, LegUse{What: strings.Join(what, "; ")}
}

// describe says what a leg measured: its prefill (cold, or after what it
// reused, in how many chunks) and its decode.
func (f *fitter) describe(o observation) string {
	var s string
	computed := o.prompt - o.cached
	chunks := len(f.base.Chunks(computed))
	switch {
	case o.cached == 0:
		s = fmt.Sprintf("cold prefill of %d", o.prompt)
	case computed == 1:
		s = fmt.Sprintf("1 token after %d cached", o.cached)
	default:
		s = fmt.Sprintf("%d tokens after %d cached", computed, o.cached)
	}
	if chunks > 1 {
		s += fmt.Sprintf(" (%d chunks)", chunks)
	}
	if o.completion > 1 {
		s += fmt.Sprintf(", %d decoded", o.completion-1)
	}
	return s
}

// promptSizes lists the distinct prompt sizes of the legs, ascending.
func promptSizes(obs []observation) []int {
	var sizes []int
	for _, o := range obs {
		sizes = append(sizes, o.prompt)
	}
	slices.Sort(sizes)
	return slices.Compact(sizes)
}

// distinctLegs counts the legs that measure different things.
func distinctLegs(obs []observation) int {
	keys := make([][3]int, len(obs))
	for i, o := range obs {
		keys[i] = o.key()
	}
	slices.SortFunc(keys, func(a, b [3]int) int {
		return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1]), cmp.Compare(a[2], b[2]))
	})
	return len(slices.Compact(keys))
}

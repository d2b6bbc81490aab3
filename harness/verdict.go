package harness

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Level is how bad a measurement is.
type Level int

// Levels, from good to bad.
const (
	OK Level = iota
	// Unchecked: nothing was checked (an audited request whose server
	// reported no cached tokens, or whose answer could not be read); never
	// ok, and no finding against the figure either.
	Unchecked
	// Suspect: something the harness cannot rule out may have distorted
	// the figure (a refused flush, no cache report, a short output).
	Suspect
	// Poisoned: the figure does not measure what it claims (a leg meant
	// to be cold was served from the prefix cache, t_b <= t_a).
	Poisoned
)

func (l Level) String() string {
	switch l {
	case Unchecked:
		return "unchecked"
	case Suspect:
		return "SUSPECT"
	case Poisoned:
		return "POISONED"
	}
	return "ok"
}

// MarshalText writes the level's name.
func (l Level) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// UnmarshalText reads a level's name.
func (l *Level) UnmarshalText(b []byte) error {
	for _, c := range []Level{OK, Unchecked, Suspect, Poisoned} {
		if string(b) == c.String() {
			*l = c
			return nil
		}
	}
	return fmt.Errorf("verdict level %q: want ok, unchecked, SUSPECT or POISONED", b)
}

// Figure names one of a row's figures, each with a verdict of its own:
// leg a gives TTFT and the prefill rate, the legs' difference the decode
// rate, so a finding may concern some of them only.
type Figure string

// The figures of a row.
const (
	FigureTTFT    Figure = "ttft"
	FigurePrefill Figure = "prefill"
	FigureDecode  Figure = "decode"
)

// rowFigures are a row's figures, in the order the table names them.
var rowFigures = []Figure{FigureTTFT, FigurePrefill, FigureDecode}

// The figures a finding concerns: leg a's (TTFT and the prefill rate), or
// the decode rate alone.
var (
	legAFigures = []Figure{FigureTTFT, FigurePrefill}
	decodeOnly  = []Figure{FigureDecode}
)

// Cause is one finding of the checks.
type Cause struct {
	Level Level  `json:"level"`
	Text  string `json:"text"`
	// Figures are the figures the finding concerns; none: every figure of
	// the row.
	Figures []Figure `json:"figures,omitempty"`
}

// concerns tells whether the finding concerns figure f.
func (c Cause) concerns(f Figure) bool {
	return len(c.Figures) == 0 || slices.Contains(c.Figures, f)
}

// Verdict is a measurement's level and every finding behind it.
type Verdict struct {
	Causes []Cause
}

// add records a finding that concerns every figure, once.
func (v *Verdict) add(l Level, text string) { v.addTo(nil, l, text) }

// addTo records a finding that concerns figs (nil: every figure), once: a
// finding made again of other figures concerns them too.
func (v *Verdict) addTo(figs []Figure, l Level, text string) {
	for i, c := range v.Causes {
		if c.Text != text {
			continue
		}
		switch {
		case len(c.Figures) == 0:
		case len(figs) == 0:
			v.Causes[i].Figures = nil
		default:
			for _, f := range figs {
				if !slices.Contains(c.Figures, f) {
					v.Causes[i].Figures = append(v.Causes[i].Figures, f)
				}
			}
		}
		return
	}
	v.Causes = append(v.Causes, Cause{l, text, slices.Clone(figs)})
}

// merge adds another verdict's findings.
func (v *Verdict) merge(o Verdict) {
	for _, c := range o.Causes {
		v.addTo(c.Figures, c.Level, c.Text)
	}
}

// LevelOf is the worst finding's level among those that concern figure f.
func (v Verdict) LevelOf(f Figure) Level {
	l := OK
	for _, c := range v.Causes {
		if c.concerns(f) {
			l = max(l, c.Level)
		}
	}
	return l
}

// Level is the worst finding's.
func (v Verdict) Level() Level {
	l := OK
	for _, c := range v.Causes {
		l = max(l, c.Level)
	}
	return l
}

// String is "ok", or the level and every finding: "POISONED: leg b reused
// 1406 of 1407 prompt tokens (cached_tokens); t_b < t_a".
func (v Verdict) String() string {
	l := v.Level()
	if l == OK {
		if len(v.Causes) == 0 {
			return "ok"
		}
		return "ok (" + v.texts() + ")"
	}
	return l.String() + ": " + v.texts()
}

func (v Verdict) texts() string {
	var parts []string
	// The worst findings first: they explain the level.
	for l := Poisoned; l >= OK; l-- {
		for _, c := range v.Causes {
			if c.Level == l {
				parts = append(parts, c.Text)
			}
		}
	}
	return strings.Join(parts, "; ")
}

// verdictJSON is a verdict on the wire: the level and text for readers,
// the causes for programs.
type verdictJSON struct {
	Level  Level   `json:"level"`
	Text   string  `json:"text"`
	Causes []Cause `json:"causes"`
}

// MarshalJSON writes {"level": ..., "text": ..., "causes": [...]}.
func (v Verdict) MarshalJSON() ([]byte, error) {
	causes := v.Causes
	if causes == nil {
		causes = []Cause{}
	}
	return json.Marshal(verdictJSON{v.Level(), v.String(), causes})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (v *Verdict) UnmarshalJSON(b []byte) error {
	var w verdictJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	v.Causes = w.Causes
	return nil
}

// Tolerance is how far a figure may be off, by any measure the harness
// has, before its row is SUSPECT: 5 %. It is the resolution benchmarks of
// two deployments are run to have, and calibrate's own: a row whose times
// are off by more cannot calibrate a profile within calibrate.Tolerance.
// Each check below turns it into its own bound, and each fix it suggests
// aims at half of it, so that the next run's verdict does not hang on the
// draw of its jitter:
//
//   - truth error: |ttft_err| or |decode_err| above Tolerance, against
//     the modelled times of the very requests sent (exactly 0 on virtual
//     time); the fix is the speedup at which the lateness observed would
//     leave Tolerance/2.
//   - spread over repeats: the 95 % interval of the median decode rate
//     (±1.96 × 1.2533 s/√n, the large-sample standard error of a median
//     from the runs' standard deviation s) wider than ±Tolerance; the fix
//     is the runs that would narrow it to ±Tolerance/2.
//   - speculative rounds: b-a spanning fewer than 1/Tolerance = 20
//     rounds, where the whole-round count moves the decode figure by more
//     than Tolerance (one round in R is 1/R of it); the fix is the b that
//     spans 2/Tolerance = 40, or against sglmock the b the model's
//     acceptance scatter needs when that is larger. The scatter check
//     below is not made then.
//   - acceptance scatter: each round accepts a random number of tokens,
//     of mean μ and standard deviation σ, so the R rounds b-a spans scatter
//     its time by (σ/μ)/√R (with a > 1 leg a's R_a rounds add theirs:
//     (σ/μ)√(R + 2 R_a)/R); one run's decode is known to ±1.96 (σ/μ)/√R
//     (95 %), the median of n runs' to ±1.96 × 1.2533 (σ/μ)/√(Rn), and the
//     row is SUSPECT when that is wider than ±Tolerance. Over repeats the
//     spread check measures the same interval from the runs: the row
//     takes the wider of the two, and one finding says so. The fix is the
//     b, or the runs, that would narrow it to ±Tolerance/2.
//   - context growth, against sglmock: the mean of the model's decode
//     rate over the context the figure's tokens are decoded at, against
//     the rate at the prompt, beyond Tolerance (growthCheck).
const Tolerance = 0.05

// minRounds is the fewest speculative rounds b-a may span: one round is
// then at most Tolerance of the decode figure.
var minRounds = math.Ceil(1 / Tolerance)

// The large-sample standard error of a median is 1.2533 σ/√n (σ√(π/2));
// 1.96 makes it a 95 % interval.
const (
	medianSE = 1.2533
	z95      = 1.96
)

// Suggestion is what a SUSPECT row's fix would change; 0 where it has
// nothing to suggest.
type Suggestion struct {
	// Speedup is the mock's speedup at which the lateness observed leaves
	// the truth errors within Tolerance/2.
	Speedup float64 `json:"speedup,omitempty"`
	// B is the leg b whose b-a spans 2/Tolerance speculative rounds, or,
	// when it spans that many, enough rounds to narrow decode's 95 %
	// interval to ±Tolerance/2 given their scatter.
	B int `json:"b,omitempty"`
	// Repeat is the runs that narrow the median's 95 % interval to
	// ±Tolerance/2. With B it is the other way to the same end: either
	// fixes the row.
	Repeat int `json:"repeat,omitempty"`
}

// mergeSuggestion adds a fix's non-zero fields to a row's suggestion, so
// that it fixes every figure: the lowest speedup, the largest b and the
// most runs any fix names.
func mergeSuggestion(to *Suggestion, sug Suggestion) *Suggestion {
	if sug == (Suggestion{}) {
		return to
	}
	if to == nil {
		to = &Suggestion{}
	}
	if sug.Speedup > 0 && (to.Speedup == 0 || sug.Speedup < to.Speedup) {
		to.Speedup = sug.Speedup
	}
	to.B, to.Repeat = max(to.B, sug.B), max(to.Repeat, sug.Repeat)
	return to
}

// lateness checks a row's truth errors: measured TTFT and decode against
// the modelled times of the very requests sent. The error is the client's:
// each leg arrives some wall time late (a timer that wakes late, a
// descheduled process, the transport), which the speedup multiplies into
// simulated seconds. From the lateness observed it computes the speedup at
// which the same lateness would leave Tolerance/2.
//
// ttftTrue is the true TTFT, dtTrue the true decode span (t_b-t_a, or a
// stream's first to last event), decodeErr nil when undefined.
func lateness(v *Verdict, ttftErr, ttftTrue float64, decodeErr *float64, dtTrue, speedup float64) float64 {
	var parts []string
	var figs []Figure // the figures beyond Tolerance
	// lateWall is the largest difference the errors show, in wall seconds;
	// it may be either way (an engine stamping an arrival late makes the
	// client's time short).
	lateWall, scale, worst := 0.0, math.Inf(1), 0.0
	target := Tolerance / 2
	if math.Abs(ttftErr) > Tolerance {
		parts = append(parts, "ttft_err "+pct(ttftErr))
		figs = append(figs, legAFigures...)
	}
	if ttftErr != 0 {
		lateWall = math.Abs(ttftErr) * ttftTrue / speedup
		scale, worst = target/math.Abs(ttftErr), math.Abs(ttftErr)
	}
	if decodeErr != nil && *decodeErr > -1 {
		// The measured span is dt(1+delta), and decode_err = -delta/(1+delta).
		delta := -*decodeErr / (1 + *decodeErr)
		if math.Abs(*decodeErr) > Tolerance {
			parts = append(parts, "decode_err "+pct(*decodeErr))
			figs = append(figs, FigureDecode)
		}
		if delta != 0 {
			lateWall = max(lateWall, math.Abs(delta)*dtTrue/speedup)
			scale, worst = min(scale, target/(1+target)/math.Abs(delta)), max(worst, math.Abs(delta))
		}
	}
	if len(parts) == 0 {
		return 0
	}
	text := fmt.Sprintf("measured off the server's own timeline (%s, beyond %s): the client's times and the server's differ by %s of wall clock",
		strings.Join(parts, ", "), pctPlain(Tolerance), millis(lateWall))
	suggest := niceBelow(speedup * scale)
	if suggest < 1 {
		// No speedup keeps half the tolerance; one may still keep all of
		// it: the lateness is wall time, so its share of a figure falls
		// with the speedup, and at x1 it is worst/speedup.
		if atOne := worst / speedup; speedup > 1 && atOne <= Tolerance {
			v.addTo(figs, Suspect, text+fmt.Sprintf(", %s simulated at x%s: run the mock at --speedup 1, where the same lateness is %s of the figures, within %s (not %s, which no speedup reaches)",
				secs(lateWall*speedup), trimFloat(speedup), pctPlain(atOne), pctPlain(Tolerance), pctPlain(target)))
			return 1
		}
		v.addTo(figs, Suspect, text+fmt.Sprintf(" at x%s, which no speedup removes (a slow client, or a transport between it and the server)", trimFloat(speedup)))
		return 0
	}
	v.addTo(figs, Suspect, text+fmt.Sprintf(", %s simulated at x%s, so this host cannot keep x%s: run the mock at --speedup %s or less",
		secs(lateWall*speedup), trimFloat(speedup), trimFloat(speedup), trimFloat(suggest)))
	return suggest
}

// niceBelow is the largest of 1, 2, 5, 10, 20, 50, ... not above x; x
// itself when it is below 1.
func niceBelow(x float64) float64 {
	if x < 1 || math.IsInf(x, 0) || math.IsNaN(x) {
		return x
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{5, 2, 1} {
		if m*p <= x*(1+1e-12) {
			return m * p
		}
	}
	return p
}

// spreadHalf is the relative half-width of the 95 % interval of the
// median of the runs' decode rates, from their spread: ±1.96 × 1.2533
// s/√n over the median; 0 for fewer than two runs.
func spreadHalf(decodes []float64) float64 {
	n := len(decodes)
	if n < 2 {
		return 0
	}
	return z95 * medianSE * stddev(decodes) / math.Sqrt(float64(n)) / median(decodes)
}

// spreadCheck checks that the median of the runs' decode rates is known
// to ±Tolerance; it returns the runs that would know it to ±Tolerance/2.
// When b-a spans too few speculative rounds (fewRounds), a larger b is the
// fix, not more runs of the same b.
func spreadCheck(v *Verdict, decodes []float64, fewRounds bool) int {
	n := len(decodes)
	half := spreadHalf(decodes)
	if !(half > Tolerance) {
		return 0
	}
	m := median(decodes)
	text := fmt.Sprintf("decode varies from run to run: %d runs from %s to %s tok/s, so the median %s is known to ±%s only (95 %%)",
		n, trimFloat1(slices.Min(decodes)), trimFloat1(slices.Max(decodes)), trimFloat1(m), pctPlain(half))
	if fewRounds {
		v.addTo(decodeOnly, Suspect, text+": a larger b narrows it (above)")
		return 0
	}
	need := min(maxRepeat, int(math.Ceil(float64(n)*math.Pow(half/(Tolerance/2), 2))))
	v.addTo(decodeOnly, Suspect, text+fmt.Sprintf("; about %d runs would know it to ±%s", need, pctPlain(Tolerance/2)))
	return need
}

// Scatter is the tokens a speculative round gives: their mean and
// standard deviation.
type Scatter struct {
	Mean, SD float64
}

// histogramScatter is the scatter of the rounds the histograms of accepted
// drafts count (h[i] rounds gave i+1 tokens), pooled: the sample standard
// deviation. ok is false when they count fewer than two rounds. A leg's
// last round, cut short by max_new_tokens, counts as the server reports it.
func histogramScatter(hs ...[]int) (sc Scatter, ok bool) {
	var n, sum float64
	for _, h := range hs {
		for i, c := range h {
			n += float64(c)
			sum += float64(c) * float64(i+1)
		}
	}
	if n < 2 {
		return Scatter{}, false
	}
	sc.Mean = sum / n
	ss := 0.0
	for _, h := range hs {
		for i, c := range h {
			d := float64(i+1) - sc.Mean
			ss += float64(c) * d * d
		}
	}
	sc.SD = math.Sqrt(ss / (n - 1))
	return sc, true
}

// AcceptScatter is the scatter of a distribution of the tokens a
// speculative round gives (dist[i] the probability of i+1, as
// /sim/profile's accept_dist and a profile's AcceptDist have it); ok is
// false when it is not one.
func AcceptScatter(dist []float64) (sc Scatter, ok bool) {
	var total, m2 float64
	for i, p := range dist {
		if !(p >= 0 && p <= 1) {
			return Scatter{}, false
		}
		k := float64(i + 1)
		total += p
		sc.Mean += k * p
		m2 += k * k * p
	}
	if math.Abs(total-1) > 1e-6 {
		return Scatter{}, false
	}
	sc.SD = math.Sqrt(max(0, m2-sc.Mean*sc.Mean))
	return sc, true
}

// scatterHalf is the relative half-width of the 95 % interval of a row's
// decode figure over n runs whose b-a spans rounds rounds and whose leg a
// took legA rounds of its own, from the acceptance scatter alone. The two
// legs are separate requests with draws of their own, so the rounds' count
// scatters by (σ/μ)√(rounds + 2 legA) (the variance of leg b's rounds and
// leg a's, each a sum of independent rounds); one run's figure is known to
// ±1.96 of that over rounds, and the median of n runs to ±1.96 × 1.2533 of
// it over √n (the median's large-sample standard error, as spreadCheck has
// it). With a = 1 leg a takes no round, and this is (σ/μ)/√rounds.
func scatterHalf(sc Scatter, rounds, legA float64, n int) float64 {
	if sc.Mean <= 0 || rounds <= 0 || n < 1 {
		return 0
	}
	return z95 * medianFactor(n) * sc.SD / sc.Mean * math.Sqrt(rounds+2*legA) / rounds / math.Sqrt(float64(n))
}

// medianFactor is the standard error of n runs' median against one run's
// figure, before the 1/√n: 1 for one run, 1.2533 for a median.
func medianFactor(n int) float64 {
	if n > 1 {
		return medianSE
	}
	return 1
}

// scatterFix is what would narrow the interval of scatterHalf to
// ±Tolerance/2: the b-a (a multiple of 16) at n runs, and the runs at this
// b. The rounds R it needs solve R² = k (R + 2 legA), k = (1.96 f (σ/μ) /
// (Tolerance/2))² / n.
func scatterFix(sc Scatter, rounds, legA float64, n int) (delta, runs int) {
	target := Tolerance / 2
	cv := sc.SD / sc.Mean
	k := math.Pow(z95*medianFactor(n)*cv/target, 2) / float64(n)
	need := (k + math.Sqrt(k*k+8*k*legA)) / 2
	delta = int(math.Ceil(need*sc.Mean/16)) * 16
	perRun := math.Pow(z95*medianSE*cv/target, 2) * (rounds + 2*legA) / (rounds * rounds)
	runs = min(maxRepeat, max(2, int(math.Ceil(perRun))))
	return delta, runs
}

// scatterCheck checks that the decode figure of n runs, b-a spanning
// rounds speculative rounds of the scatter sc after leg a's legA, is known
// to ±Tolerance (scatterHalf). It names the b (flag) that would know it to
// ±Tolerance/2 at n runs, and the runs that would at this b.
func scatterCheck(v *Verdict, flag string, a, b int, rounds, legA float64, sc Scatter, n int) Suggestion {
	half := scatterHalf(sc, rounds, legA, n)
	if !(half > Tolerance) {
		return Suggestion{}
	}
	what := fmt.Sprintf("b-a = %d spans", b-a)
	if flag != "--b" {
		what = fmt.Sprintf("the %d tokens after the first span", b-a)
	}
	known := "one run's decode"
	if n > 1 {
		known = fmt.Sprintf("the median of %d runs' decode", n)
	}
	delta, runs := scatterFix(sc, rounds, legA, n)
	text := fmt.Sprintf("%s about %s speculative rounds of %.2f ± %.2f tokens, so %s is known to ±%.1f %% only (95 %%): use %s %d (about %d rounds)",
		what, trimFloat1(rounds), sc.Mean, sc.SD, known, 100*half, flag, a+delta, int(math.Round(float64(delta)/sc.Mean)))
	if flag != "--b" {
		v.addTo(decodeOnly, Suspect, text)
		return Suggestion{B: a + delta}
	}
	v.addTo(decodeOnly, Suspect, text+fmt.Sprintf(" or --repeat %d", runs))
	return Suggestion{B: a + delta, Repeat: runs}
}

// scatterUnchecked says, of a decode figure over rounds speculative rounds
// whose scatter nothing tells (a server without a usable histogram of
// accepted drafts, and no model), that how far one run may be off is not
// checked: an ok that says nothing of it would claim more than was
// checked. fix names what measures it instead.
func scatterUnchecked(v *Verdict, flag string, a, b int, rounds float64, fix string) {
	what := fmt.Sprintf("b-a = %d spans", b-a)
	if flag != "--b" {
		what = fmt.Sprintf("the %d tokens after the first span", b-a)
	}
	v.addTo(decodeOnly, OK, fmt.Sprintf("%s about %s speculative rounds, and the server reports no usable histogram of accepted drafts (meta_info.spec_correct_drafts_histogram), so the scatter of one run's decode is not checked%s",
		what, trimFloat1(rounds), fix))
}

// roundsCheck checks that b-a spans enough speculative rounds: leg b stops
// mid-round once it has its tokens, so b-a takes a whole number of rounds
// R, and the decode figure moves by one round in R from run to run and
// reads low by the last round's unused tokens (the small-delta-bias
// scenario). accept is the mean tokens a round gives; the b it returns
// spans 2/Tolerance rounds of it, or atLeast tokens past a when that is
// more (the b-a the model's acceptance scatter needs, against sglmock, so
// that one fix does for both; against another server the scatter check
// names its own b once b-a spans enough rounds to tell), and flag is the
// option that sets b.
func roundsCheck(v *Verdict, flag string, a, b int, rounds, accept float64, atLeast int) int {
	what := fmt.Sprintf("b-a = %d", b-a)
	if flag != "--b" {
		what = fmt.Sprintf("the %d tokens after the first", b-a)
	}
	if !fewRounds(a, b, rounds, accept) {
		return 0 // one token a round, or enough rounds
	}
	delta := int(math.Ceil(2*minRounds*accept/16)) * 16
	also := ""
	if atLeast > delta {
		delta, also = atLeast, ", which the scatter of the tokens a round accepts needs too"
	}
	v.addTo(decodeOnly, Suspect, fmt.Sprintf("%s: only %s speculative rounds, and decode moves by a whole round (%s) from run to run: use %s %d (about %d rounds of %.2f tokens%s)",
		what, trimFloat1(rounds), pctPlain(1/rounds), flag, a+delta, int(math.Round(float64(delta)/accept)), accept, also))
	return a + delta
}

// fewRounds tells whether roundsCheck finds b-a over too few rounds.
func fewRounds(a, b int, rounds, accept float64) bool {
	return rounds > 0 && rounds < float64(b-a) && rounds < minRounds && accept > 1
}

// growthCheck checks the method's own error from the context leg b grows
// through: from prompt+a to prompt+b tokens the model's decode rate goes
// from first to last tokens a second, and expected is the span's mean rate
// against the steady rate at the prompt (the decode_bias a run reads
// without scatter). Past Tolerance the figure is not the rate at the
// prompt, and no b fixes both this and the scatter: a smaller span wants
// more runs.
// flag is the option that sets b: --b for two legs, --max-new-tokens for
// a stream.
func growthCheck(v *Verdict, flag string, prompt, a, b int, first, last, expected float64, measured *float64) {
	if !(math.Abs(expected) > Tolerance) {
		return
	}
	who, fix := "leg b", "a smaller b narrows the span and widens the scatter, which --repeat narrows"
	if flag != "--b" {
		who, fix = "the request", "a smaller "+flag+" narrows the span and widens the scatter"
	}
	// The row's column has the measured bias, scatter included; the note
	// quotes it beside the part the model puts there, so that the two
	// numbers a reader sees are told apart.
	bias := pctSigned(expected) + " by construction (sglmock's model)"
	if measured != nil {
		bias = fmt.Sprintf("%+.2f %% (%s by construction, sglmock's model)", 100**measured, pctSigned(expected))
	}
	v.addTo(decodeOnly, Suspect, fmt.Sprintf("decode_bias is %s: %s decodes from %d to %d tokens of context, over which this deployment's decode goes from %s to %s tok/s, so the figure is that span's mean rate, not the rate at %d (%s)",
		bias, who, prompt+a, prompt+b, trimFloat1(first), trimFloat1(last), prompt, fix))
}

// pctSigned is a fraction as a signed percentage with one decimal.
func pctSigned(x float64) string { return fmt.Sprintf("%+.1f %%", 100*x) }

// StdDev is the sample standard deviation bench's spread check takes of
// a row's runs, for programs that take runs apart as bench does.
func StdDev(xs []float64) float64 { return stddev(xs) }

// stddev is the sample standard deviation.
func stddev(xs []float64) float64 {
	if len(xs) < 2 {
		return 0
	}
	mean := 0.0
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	ss := 0.0
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	return math.Sqrt(ss / float64(len(xs)-1))
}

// impossibleCounts names the counts of a generation no server can report:
// malformed numbers, impossible token counts (countProblems), more
// speculative rounds than tokens, an impossible histogram of accepted
// drafts (histogramProblems).
func impossibleCounts(g *Generation) []string {
	out := slices.Clone(g.Malformed)
	out = append(out, countProblems(g.PromptTokens, g.CachedTokens, g.CachedKnown, g.CompletionTokens)...)
	if v := g.SpecVerifyCt; v != nil && (*v < 0 || *v > max(g.CompletionTokens, 0)) {
		out = append(out, fmt.Sprintf("spec_verify_ct %d for %d tokens", *v, g.CompletionTokens))
	}
	// A malformed entry is named already, and its clamped value would only
	// add a sum no server sent.
	malformed := slices.ContainsFunc(g.Malformed, func(m string) bool { return strings.HasPrefix(m, g.SpecHistogramField) })
	if g.SpecHistogram != nil && !malformed {
		out = append(out, histogramProblems(g.SpecHistogramField, g.SpecHistogram, g.SpecVerifyCt, g.CompletionTokens)...)
	}
	return out
}

// histogramProblems names what no server can report in a histogram of
// accepted drafts (index: drafts a round accepted, value: rounds): a
// negative count of rounds; rounds other than spec_verify_ct, as SGLang
// counts both once a round; or more rounds than tokens, each round giving
// at least one. Its tokens are not held against completion_tokens: a
// round cut short by max_new_tokens may count drafts that were dropped.
func histogramProblems(field string, h []int, verify *int, completion int) []string {
	rounds := 0.0 // a float: the sum of counts up to 2^53 each cannot overflow
	for i, c := range h {
		if c < 0 {
			return []string{fmt.Sprintf("%s[%d] %d", field, i, c)}
		}
		rounds += float64(c)
	}
	switch {
	case verify != nil && rounds != float64(*verify):
		return []string{fmt.Sprintf("%s of %s rounds for spec_verify_ct %d", field, strconv.FormatFloat(rounds, 'f', -1, 64), *verify)}
	case rounds > float64(max(completion, 0)):
		return []string{fmt.Sprintf("%s of %s rounds for %d tokens", field, strconv.FormatFloat(rounds, 'f', -1, 64), completion)}
	}
	return nil
}

// countProblems names the token counts no server can report for one
// request: a prompt of no tokens, more cached tokens than the prompt has or
// fewer than none (when the server reported them), negative outputs.
func countProblems(prompt, cached int, cachedKnown bool, completion int) []string {
	var out []string
	if prompt <= 0 {
		out = append(out, fmt.Sprintf("prompt_tokens %d", prompt))
	}
	if cachedKnown && (cached < 0 || cached > max(prompt, 0)) {
		out = append(out, fmt.Sprintf("cached_tokens %d of a %d-token prompt", cached, prompt))
	}
	if completion < 0 {
		out = append(out, fmt.Sprintf("completion_tokens %d", completion))
	}
	return out
}

// pctPlain renders a fraction as "5 %" or "12.5 %".
func pctPlain(x float64) string {
	return strconv.FormatFloat(math.Round(1000*x)/10, 'f', -1, 64) + " %"
}

// millis renders wall seconds as "2.3 ms".
func millis(s float64) string {
	return strconv.FormatFloat(s*1000, 'g', 2, 64) + " ms"
}

// secs renders seconds as "0.23 s".
func secs(s float64) string { return strconv.FormatFloat(s, 'g', 2, 64) + " s" }

// trimFloat1 renders with one decimal at most.
func trimFloat1(x float64) string {
	return strconv.FormatFloat(math.Round(10*x)/10, 'f', -1, 64)
}

// SuggestedSpeedup is the mock's speedup the whole report can be run at:
// the lowest any row suggests; 0 when no row found its host late.
func (r *Report) SuggestedSpeedup() float64 {
	s := 0.0
	for _, sug := range r.suggestions() {
		if sug.Speedup > 0 && (s == 0 || sug.Speedup < s) {
			s = sug.Speedup
		}
	}
	return s
}

// suggestions are the rows' fixes.
func (r *Report) suggestions() []Suggestion {
	var out []Suggestion
	for _, row := range r.Rows {
		if row.Suggested != nil {
			out = append(out, *row.Suggested)
		}
	}
	for _, row := range r.Stream {
		if row.Suggested != nil {
			out = append(out, *row.Suggested)
		}
	}
	return out
}

// FigureVerdict is one figure's verdict: its level, and what is known of
// its error added up as a bound (relative: 0.053 is ±5.3 %); no bound
// where the figure is POISONED, which no bound describes.
type FigureVerdict struct {
	Level Level    `json:"level"`
	Bound *float64 `json:"bound"`
	// Parts are what the bound adds up.
	Parts []ErrorPart `json:"parts,omitempty"`
}

// ErrorPart is one known share of a figure's error, relative: a bias with
// its sign (the client's lateness against the truth, the context the
// figure was decoded over), or the half-width of a 95 % interval (the
// acceptance scatter, the spread over repeats, whole rounds).
type ErrorPart struct {
	What  string  `json:"what"`
	Share float64 `json:"share"`
}

// FigureVerdicts are the verdicts of a row's figures: each is ok only when
// no finding concerns it and what is known of its error adds up to within
// Tolerance.
type FigureVerdicts struct {
	TTFT    FigureVerdict `json:"ttft"`
	Prefill FigureVerdict `json:"prefill"`
	Decode  FigureVerdict `json:"decode"`
}

// Of is figure f's verdict.
func (fv *FigureVerdicts) Of(f Figure) *FigureVerdict {
	switch f {
	case FigureTTFT:
		return &fv.TTFT
	case FigurePrefill:
		return &fv.Prefill
	}
	return &fv.Decode
}

// errorBudget collects the known shares of each figure's error.
type errorBudget map[Figure][]ErrorPart

// add records a share of figure f's error; none when it is 0 or not a
// number.
func (b errorBudget) add(f Figure, what string, share float64) {
	if share != 0 && !math.IsNaN(share) && !math.IsInf(share, 0) {
		b[f] = append(b[f], ErrorPart{what, share})
	}
}

// total adds up the parts' magnitudes: a bound that holds whichever way
// each goes.
func total(parts []ErrorPart) float64 {
	sum := 0.0
	for _, p := range parts {
		sum += math.Abs(p.Share)
	}
	return sum
}

// budgetFix says what narrows a figure's bound: the fix of its largest
// part. n is the runs the figure is the median of, flag the option that
// sets b, speedup the mock's.
type budgetFix struct {
	n       int
	flag    string
	speedup float64
}

// Kinds of error parts, named in the budget's finding.
const (
	partLateness = "lateness"
	partScatter  = "acceptance scatter"
	partSpread   = "spread over the runs"
	partGrowth   = "context growth"
	partRounds   = "whole rounds"
	partReuse    = "tolerated reuse"
)

// judgeFigures gives each figure of a row its verdict from the findings
// that concern it and its error budget. A figure whose parts add up beyond
// Tolerance, though none does alone, gets a SUSPECT finding naming them and
// the fix of the largest: decode_bias -5.59 % on an ok row (the scatter's
// ±4.3 % over 243 rounds and a growth of -1.3 % each passing alone) is what
// this catches. A part past Tolerance alone mostly has a finding of its
// own; where none made the figure SUSPECT (the spread of TTFT over
// repeats, or the prefill rate's share of a TTFT error just under
// Tolerance), the budget's finding does. TTFT and the prefill rate, both
// leg a's, share one finding.
func judgeFigures(v *Verdict, b errorBudget, fix budgetFix) (FigureVerdicts, Suggestion) {
	var fv FigureVerdicts
	var sug Suggestion
	said := map[Figure]bool{}
	alone := func(f Figure) bool {
		return slices.ContainsFunc(b[f], func(p ErrorPart) bool { return math.Abs(p.Share) > Tolerance })
	}
	// unsaid tells whether figure f's bound passes Tolerance with no
	// finding that says so.
	unsaid := func(f Figure) bool {
		l := v.LevelOf(f)
		return total(b[f]) > Tolerance && l != Poisoned && (!alone(f) || l < Suspect)
	}
	for _, f := range rowFigures {
		if said[f] || !unsaid(f) {
			continue
		}
		figs := []Figure{f}
		name := "decode"
		if f == FigureTTFT {
			name = "TTFT"
			if unsaid(FigurePrefill) {
				figs, name = legAFigures, "TTFT (and so the prefill rate)"
			}
		} else if f == FigurePrefill {
			name = "the prefill rate"
		}
		for _, g := range figs {
			said[g] = true
		}
		text, s := fix.text(name, b[f], alone(f))
		v.addTo(figs, Suspect, text)
		sug = *mergeSuggestion(&sug, s)
	}
	for _, f := range rowFigures {
		out := fv.Of(f)
		out.Level = v.LevelOf(f)
		if out.Level != Poisoned {
			sum := total(b[f])
			out.Bound, out.Parts = &sum, b[f]
		}
	}
	return fv, sug
}

// text is the budget's finding for figure name, with the fix of its
// largest part; alone says a part is past Tolerance by itself.
func (fix budgetFix) text(name string, parts []ErrorPart, alone bool) (string, Suggestion) {
	sum := total(parts)
	var names []string
	largest := parts[0]
	for _, p := range parts {
		if math.Abs(p.Share) > math.Abs(largest.Share) {
			largest = p
		}
		if math.Abs(p.Share) < 0.0005 {
			continue // in the bound, too small to name at one decimal
		}
		share := pctSigned(p.Share)
		if p.What == partScatter || p.What == partSpread || p.What == partRounds {
			share = "±" + pctPlain(math.Abs(p.Share))
		}
		names = append(names, p.What+" "+share)
	}
	text := fmt.Sprintf("%s is known to ±%.1f %% only, adding up what is known of its error (%s)", name, 100*sum, strings.Join(names, ", "))
	if !alone {
		text += ", each within " + pctPlain(Tolerance) + " alone"
	}
	target := Tolerance / 2
	switch largest.What {
	case partScatter, partSpread, partRounds:
		// The median of n' runs narrows a one-run interval by
		// 1.2533/√n', and a median of n by √(n/n').
		runs := math.Ceil(float64(fix.n) * math.Pow(math.Abs(largest.Share)*medianSE/medianFactor(fix.n)/target, 2))
		if fix.flag != "--b" || runs > maxRepeat {
			return text + fmt.Sprintf(": a larger %s narrows the %s", fix.flag, largest.What), Suggestion{}
		}
		return text + fmt.Sprintf(": --repeat %d narrows the %s to ±%s", int(runs), largest.What, pctPlain(target)), Suggestion{Repeat: int(runs)}
	case partReuse:
		return text + ": --allow-shared-prefix lets it through; a nonce first in each prompt keeps the legs cold", Suggestion{}
	case partLateness:
		if s := niceBelow(fix.speedup * target / math.Abs(largest.Share)); s >= 1 && s < fix.speedup {
			return text + fmt.Sprintf(": --speedup %s narrows the lateness to %s", trimFloat(s), pctPlain(target)), Suggestion{Speedup: s}
		}
		return text + ": the lateness is the client's", Suggestion{}
	}
	return text + fmt.Sprintf(": a smaller %s narrows the span of context", fix.flag), Suggestion{}
}

// latenessParts records the client's lateness against the truth: the
// truth errors of TTFT and decode, and the prefill rate's, which is the
// prompt over TTFT.
func (b errorBudget) latenessParts(t *TruthFigures) {
	b.add(FigureTTFT, partLateness, t.TTFTErr)
	if t.TTFTErr > -1 {
		b.add(FigurePrefill, partLateness, 1/(1+t.TTFTErr)-1)
	}
	if t.DecodeErr != nil {
		b.add(FigureDecode, partLateness, *t.DecodeErr)
	}
}

// tolerated is the reuse of a leg that the checks let through: its cached
// tokens beyond the shared floor, when --allow-shared-prefix tolerates
// them; 0 when it reused none of them, is POISONED for more, or its count
// is unknown.
func (l *Leg) tolerated(floor, allow int) int {
	floor = max(floor, 0)
	if l.CachedTokens == nil || l.cachedImpossible() || *l.CachedTokens <= floor || *l.CachedTokens > floor+allow {
		return 0
	}
	return *l.CachedTokens - floor
}

// largest records share as figure f's part what, in place of a smaller
// one: of several runs, the one furthest off bounds the median.
func (b errorBudget) largest(f Figure, what string, share float64) {
	for i, p := range b[f] {
		if p.What == what {
			if math.Abs(share) > math.Abs(p.Share) {
				b[f][i].Share = share
			}
			return
		}
	}
	b.add(f, what, share)
}

// reuseParts records the reuse a row's checks tolerate. A prefix of k of a
// prompt's P tokens from the cache saves at most k/P of its prefill (the
// first tokens attend to the fewest), so TTFT reads short by at most k/P
// and the prefill rate high by 1/(1-k/P)-1; and t_b-t_a moves by the
// difference of the legs' savings, at most the larger of them, k/P of the
// cold prefill (t_a/(1-k_a/P) at most), over the decode span. Legs that
// reused alike move no decode.
func (b errorBudget) reuseParts(runs []Run, floor, allow int) {
	for _, r := range runs {
		p := float64(r.A.PromptTokens)
		ka, kb := float64(r.A.tolerated(floor, allow)), float64(r.B.tolerated(floor, allow))
		if p <= 0 || ka >= p {
			continue
		}
		if ka > 0 {
			b.largest(FigureTTFT, partReuse, -ka/p)
			b.largest(FigurePrefill, partReuse, 1/(1-ka/p)-1)
		}
		if dt := r.B.Seconds - r.A.Seconds; ka != kb && dt > 0 {
			sign := 1.0 // leg b saved more: t_b short, decode high
			if ka > kb {
				sign = -1
			}
			b.largest(FigureDecode, partReuse, sign*max(ka, kb)/p*r.A.Seconds/(1-ka/p)/dt)
		}
	}
}

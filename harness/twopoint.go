package harness

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/sglmock/sglmock/sim"
)

// Method is a variant of the two-point method.
type Method string

// The two-point variants.
const (
	// Naive sends the same prompt twice: the original benchmark's first
	// run, which the prefix cache poisons.
	Naive Method = "naive"
	// FlushMethod empties the prefix cache before each leg.
	FlushMethod Method = "flush"
	// NonceMethod puts a fresh nonce in each leg's prompt.
	NonceMethod Method = "nonce"
	// FlushNonce does both: the original benchmark's fix.
	FlushNonce Method = "flush+nonce"
	// SaltMethod sends the same prompt with a fresh cache_salt on each
	// leg: SGLang keys its radix cache on the salt from PR #30827 (0.5.17)
	// on; before it /generate ignores the salt and leg b reuses leg a.
	SaltMethod Method = "salt"
)

// Methods lists the two-point variants.
var Methods = []Method{Naive, FlushMethod, NonceMethod, FlushNonce, SaltMethod}

// methodNames is Methods for messages.
const methodNames = "naive, flush, nonce, flush+nonce, salt"

// Flushes tells whether the method flushes the cache before its legs.
func (m Method) Flushes() bool { return m == FlushMethod || m == FlushNonce }
func (m Method) nonces() bool  { return m == NonceMethod || m == FlushNonce }
func (m Method) salts() bool   { return m == SaltMethod }

// Point is one context of a sweep: the row's label and the server tokens
// its prompt is sized to.
type Point struct {
	CtxReq int `json:"ctx_req"`
	Tokens int `json:"tokens"`
}

// TwoPoint is the two-point method: per context a leg with max_new_tokens
// A and a leg with B on the same prompt; decode tok/s = (B-A)/(t_b-t_a),
// TTFT ~ t_a, prefill tok/s = prompt tokens / t_a.
type TwoPoint struct {
	Client  *Client
	Points  []Point
	A, B    int
	Methods []Method
	// NoncePosition is where the nonce methods put the nonce.
	NoncePosition NoncePosition
	// Repeat measures each context this many times and reports the
	// medians and the spread.
	Repeat int
	// FlushOnlyBetweenLegs sends the flush methods' flush before leg b
	// only, as a script that flushes after leg a does. On a fresh server it
	// is clean; on one that ran the sweep before, leg a finds the prompt
	// and output the last leg b left in the cache.
	FlushOnlyBetweenLegs bool
	Options
}

// Validate checks the configuration before anything is sent.
func (tp *TwoPoint) Validate() error {
	switch {
	case tp.A < 1 || tp.B <= tp.A || tp.B > MaxTokens:
		return fmt.Errorf("need 1 <= a < b <= %d, got a=%d b=%d", MaxTokens, tp.A, tp.B)
	case tp.Repeat < 1 || tp.Repeat > maxRepeat:
		return fmt.Errorf("repeat %d: must be in 1..%d", tp.Repeat, maxRepeat)
	case len(tp.Methods) == 0:
		return errors.New("no method")
	case tp.NoncePosition != NonceStart && tp.NoncePosition != NonceEnd:
		return fmt.Errorf("nonce position %q: must be start or end", tp.NoncePosition)
	}
	if err := validateCommon(tp.Points, tp.Options); err != nil {
		return err
	}
	for _, m := range tp.Methods {
		if tp.FlushOnlyBetweenLegs && !m.Flushes() {
			return fmt.Errorf("method %s sends no flush, so flushing only between the legs means nothing: use flush or flush+nonce", m)
		}
		if !slices.Contains(Methods, m) {
			return fmt.Errorf("method %q: must be one of %s", m, methodNames)
		}
		if m.Flushes() && tp.Client != nil && !tp.Client.CanFlush() {
			return fmt.Errorf("method %s: %w", m, ErrNoFlush)
		}
	}
	return nil
}

// Leg is one request of a measurement.
type Leg struct {
	Name             string `json:"leg"`
	RID              string `json:"rid"`
	MaxNewTokens     int    `json:"max_new_tokens"`
	PromptTokens     int    `json:"prompt_tokens"`
	CompletionTokens int    `json:"completion_tokens"`
	// CachedTokens is nil when the server does not report it; Tiers is its
	// cached_tokens_details (HiCache), nil when it reports none.
	CachedTokens *int   `json:"cached_tokens"`
	Tiers        *Tiers `json:"cached_tiers,omitempty"`
	// Seconds is the measured time, in the server's seconds.
	Seconds float64 `json:"seconds"`
	// Flush is the flush sent before the leg, if the method flushes.
	Flush *FlushRecord `json:"flush,omitempty"`
	// Truth is the server's record of the request, when it has /sim/.
	Truth *sim.Truth `json:"truth,omitempty"`
	// SizedTokens is what the server's /tokenize counted for the prompt
	// sent; 0 when it was sized another way.
	SizedTokens int `json:"sized_tokens,omitempty"`
	// SpecVerifyCt is the speculative rounds the server reported
	// (meta_info.spec_verify_ct); nil when it reports none.
	SpecVerifyCt *int `json:"spec_verify_ct,omitempty"`
	// SpecHistogram is the server's histogram of accepted drafts a round
	// (Generation.SpecHistogram): SpecHistogram[i] rounds gave i+1
	// tokens; nil when it reports none or an impossible one.
	SpecHistogram []int `json:"spec_accept_histogram,omitempty"`
	// Impossible names the counts of the answer no server can report
	// ("cached_tokens -5 of a 100-token prompt"); an impossible cached
	// count leaves CachedTokens nil.
	Impossible []string `json:"impossible_counts,omitempty"`
	// DPRank is the DP rank that ran the leg (meta_info.dp_rank, or the
	// mock's truth); nil when the server does not say (placement.go).
	DPRank *int `json:"dp_rank,omitempty"`
}

// record copies what the server reported of a generation into the leg.
func (l *Leg) record(s *session, g *Generation) {
	l.PromptTokens, l.CompletionTokens, l.Seconds = g.PromptTokens, g.CompletionTokens, s.seconds(g.Wall)
	l.SpecVerifyCt = g.SpecVerifyCt
	l.DPRank = g.DPRank
	l.Impossible = impossibleCounts(g)
	if !l.cachedImpossible() {
		l.CachedTokens = s.cached(g)
		if g.Tiers.hicache() {
			l.Tiers = g.Tiers
		}
	}
	if g.SpecHistogram != nil && !slices.ContainsFunc(l.Impossible, func(t string) bool { return strings.HasPrefix(t, g.SpecHistogramField) }) {
		l.SpecHistogram = g.SpecHistogram
	}
}

// cachedImpossible tells whether the leg's cached count was impossible.
func (l *Leg) cachedImpossible() bool {
	return slices.ContainsFunc(l.Impossible, func(t string) bool { return strings.HasPrefix(t, "cached_tokens") })
}

// Run is one two-point measurement: legs a and b.
type Run struct {
	A Leg `json:"a"`
	B Leg `json:"b"`
}

// Figures are the two-point results; nil where undefined (t_b <= t_a).
type Figures struct {
	TTFT       float64  `json:"ttft_s"`
	PrefillTPS float64  `json:"prefill_tok_s"`
	DecodeTPS  *float64 `json:"decode_tok_s"`
	SPerOutTok *float64 `json:"s_per_out_tok"`
}

// TruthFigures compare a row's figures with the server's model: the
// measurement error against the modelled values of the very requests sent
// (only the client's clock and transport are in it), and the method bias
// against the cold TTFT and the steady-state decode rate at that context
// (what the method itself gets wrong). Errors are relative, (measured -
// true)/true; nil where undefined.
type TruthFigures struct {
	TTFT         float64  `json:"ttft_true_s"`
	Decode       *float64 `json:"decode_true_tok_s"`
	ColdTTFT     float64  `json:"ttft_cold_s"`
	SteadyDecode *float64 `json:"decode_steady_tok_s"`
	TTFTErr      float64  `json:"ttft_err"`
	DecodeErr    *float64 `json:"decode_err"`
	TTFTBias     float64  `json:"ttft_bias"`
	DecodeBias   *float64 `json:"decode_bias"`
}

// Row is one context of one method: the median over its runs.
type Row struct {
	Method       Method  `json:"method"`
	CtxReq       int     `json:"ctx_req"`
	PromptTokens int     `json:"prompt_tok"`
	A            int     `json:"a"`
	B            int     `json:"b"`
	TA           float64 `json:"t_a"`
	TB           float64 `json:"t_b"`
	Figures
	// CachedA and CachedB are the most any run's leg reused; nil when
	// the server does not report it.
	CachedA *int `json:"cached_a"`
	CachedB *int `json:"cached_b"`
	// Spread is (max-min)/median of the decode rate over the runs (of
	// t_a when decode is undefined); 0 with one run.
	Spread  float64       `json:"spread"`
	Speedup float64       `json:"speedup"`
	Truth   *TruthFigures `json:"truth,omitempty"`
	Verdict Verdict       `json:"verdict"`
	Runs    []Run         `json:"runs"`
	// NoncePosition is where the nonce methods put the nonce; "" for the
	// methods without one.
	NoncePosition NoncePosition `json:"nonce_position,omitempty"`
	// SpecRounds is the median speculative rounds b-a took (reported by the
	// server, or expected from /sim/); nil when unknown or without
	// speculative decoding.
	SpecRounds *float64 `json:"spec_rounds,omitempty"`
	// Suggested is the fix the SUSPECT causes name, for programs.
	Suggested *Suggestion `json:"suggested,omitempty"`
	// FigureVerdicts are each figure's own verdict and error bound.
	FigureVerdicts FigureVerdicts `json:"figure_verdicts"`
}

// Report is the result of a run of the harness.
type Report struct {
	Method string      `json:"method"` // "twopoint" or "stream"
	Server Server      `json:"server"`
	Rows   []Row       `json:"rows,omitempty"`
	Stream []StreamRow `json:"stream_rows,omitempty"`
}

// noncePositionTitle says in a method's title where its nonce went: a
// nonce at the end leaves everything before it shared.
func noncePositionTitle(row Row, title string) string {
	if row.NoncePosition != NonceEnd {
		return title
	}
	switch row.Method {
	case NonceMethod:
		return "a fresh nonce at the END of each leg's prompt (--nonce-position end: everything before it is shared), no flush"
	case FlushNonce:
		title = strings.TrimSuffix(title, " (the original benchmark's fix)")
		return strings.Replace(title, "a fresh nonce at the start of each prompt", "a fresh nonce at the END of each prompt (--nonce-position end: everything before it is shared)", 1)
	}
	return title
}

// Poisoned tells whether any row is poisoned.
func (r *Report) Poisoned() bool {
	for _, row := range r.Rows {
		if row.Verdict.Level() == Poisoned {
			return true
		}
	}
	for _, row := range r.Stream {
		if row.Verdict.Level() == Poisoned {
			return true
		}
	}
	return false
}

// Run measures every method at every context, in that order, and checks
// each measurement.
func (tp *TwoPoint) Run(ctx context.Context) (*Report, error) {
	if err := tp.Validate(); err != nil {
		return nil, err
	}
	s, err := startSession(ctx, tp.Client, tp.Options, tp.Points, max(tp.A, tp.B))
	if err != nil {
		return nil, err
	}
	if slices.Contains(tp.Methods, FlushMethod) && tp.Client.Backend == SGLang {
		s.server.HiCacheStorage = tp.Client.hicacheStorage(ctx)
	}
	s.prog.Start(tp.plan())
	defer s.prog.Finish()
	rep := &Report{Method: "twopoint", Server: s.server}
	for _, m := range tp.Methods {
		for _, p := range tp.Points {
			row := Row{Method: m, CtxReq: p.CtxReq, A: tp.A, B: tp.B, Speedup: s.server.Speedup}
			if m.nonces() {
				row.NoncePosition = tp.NoncePosition
			}
			for i := range tp.Repeat {
				run, err := tp.measure(ctx, s, m, p, i)
				if err != nil {
					return rep, fmt.Errorf("%s at ctx %d: %w", m, p.CtxReq, err)
				}
				row.Runs = append(row.Runs, run)
			}
			if err := tp.summarize(ctx, s, &row); err != nil {
				return rep, err
			}
			rep.Rows = append(rep.Rows, row)
			s.prog.Row(rep)
		}
	}
	return rep, nil
}

// measure sends one run's two legs.
func (tp *TwoPoint) measure(ctx context.Context, s *session, m Method, p Point, i int) (Run, error) {
	var run Run
	seed := uint64(p.Tokens)
	var shared Prompt
	var sharedSized int
	if !m.nonces() {
		var err error
		if shared, sharedSized, err = s.builder.build(ctx, p.Tokens, seed, "", tp.NoncePosition); err != nil {
			return run, err
		}
	}
	for _, leg := range []*Leg{&run.A, &run.B} {
		leg.Name, leg.MaxNewTokens = "a", tp.A
		if leg == &run.B {
			leg.Name, leg.MaxNewTokens = "b", tp.B
		}
		id := s.opt.NewID()
		prompt, sized := shared, sharedSized
		if m.nonces() {
			var err error
			if prompt, sized, err = s.builder.build(ctx, p.Tokens, seed, id, tp.NoncePosition); err != nil {
				return run, err
			}
		}
		if !s.c.InputIDs {
			leg.SizedTokens = sized
		}
		if m.salts() {
			prompt.CacheSalt = id
		}
		desc := fmt.Sprintf("%s ctx %d leg %s", m, p.CtxReq, leg.Name)
		if tp.Repeat > 1 {
			desc += fmt.Sprintf(" (run %d/%d)", i+1, tp.Repeat)
		}
		s.prog.Leg(desc)
		if m.Flushes() && (leg == &run.B || !tp.FlushOnlyBetweenLegs) {
			rec, err := s.flush(ctx)
			if err != nil {
				return run, err
			}
			leg.Flush = rec
		}
		leg.RID = "twopoint-" + id
		g, err := s.c.Generate(ctx, prompt, leg.MaxNewTokens, leg.RID, false)
		if err != nil {
			return run, err
		}
		s.prog.Done()
		leg.record(s, g)
	}
	if s.sim != nil {
		for _, leg := range []*Leg{&run.A, &run.B} {
			t, err := s.c.Truth(ctx, leg.RID)
			if err != nil {
				return run, err
			}
			leg.Truth = t
			if leg.DPRank == nil {
				leg.DPRank = t.DPRank // the server did not say: the mock's record does
			}
		}
	}
	return run, nil
}

// figures computes one run's two-point results.
func (r Run) figures() Figures {
	f := Figures{TTFT: r.A.Seconds}
	// An impossible prompt count gives no prefill rate, not a negative one.
	if r.A.Seconds > 0 && r.A.PromptTokens > 0 {
		f.PrefillTPS = float64(r.A.PromptTokens) / r.A.Seconds
	}
	dt, dn := r.B.Seconds-r.A.Seconds, r.B.CompletionTokens-r.A.CompletionTokens
	if dt > 0 && dn > 0 && r.A.CompletionTokens >= 0 {
		d, s := float64(dn)/dt, dt/float64(dn)
		f.DecodeTPS, f.SPerOutTok = &d, &s
	}
	return f
}

// check runs every check on one run. floor is the shared prefix floor (-1
// unknown); allow the tolerated reuse beyond it. A reversed run (t_b <=
// t_a) is left to reversed, which names the runs of a row.
//
// A finding about leg a concerns every figure (TTFT and the prefill rate
// are leg a's, and decode is the legs' difference); one about leg b the
// decode rate alone. Reuse is judged by what it moves: leg a's moves TTFT
// and the prefill rate, and decode unless leg b reused as much (the two
// prefills then match, and t_b-t_a is decode alone).
func (r Run) check(floor, allow int) Verdict {
	var v Verdict
	bound := max(floor, 0) + allow
	reused := func(l Leg) bool { return l.CachedTokens != nil && *l.CachedTokens > bound }
	same := r.A.CachedTokens != nil && r.B.CachedTokens != nil && *r.A.CachedTokens == *r.B.CachedTokens
	for _, leg := range []Leg{r.A, r.B} {
		figs := []Figure(nil) // leg a: every figure
		if leg.Name == "b" {
			figs = decodeOnly
		}
		if leg.Flush != nil && !leg.Flush.OK() {
			v.addTo(figs, Suspect, flushCause(leg.Name, leg.Flush))
		}
		if len(leg.Impossible) > 0 {
			text := fmt.Sprintf("leg %s: the server reported impossible counts: %s", leg.Name, strings.Join(leg.Impossible, ", "))
			if leg.cachedImpossible() {
				text += ", so cache reuse is unchecked"
			}
			v.addTo(figs, Suspect, text)
		}
		switch {
		case leg.cachedImpossible():
		case leg.CachedTokens == nil:
			v.addTo(figs, Suspect, fmt.Sprintf("leg %s: the server reports no cached tokens, so cache reuse is unchecked (SGLang's OpenAI routes report them with --enable-cache-report, vLLM with --enable-prompt-tokens-details)", leg.Name))
		case reused(leg):
			text := fmt.Sprintf("leg %s reused %d of %d prompt tokens (cached_tokens)", leg.Name, *leg.CachedTokens, leg.PromptTokens)
			if floor > 0 {
				text += fmt.Sprintf(", beyond the %d every prompt shares", floor)
			}
			if leg.Flush != nil && leg.Flush.OK() {
				text += " although the flush before it was accepted"
			}
			text += tierClause(leg.Tiers)
			moves := legAFigures
			switch {
			case leg.Name == "a" && !same:
				moves = nil
			case leg.Name == "b" && !same:
				moves = decodeOnly
			case leg.Name == "b":
				// As much as leg a: the legs' prefills match.
				v.addTo(decodeOnly, OK, text+", as leg a did: their prefills match, so decode is not moved by it")
				continue
			}
			v.addTo(moves, Poisoned, text)
		}
		if leg.CompletionTokens != leg.MaxNewTokens {
			v.addTo(figs, Suspect, fmt.Sprintf("leg %s generated %d of %d tokens", leg.Name, leg.CompletionTokens, leg.MaxNewTokens))
		}
		if leg.SizedTokens > 0 && leg.PromptTokens != leg.SizedTokens && leg.PromptTokens > 0 {
			v.addTo(figs, Suspect, fmt.Sprintf("leg %s: the server's /tokenize counted %d tokens for the prompt, its answer %d: one of them is not the tokenizer the requests use, so the prompt's size is uncertain", leg.Name, leg.SizedTokens, leg.PromptTokens))
		}
	}
	if r.A.PromptTokens != r.B.PromptTokens {
		v.addTo(decodeOnly, Suspect, fmt.Sprintf("the legs' prompts differ: %d and %d tokens", r.A.PromptTokens, r.B.PromptTokens))
	}
	return v
}

// reversalLevel is how bad a run's t_b <= t_a is: POISONED when a leg was
// served from the cache or the server does not say whether it was (the
// original benchmark's nan), SUSPECT when both legs were cold (a stall of
// the client, or jitter larger than the legs' difference).
func (r Run) reversalLevel(v Verdict) Level {
	if v.LevelOf(FigureDecode) == Poisoned || r.A.CachedTokens == nil || r.B.CachedTokens == nil {
		return Poisoned
	}
	return Suspect
}

// reversed says which runs had t_b <= t_a: of the one run, "t_b < t_a,
// so decode is undefined"; of several, which ones and that the median
// counts them as the fastest, so the row's decode stands when they are
// fewer than half.
func reversed(v *Verdict, runs []Run, checks []Verdict, medianDefined bool) {
	var idx []int
	level := OK
	for i, r := range runs {
		if r.B.Seconds <= r.A.Seconds {
			idx = append(idx, i)
			level = max(level, r.reversalLevel(checks[i]))
		}
	}
	if len(idx) == 0 {
		return
	}
	if len(runs) == 1 {
		rel := "<"
		if runs[0].B.Seconds == runs[0].A.Seconds {
			rel = "="
		}
		v.addTo(decodeOnly, level, fmt.Sprintf("t_b %s t_a, so decode is undefined", rel))
		return
	}
	var which []string
	for _, i := range idx[:min(len(idx), 3)] {
		which = append(which, fmt.Sprintf("run %d: t_a %s, t_b %s", i+1, f3(runs[i].A.Seconds), f3(runs[i].B.Seconds)))
	}
	if len(idx) > 3 {
		which = append(which, "...")
	}
	text := fmt.Sprintf("t_b <= t_a in %d of %d runs (%s): their decode is undefined", len(idx), len(runs), strings.Join(which, "; "))
	if medianDefined {
		text += "; the median counts them as the fastest"
	} else {
		text += ", and so is the median"
	}
	v.addTo(decodeOnly, level, text)
}

// summarize fills a row from its runs: medians, spread, verdict, truth.
//
// A run whose t_b <= t_a has no decode rate; the median ranks it as the
// fastest (its t_b-t_a is the smallest), so the row's decode is defined
// while such runs are fewer than half.
func (tp *TwoPoint) summarize(ctx context.Context, s *session, row *Row) error {
	var tas, tbs, ttfts, prefills, decodes, spos, defined []float64
	var checks []Verdict
	row.PromptTokens = row.Runs[0].A.PromptTokens // as reported, even when impossible
	for _, r := range row.Runs {
		f := r.figures()
		tas, tbs = append(tas, r.A.Seconds), append(tbs, r.B.Seconds)
		ttfts, prefills = append(ttfts, f.TTFT), append(prefills, f.PrefillTPS)
		switch {
		case f.DecodeTPS != nil:
			decodes, spos = append(decodes, *f.DecodeTPS), append(spos, *f.SPerOutTok)
			defined = append(defined, *f.DecodeTPS)
		case r.B.Seconds <= r.A.Seconds:
			decodes, spos = append(decodes, math.Inf(1)), append(spos, 0)
		}
		c := r.check(s.server.SharedFloor, s.opt.AllowSharedPrefix)
		if cause := placementCause(row.Method, r, s.server.DPRanks, s.server.SharedFloor, s.opt.AllowSharedPrefix); cause != "" {
			c.addTo(decodeOnly, Suspect, cause) // leg b's coldness: leg a's figures stand
		}
		checks = append(checks, c)
		row.Verdict.merge(c)
		row.PromptTokens = max(row.PromptTokens, r.A.PromptTokens, r.B.PromptTokens)
		row.CachedA, row.CachedB = maxPtr(row.CachedA, r.A.CachedTokens), maxPtr(row.CachedB, r.B.CachedTokens)
	}
	for _, c := range s.notes {
		row.Verdict.add(c.Level, c.Text)
	}
	storageCheck(&row.Verdict, row.Method, s.server)
	if row.Method.salts() {
		if c, ok := s.saltCause(); ok {
			row.Verdict.add(c.Level, c.Text)
		}
	}
	if note := retriedFlushes(row.Runs); note != "" {
		row.Verdict.add(OK, note)
	}
	row.TA, row.TB = median(tas), median(tbs)
	row.TTFT, row.PrefillTPS = median(ttfts), median(prefills)
	d, sp := median(decodes), median(spos)
	medianDefined := len(decodes) == len(row.Runs) && !math.IsInf(d, 0) && sp > 0
	if medianDefined {
		row.DecodeTPS, row.SPerOutTok = &d, &sp
	}
	if len(defined) > 0 {
		row.Spread = spread(defined)
	} else {
		row.Spread = spread(tas)
	}
	reversed(&row.Verdict, row.Runs, checks, medianDefined)
	if n := len(row.Runs) - len(decodes); n > 0 && len(row.Runs) > 1 {
		row.Verdict.addTo(decodeOnly, Suspect, fmt.Sprintf("decode is undefined in %d of %d runs (leg b did not report more tokens than leg a)", n, len(row.Runs)))
	}
	row.SpecRounds = tp.specRounds(s, row.Runs)
	budget := errorBudget{}
	budget.add(FigureTTFT, partSpread, spreadHalf(ttfts))
	budget.add(FigurePrefill, partSpread, spreadHalf(prefills))
	budget.reuseParts(row.Runs, s.server.SharedFloor, s.opt.AllowSharedPrefix)
	if medianDefined {
		row.precision(s, tp.A, tp.B, defined, budget)
	}
	if s.sim != nil {
		if err := tp.truth(ctx, s, row, budget); err != nil {
			return err
		}
	}
	fv, sug := judgeFigures(&row.Verdict, budget, budgetFix{n: len(row.Runs), flag: "--b", speedup: row.Speedup})
	row.FigureVerdicts = fv
	row.suggest(sug)
	return nil
}

// precision checks that the row's decode is known to ±Tolerance: that
// b-a spans enough speculative rounds (roundsCheck), and that the 95 %
// interval of its decode is narrow enough. That interval is the wider of
// the one the acceptance scatter predicts (scatterCheck) and, over
// repeats, the one the runs' spread measures (spreadCheck): one finding
// names it, with its fix. Over too few rounds the rounds check's fix comes
// first, and the scatter is not judged: a handful of rounds (one of them
// cut short by max_new_tokens) tells its standard deviation too roughly
// to size a b by, and the b the rounds check names spans enough to.
func (row *Row) precision(s *session, a, b int, decodes []float64, budget errorBudget) {
	var sug Suggestion
	n := len(row.Runs)
	sc, measured := row.scatter(s), spreadHalf(decodes)
	few := false
	if row.SpecRounds != nil {
		rounds := *row.SpecRounds
		accept := float64(b-a) / rounds
		if s.sim != nil && s.sim.ExpectedAccept > 1 {
			accept = s.sim.ExpectedAccept // the model's mean, not one run's draw
		}
		legA := row.legARounds(a, accept)
		few = fewRounds(a, b, rounds, accept)
		atLeast := 0
		if msc := s.modelScatter(); msc != nil && few {
			atLeast, _ = scatterFix(*msc, float64(b-a)/accept, legA, n)
		}
		sug.B = roundsCheck(&row.Verdict, "--b", a, b, rounds, accept, atLeast)
		if few {
			budget.add(FigureDecode, partRounds, 1/rounds)
		}
		if half := 0.0; sc != nil && !few {
			if half = scatterHalf(*sc, rounds, legA, n); half >= measured {
				budget.add(FigureDecode, partScatter, half)
				row.suggest(sug)
				row.suggest(scatterCheck(&row.Verdict, "--b", a, b, rounds, legA, *sc, n))
				return
			}
		}
		if sc == nil && !few && n == 1 && accept > 1 {
			// Over repeats the spread check measures it instead.
			scatterUnchecked(&row.Verdict, "--b", a, b, rounds, ": --repeat measures it")
		}
	}
	budget.add(FigureDecode, partSpread, measured)
	sug.Repeat = spreadCheck(&row.Verdict, decodes, few)
	row.suggest(sug)
}

// legARounds is the speculative rounds leg a took: the median of what its
// runs reported (spec_verify_ct), else a-1 tokens at accept a round; 0
// for a leg of one token, which takes none.
func (row *Row) legARounds(a int, accept float64) float64 {
	if a <= 1 {
		return 0
	}
	var rounds []float64
	for _, r := range row.Runs {
		if r.A.SpecVerifyCt == nil {
			return float64(a-1) / accept
		}
		rounds = append(rounds, float64(*r.A.SpecVerifyCt))
	}
	return median(rounds)
}

// scatter is the row's acceptance scatter: from the histograms of accepted
// drafts its legs reported, pooled over its runs, when every leg b
// reported one; else from the accept_dist of /sim/profile; nil when
// neither is known.
func (row *Row) scatter(s *session) *Scatter {
	var hs [][]int
	for _, r := range row.Runs {
		if r.B.SpecHistogram == nil {
			hs = nil
			break
		}
		hs = append(hs, r.A.SpecHistogram, r.B.SpecHistogram)
	}
	return s.scatter(hs)
}

// scatter is the acceptance scatter of the histograms of accepted drafts
// hs, pooled; else, with hs empty, from the accept_dist of /sim/profile;
// nil when neither is known.
func (s *session) scatter(hs [][]int) *Scatter {
	if sc, ok := histogramScatter(hs...); ok {
		return &sc
	}
	return s.modelScatter()
}

// modelScatter is the acceptance scatter of the mock's model (the
// accept_dist of /sim/profile); nil against another server. Over the few
// rounds a short leg takes, the legs' histograms tell the scatter too
// roughly to size a b by; the model's does not depend on them.
func (s *session) modelScatter() *Scatter {
	if s.sim != nil {
		if sc, ok := AcceptScatter(s.sim.AcceptDist); ok && sc.SD > 0 {
			return &sc
		}
	}
	return nil
}

// aCached is the CSV's a_cached: whether any run's leg a reused more than
// the shared floor; "" when the server does not say.
func (row *Row) aCached(floor int) string {
	if row.CachedA == nil {
		return ""
	}
	return strconv.FormatBool(*row.CachedA > floor)
}

// suggest merges a fix into the row's suggestion.
func (row *Row) suggest(sug Suggestion) { row.Suggested = mergeSuggestion(row.Suggested, sug) }

// specRounds is the median of the speculative rounds b-a took over the
// runs, from the rounds each leg reported (spec_verify_ct: a leg of one
// token reports none, having taken none), else expected from the mock's
// mean accept length; nil when neither is known or without speculative
// decoding.
func (tp *TwoPoint) specRounds(s *session, runs []Run) *float64 {
	var rounds []float64
	for _, r := range runs {
		if r.B.SpecVerifyCt == nil {
			break
		}
		a := 0
		if r.A.SpecVerifyCt != nil {
			a = *r.A.SpecVerifyCt
		}
		rounds = append(rounds, float64(*r.B.SpecVerifyCt-a))
	}
	var m float64
	switch {
	case len(rounds) == len(runs):
		m = median(rounds)
	case s.sim != nil && s.sim.ExpectedAccept > 1:
		m = float64(tp.B-tp.A) / s.sim.ExpectedAccept
	default:
		return nil
	}
	if m <= 0 || m >= float64(tp.B-tp.A) {
		return nil // one token a round: no speculative decoding
	}
	return &m
}

// truth computes the row's errors against the model. With several runs
// each error is the median of the runs' errors, every run's measured
// figure taken against the truth of its own requests (a run without a
// decode rate counts as the fastest, as in the median of the rates).
func (tp *TwoPoint) truth(ctx context.Context, s *session, row *Row, budget errorBudget) error {
	var trueTA, trueDecode, ttftErrs, decodeErrs []float64
	for _, r := range row.Runs {
		f := r.figures()
		trueTA = append(trueTA, r.A.Truth.E2E)
		ttftErrs = append(ttftErrs, relErr(f.TTFT, r.A.Truth.E2E))
		if dt := r.B.Truth.E2E - r.A.Truth.E2E; dt > 0 {
			d := float64(r.B.Truth.CompletionTokens-r.A.Truth.CompletionTokens) / dt
			trueDecode = append(trueDecode, d)
			switch {
			case f.DecodeTPS != nil:
				decodeErrs = append(decodeErrs, relErr(*f.DecodeTPS, d))
			case r.B.Seconds <= r.A.Seconds:
				decodeErrs = append(decodeErrs, math.Inf(1))
			}
		}
	}
	prompt := row.Runs[0].A.PromptTokens
	cold, err := s.expect(ctx, prompt, 0, 1)
	if err != nil {
		return err
	}
	steady, err := s.expect(ctx, prompt, 0, tp.B)
	if err != nil {
		return err
	}
	t := &TruthFigures{TTFT: median(trueTA), ColdTTFT: cold.TTFT, SteadyDecode: steady.DecodeTokensPerS}
	t.TTFTErr, t.TTFTBias = median(ttftErrs), relErr(row.TTFT, t.ColdTTFT)
	if len(trueDecode) == len(row.Runs) {
		d := median(trueDecode)
		t.Decode = &d
	}
	if e := median(decodeErrs); len(decodeErrs) == len(row.Runs) && !math.IsInf(e, 0) {
		t.DecodeErr = &e
	}
	if row.DecodeTPS != nil && t.SteadyDecode != nil {
		b := relErr(*row.DecodeTPS, *t.SteadyDecode)
		t.DecodeBias = &b
		expected, err := s.growth(ctx, &row.Verdict, "--b", prompt, tp.A, tp.B, *t.SteadyDecode, t.DecodeBias)
		if err != nil {
			return err
		}
		budget.add(FigureDecode, partGrowth, expected)
	}
	row.Truth = t
	budget.latenessParts(t)
	dtTrue := 0.0
	if t.Decode != nil {
		dtTrue = float64(tp.B-tp.A) / *t.Decode
	}
	row.suggest(Suggestion{Speedup: lateness(&row.Verdict, t.TTFTErr, t.TTFT, t.DecodeErr, dtTrue, row.Speedup)})
	return nil
}

// growth checks a decode figure against the context it was decoded over:
// tokens a to b of a request with this prompt are decoded from prompt+a
// to prompt+b tokens of context, each round priced at the context it has,
// so the figure is the mean rate over that span. The span's mean time a
// token comes from the model's steady rates at its start, middle and end
// (Simpson's rule: exact where the cost is linear in the context, as
// between a table's points); steady is the rate at the prompt, and flag
// the option that sets b; measured is the row's decode_bias. A span that ends at the context length itself
// is one the model refuses to price (400): it is then not judged.
func (s *session) growth(ctx context.Context, v *Verdict, flag string, prompt, a, b int, steady float64, measured *float64) (float64, error) {
	var rates [3]float64
	for i, at := range [3]int{prompt + a, prompt + (a+b)/2, prompt + b} {
		e, err := s.expect(ctx, at, 0, 1)
		var refused *HTTPError
		if errors.As(err, &refused) && refused.Status == http.StatusBadRequest {
			// The span's end at the context length itself: the model prices
			// no request there, and the span is not judged.
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		if e.DecodeTokensPerS == nil || *e.DecodeTokensPerS <= 0 {
			return 0, nil // a profile that charges nothing for a round
		}
		rates[i] = *e.DecodeTokensPerS
	}
	mean := (1/rates[0] + 4/rates[1] + 1/rates[2]) / 6
	expected := relErr(1/mean, steady)
	growthCheck(v, flag, prompt, a, b, rates[0], rates[2], expected, measured)
	return expected, nil
}

// retriedFlushes describes the flushes that were refused first and then
// accepted on a retry, as SGLang refuses one sent right after a response;
// "" when there were none.
func retriedFlushes(runs []Run) string {
	flushes, retried, most := 0, 0, 0
	for _, r := range runs {
		for _, f := range []*FlushRecord{r.A.Flush, r.B.Flush} {
			if f == nil {
				continue
			}
			flushes++
			if f.OK() && len(f.Attempts) > 1 {
				retried++
				most = max(most, len(f.Attempts))
			}
		}
	}
	if retried == 0 {
		return ""
	}
	return fmt.Sprintf("%d of %d flushes were refused at first and accepted on a retry, after at most %d tries", retried, flushes, most)
}

func maxPtr(a, b *int) *int {
	switch {
	case b == nil:
		return a
	case a == nil || *b > *a:
		v := *b
		return &v
	}
	return a
}

// Median is the median a row's figures are of its runs, for programs
// that take runs apart as bench does (calibrate).
func Median(xs []float64) float64 { return median(xs) }

// median of xs (the mean of the middle two for an even count).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// spread is (max-min)/median; 0 for fewer than two values.
func spread(xs []float64) float64 {
	if len(xs) < 2 {
		return 0
	}
	m := median(xs)
	if m == 0 {
		return 0
	}
	return (slices.Max(xs) - slices.Min(xs)) / m
}

// ParseMethods parses a comma-separated list of methods.
func ParseMethods(s string) ([]Method, error) {
	var out []Method
	for _, f := range strings.Split(s, ",") {
		m := Method(strings.TrimSpace(f))
		if !slices.Contains(Methods, m) {
			return nil, fmt.Errorf("method %q: must be one of %s", m, methodNames)
		}
		if slices.Contains(out, m) {
			return nil, fmt.Errorf("method %s is given twice (--repeat N measures a context N times)", m)
		}
		out = append(out, m)
	}
	return out, nil
}

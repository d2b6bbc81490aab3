package harness

import (
	"context"
	"fmt"
	"strings"
)

// Stream measures with one streaming request per context: TTFT from the
// first event, and the decode rate token-weighted from the cumulative
// completion tokens the events report, which stays right when one event
// carries several speculative tokens. It also reports the per-event ITL a
// script that counts one token per event would compute, and how far off it
// is. Each request gets a fresh nonce at the start of its prompt, and a
// flush before it when the backend has one.
type Stream struct {
	Client       *Client
	Points       []Point
	MaxNewTokens int
	// NoFlush skips the flush before each request (the nonce alone keeps
	// it cold).
	NoFlush bool
	Options
}

// StreamRow is one context of a stream run.
type StreamRow struct {
	CtxReq       int     `json:"ctx_req"`
	PromptTokens int     `json:"prompt_tok"`
	TTFT         float64 `json:"ttft_s"`
	PrefillTPS   float64 `json:"prefill_tok_s"`
	// DecodeTPS is token-weighted: the tokens after the first event over
	// the time from the first event to the last.
	DecodeTPS  float64 `json:"decode_tok_s"`
	SPerOutTok float64 `json:"s_per_out_tok"`
	Events     int     `json:"events"`
	// TokensPerEvent is the mean tokens an event after the first added.
	TokensPerEvent float64 `json:"tokens_per_event"`
	// EventITL is the mean gap between events: what a script that counts
	// one token per event reports as inter-token latency.
	EventITL float64 `json:"event_itl_s"`
	// EventITLErr is EventITL against the true seconds per token
	// (1/DecodeTPS), relative.
	EventITLErr float64       `json:"event_itl_err"`
	Cached      *int          `json:"cached"`
	Speedup     float64       `json:"speedup"`
	Truth       *TruthFigures `json:"truth,omitempty"`
	Verdict     Verdict       `json:"verdict"`
	Leg         Leg           `json:"request"`
	// Suggested is the fix the SUSPECT causes name, for programs.
	Suggested *Suggestion `json:"suggested,omitempty"`
	// FigureVerdicts are each figure's own verdict and error bound.
	FigureVerdicts FigureVerdicts `json:"figure_verdicts"`
}

// Validate checks the configuration before anything is sent.
func (st *Stream) Validate() error {
	if st.MaxNewTokens < 3 || st.MaxNewTokens > MaxTokens {
		return fmt.Errorf("max new tokens %d: a decode rate needs at least 3, and at most %d are sent", st.MaxNewTokens, MaxTokens)
	}
	return validateCommon(st.Points, st.Options)
}

// Run measures every context in order.
func (st *Stream) Run(ctx context.Context) (*Report, error) {
	if err := st.Validate(); err != nil {
		return nil, err
	}
	s, err := startSession(ctx, st.Client, st.Options, st.Points, st.MaxNewTokens)
	if err != nil {
		return nil, err
	}
	s.prog.Start(st.plan())
	defer s.prog.Finish()
	rep := &Report{Method: "stream", Server: s.server}
	for _, p := range st.Points {
		row, err := st.measure(ctx, s, p)
		if err != nil {
			return rep, fmt.Errorf("stream at ctx %d: %w", p.CtxReq, err)
		}
		rep.Stream = append(rep.Stream, row)
		s.prog.Row(rep)
	}
	return rep, nil
}

func (st *Stream) measure(ctx context.Context, s *session, p Point) (StreamRow, error) {
	row := StreamRow{CtxReq: p.CtxReq, Speedup: s.server.Speedup}
	id := s.opt.NewID()
	prompt, sized, err := s.builder.build(ctx, p.Tokens, uint64(p.Tokens), id, NonceStart)
	if err != nil {
		return row, err
	}
	s.prog.Leg(fmt.Sprintf("stream ctx %d", p.CtxReq))
	leg := Leg{Name: "stream", RID: "stream-" + id, MaxNewTokens: st.MaxNewTokens}
	if !s.c.InputIDs {
		leg.SizedTokens = sized
	}
	if !st.NoFlush && s.c.CanFlush() {
		if leg.Flush, err = s.flush(ctx); err != nil {
			return row, err
		}
	}
	g, err := s.c.Generate(ctx, prompt, st.MaxNewTokens, leg.RID, true)
	if err != nil {
		return row, err
	}
	s.prog.Done()
	leg.record(s, g)
	row.Cached = leg.CachedTokens
	row.PromptTokens = g.PromptTokens
	first, last := g.Events[0], g.Events[len(g.Events)-1]
	row.Events = len(g.Events)
	row.TTFT = s.seconds(first.At)
	// An impossible prompt count gives no prefill rate, not a negative one.
	if row.TTFT > 0 && g.PromptTokens > 0 {
		row.PrefillTPS = float64(g.PromptTokens) / row.TTFT
	}
	v := &row.Verdict
	budget := errorBudget{}
	for _, c := range s.notes {
		v.add(c.Level, c.Text)
	}
	if len(leg.Impossible) > 0 {
		text := "the server reported impossible counts: " + strings.Join(leg.Impossible, ", ")
		if leg.cachedImpossible() {
			text += ", so cache reuse is unchecked"
		}
		v.add(Suspect, text)
	}
	if leg.SizedTokens > 0 && leg.PromptTokens != leg.SizedTokens && leg.PromptTokens > 0 {
		v.addTo(legAFigures, Suspect, fmt.Sprintf("the server's /tokenize counted %d tokens for the prompt, its answer %d: one of them is not the tokenizer the requests use, so the prompt's size is uncertain", leg.SizedTokens, leg.PromptTokens))
	}
	switch f := leg.Flush; {
	case f != nil && !f.OK():
		v.add(Suspect, flushCause("stream", f))
	case f != nil && len(f.Attempts) > 1:
		v.add(OK, fmt.Sprintf("the flush was refused at first and accepted on try %d", len(f.Attempts)))
	}
	floor := max(s.server.SharedFloor, 0) + s.opt.AllowSharedPrefix
	switch {
	case leg.cachedImpossible():
	case leg.CachedTokens == nil:
		v.addTo(legAFigures, Suspect, "the server reports no cached tokens, so cache reuse is unchecked")
	case *leg.CachedTokens > floor:
		// A prefix from the cache shortens the prefill, not the decode.
		v.addTo(legAFigures, Poisoned, fmt.Sprintf("the request reused %d of %d prompt tokens (cached_tokens)", *leg.CachedTokens, leg.PromptTokens))
	default:
		budget.reuseParts([]Run{{A: leg, B: leg}}, s.server.SharedFloor, s.opt.AllowSharedPrefix)
	}
	if leg.CompletionTokens != st.MaxNewTokens {
		v.addTo(decodeOnly, Suspect, fmt.Sprintf("the request generated %d of %d tokens", leg.CompletionTokens, st.MaxNewTokens))
	}
	if !first.CountKnown {
		// One token an event is then assumed, which the final usage checks.
		switch {
		case !g.CountsReported:
			v.addTo(decodeOnly, Suspect, fmt.Sprintf("the events carry no token counts and no final usage says how many tokens came, so one token per event is assumed (%d events)", len(g.Events)))
		case g.CompletionTokens != len(g.Events):
			v.addTo(decodeOnly, Suspect, fmt.Sprintf("the events carry no token counts, and the final usage says %d tokens for %d events: the decode rate assumes one token per event", g.CompletionTokens, len(g.Events)))
		default:
			v.addTo(decodeOnly, OK, fmt.Sprintf("the events carry no token counts; the final usage's %d tokens are the %d events: one token per event", g.CompletionTokens, len(g.Events)))
		}
	}
	span, tokens := s.seconds(last.At-first.At), last.CompletionTokens-first.CompletionTokens
	if len(g.Events) < 2 || span <= 0 || tokens <= 0 {
		v.addTo(decodeOnly, Poisoned, fmt.Sprintf("%d events after the first, %d tokens: no decode rate", len(g.Events)-1, tokens))
	} else {
		row.DecodeTPS, row.SPerOutTok = float64(tokens)/span, span/float64(tokens)
		row.TokensPerEvent = float64(tokens) / float64(len(g.Events)-1)
		row.EventITL = span / float64(len(g.Events)-1)
		row.EventITLErr = relErr(row.EventITL, row.SPerOutTok)
		if row.TokensPerEvent > 1 {
			v.addTo(decodeOnly, OK, fmt.Sprintf("events carry %.2f tokens each: a per-event ITL is %.2fx the true time per token", row.TokensPerEvent, row.EventITL/row.SPerOutTok))
		}
		// The span from the first event to the last is the request's
		// speculative rounds (the first token comes out of prefill).
		if g.SpecVerifyCt != nil && !leg.cachedImpossible() {
			rounds, accept := float64(*g.SpecVerifyCt), float64(tokens)/float64(*g.SpecVerifyCt)
			if s.sim != nil && s.sim.ExpectedAccept > 1 {
				accept = s.sim.ExpectedAccept
			}
			sc := s.scatter(histograms(leg.SpecHistogram))
			few := fewRounds(1, st.MaxNewTokens, rounds, accept)
			atLeast := 0
			if msc := s.modelScatter(); msc != nil && few {
				atLeast, _ = scatterFix(*msc, float64(st.MaxNewTokens-1)/accept, 0, 1)
			}
			if b := roundsCheck(v, "--max-new-tokens", 1, st.MaxNewTokens, rounds, accept, atLeast); b > 0 {
				budget.add(FigureDecode, partRounds, 1/rounds)
				row.suggest(Suggestion{B: b})
			} else if sc != nil {
				budget.add(FigureDecode, partScatter, scatterHalf(*sc, rounds, 0, 1))
				row.suggest(scatterCheck(v, "--max-new-tokens", 1, st.MaxNewTokens, rounds, 0, *sc, 1))
			} else if accept > 1 {
				scatterUnchecked(v, "--max-new-tokens", 1, st.MaxNewTokens, rounds, "")
			}
		}
	}
	if s.sim != nil {
		if err := st.truth(ctx, s, &row, &leg, budget); err != nil {
			return row, err
		}
	}
	fv, sug := judgeFigures(v, budget, budgetFix{n: 1, flag: "--max-new-tokens", speedup: row.Speedup})
	row.FigureVerdicts = fv
	row.suggest(sug)
	row.Leg = leg
	return row, nil
}

func (st *Stream) truth(ctx context.Context, s *session, row *StreamRow, leg *Leg, budget errorBudget) error {
	t, err := s.c.Truth(ctx, leg.RID)
	if err != nil {
		return err
	}
	leg.Truth = t
	if t.TTFT == nil || t.FirstToken == nil {
		return fmt.Errorf("request %s: the server's truth has no first token (finish %q)", leg.RID, t.FinishReason)
	}
	cold, err := s.expect(ctx, leg.PromptTokens, 0, 1)
	if err != nil {
		return err
	}
	steady, err := s.expect(ctx, leg.PromptTokens, 0, st.MaxNewTokens)
	if err != nil {
		return err
	}
	tr := &TruthFigures{TTFT: *t.TTFT, ColdTTFT: cold.TTFT, SteadyDecode: steady.DecodeTokensPerS}
	if d := t.Finished - *t.FirstToken; d > 0 {
		decode := float64(t.CompletionTokens-1) / d
		e := relErr(row.DecodeTPS, decode)
		tr.Decode, tr.DecodeErr = &decode, &e
	}
	tr.TTFTErr, tr.TTFTBias = relErr(row.TTFT, tr.TTFT), relErr(row.TTFT, tr.ColdTTFT)
	if tr.SteadyDecode != nil && row.DecodeTPS > 0 {
		b := relErr(row.DecodeTPS, *tr.SteadyDecode)
		tr.DecodeBias = &b
		expected, err := s.growth(ctx, &row.Verdict, "--max-new-tokens", leg.PromptTokens, 1, st.MaxNewTokens, *tr.SteadyDecode, tr.DecodeBias)
		if err != nil {
			return err
		}
		budget.add(FigureDecode, partGrowth, expected)
	}
	row.Truth = tr
	budget.latenessParts(tr)
	span := t.Finished - *t.FirstToken
	row.suggest(Suggestion{Speedup: lateness(&row.Verdict, tr.TTFTErr, tr.TTFT, tr.DecodeErr, span, row.Speedup)})
	return nil
}

// suggest merges a fix into the row's suggestion.
func (row *StreamRow) suggest(sug Suggestion) {
	row.Suggested = mergeSuggestion(row.Suggested, sug)
}

// histograms is the leg's histogram of accepted drafts as a list for
// session.scatter: none when the leg reported none.
func histograms(h []int) [][]int {
	if h == nil {
		return nil
	}
	return [][]int{h}
}

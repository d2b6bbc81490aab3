package scenarios

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sglmock/sglmock/harness"
)

// truthFigures are the figures a row has against sglmock's model.
var truthFigures = []string{"ttft_err", "decode_err", "ttft_bias", "decode_bias", "ttft_true_s", "decode_true_tok_s", "ttft_cold_s", "decode_steady_tok_s"}

func setTruth(rw *row, t *harness.TruthFigures) {
	if t == nil {
		for _, name := range truthFigures {
			rw.figures[name] = nil
		}
		return
	}
	rw.set("ttft_err", t.TTFTErr)
	rw.setPtr("decode_err", t.DecodeErr)
	rw.set("ttft_bias", t.TTFTBias)
	rw.setPtr("decode_bias", t.DecodeBias)
	rw.set("ttft_true_s", t.TTFT)
	rw.setPtr("decode_true_tok_s", t.Decode)
	rw.set("ttft_cold_s", t.ColdTTFT)
	rw.setPtr("decode_steady_tok_s", t.SteadyDecode)
}

func contextsOf(points []harness.Point) []int {
	var out []int
	for _, p := range points {
		out = append(out, p.CtxReq)
	}
	return out
}

func pointsText(points []harness.Point) string {
	var parts []string
	for _, p := range points {
		if p.CtxReq == p.Tokens {
			parts = append(parts, fmt.Sprint(p.Tokens))
		} else {
			parts = append(parts, fmt.Sprintf("%d:%d", p.CtxReq, p.Tokens))
		}
	}
	return strings.Join(parts, ",")
}

func (fp flushPolicy) String() string {
	if fp.timeout > 0 {
		return fmt.Sprintf("flush with ?timeout=%g", fp.timeout)
	}
	if fp.retries == 0 {
		return "flush tried once"
	}
	return fmt.Sprintf("a refused flush retried %d times, %g s apart", fp.retries, fp.retryWait)
}

func (a *twoPointAction) kind() string { return kindTwoPoint }

func (a *twoPointAction) describe() string {
	s := fmt.Sprintf("twopoint --method %s --ctx %s --a %d --b %d", a.method, pointsText(a.points), a.a, a.b)
	if a.repeat > 1 {
		s += fmt.Sprintf(" --repeat %d", a.repeat)
	}
	if a.noncePos != harness.NonceStart {
		s += " --nonce-position " + string(a.noncePos)
	}
	if a.method == harness.FlushMethod || a.method == harness.FlushNonce {
		if a.betweenLegs {
			s += ", flushing only between the legs"
		}
		s += "; " + a.flush.String()
	}
	return s
}

func (a *twoPointAction) figures() []string {
	return append(append([]string{"prompt_tok", "ttft_s", "prefill_tok_s", "decode_tok_s", "s_per_out_tok", "t_a", "t_b",
		"cached_a", "cached_b", "runs", "spread", "rank_a", "rank_b"}, tierFigures...), truthFigures...)
}

func (a *twoPointAction) expectations() []string { return []string{expVerdict, expFigure, expFlush} }
func (a *twoPointAction) contexts() []int        { return contextsOf(a.points) }
func (a *twoPointAction) legs() []string         { return []string{"a", "b"} }

func (a *twoPointAction) run(ctx context.Context, r *runner) (*result, error) {
	tp := &harness.TwoPoint{Client: r.c, Points: a.points, A: a.a, B: a.b, Methods: []harness.Method{a.method},
		NoncePosition: a.noncePos, Repeat: a.repeat, FlushOnlyBetweenLegs: a.betweenLegs, Options: r.options(a.flush, a.allowShared)}
	rep, err := tp.Run(ctx)
	if err != nil {
		return nil, err
	}
	res := &result{write: rep.WriteTable}
	for i := range rep.Rows {
		hr := &rep.Rows[i]
		rw := &row{ctx: hr.CtxReq, label: fmt.Sprint(hr.CtxReq), figures: map[string]*float64{}, verdict: &hr.Verdict,
			flushes: map[string]*harness.FlushRecord{}}
		rw.set("prompt_tok", float64(hr.PromptTokens))
		rw.set("ttft_s", hr.TTFT)
		rw.set("prefill_tok_s", hr.PrefillTPS)
		rw.setPtr("decode_tok_s", hr.DecodeTPS)
		rw.setPtr("s_per_out_tok", hr.SPerOutTok)
		rw.set("t_a", hr.TA)
		rw.set("t_b", hr.TB)
		rw.setInt("cached_a", hr.CachedA)
		rw.setInt("cached_b", hr.CachedB)
		rw.set("runs", float64(len(hr.Runs)))
		rw.set("spread", hr.Spread)
		setTiers(rw, hr)
		setTruth(rw, hr.Truth)
		// The flushes and the DP ranks of the last run: with repeats,
		// every run's flushes are alike or the verdict says otherwise.
		last := hr.Runs[len(hr.Runs)-1]
		rw.setInt("rank_a", last.A.DPRank)
		rw.setInt("rank_b", last.B.DPRank)
		rw.flushes["a"], rw.flushes["b"] = last.A.Flush, last.B.Flush
		res.rows = append(res.rows, rw)
	}
	return res, nil
}

func (a *streamAction) kind() string { return kindStream }

func (a *streamAction) describe() string {
	s := fmt.Sprintf("stream --ctx %s --max-new-tokens %d", pointsText(a.points), a.maxNew)
	if a.noFlush {
		return s + " --no-flush"
	}
	return s + "; " + a.flush.String()
}

func (a *streamAction) figures() []string {
	return append([]string{"prompt_tok", "ttft_s", "prefill_tok_s", "decode_tok_s", "s_per_out_tok", "events",
		"tokens_per_event", "event_itl_s", "event_itl_err", "cached"}, truthFigures...)
}

func (a *streamAction) expectations() []string { return []string{expVerdict, expFigure, expFlush} }
func (a *streamAction) contexts() []int        { return contextsOf(a.points) }
func (a *streamAction) legs() []string         { return []string{"stream"} }

func (a *streamAction) run(ctx context.Context, r *runner) (*result, error) {
	st := &harness.Stream{Client: r.c, Points: a.points, MaxNewTokens: a.maxNew, NoFlush: a.noFlush, Options: r.options(a.flush, a.allowShared)}
	rep, err := st.Run(ctx)
	if err != nil {
		return nil, err
	}
	res := &result{write: rep.WriteTable}
	for i := range rep.Stream {
		hr := &rep.Stream[i]
		rw := &row{ctx: hr.CtxReq, label: fmt.Sprint(hr.CtxReq), figures: map[string]*float64{}, verdict: &hr.Verdict,
			flushes: map[string]*harness.FlushRecord{"stream": hr.Leg.Flush}}
		rw.set("prompt_tok", float64(hr.PromptTokens))
		rw.set("ttft_s", hr.TTFT)
		rw.set("prefill_tok_s", hr.PrefillTPS)
		rw.set("decode_tok_s", hr.DecodeTPS)
		rw.set("s_per_out_tok", hr.SPerOutTok)
		rw.set("events", float64(hr.Events))
		rw.set("tokens_per_event", hr.TokensPerEvent)
		rw.set("event_itl_s", hr.EventITL)
		rw.set("event_itl_err", hr.EventITLErr)
		rw.setInt("cached", hr.Cached)
		setTruth(rw, hr.Truth)
		res.rows = append(res.rows, rw)
	}
	return res, nil
}

func (a *flushAction) kind() string { return kindFlush }

func (a *flushAction) describe() string {
	if a.timeout > 0 {
		return fmt.Sprintf("POST /flush_cache?timeout=%g, once", a.timeout)
	}
	return "POST /flush_cache, once, no timeout"
}

func (a *flushAction) figures() []string {
	return []string{"status", "seconds", "running", "queued", "refused_ranks"}
}
func (a *flushAction) expectations() []string { return []string{expStatus, expBody, expFigure} }
func (a *flushAction) contexts() []int        { return nil }
func (a *flushAction) legs() []string         { return nil }

// run sends the flush and reads the server's record of it: how many
// requests were running and queued when it was asked.
func (a *flushAction) run(ctx context.Context, r *runner) (*result, error) {
	start := time.Now()
	at, err := r.c.FlushOnce(ctx, a.timeout)
	if err != nil {
		return nil, err
	}
	seconds := time.Since(start).Seconds() * r.speedup
	flushes, err := r.c.Flushes(ctx)
	if err != nil {
		return nil, err
	}
	if len(flushes) == 0 {
		return nil, fmt.Errorf("the server recorded no flush")
	}
	rec := flushes[len(flushes)-1]
	rw := &row{figures: map[string]*float64{}, status: at.Status, body: at.Body}
	rw.set("status", float64(at.Status))
	rw.set("seconds", seconds)
	rw.set("running", float64(rec.Running))
	rw.set("queued", float64(rec.Queued))
	// On several DP ranks the answer is the first rank's: count the
	// ranks that refused.
	refused := 0
	outcome := rec.Outcome
	for _, rank := range rec.Ranks {
		if !rank.OK {
			refused++
		}
		outcome += fmt.Sprintf("; rank %d: %s", rank.Rank, rank.Outcome)
	}
	rw.set("refused_ranks", float64(refused))
	write := func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "HTTP %d %q after %.3f s; asked with %d running and %d queued, the server's outcome: %s\n",
			at.Status, at.Body, seconds, rec.Running, rec.Queued, outcome)
		return err
	}
	return &result{rows: []*row{rw}, write: write}, nil
}

func (a *waitAction) kind() string           { return kindWait }
func (a *waitAction) describe() string       { return fmt.Sprintf("wait %g simulated seconds", a.seconds) }
func (a *waitAction) figures() []string      { return nil }
func (a *waitAction) expectations() []string { return nil }
func (a *waitAction) contexts() []int        { return nil }
func (a *waitAction) legs() []string         { return nil }

func (a *waitAction) run(ctx context.Context, r *runner) (*result, error) {
	t := time.NewTimer(r.wall(a.seconds))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	write := func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "waited %g s\n", a.seconds)
		return err
	}
	return &result{write: write}, nil
}

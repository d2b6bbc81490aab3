package profile

import (
	"math"
	"time"
)

// Duration converts modelled seconds to a Duration, rounded to the
// nanosecond. The engine sums Durations, so its timings are exact integers.
// Seconds past a Duration's range (about 292 years) saturate at its bound
// instead of wrapping to a negative time; a validated profile keeps every
// iteration within MaxIterationSeconds, far below it.
func Duration(seconds float64) time.Duration {
	ns := math.Round(seconds * 1e9)
	switch {
	case ns >= math.MaxInt64:
		return math.MaxInt64
	case ns <= math.MinInt64:
		return math.MinInt64
	case ns != ns: // NaN
		return 0
	}
	return time.Duration(ns)
}

// MaxIterationSeconds bounds what one scheduler iteration may cost: a
// profile whose largest prefill batch or decode round, at the limits it
// sets, costs more is refused. Real iterations take milliseconds to
// seconds; the bound keeps every modelled time far from a Duration's range.
const MaxIterationSeconds = 86400

// worstPrefillSeconds bounds the cost of the largest prefill batch the
// profile's limits allow: as many chunks as requests may run, together
// as many tokens as one batch takes (a whole prompt without chunking),
// each at the full context.
func (p *Profile) worstPrefillSeconds() float64 {
	tokens, chunked := p.ChunkBudget()
	if !chunked {
		tokens = max(tokens, p.ContextLength)
	}
	chunks := float64(min(max(p.RankMaxRunningRequests(), 1), max(tokens, 1)))
	c := p.Prefill
	ctx, t := float64(p.ContextLength), float64(tokens)
	if len(c.Table) > 0 {
		return chunks * (c.OverheadS + c.Table.At(ctx))
	}
	return chunks*c.OverheadS + c.PerTokenS*t + c.AttentionS*t*ctx
}

// worstDecodeSeconds bounds the cost of the largest decode round: every
// request slot running, their contexts filling the KV pool.
func (p *Profile) worstDecodeSeconds() float64 {
	return p.DecodeRoundSeconds(max(p.RankMaxRunningRequests(), 1), p.MaxTotalTokens)
}

// PrefillChunkSeconds is the cost of one prefill chunk of m new tokens for a
// request whose KV already holds prefix tokens.
func (p *Profile) PrefillChunkSeconds(prefix, m int) float64 {
	if m <= 0 {
		return 0
	}
	c := p.Prefill
	if len(c.Table) > 0 {
		return c.OverheadS + c.Table.At(float64(prefix+m)) - c.Table.At(float64(prefix))
	}
	fm, fp := float64(m), float64(prefix)
	return c.OverheadS + c.PerTokenS*fm + c.AttentionS*fm*(fp+fm/2)
}

// DecodeRoundSeconds is the cost of one decode round (one draft+verify round
// under speculative decoding) over batch requests whose contexts sum to ctx.
func (p *Profile) DecodeRoundSeconds(batch, ctx int) float64 {
	if batch <= 0 {
		return 0
	}
	d := p.Decode
	s := d.StepOverheadS + d.PerSeqS*float64(batch)
	if len(d.CtxTable) > 0 {
		s += d.CtxTable.At(float64(ctx))
	} else {
		s += d.PerCtxTokenS * float64(ctx)
	}
	if p.Speculative != nil {
		s *= p.Speculative.RoundCostFactor
	}
	return s
}

// ChunkBudget is the most prompt tokens one prefill batch of one rank
// takes, and whether a longer prompt is split into chunks (SGLang's chunked
// prefill) rather than run whole.
func (p *Profile) ChunkBudget() (tokens int, chunked bool) {
	chunk := p.RankChunkedPrefillSize()
	if chunk == -1 {
		return p.MaxPrefillTokens, false
	}
	return min(chunk, p.MaxPrefillTokens), true
}

// Chunks splits a lone request's prefill of extend tokens after prefix
// cached tokens into the chunk sizes the scheduler runs, one batch each.
// Even on a profile that fails validation (a budget below one page) every
// chunk takes at least one page, so the split always ends.
func (p *Profile) Chunks(extend int) []int {
	budget, chunked := p.ChunkBudget()
	if !chunked || extend <= budget {
		if extend <= 0 {
			return nil
		}
		return []int{extend}
	}
	page := max(p.PageSize, 1)
	budget = max(budget-budget%page, page)
	var out []int
	for extend > 0 {
		m := min(budget, extend)
		out = append(out, m)
		extend -= m
	}
	return out
}

// AcceptDist returns P(k) for k = 1..num_steps+1, the tokens one speculative
// round adds to a request: k-1 accepted drafts plus the bonus token. Without
// speculative decoding it is [1].
func (p *Profile) AcceptDist() []float64 {
	s := p.Speculative
	if s == nil {
		return []float64{1}
	}
	dist := make([]float64, s.NumSteps+1)
	survive := 1.0
	for i, a := range s.AcceptProbs {
		dist[i] = survive * (1 - a)
		survive *= a
	}
	dist[s.NumSteps] = survive
	return dist
}

// ExpectedAccept is the mean number of tokens a round adds, E[k].
func (p *Profile) ExpectedAccept() float64 {
	e := 0.0
	for i, pk := range p.AcceptDist() {
		e += float64(i+1) * pk
	}
	return e
}

// Expectation is what the model predicts for one request running alone.
type Expectation struct {
	// TTFT is the prefill time of the uncached tokens, chunk by chunk: exact.
	TTFT time.Duration
	// DecodeSeconds is the expected time for the tokens after the first
	// (exact without speculative decoding, an expectation over the
	// acceptance draws with it).
	DecodeSeconds float64
	// DecodeRounds is the expected number of decode rounds.
	DecodeRounds float64
	// DecodeTokensPerSecond is the steady-state decode rate at the prompt's
	// context: E[k] / round time.
	DecodeTokensPerSecond float64
}

// Expect predicts a lone request with prompt tokens, cached of them served
// from the prefix cache, and completion output tokens (the first comes out
// of prefill).
func (p *Profile) Expect(prompt, cached, completion int) Expectation {
	var e Expectation
	done := cached
	for _, m := range p.Chunks(prompt - cached) {
		e.TTFT += Duration(p.PrefillChunkSeconds(done, m))
		done += m
	}
	dist := p.AcceptDist()
	// remaining[r] = expected seconds and rounds to produce r more tokens;
	// the context grows with every token, and a round's gain is capped at
	// what is left.
	n := completion - 1
	if n > 0 {
		secs := make([]float64, n+1)
		rounds := make([]float64, n+1)
		for r := 1; r <= n; r++ {
			ctx := prompt + completion - r
			secs[r] = p.DecodeRoundSeconds(1, ctx)
			rounds[r] = 1
			for i, pk := range dist {
				k := min(i+1, r)
				secs[r] += pk * secs[r-k]
				rounds[r] += pk * rounds[r-k]
			}
		}
		e.DecodeSeconds, e.DecodeRounds = secs[n], rounds[n]
	}
	e.DecodeTokensPerSecond = p.ExpectedAccept() / p.DecodeRoundSeconds(1, prompt+1)
	return e
}

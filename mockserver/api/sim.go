package api

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/sglmock/sglmock/mockserver/engine"
	"github.com/sglmock/sglmock/sim"
)

// The /sim/ endpoints expose what only a simulation knows: the active
// profile, the model's predictions, and each request's ground truth. SGLang
// has none; the harness uses them when it finds them. Their JSON is the
// sim package's types; times are simulated seconds.

func (s *Server) simProfile(c *exchange) {
	writeJSON(c, http.StatusOK, sim.Profile{
		Name:              s.cfg.Profile.Name,
		Speedup:           s.eng.Speedup(),
		DisableRadixCache: s.cfg.DisableRadixCache,
		ExpectedAccept:    s.cfg.Profile.ExpectedAccept(),
		AcceptDist:        s.cfg.Profile.AcceptDist(),
		Profile:           marshal(s.cfg.Profile),
	})
}

// simExpect is the model evaluator: GET
// /sim/expect?prompt_tokens=N&cached_tokens=C&completion_tokens=K.
func (s *Server) simExpect(c *exchange) {
	get := func(name string, def int) (int, error) {
		raw := c.Query(name)
		if raw == "" {
			if def < 0 {
				return 0, fmt.Errorf("%s: Field required", name)
			}
			return def, nil
		}
		v, err := strconv.Atoi(raw)
		if err != nil || v < 0 {
			return 0, fmt.Errorf("%s: Input should be a whole number >= 0, got %q", name, clip(raw))
		}
		return v, nil
	}
	prompt, err := get("prompt_tokens", -1)
	if err != nil {
		writeValidationError(c, err.Error())
		return
	}
	cached, err := get("cached_tokens", 0)
	if err != nil {
		writeValidationError(c, err.Error())
		return
	}
	completion, err := get("completion_tokens", 1)
	if err != nil {
		writeValidationError(c, err.Error())
		return
	}
	if prompt < 1 || cached >= prompt {
		writeValidationError(c, fmt.Sprintf("need prompt_tokens >= 1 and cached_tokens < prompt_tokens, got %d and %d", prompt, cached))
		return
	}
	// The evaluator allocates per output token: bound both counts by what a
	// request can have, each first so that their sum cannot overflow.
	if ctx := s.cfg.Profile.ContextLength; prompt >= ctx || completion > ctx || prompt+completion > ctx {
		writeValidationError(c, fmt.Sprintf(
			"need prompt_tokens < the context length (%d) and prompt_tokens + completion_tokens <= it, got %d and %d", ctx, prompt, completion))
		return
	}
	e := s.cfg.Profile.Expect(prompt, cached, completion)
	writeJSON(c, http.StatusOK, sim.Expectation{
		PromptTokens:      prompt,
		CachedTokens:      cached,
		CompletionTokens:  completion,
		TTFT:              e.TTFT.Seconds(),
		Decode:            e.DecodeSeconds,
		DecodeRounds:      e.DecodeRounds,
		E2E:               e.TTFT.Seconds() + e.DecodeSeconds,
		DecodeTokensPerS:  finite(e.DecodeTokensPerSecond),
		PrefillTokensPerS: finite(float64(prompt-cached) / e.TTFT.Seconds()),
		ExpectedAccept:    s.cfg.Profile.ExpectedAccept(),
	})
}

// finite returns &x, or nil (JSON null) for a rate that is infinite because
// the profile charges nothing: JSON has no infinity.
func finite(x float64) *float64 {
	if math.IsInf(x, 0) || math.IsNaN(x) {
		return nil
	}
	return &x
}

// truthJSON renders a request's ground truth.
func truthJSON(t *engine.Truth) sim.Truth {
	chunks := make([]sim.Chunk, len(t.Prefill))
	for i, c := range t.Prefill {
		chunks[i] = sim.Chunk{Start: c.Start.Seconds(), Duration: c.Duration.Seconds(), Cost: c.Cost.Seconds(),
			Prefix: c.Prefix, Tokens: c.Tokens, Batch: c.Batch, LoadBack: c.LoadBack}
	}
	rounds := make([]sim.Round, len(t.Rounds))
	for i, r := range t.Rounds {
		rounds[i] = sim.Round{Start: r.Start.Seconds(), Duration: r.Duration.Seconds(), Gained: r.Gained,
			Batch: r.Batch, Context: r.Context, Count: r.Count}
	}
	var firstToken, ttft *float64
	if t.Prefilled {
		ft, ttf := t.FirstToken.Seconds(), t.TTFT().Seconds()
		firstToken, ttft = &ft, &ttf
	}
	return sim.Truth{
		RID:              t.RID,
		PromptTokens:     t.PromptTokens,
		CachedTokens:     t.CachedTokens,
		CompletionTokens: t.CompletionTokens,
		ReusedFrom:       t.ReusedFrom,
		Arrival:          t.Arrival.Seconds(),
		Admitted:         t.Admitted.Seconds(),
		FirstToken:       firstToken,
		Finished:         t.Finished.Seconds(),
		Queue:            t.QueueTime().Seconds(),
		TTFT:             ttft,
		E2E:              t.E2E().Seconds(),
		FinishReason:     t.Finish.Reason,
		SpecVerifyCt:     t.Spec.VerifyCt,
		Retractions:      t.Retractions,
		Prefill:          chunks,
		Rounds:           rounds,
		Tiers:            tiersJSON(t),
		Prefetch:         prefetchJSON(t.Prefetch),
	}
}

// dpRankOf is a request's DP rank, as /sim/ shows it: on a deployment of
// several ranks only.
func (s *Server) dpRankOf(t *engine.Truth) *int {
	if s.eng.Ranks() == 1 {
		return nil
	}
	r := t.DPRank
	return &r
}

func (s *Server) simRequests(c *exchange) {
	truths := s.eng.Truths()
	out := make([]sim.RequestSummary, len(truths))
	for i, t := range truths {
		out[i] = sim.RequestSummary{
			RID:              t.RID,
			PromptTokens:     t.PromptTokens,
			CachedTokens:     t.CachedTokens,
			CompletionTokens: t.CompletionTokens,
			ReusedFrom:       t.ReusedFrom,
			Arrival:          t.Arrival.Seconds(),
			Finished:         t.Finished.Seconds(),
			FinishReason:     t.Finish.Reason,
			Route:            t.Route,
			PromptHash:       strconv.FormatUint(t.PromptHash, 16),
			SampleOf:         t.SampleOf,
			E2E:              t.E2E().Seconds(),
			DPRank:           s.dpRankOf(t),
			CacheSalt:        t.Salted,
		}
		out[i].PrefillCost, out[i].ColdPrefillCost = s.prefillCosts(t)
		out[i].Tiers = tiersJSON(t)
		if t.Prefilled {
			ttft := t.TTFT().Seconds()
			out[i].TTFT = &ttft
		}
	}
	writeJSON(c, http.StatusOK, out)
}

// prefillCosts is what a request's own prefill cost as it ran, its chunks
// up to its first token (a retracted request's later refill excluded), and
// what its whole prompt costs with nothing cached, chunk by chunk: the
// profile's own evaluator, as for a lone request.
func (s *Server) prefillCosts(t *engine.Truth) (own, cold float64) {
	var d time.Duration
	for _, c := range t.Prefill {
		if t.Prefilled && c.Start >= t.FirstToken {
			break
		}
		d += c.Cost
	}
	if t.PromptTokens > 0 {
		cold = s.cfg.Profile.Expect(t.PromptTokens, 0, 1).TTFT.Seconds()
	}
	return d.Seconds(), cold
}

func (s *Server) simRequest(c *exchange) {
	t, ok := s.eng.Truth(c.Param("rid"))
	if !ok {
		writeJSON(c, http.StatusNotFound, jsonObject{"detail": fmt.Sprintf("no finished request with rid %q", clip(c.Param("rid")))})
		return
	}
	out := truthJSON(t)
	out.DPRank = s.dpRankOf(t)
	writeJSON(c, http.StatusOK, out)
}

func (s *Server) simFlushes(c *exchange) {
	hist := s.eng.FlushHistory()
	out := make([]sim.Flush, len(hist))
	for i, f := range hist {
		outcome := "" // a pending flush has none yet
		if !f.Pending {
			outcome = flushMessage(f.Err)
		}
		out[i] = sim.Flush{At: f.At.Seconds(), Timeout: f.Timeout.Seconds(), Answered: f.Answered.Seconds(),
			Outcome: outcome, OK: !f.Pending && f.Err == nil, Queued: f.Queued, Running: f.Running,
			Origin: f.Origin, Pending: f.Pending}
		if f.ClientLeft {
			left := f.ClientLeftAt.Seconds()
			out[i].ClientLeft = &left
		}
		for _, r := range f.Ranks {
			outcome := ""
			if !r.Pending {
				outcome = flushMessage(r.Err)
			}
			out[i].Ranks = append(out[i].Ranks, sim.FlushRank{Rank: r.Rank, Answered: r.Answered.Seconds(), Outcome: outcome,
				OK: !r.Pending && r.Err == nil, Queued: r.Queued, Running: r.Running, Pending: r.Pending})
		}
	}
	writeJSON(c, http.StatusOK, out)
}

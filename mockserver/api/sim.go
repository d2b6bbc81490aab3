package api

import (
	"fmt"
	"math"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"sglmock/mockserver/engine"
)

// The /sim/ endpoints expose what only a simulation knows: the active
// profile, the model's predictions, and each request's ground truth. SGLang
// has none; the harness uses them when it finds them. Times are simulated
// seconds.

func (s *Server) simProfile(c *gin.Context) {
	writeJSON(c, http.StatusOK, gin.H{
		"name":                s.cfg.Profile.Name,
		"speedup":             s.eng.Speedup(),
		"disable_radix_cache": s.cfg.DisableRadixCache,
		"expected_accept":     s.cfg.Profile.ExpectedAccept(),
		"profile":             s.cfg.Profile,
	})
}

// simExpect is the model evaluator: GET
// /sim/expect?prompt_tokens=N&cached_tokens=C&completion_tokens=K.
func (s *Server) simExpect(c *gin.Context) {
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
			return 0, fmt.Errorf("%s: Input should be a whole number >= 0, got %q", name, raw)
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
	e := s.cfg.Profile.Expect(prompt, cached, completion)
	writeJSON(c, http.StatusOK, gin.H{
		"prompt_tokens":        prompt,
		"cached_tokens":        cached,
		"completion_tokens":    completion,
		"ttft_s":               e.TTFT.Seconds(),
		"decode_s":             e.DecodeSeconds,
		"decode_rounds":        e.DecodeRounds,
		"e2e_s":                e.TTFT.Seconds() + e.DecodeSeconds,
		"decode_tokens_per_s":  finite(e.DecodeTokensPerSecond),
		"expected_accept_len":  s.cfg.Profile.ExpectedAccept(),
		"prefill_tokens_per_s": finite(float64(prompt-cached) / e.TTFT.Seconds()),
		"includes_queueing":    false,
		"note":                 "a lone request on an idle server",
	})
}

// finite returns x, or nil (JSON null) for a rate that is infinite because
// the profile charges nothing: JSON has no infinity.
func finite(x float64) any {
	if math.IsInf(x, 0) || math.IsNaN(x) {
		return nil
	}
	return x
}

// truthJSON renders a request's ground truth with times in seconds.
func truthJSON(t *engine.Truth) gin.H {
	chunks := make([]gin.H, len(t.Prefill))
	for i, c := range t.Prefill {
		chunks[i] = gin.H{"start_s": c.Start.Seconds(), "duration_s": c.Duration.Seconds(), "cost_s": c.Cost.Seconds(),
			"prefix_tokens": c.Prefix, "tokens": c.Tokens, "batch": c.Batch}
	}
	rounds := make([]gin.H, len(t.Rounds))
	for i, r := range t.Rounds {
		rounds[i] = gin.H{"start_s": r.Start.Seconds(), "duration_s": r.Duration.Seconds(), "gained": r.Gained,
			"batch": r.Batch, "context": r.Context}
	}
	return gin.H{
		"rid":               t.RID,
		"prompt_tokens":     t.PromptTokens,
		"cached_tokens":     t.CachedTokens,
		"completion_tokens": t.CompletionTokens,
		"reused_from":       t.ReusedFrom,
		"arrival_s":         t.Arrival.Seconds(),
		"admitted_s":        t.Admitted.Seconds(),
		"first_token_s":     t.FirstToken.Seconds(),
		"finished_s":        t.Finished.Seconds(),
		"queue_s":           t.QueueTime().Seconds(),
		"ttft_s":            t.TTFT().Seconds(),
		"e2e_s":             t.E2E().Seconds(),
		"finish_reason":     t.Finish.Reason,
		"spec_verify_ct":    t.Spec.VerifyCt,
		"prefill":           chunks,
		"rounds":            rounds,
	}
}

func (s *Server) simRequest(c *gin.Context) {
	t, ok := s.eng.Truth(c.Param("rid"))
	if !ok {
		writeJSON(c, http.StatusNotFound, gin.H{"detail": fmt.Sprintf("no finished request with rid %q", c.Param("rid"))})
		return
	}
	writeJSON(c, http.StatusOK, truthJSON(t))
}

func (s *Server) simFlushes(c *gin.Context) {
	hist := s.eng.FlushHistory()
	out := make([]gin.H, len(hist))
	for i, f := range hist {
		out[i] = gin.H{"at_s": f.At.Seconds(), "timeout_s": f.Timeout.Seconds(), "answered_s": f.Answered.Seconds(),
			"outcome": f.Outcome, "ok": f.Outcome == "flushed", "queued": f.Queued, "running": f.Running}
	}
	writeJSON(c, http.StatusOK, out)
}

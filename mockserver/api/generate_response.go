package api

import "github.com/sglmock/sglmock/mockserver/engine"

// Finish reasons, with fields in SGLang's order.
type (
	finishLength struct {
		Type   string `json:"type"`
		Length int    `json:"length"`
	}
	finishStop struct {
		Type    string `json:"type"`
		Matched any    `json:"matched"`
	}
	finishAbort struct {
		Type       string  `json:"type"`
		Message    string  `json:"message"`
		StatusCode *int    `json:"status_code"`
		ErrType    *string `json:"err_type"`
	}
	finishAbortInQueue struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	}
)

// finishReason renders SGLang's finish_reason object, or nil while running.
func finishReason(f *engine.Finish) any {
	if f == nil {
		return nil
	}
	switch {
	case f.Reason == engine.FinishLength:
		return finishLength{"length", f.Length}
	case f.Reason == engine.FinishStop && f.MatchedToken != nil:
		return finishStop{"stop", *f.MatchedToken}
	case f.Reason == engine.FinishStop:
		return finishStop{"stop", *f.MatchedString}
	case f.InWaitingQueue:
		return finishAbortInQueue{"abort", f.Message}
	}
	return finishAbort{Type: "abort", Message: f.Message} // a user's abort: no status, no error type
}

// cachedTokensDetails is SGLang's CachedTokensDetails without L3 storage.
type cachedTokensDetails struct {
	Device int `json:"device"`
	Host   int `json:"host"`
}

// metaInfo is meta_info, in SGLang's field order.
type metaInfo struct {
	ID             string `json:"id"`
	FinishReason   any    `json:"finish_reason"`
	PromptTokens   int    `json:"prompt_tokens"`
	WeightVersion  string `json:"weight_version"`
	NumRetractions int    `json:"num_retractions"`
	*metaLogprobs
	// ReasoningTokens counts reasoning tokens, which only a reasoning
	// parser separates; the mock has none, so it is 0, as SGLang's is then.
	ReasoningTokens  int `json:"reasoning_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	CachedTokens     int `json:"cached_tokens"`
	// CachedTokensDetails is output_streamer.py's breakdown: all device
	// (GPU) tokens, there being no host cache; null when nothing is cached.
	CachedTokensDetails *cachedTokensDetails `json:"cached_tokens_details"`
	E2ELatency          float64              `json:"e2e_latency,omitempty"`
	// Speculative decoding, final event only: the v0.4/v0.5 names and the
	// current ones, so clients of every era find theirs.
	SpecVerifyCt          *int     `json:"spec_verify_ct,omitempty"`
	SpecAcceptRate        *float64 `json:"spec_accept_rate,omitempty"`
	SpecAcceptLength      *float64 `json:"spec_accept_length,omitempty"`
	SpecAcceptTokenNum    *int     `json:"spec_accept_token_num,omitempty"`
	SpecDraftTokenNum     *int     `json:"spec_draft_token_num,omitempty"`
	SpecNumCorrectDrafts  *int     `json:"spec_num_correct_drafts,omitempty"`
	SpecNumProposedDrafts *int     `json:"spec_num_proposed_drafts,omitempty"`
	SpecAcceptedDrafts    *int     `json:"spec_accepted_drafts,omitempty"`
	SpecProposedDrafts    *int     `json:"spec_proposed_drafts,omitempty"`
	SpecAcceptHistogram   []int    `json:"spec_accept_histogram,omitempty"`
}

func (o *output) meta() metaInfo {
	ev := o.last
	m := metaInfo{
		ID:               o.rid,
		FinishReason:     finishReason(ev.Finish),
		PromptTokens:     ev.PromptTokens,
		WeightVersion:    weightVersion,
		NumRetractions:   ev.Retractions,
		CompletionTokens: ev.CompletionTokens,
		CachedTokens:     ev.CachedTokens,
	}
	if ev.CachedTokens > 0 {
		m.CachedTokensDetails = &cachedTokensDetails{Device: ev.CachedTokens}
	}
	m.metaLogprobs = o.logprobs().meta(o.item.logprobs.top > 0)
	if ev.Truth != nil {
		m.E2ELatency = ev.Truth.E2E().Seconds()
	}
	if sp := ev.Spec; sp != nil && sp.VerifyCt > 0 {
		verify, accepted, proposed := sp.VerifyCt, sp.AcceptedDrafts, sp.ProposedDrafts
		length := float64(ev.CompletionTokens) / float64(verify)
		rate := 0.0
		if proposed > 0 {
			rate = float64(accepted) / float64(proposed)
		}
		m.SpecVerifyCt, m.SpecAcceptLength, m.SpecAcceptRate = &verify, &length, &rate
		m.SpecAcceptTokenNum, m.SpecDraftTokenNum = &accepted, &proposed
		m.SpecNumCorrectDrafts, m.SpecNumProposedDrafts = &accepted, &proposed
		m.SpecAcceptedDrafts, m.SpecProposedDrafts = &accepted, &proposed
		m.SpecAcceptHistogram = sp.Histogram
	}
	return m
}

// waitingQueueMeta is the meta_info SGLang's tokenizer manager sends for a
// request aborted in the waiting queue (_handle_abort_req), in its order.
type waitingQueueMeta struct {
	ID               string  `json:"id"`
	FinishReason     any     `json:"finish_reason"`
	WeightVersion    string  `json:"weight_version"`
	E2ELatency       float64 `json:"e2e_latency"`
	CompletionTokens int     `json:"completion_tokens"`
}

// generateResponse is one /generate result object.
type generateResponse struct {
	Text      string  `json:"text"`
	OutputIDs []int32 `json:"output_ids"`
	MetaInfo  any     `json:"meta_info"` // metaInfo, or waitingQueueMeta
	Index     *int    `json:"index,omitempty"`
}

func (o *output) response(withIndex bool) generateResponse {
	r := generateResponse{Text: string(o.visibleText()), OutputIDs: o.ids, MetaInfo: o.meta()}
	if f, t := o.last.Finish, o.last.Truth; f != nil && f.InWaitingQueue && t != nil {
		r.MetaInfo = waitingQueueMeta{ID: o.rid, FinishReason: finishReason(f), WeightVersion: weightVersion,
			E2ELatency: t.E2E().Seconds(), CompletionTokens: o.last.CompletionTokens}
	}
	if r.OutputIDs == nil {
		r.OutputIDs = []int32{}
	}
	if withIndex {
		idx := o.item.index
		r.Index = &idx
	}
	return r
}

package api

import (
	"time"

	"github.com/sglmock/sglmock/mockserver/engine"
)

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
	case f.StatusCode != 0:
		code := f.StatusCode // the scheduler's abort (out of memory): no error type
		return finishAbort{Type: "abort", Message: f.Message, StatusCode: &code}
	}
	return finishAbort{Type: "abort", Message: f.Message} // a user's abort: no status, no error type
}

// cachedTokensDetails is SGLang's CachedTokensDetails: storage and its
// backend's class only with a storage tier.
type cachedTokensDetails struct {
	Device         int     `json:"device"`
	Host           int     `json:"host"`
	Storage        *int    `json:"storage,omitempty"`
	StorageBackend *string `json:"storage_backend,omitempty"`
}

// metaInfo is meta_info, in SGLang's field order: the head, the logprob
// lists, the tail. A long answer writes the lists itself, between the head
// and the tail (encodeGenerate).
type metaInfo struct {
	metaHead
	*metaLogprobs
	metaTail
}

type metaHead struct {
	ID             string `json:"id"`
	FinishReason   any    `json:"finish_reason"`
	PromptTokens   int    `json:"prompt_tokens"`
	WeightVersion  string `json:"weight_version"`
	NumRetractions int    `json:"num_retractions"`
}

type metaTail struct {
	// ReasoningTokens counts reasoning tokens, which only a reasoning
	// parser separates; the mock has none, so it is 0, as SGLang's is then.
	ReasoningTokens  int `json:"reasoning_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	CachedTokens     int `json:"cached_tokens"`
	// CachedTokensDetails is output_streamer.py's breakdown by tier
	// (cachedDetails); null when nothing is cached.
	CachedTokensDetails *cachedTokensDetails `json:"cached_tokens_details"`
	*schedulerTiming
	// DPRank is the DP rank that ran the request: the scheduler's
	// dp_ranks, which the tokenizer manager copies into meta_info (PR
	// #19268, every known release). A server of one rank launches its
	// scheduler with dp_rank None, so it is null there.
	DPRank     *int    `json:"dp_rank"`
	E2ELatency float64 `json:"e2e_latency,omitempty"`
	*finishTiming
	// Speculative decoding, final event only (fill_spec_decoding_meta):
	// the current names, then the aliases SGLang keeps for old clients.
	SpecAcceptRate             *float64 `json:"spec_accept_rate,omitempty"`
	SpecAcceptLength           *float64 `json:"spec_accept_length,omitempty"`
	SpecNumCorrectDrafts       *int     `json:"spec_num_correct_drafts,omitempty"`
	SpecNumProposedDrafts      *int     `json:"spec_num_proposed_drafts,omitempty"`
	SpecVerifyCt               *int     `json:"spec_verify_ct,omitempty"`
	SpecAcceptedDrafts         *int     `json:"spec_accepted_drafts,omitempty"`
	SpecProposedDrafts         *int     `json:"spec_proposed_drafts,omitempty"`
	SpecCorrectDraftsHistogram []int    `json:"spec_correct_drafts_histogram,omitempty"`
	SpecAcceptHistogram        []int    `json:"spec_accept_histogram,omitempty"`
	// ResponseSentToClientTS is when the tokenizer manager yielded the
	// request's first output to the client (its first stream event, or the
	// whole response): the wall time of that event's modelled moment.
	ResponseSentToClientTS *float64 `json:"response_sent_to_client_ts,omitempty"`
}

// schedulerTiming is what the scheduler's time stats add to every event
// under --enable-metrics (SchedulerReqTimeStats.convert_to_output_meta_info):
// the queueing time in simulated seconds, and the wall times of the
// modelled admission and end of prefill.
type schedulerTiming struct {
	QueueTime           *float64 `json:"queue_time,omitempty"`
	ForwardEntryTime    *float64 `json:"forward_entry_time,omitempty"`
	PrefillFinishedTime *float64 `json:"prefill_finished_time,omitempty"`
}

// finishTiming is what the tokenizer manager's time stats add to the last
// event under --enable-metrics (APIServerReqTimeStats
// .convert_to_output_meta_info): wall times of the modelled arrival and
// finish (the mock tokenizes at once, so dispatch is arrival), and the
// decode rate after the first token in simulated seconds.
type finishTiming struct {
	RequestReceivedTS         float64  `json:"request_received_ts"`
	APIServerDispatchFinishTS float64  `json:"api_server_dispatch_finish_ts"`
	RequestFinishedTS         float64  `json:"request_finished_ts"`
	DecodeThroughput          *float64 `json:"decode_throughput,omitempty"`
}

// realtime is a wall time as SGLang's convert_time_to_realtime gives it:
// seconds since the epoch.
func realtime(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// meta is the output's meta_info with its logprob lists.
func (o *output) meta() metaInfo {
	m := o.metaWithoutLogprobs()
	m.metaLogprobs = o.logprobs().meta(o.item.logprobs.top > 0)
	return m
}

// metaWithoutLogprobs is meta_info but its logprob lists.
func (o *output) metaWithoutLogprobs() metaInfo {
	ev := o.last
	m := metaInfo{
		metaHead: metaHead{ID: o.rid, FinishReason: finishReason(ev.Finish), PromptTokens: ev.PromptTokens,
			WeightVersion: weightVersion, NumRetractions: ev.Retractions},
		metaTail: metaTail{CompletionTokens: ev.CompletionTokens, CachedTokens: ev.CachedTokens},
	}
	m.CachedTokensDetails = cachedDetails(&ev)
	if o.item.dpRank {
		r := ev.DPRank
		m.DPRank = &r
	}
	if ev.Truth != nil {
		m.E2ELatency = ev.Truth.E2E().Seconds()
	}
	if o.item.metrics && o.wall != nil {
		m.schedulerTiming, m.finishTiming = o.timing()
	}
	if sp := ev.Spec; sp != nil && sp.VerifyCt > 0 {
		verify, accepted, proposed := sp.VerifyCt, sp.AcceptedDrafts, sp.ProposedDrafts
		length := float64(ev.CompletionTokens) / float64(verify)
		rate := 0.0
		if proposed > 0 {
			rate = float64(accepted) / float64(proposed)
		}
		m.SpecAcceptRate, m.SpecAcceptLength = &rate, &length
		m.SpecNumCorrectDrafts, m.SpecNumProposedDrafts, m.SpecVerifyCt = &accepted, &proposed, &verify
		m.SpecAcceptedDrafts, m.SpecProposedDrafts = &accepted, &proposed
		m.SpecCorrectDraftsHistogram, m.SpecAcceptHistogram = sp.Histogram, sp.Histogram
	}
	if o.sent == 0 && o.wall != nil {
		ts := realtime(o.wall(ev.At))
		m.ResponseSentToClientTS = &ts
	}
	return m
}

// timing is the --enable-metrics timing of the output's last event: the
// scheduler's (once the request was admitted), and at the finish the
// tokenizer manager's.
func (o *output) timing() (*schedulerTiming, *finishTiming) {
	ev := o.last
	scheduled, prefilled := true, true
	if t := ev.Truth; t != nil {
		scheduled, prefilled = t.Scheduled(), t.Prefilled
	}
	var st *schedulerTiming
	if scheduled {
		queue, entry := (ev.Admitted - ev.Arrival).Seconds(), realtime(o.wall(ev.Admitted))
		st = &schedulerTiming{QueueTime: &queue, ForwardEntryTime: &entry}
		if prefilled {
			done := realtime(o.wall(ev.FirstToken))
			st.PrefillFinishedTime = &done
		}
	}
	t := ev.Truth
	if t == nil {
		return st, nil
	}
	ft := &finishTiming{
		RequestReceivedTS: realtime(o.wall(t.Arrival)), APIServerDispatchFinishTS: realtime(o.wall(t.Arrival)),
		RequestFinishedTS: realtime(o.wall(t.Finished)),
	}
	if decode := (t.Finished - t.FirstToken).Seconds(); t.Prefilled && decode > 0 && t.CompletionTokens > 1 {
		rate := float64(t.CompletionTokens-1) / decode
		ft.DecodeThroughput = &rate
	}
	return st, ft
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

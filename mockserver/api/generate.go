package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	json "github.com/goccy/go-json"

	"github.com/gin-gonic/gin"

	"sglmock/mockserver/engine"
	"sglmock/mockserver/tokenizer"
)

// stringOrList is a JSON string or list of strings (SGLang's stop).
type stringOrList []string

func (s *stringOrList) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		*s = nil
		return nil
	}
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*s = []string{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return fmt.Errorf("stop: must be a string or a list of strings")
	}
	*s = many
	return nil
}

// samplingParams are the sampling_params a mock honours; the rest are
// accepted and ignored (the mock's output does not depend on sampling).
type samplingParams struct {
	MaxNewTokens   *integer     `json:"max_new_tokens"`
	Temperature    *float64     `json:"temperature"`
	Stop           stringOrList `json:"stop"`
	StopTokenIDs   []int32      `json:"stop_token_ids"`
	IgnoreEOS      bool         `json:"ignore_eos"`
	N              *integer     `json:"n"`
	StreamInterval *integer     `json:"stream_interval"`
	NoStopTrim     bool         `json:"no_stop_trim"`
}

// generateBody is GenerateReqInput; unknown keys are ignored.
type generateBody struct {
	Text            json.RawMessage `json:"text"`
	InputIDs        json.RawMessage `json:"input_ids"`
	InputEmbeds     json.RawMessage `json:"input_embeds"`
	SamplingParams  json.RawMessage `json:"sampling_params"`
	RID             json.RawMessage `json:"rid"`
	Stream          bool            `json:"stream"`
	ReturnLogprob   json.RawMessage `json:"return_logprob"`
	LogprobStartLen json.RawMessage `json:"logprob_start_len"`
	TopLogprobsNum  json.RawMessage `json:"top_logprobs_num"`
	// ReturnTextInLogprobs puts each token's text in the logprob tuples.
	ReturnTextInLogprobs bool            `json:"return_text_in_logprobs"`
	LoraPath             json.RawMessage `json:"lora_path"`
	// ExtraKey partitions the prefix cache. GenerateReqInput has no
	// cache_salt: a /generate body's cache_salt is an unknown key, ignored.
	ExtraKey json.RawMessage `json:"extra_key"`
}

// item is one sequence to generate, with what the HTTP layer needs to
// render it.
type item struct {
	req            engine.Request
	index          int
	noStopTrim     bool
	streamInterval int
	logprobs       logprobParams
}

func isNull(b json.RawMessage) bool { return len(b) == 0 || bytes.Equal(b, []byte("null")) }

func isList(b json.RawMessage) bool { return len(b) > 0 && b[0] == '[' }

// perItem decodes a field that is either one value for every item or a
// list with one value per item.
func perItem[T any](raw json.RawMessage, n int, field string, def T) ([]T, error) {
	out := make([]T, n)
	for i := range out {
		out[i] = def
	}
	if isNull(raw) {
		return out, nil
	}
	if isList(raw) {
		var list []T
		if err := decodeJSON(raw, &list); err == nil {
			if len(list) != n {
				return nil, fmt.Errorf("%s: got %d values for a batch of %d", field, len(list), n)
			}
			return list, nil
		}
	}
	var one T
	if err := decodeJSON(raw, &one); err != nil {
		return nil, fmt.Errorf("%s: %s", field, describeJSONError(err))
	}
	for i := range out {
		out[i] = one
	}
	return out, nil
}

// cacheNamespace is the radix cache namespace SGLang's Req builds
// (schedule_batch.py, Req.__init__): the request's extra_key with the LoRA
// adapter appended, plainly concatenated. A present extra_key, even "", is a
// namespace of its own, since SGLang's radix key tests extra_key against
// None; the engine's "" means none, so every present key gets a leading
// marker byte.
func cacheNamespace(extraKey *string, lora string) string {
	if extraKey == nil && lora == "" {
		return ""
	}
	return "\x01" + deref(extraKey) + lora
}

// plan is a parsed generation request: its sequences, prompt-major, with
// copies (SGLang's n, parallel_sample_num) sequences per prompt.
type plan struct {
	items  []item
	copies int
	// batch: the answer is a list, and stream events carry an index.
	batch bool
}

// parseGenerate turns a /generate body into a plan. Type errors are
// validation errors (first error); semantic ones are /generate errors.
func (s *Server) parseGenerate(b *generateBody) (p plan, validation, semantic error) {
	hasText, hasIDs := !isNull(b.Text), !isNull(b.InputIDs)
	if hasText == hasIDs || !isNull(b.InputEmbeds) {
		if !isNull(b.InputEmbeds) && !hasText && !hasIDs {
			return plan{}, nil, errors.New("input_embeds is not supported by sglmock: send text or input_ids.")
		}
		return plan{}, nil, errors.New("Either text, input_ids or input_embeds should be provided.")
	}
	var texts []string
	var ids [][]int32
	switch {
	case hasText && isList(b.Text):
		if err := json.Unmarshal(b.Text, &texts); err != nil {
			return plan{}, fmt.Errorf("text: must be a string or a list of strings"), nil
		}
		p.batch = true
	case hasText:
		var one string
		if err := json.Unmarshal(b.Text, &one); err != nil {
			return plan{}, fmt.Errorf("text: must be a string or a list of strings"), nil
		}
		texts = []string{one}
	default:
		var one []int32
		if err := json.Unmarshal(b.InputIDs, &one); err == nil {
			ids = [][]int32{one}
		} else if err := json.Unmarshal(b.InputIDs, &ids); err == nil {
			p.batch = true
		} else {
			return plan{}, fmt.Errorf("input_ids: must be a list of token ids or a list of such lists"), nil
		}
	}
	n := max(len(texts), len(ids))
	if n == 0 {
		return plan{}, nil, errors.New("The batch is empty.")
	}
	if err := checkSequences(n, 1); err != nil {
		return plan{}, nil, err // before any per-prompt list is sized by n
	}
	params, err := perItem(b.SamplingParams, n, "sampling_params", samplingParams{})
	if err != nil {
		return plan{}, err, nil
	}
	if p.batch && !isNull(b.RID) && !isList(b.RID) {
		return plan{}, nil, errors.New("The rid should be a list for batch processing.")
	}
	rids, err := perItem(b.RID, n, "rid", "")
	if err != nil {
		return plan{}, err, nil
	}
	logprob, err := perItem(b.ReturnLogprob, n, "return_logprob", false)
	if err != nil {
		return plan{}, err, nil
	}
	starts, err := perItem(b.LogprobStartLen, n, "logprob_start_len", integer(-1))
	if err != nil {
		return plan{}, err, nil
	}
	tops, err := perItem(b.TopLogprobsNum, n, "top_logprobs_num", integer(0))
	if err != nil {
		return plan{}, err, nil
	}
	for _, top := range tops {
		if err := checkTopLogprobs("top_logprobs_num", int(top)); err != nil {
			return plan{}, nil, err
		}
	}
	loras, err := perItem(b.LoraPath, n, "lora_path", "")
	if err != nil {
		return plan{}, err, nil
	}
	extraKeys, err := perItem(b.ExtraKey, n, "extra_key", (*string)(nil))
	if err != nil {
		return plan{}, err, nil
	}
	copies, err := copiesOf(params[0].N)
	if err != nil {
		return plan{}, nil, err
	}
	if err := checkSequences(n, copies); err != nil {
		return plan{}, nil, err
	}
	for i := range n {
		if c, err := copiesOf(params[i].N); err != nil {
			return plan{}, nil, err
		} else if c != copies {
			return plan{}, nil, errors.New("The parallel_sample_num should be the same for all samples in sample params.")
		}
		it := s.itemFrom(params[i])
		if texts != nil {
			it.req.Text = texts[i]
		} else {
			it.req.InputIDs = ids[i]
		}
		// Parallel samples get fresh rids (SGLang regenerates them), so a
		// client's rid names a sequence only when n is 1.
		if copies == 1 {
			it.req.RID = rids[i]
		}
		it.logprobs = logprobParams{on: logprob[i], start: int(starts[i]), top: int(tops[i]), text: b.ReturnTextInLogprobs}
		it.req.ReturnLogprob, it.req.LogprobStartLen = logprob[i], int(starts[i])
		if err := s.tokenizeForLogprobs(&it); err != nil {
			return plan{}, nil, err
		}
		it.req.Namespace = cacheNamespace(extraKeys[i], loras[i])
		for range copies {
			it.index = len(p.items)
			p.items = append(p.items, it)
		}
	}
	p.copies = copies
	p.batch = p.batch || copies > 1
	return p, nil, nil
}

// maxN bounds n (parallel samples per prompt), as OpenAI does, and
// maxSequences the sequences of one request (prompts x n), so that one
// request cannot ask for unbounded work: each sequence is an engine
// request. SGLang bounds neither; the mock's bound is generous.
const (
	maxN         = 128
	maxSequences = 2048
)

// checkSequences bounds the sequences of a batch of prompts with n copies
// each.
func checkSequences(prompts, copies int) error {
	if prompts > maxSequences || prompts*copies > maxSequences {
		return fmt.Errorf("A request may ask for at most %d sequences (prompts x n), got %d prompts x %d.",
			maxSequences, prompts, copies)
	}
	return nil
}

func copiesOf(n *integer) (int, error) {
	switch {
	case n == nil:
		return 1, nil
	case *n < 1:
		return 0, fmt.Errorf("n must be at least 1, got %d.", *n)
	case *n > maxN:
		return 0, fmt.Errorf("n must be at most %d, got %d.", maxN, *n)
	}
	return int(*n), nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// itemFrom maps sampling params onto an engine request.
func (s *Server) itemFrom(p samplingParams) item {
	it := item{noStopTrim: p.NoStopTrim, streamInterval: s.cfg.StreamInterval}
	it.req.MaxNewTokens = 128
	if p.MaxNewTokens != nil {
		it.req.MaxNewTokens = int(*p.MaxNewTokens)
	}
	it.req.Stop = p.Stop
	it.req.StopTokenIDs = p.StopTokenIDs
	it.req.IgnoreEOS = p.IgnoreEOS
	if p.StreamInterval != nil && *p.StreamInterval > 0 {
		it.streamInterval = int(*p.StreamInterval)
	}
	return it
}

// submit submits a plan's sequences; on the first refusal it aborts those
// it already submitted and returns the refusal. With n > 1 it first caches
// the prompts, as SGLang's parallel sampling does.
func (s *Server) submit(ctx context.Context, p plan) ([]*engine.Stream, error) {
	if p.copies > 1 {
		if err := s.cachePrompts(ctx, p); err != nil {
			return nil, err
		}
	}
	streams := make([]*engine.Stream, 0, len(p.items))
	for _, it := range p.items {
		st, err := s.eng.Submit(it.req)
		if err != nil {
			abortAll(streams)
			return nil, err
		}
		streams = append(streams, st)
	}
	return streams, nil
}

// cachePrompts is the prelude of SGLang's parallel sampling
// (tokenizer_manager.py, _handle_batch_request): every prompt is tokenized
// and checked before anything runs; then, prompt after prompt, a copy with
// max_new_tokens 0 and a fresh rid prefills it into the cache and is
// waited for. It is a request like any other (counted in the metrics,
// listed under /sim/requests), so each of the n copies submitted next finds
// the whole prompt cached. The copies share one tokenization.
func (s *Server) cachePrompts(ctx context.Context, p plan) error {
	for i := 0; i < len(p.items); i += p.copies {
		group := p.items[i : i+p.copies]
		tokens, err := s.eng.Tokenize(group[0].req)
		if err != nil {
			return err
		}
		for c := range group {
			group[c].req.InputIDs, group[c].req.Text = tokens, ""
		}
		if err := s.eng.Check(group[0].req); err != nil {
			return err
		}
	}
	for i := 0; i < len(p.items); i += p.copies {
		prefill := p.items[i].req
		prefill.RID, prefill.MaxNewTokens = "", 0
		st, err := s.eng.Submit(prefill)
		if err != nil {
			return err
		}
		if _, err := st.Collect(ctx); err != nil {
			st.Abort()
			return err
		}
	}
	return nil
}

// output accumulates one sequence's output for rendering.
type output struct {
	item item
	rid  string
	ids  []int32
	last engine.Event
	// sent counts the events a streaming client was sent.
	sent int
	// lp holds the logprobs computed so far, lpSent how many output
	// positions an OpenAI stream has sent.
	lp     *logprobLists
	lpSent int
	// stopTail is how many trailing tokens holdsStopPrefix decodes; 0
	// until first needed.
	stopTail int
}

// due reports whether the event just added goes to a streaming client, as
// SGLang's output streamer decides (output_streamer.py, accept): the finish
// always does; before it, an event goes when the output's length in tokens
// is 1 modulo stream_interval (every event for 1), unless the output's tail
// could be the start of a stop string. Such an event is held back, so
// streamed text never has to be taken back.
func (o *output) due() bool {
	if o.last.Finish != nil {
		return true
	}
	if si := o.item.streamInterval; si > 1 && len(o.ids)%si != 1 {
		return false
	}
	return !o.holdsStopPrefix()
}

// holdsStopPrefix is Req.check_match_stop_str_prefix: the last tokens
// (as many as the longest stop string has, plus two) decode to a text that
// contains a stop string or ends with one's first characters.
func (o *output) holdsStopPrefix() bool {
	stops := o.item.req.Stop
	if len(stops) == 0 {
		return false
	}
	if o.stopTail == 0 {
		longest := 0
		for _, st := range stops {
			longest = max(longest, tokenizer.Count(st))
		}
		o.stopTail = longest + 2
	}
	tail := tokenizer.Decode(o.ids[len(o.ids)-min(o.stopTail, len(o.ids)):])
	for _, st := range stops {
		if st == "" {
			continue
		}
		if strings.Contains(tail, st) {
			return true
		}
		for i := 1; i <= min(len(tail), len(st)); i++ {
			if tail[len(tail)-i:] == st[:i] {
				return true
			}
		}
	}
	return false
}

// abortAll aborts every stream at once: one of them was refused.
func abortAll(streams []*engine.Stream) {
	for _, st := range streams {
		st.Abort()
	}
}

// disconnectAll tells the engine the client of every stream left; SGLang
// aborts them only later (see engine.Stream.Disconnect).
func disconnectAll(streams []*engine.Stream, streaming bool) {
	for _, st := range streams {
		st.Disconnect(streaming)
	}
}

func (o *output) add(ev engine.Event) {
	o.ids = append(o.ids, ev.Tokens...)
	o.last = ev
}

// text is the cumulative output text, trimmed at a matched stop string or
// stop token unless no_stop_trim, as SGLang's detokenizer trims.
func (o *output) text() string {
	ids := o.ids
	f := o.last.Finish
	if f != nil && f.MatchedToken != nil && !o.item.noStopTrim && len(ids) > 0 {
		ids = ids[:len(ids)-1]
	}
	t := tokenizer.Decode(ids)
	if f != nil && f.MatchedString != nil && !o.item.noStopTrim {
		if i := strings.Index(t, *f.MatchedString); i >= 0 {
			t = t[:i]
		}
	}
	return t
}

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
	r := generateResponse{Text: o.text(), OutputIDs: o.ids, MetaInfo: o.meta()}
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

func (s *Server) generate(c *gin.Context) {
	var body generateBody
	if !s.readBody(c, &body) {
		return
	}
	p, verr, serr := s.parseGenerate(&body)
	if verr != nil {
		writeValidationError(c, verr.Error())
		return
	}
	if body.Stream {
		s.streamGenerate(c, p, serr)
		return
	}
	if serr != nil {
		writeGenerateError(c, serr.Error())
		return
	}
	streams, err := s.submit(c.Request.Context(), p)
	if err != nil {
		if c.Request.Context().Err() == nil {
			writeGenerateError(c, err.Error())
		}
		return
	}
	outs, ok := collect(c.Request.Context(), p.items, streams)
	if !ok {
		return // the client left; its requests are aborted
	}
	if !p.batch {
		writeJSON(c, http.StatusOK, outs[0].response(false))
		return
	}
	resps := make([]generateResponse, len(outs))
	for i, o := range outs {
		resps[i] = o.response(false)
	}
	writeJSON(c, http.StatusOK, resps)
}

// collect reads every stream to its end. If ctx ends first (the client
// disconnected), it tells the engine and reports false.
func collect(ctx context.Context, items []item, streams []*engine.Stream) ([]*output, bool) {
	outs := make([]*output, len(streams))
	for i, st := range streams {
		outs[i] = &output{item: items[i], rid: st.RID()}
		evs, err := st.Collect(ctx)
		if err != nil {
			disconnectAll(streams, false)
			return nil, false
		}
		for _, ev := range evs {
			outs[i].add(ev)
		}
	}
	return outs, true
}

// tagged is one event from one of several merged streams.
type tagged struct {
	i  int
	ev engine.Event
}

// events delivers the streams' events, tagged with their stream's index,
// until ctx ends. One stream is read directly; several are merged by one
// goroutine each. The returned wait blocks until those goroutines stop.
func events(ctx context.Context, streams []*engine.Stream) (next func() (tagged, error), wait func()) {
	if len(streams) == 1 {
		st := streams[0]
		return func() (tagged, error) {
			ev, err := st.Next(ctx)
			return tagged{0, ev}, err
		}, func() {}
	}
	ch := make(chan tagged)
	var wg sync.WaitGroup
	for i, st := range streams {
		wg.Go(func() {
			for {
				ev, err := st.Next(ctx)
				if err != nil {
					return
				}
				select {
				case ch <- tagged{i, ev}:
				case <-ctx.Done():
					return
				}
				if ev.Finish != nil {
					return
				}
			}
		})
	}
	return func() (tagged, error) {
		select {
		case t := <-ch:
			return t, nil
		case <-ctx.Done():
			return tagged{}, ctx.Err()
		}
	}, wg.Wait
}

// streamGenerate serves a streaming /generate. SGLang's generate_request
// returns its StreamingResponse before the request is even parsed, so the
// status line and headers go out at once, before prefill; a request refused
// after that (serr, or a refusal at submit) gets one error event.
func (s *Server) streamGenerate(c *gin.Context, p plan, serr error) {
	w := &sse{c: c}
	if w.open() != nil {
		return
	}
	if serr != nil {
		streamError(w, serr.Error())
		return
	}
	streams, err := s.submit(c.Request.Context(), p)
	if err != nil {
		if c.Request.Context().Err() == nil {
			streamError(w, err.Error())
		}
		return
	}
	ctx, cancel := context.WithCancel(c.Request.Context())
	next, wait := events(ctx, streams)
	defer func() {
		cancel()
		wait()
	}()
	outs := make([]*output, len(streams))
	for i, st := range streams {
		outs[i] = &output{item: p.items[i], rid: st.RID()}
	}
	for left := len(streams); left > 0; {
		t, err := next()
		if err != nil {
			disconnectAll(streams, true)
			return
		}
		o := outs[t.i]
		o.add(t.ev)
		if t.ev.Finish != nil {
			left--
		}
		if !o.due() {
			continue
		}
		o.sent++
		if err := w.data(marshal(o.response(p.batch))); err != nil {
			disconnectAll(streams, true)
			return
		}
	}
	w.done()
}

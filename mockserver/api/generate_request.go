package api

import (
	"context"
	"encoding/json"

	"github.com/sglmock/sglmock/mockserver/engine"
	"github.com/sglmock/sglmock/sim"
)

// samplingParams are the sampling_params a mock honours, and those SGLang
// verifies (SamplingParams.verify), which change nothing the mock
// generates; the rest are accepted and ignored.
type samplingParams struct {
	MaxNewTokens      *integer        `json:"max_new_tokens"`
	Temperature       *number         `json:"temperature"`
	TopP              *number         `json:"top_p"`
	TopK              *number         `json:"top_k"`
	MinP              *number         `json:"min_p"`
	FrequencyPenalty  *number         `json:"frequency_penalty"`
	PresencePenalty   *number         `json:"presence_penalty"`
	RepetitionPenalty *number         `json:"repetition_penalty"`
	MinNewTokens      *number         `json:"min_new_tokens"`
	LogitBias         objectKeys      `json:"logit_bias"`
	JSONSchema        json.RawMessage `json:"json_schema"`
	Regex             json.RawMessage `json:"regex"`
	EBNF              json.RawMessage `json:"ebnf"`
	Stop              stringOrList    `json:"stop"`
	StopTokenIDs      []int32         `json:"stop_token_ids"`
	IgnoreEOS         bool            `json:"ignore_eos"`
	N                 *integer        `json:"n"`
	StreamInterval    *integer        `json:"stream_interval"`
	NoStopTrim        bool            `json:"no_stop_trim"`
}

// generateBody is GenerateReqInput; unknown keys are ignored.
type generateBody struct {
	Text json.RawMessage `json:"text"`
	// textPlain says Text is a plain string (decodeAroundText).
	textPlain       bool
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
	// ExtraKey and CacheSalt partition the prefix cache, as the pair
	// (extra_key, cache_salt), each a value or a list of one per prompt.
	ExtraKey  json.RawMessage `json:"extra_key"`
	CacheSalt json.RawMessage `json:"cache_salt"`
	// RoutedDPRank pins the request to a DP rank; DataParallelRank is
	// its deprecated name (routedRank).
	RoutedDPRank     *integer `json:"routed_dp_rank"`
	DataParallelRank *integer `json:"data_parallel_rank"`
	// Priority orders the queue under priority scheduling, for every
	// item; RoutingKey groups requests for the routing-key policy, for a
	// single request only (GenerateReqInput.__getitem__ drops it).
	Priority   *integer `json:"priority"`
	RoutingKey *string  `json:"routing_key"`
}

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
		if err := json.Unmarshal(raw, &list); err == nil {
			if len(list) != n {
				return nil, malformed("%s: got %d values for a batch of %d", field, len(list), n)
			}
			return list, nil
		}
	}
	var one T
	if err := json.Unmarshal(raw, &one); err != nil {
		return nil, malformed("%s: %s", field, describeJSONError(err))
	}
	for i := range out {
		out[i] = one
	}
	return out, nil
}

// parseGenerate turns a /generate body into a plan. A body of the wrong
// shape is malformed (errMalformed); any other error refuses the request.
func (s *Server) parseGenerate(ctx context.Context, b *generateBody) (p plan, err error) {
	hasText, hasIDs := !isNull(b.Text), !isNull(b.InputIDs)
	if hasText == hasIDs || !isNull(b.InputEmbeds) {
		if !isNull(b.InputEmbeds) && !hasText && !hasIDs {
			return plan{}, errInputEmbeds
		}
		return plan{}, errNoInput
	}
	var texts []string
	var ids [][]int32
	switch {
	case hasText && isList(b.Text):
		if err := json.Unmarshal(b.Text, &texts); err != nil {
			return plan{}, malformed("text: must be a string or a list of strings")
		}
		p.batch = true
	case hasText:
		if one, ok := plainText(b.Text, b.textPlain); ok {
			texts = []string{one}
			break
		}
		var one string
		if err := json.Unmarshal(b.Text, &one); err != nil {
			return plan{}, malformed("text: must be a string or a list of strings")
		}
		texts = []string{one}
	default:
		var one []int32
		if err := json.Unmarshal(b.InputIDs, &one); err == nil {
			ids = [][]int32{one}
		} else if err := json.Unmarshal(b.InputIDs, &ids); err == nil {
			p.batch = true
		} else {
			return plan{}, malformed("input_ids: must be a list of token ids or a list of such lists")
		}
	}
	n := max(len(texts), len(ids))
	if n == 0 {
		return plan{}, errEmptyBatch
	}
	if err := checkSequences(n, 1); err != nil {
		return plan{}, err // before any per-prompt list is sized by n
	}
	params, err := perItem(b.SamplingParams, n, "sampling_params", samplingParams{})
	if err != nil {
		return plan{}, err
	}
	if p.batch && !isNull(b.RID) && !isList(b.RID) {
		return plan{}, errRIDNotList
	}
	rids, err := perItem(b.RID, n, "rid", "")
	if err != nil {
		return plan{}, err
	}
	logprob, err := perItem(b.ReturnLogprob, n, "return_logprob", false)
	if err != nil {
		return plan{}, err
	}
	starts, err := perItem(b.LogprobStartLen, n, "logprob_start_len", integer(-1))
	if err != nil {
		return plan{}, err
	}
	tops, err := perItem(b.TopLogprobsNum, n, "top_logprobs_num", integer(0))
	if err != nil {
		return plan{}, err
	}
	for _, top := range tops {
		if err := checkTopLogprobs("top_logprobs_num", int(top)); err != nil {
			return plan{}, err
		}
	}
	loras, err := perItem(b.LoraPath, n, "lora_path", "")
	if err != nil {
		return plan{}, err
	}
	extraKeys, err := perItem(b.ExtraKey, n, "extra_key", (*string)(nil))
	if err != nil {
		return plan{}, err
	}
	// Before the generate-cache-salt rule (PR #30827) GenerateReqInput has
	// no cache_salt: the key is ignored, whatever its value.
	salts := make([]*string, n)
	if s.rules.GenerateCacheSalt {
		if salts, err = perItem(b.CacheSalt, n, "cache_salt", (*string)(nil)); err != nil {
			return plan{}, err
		}
	}
	sent := saltsSent(b.CacheSalt, n)
	copies, err := copiesOf(params[0].N)
	if err != nil {
		return plan{}, err
	}
	if err := checkSequences(n, copies); err != nil {
		return plan{}, err
	}
	for i := range n {
		if c, err := copiesOf(params[i].N); err != nil {
			return plan{}, err
		} else if c != copies {
			return plan{}, errUnequalCopies
		}
		it := s.itemFrom(params[i])
		if texts != nil {
			it.req.Text, it.req.Route = texts[i], sim.RouteGenerate
		} else {
			it.req.InputIDs, it.req.Route = ids[i], sim.RouteGenerateIDs
		}
		// Parallel samples get fresh rids (SGLang regenerates them), so a
		// client's rid names a sequence only when n is 1.
		if copies == 1 {
			it.req.RID = rids[i]
		}
		it.logprobs = logprobParams{on: logprob[i], start: int(starts[i]), top: int(tops[i]), text: b.ReturnTextInLogprobs}
		it.req.ReturnLogprob, it.req.LogprobStartLen = logprob[i], int(starts[i])
		if err := s.tokenizeForLogprobs(ctx, &it); err != nil {
			return plan{}, err
		}
		it.req.Namespace = cacheNamespace(extraKeys[i], loras[i], salts[i])
		it.req.Salted = sent[i]
		it.req.RoutedDPRank = routedRank(b.RoutedDPRank, b.DataParallelRank)
		it.req.Priority = b.Priority.ptr()
		if !p.batch && copies == 1 {
			it.req.RoutingKey = deref(b.RoutingKey)
		}
		for range copies {
			it.index = len(p.items)
			p.items = append(p.items, it)
		}
	}
	p.copies = copies
	p.batch = p.batch || copies > 1
	return p, nil
}

// saltsSent says which of a /generate body's n prompts carry a cache_salt
// (a string that is not empty, one for all or one a prompt), whether or not
// the release takes it, so that /sim/ can say which requests counted on
// one.
func saltsSent(raw json.RawMessage, n int) []bool {
	out := make([]bool, n)
	var one string
	if json.Unmarshal(raw, &one) == nil {
		for i := range out {
			out[i] = one != ""
		}
		return out
	}
	var list []*string
	if json.Unmarshal(raw, &list) == nil && len(list) == n {
		for i, s := range list {
			out[i] = s != nil && *s != ""
		}
	}
	return out
}

// itemFrom maps sampling params onto an engine request.
func (s *Server) itemFrom(p samplingParams) item {
	it := item{noStopTrim: p.NoStopTrim, streamInterval: s.cfg.StreamInterval, metrics: s.cfg.EnableMetrics, dpRank: s.eng.Ranks() > 1}
	it.req.MaxNewTokens = 128
	if p.MaxNewTokens != nil {
		it.req.MaxNewTokens = int(*p.MaxNewTokens)
	}
	it.req.Stop = p.Stop
	it.req.StopTokenIDs = p.StopTokenIDs
	it.req.IgnoreEOS = p.IgnoreEOS
	it.req.Sampling = engine.Sampling{
		Temperature: p.Temperature.param(), TopP: p.TopP.param(), TopK: p.TopK.param(), MinP: p.MinP.param(),
		FrequencyPenalty: p.FrequencyPenalty.param(), PresencePenalty: p.PresencePenalty.param(),
		RepetitionPenalty: p.RepetitionPenalty.param(), MinNewTokens: p.MinNewTokens.param(), LogitBias: p.LogitBias,
	}
	for _, g := range []json.RawMessage{p.JSONSchema, p.Regex, p.EBNF} {
		if !isNull(g) {
			it.req.Sampling.Grammars++
		}
	}
	if p.StreamInterval != nil && *p.StreamInterval > 0 {
		it.streamInterval = int(*p.StreamInterval)
	}
	return it
}

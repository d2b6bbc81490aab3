package api

import "github.com/sglmock/sglmock/mockserver/engine"

// promptTokensDetails is SGLang's PromptTokensDetails.
type promptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// usage is SGLang's UsageInfo, in its field order.
type usage struct {
	PromptTokens        int                  `json:"prompt_tokens"`
	TotalTokens         int                  `json:"total_tokens"`
	CompletionTokens    int                  `json:"completion_tokens"`
	PromptTokensDetails *promptTokensDetails `json:"prompt_tokens_details"`
	ReasoningTokens     int                  `json:"reasoning_tokens"`
}

// usageExcludeNone is usage as model_dump_json(exclude_none=True) writes
// it, which the completions stream's final usage chunk uses: no
// prompt_tokens_details when there is none.
type usageExcludeNone struct {
	PromptTokens        int                  `json:"prompt_tokens"`
	TotalTokens         int                  `json:"total_tokens"`
	CompletionTokens    int                  `json:"completion_tokens"`
	PromptTokensDetails *promptTokensDetails `json:"prompt_tokens_details,omitempty"`
	ReasoningTokens     int                  `json:"reasoning_tokens"`
}

// usageOf sums usage over outputs, counting each prompt once (n copies of a
// prompt share it). Cached tokens appear only under --enable-cache-report
// and when there are some, as in SGLang.
func (s *Server) usageOf(outs []*output, copies int, withCached bool) usage {
	var u usage
	cached := 0
	for i, o := range outs {
		if i%copies == 0 {
			u.PromptTokens += o.last.PromptTokens
			cached += o.last.CachedTokens
		}
		u.CompletionTokens += o.last.CompletionTokens
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	if withCached && s.cfg.EnableCacheReport && cached > 0 {
		u.PromptTokensDetails = &promptTokensDetails{cached}
	}
	return u
}

// sglextOf is the response's sglext when the request asked for
// return_cached_tokens_details: the cached_tokens_details of the first
// sequence, as serving_chat.py and serving_completions.py take them from
// the first result (process_cached_tokens_details_from_ret), or nil when
// it has none (nothing cached).
func sglextOf(c *openAICommon, outs []*output) *sglext {
	if !c.ReturnCachedTokensDetails || len(outs) == 0 {
		return nil
	}
	d := outs[0].metaWithoutLogprobs().CachedTokensDetails
	if d == nil {
		return nil
	}
	return &sglext{CachedTokensDetails: d}
}

// openAIFinish maps a finish to OpenAI's finish_reason and matched_stop.
func openAIFinish(f *engine.Finish) (reason any, matched any) {
	if f == nil {
		return nil, nil
	}
	switch {
	case f.Reason == engine.FinishLength:
		return "length", nil
	case f.Reason == engine.FinishAbort:
		return "abort", nil
	case f.MatchedToken != nil:
		return "stop", *f.MatchedToken
	default:
		return "stop", *f.MatchedString
	}
}

// The response shapes, with fields in SGLang's order.
type (
	openAIResponse struct {
		ID       string    `json:"id"`
		Object   string    `json:"object"`
		Created  int64     `json:"created"`
		Model    string    `json:"model"`
		Choices  []any     `json:"choices"`
		Usage    *usage    `json:"usage,omitempty"`
		Metadata *metadata `json:"metadata,omitempty"`
		Sglext   *sglext   `json:"sglext,omitempty"`
	}
	// sglext is SGLang's SglExt: its extensions to OpenAI's response
	// objects, present only when set.
	sglext struct {
		CachedTokensDetails *cachedTokensDetails `json:"cached_tokens_details,omitempty"`
	}
	metadata struct {
		WeightVersion string `json:"weight_version"`
	}
	completionChoice struct {
		Index        int    `json:"index"`
		Text         string `json:"text"`
		Logprobs     any    `json:"logprobs"`
		FinishReason any    `json:"finish_reason"`
		MatchedStop  any    `json:"matched_stop"`
	}
	chatMessageOut struct {
		Role             string `json:"role"`
		Content          string `json:"content"`
		ReasoningContent any    `json:"reasoning_content"`
		ToolCalls        any    `json:"tool_calls"`
	}
	chatChoice struct {
		Index        int            `json:"index"`
		Message      chatMessageOut `json:"message"`
		Logprobs     any            `json:"logprobs"`
		FinishReason any            `json:"finish_reason"`
		MatchedStop  any            `json:"matched_stop"`
	}
	// chatDelta is sse_utils.py's StreamDelta: reasoning_content is always
	// there (null without a reasoning parser, so SDK code that reads
	// delta.reasoning_content works), role and content only when set.
	chatDelta struct {
		ReasoningContent *string `json:"reasoning_content"`
		Role             string  `json:"role,omitempty"`
		Content          *string `json:"content,omitempty"`
	}
	// streamChunk is a completions chunk (CompletionStreamResponse, whose
	// "usage" is there even when null) or a final include_usage chunk.
	streamChunk struct {
		ID      string  `json:"id"`
		Object  string  `json:"object"`
		Created int64   `json:"created"`
		Model   string  `json:"model"`
		Choices []any   `json:"choices"`
		Usage   any     `json:"usage"`
		Sglext  *sglext `json:"sglext,omitempty"`
	}
	chatChunkChoice struct {
		Index        int       `json:"index"`
		Delta        chatDelta `json:"delta"`
		Logprobs     any       `json:"logprobs"`
		FinishReason any       `json:"finish_reason"`
		MatchedStop  any       `json:"matched_stop"`
	}
)

// A streaming chunk is an openAIResponse without metadata. It has no
// "error" key: clients such as the official Go one fail a stream on
// "error": null.

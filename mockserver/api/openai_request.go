package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/sglmock/sglmock/mockserver/engine"
	"github.com/sglmock/sglmock/sim"
)

type streamOptions struct {
	IncludeUsage         bool `json:"include_usage"`
	ContinuousUsageStats bool `json:"continuous_usage_stats"`
}

// openAICommon are the fields completions and chat share.
type openAICommon struct {
	Model         string         `json:"model"`
	MaxTokens     *integer       `json:"max_tokens"`
	N             *integer       `json:"n"`
	Stop          stringOrList   `json:"stop"`
	Stream        bool           `json:"stream"`
	StreamOptions *streamOptions `json:"stream_options"`
	IgnoreEOS     bool           `json:"ignore_eos"`
	StopTokenIDs  []int32        `json:"stop_token_ids"`
	NoStopTrim    bool           `json:"no_stop_trim"`
	RID           *string        `json:"rid"`
	ExtraKey      *string        `json:"extra_key"`
	CacheSalt     *string        `json:"cache_salt"`
	LoraPath      *string        `json:"lora_path"`
	// The sampling parameters SGLang verifies (SamplingParams.verify):
	// pydantic's float fields print as floats, its int fields as ints.
	Temperature       *number         `json:"temperature"`
	TopP              *number         `json:"top_p"`
	TopK              *integer        `json:"top_k"`
	MinP              *number         `json:"min_p"`
	FrequencyPenalty  *number         `json:"frequency_penalty"`
	PresencePenalty   *number         `json:"presence_penalty"`
	RepetitionPenalty *number         `json:"repetition_penalty"`
	MinTokens         *integer        `json:"min_tokens"`
	LogitBias         objectKeys      `json:"logit_bias"`
	Regex             json.RawMessage `json:"regex"`
	EBNF              json.RawMessage `json:"ebnf"`
	// ReturnCachedTokensDetails adds SGLang's sglext.cached_tokens_details
	// to the response (a chunk of its own in a stream), with or without
	// --enable-cache-report.
	ReturnCachedTokensDetails bool `json:"return_cached_tokens_details"`
	// RoutedDPRank pins the request to a DP rank; DataParallelRank is
	// its deprecated name (routedRank); the X-Data-Parallel-Rank header
	// wins over both (headerRank, kept in headerDPRank).
	RoutedDPRank     *integer `json:"routed_dp_rank"`
	DataParallelRank *integer `json:"data_parallel_rank"`
	headerDPRank     *int
	// Priority is the request's priority; routingKey comes from the
	// x-smg-routing-key header (openAIHeaders).
	Priority   *integer `json:"priority"`
	routingKey string
}

type completionBody struct {
	openAICommon
	Prompt json.RawMessage `json:"prompt"`
	// promptPlain says Prompt is a plain string (decodeAroundText).
	promptPlain bool
	Echo        bool `json:"echo"`
	// Logprobs asks for logprobs with this many alternatives per position.
	Logprobs *integer `json:"logprobs"`
}

type chatBody struct {
	openAICommon
	chatTemplateRequest
	MaxCompletionTokens *integer `json:"max_completion_tokens"`
	InputIDs            []int32  `json:"input_ids"`
	Logprobs            bool     `json:"logprobs"`
	TopLogprobs         *integer `json:"top_logprobs"`
}

// openAINamespace is the cache namespace of an OpenAI request, as
// serving_base.py's _compute_extra_key passes extra_key on (an empty one is
// none): with the generate-cache-salt rule (PR #30827) cache_salt goes
// beside it; before it, cache_salt and extra_key, each when not empty, are
// joined into one extra_key, salt first, so salt "ab", salt "a" with
// extra_key "b", and extra_key "ab" share a namespace.
func (s *Server) openAINamespace(extraKey, lora, cacheSalt *string) string {
	if s.rules.GenerateCacheSalt {
		if deref(extraKey) == "" {
			extraKey = nil
		}
		return cacheNamespace(extraKey, deref(lora), cacheSalt)
	}
	joined := deref(cacheSalt) + deref(extraKey)
	if joined == "" {
		return cacheNamespace(nil, deref(lora), nil)
	}
	return cacheNamespace(&joined, deref(lora), nil)
}

// sampling are the OpenAI request's sampling parameters as SGLang's
// to_sampling_params passes them on (min_tokens as min_new_tokens).
func (b *openAICommon) sampling() engine.Sampling {
	asInt := func(n *integer) *engine.Number {
		if n == nil {
			return nil
		}
		return &engine.Number{Value: float64(*n), Text: strconv.Itoa(int(*n))}
	}
	sp := engine.Sampling{
		Temperature: b.Temperature.asFloat(), TopP: b.TopP.asFloat(), TopK: asInt(b.TopK), MinP: b.MinP.asFloat(),
		FrequencyPenalty: b.FrequencyPenalty.asFloat(), PresencePenalty: b.PresencePenalty.asFloat(),
		RepetitionPenalty: b.RepetitionPenalty.asFloat(), MinNewTokens: asInt(b.MinTokens), LogitBias: b.LogitBias,
	}
	for _, g := range []json.RawMessage{b.Regex, b.EBNF} {
		if !isNull(g) {
			sp.Grammars++
		}
	}
	return sp
}

// prepareOpenAI validates the shared fields and plans copies of each
// prompt, prompt-major, each to generate maxNew(prompt) tokens. maxNew gets
// the prompt in prompts itself, which it may change (chatBudget tokenizes
// it to count it).
func (s *Server) prepareOpenAI(ctx context.Context, b *openAICommon, prompts []engine.Request, maxNew func(*engine.Request) (int, error), lp logprobParams) (plan, error) {
	copies, err := copiesOf(b.N)
	if err != nil {
		return plan{}, err
	}
	if err := checkSequences(len(prompts), copies); err != nil {
		return plan{}, err
	}
	ns := s.openAINamespace(b.ExtraKey, b.LoraPath, b.CacheSalt)
	p := plan{copies: copies, batch: len(prompts)*copies > 1, items: make([]item, 0, len(prompts)*copies)}
	for i := range prompts {
		limit, err := maxNew(&prompts[i])
		if err != nil {
			return plan{}, err
		}
		prompt := prompts[i]
		if lp.on && prompt.InputIDs == nil {
			// The input logprobs are of its tokens.
			if prompt.InputIDs, err = s.tokenizePrompt(ctx, prompt); err != nil {
				return plan{}, err
			}
			prompt.Text = ""
		}
		for range copies {
			it := item{index: len(p.items), noStopTrim: b.NoStopTrim, streamInterval: s.cfg.StreamInterval, logprobs: lp}
			it.req = prompt
			it.req.ReturnLogprob, it.req.LogprobStartLen = lp.on, lp.start
			it.req.MaxNewTokens = limit
			it.req.Stop = b.Stop
			it.req.StopTokenIDs = b.StopTokenIDs
			it.req.IgnoreEOS = b.IgnoreEOS
			it.req.Sampling = b.sampling()
			it.req.Namespace = ns
			it.req.Priority = b.Priority.ptr()
			if !p.batch {
				it.req.RoutingKey = b.routingKey // a batch's items lose it (GenerateReqInput.__getitem__)
			}
			it.req.Salted = b.CacheSalt != nil && *b.CacheSalt != ""
			it.req.RoutedDPRank = b.headerDPRank
			if it.req.RoutedDPRank == nil {
				it.req.RoutedDPRank = routedRank(b.RoutedDPRank, b.DataParallelRank)
			}
			// Parallel samples get fresh rids, as SGLang regenerates them.
			switch {
			case b.RID == nil || copies > 1:
			case len(prompts) == 1:
				it.req.RID = *b.RID
			default:
				it.req.RID = fmt.Sprintf("%s_%d", *b.RID, i)
			}
			p.items = append(p.items, it)
		}
	}
	return p, nil
}

// parsePrompt reads a completions prompt: a string, a list of strings, a
// list of token ids or a list of such lists. plain says raw is known to be
// a plain string (decodeAroundText).
func parsePrompt(raw json.RawMessage, plain bool) ([]engine.Request, error) {
	if emptyPrompt(raw) {
		return nil, errEmptyPrompt
	}
	if one, ok := plainText(raw, plain); ok {
		return []engine.Request{{Text: one, Route: sim.RouteCompletions}}, nil
	}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		return []engine.Request{{Text: one, Route: sim.RouteCompletions}}, nil
	}
	var texts []string
	if err := json.Unmarshal(raw, &texts); err == nil && len(texts) > 0 {
		out := make([]engine.Request, len(texts))
		for i, t := range texts {
			out[i].Text, out[i].Route = t, sim.RouteCompletions
		}
		return out, nil
	}
	var ids []int32
	if err := json.Unmarshal(raw, &ids); err == nil && len(ids) > 0 {
		return []engine.Request{{InputIDs: ids, Route: sim.RouteCompletionsTokens}}, nil
	}
	var batch [][]int32
	if err := json.Unmarshal(raw, &batch); err == nil && len(batch) > 0 {
		out := make([]engine.Request, len(batch))
		for i, b := range batch {
			out[i].InputIDs, out[i].Route = b, sim.RouteCompletionsTokens
		}
		return out, nil
	}
	return nil, malformed("prompt: must be a string, a list of strings, a list of token ids or a list of such lists")
}

// emptyPrompt is serving_completions.py's _validate_request: a prompt that
// is empty, or a list whose every item is ("", [] or []), is refused.
// Only a list is decoded: a long prompt string is not read twice.
func emptyPrompt(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || t[0] != '[' {
		return string(t) == `""`
	}
	var items []json.RawMessage
	if err := json.Unmarshal(t, &items); err != nil {
		return false
	}
	for _, it := range items {
		if t := strings.TrimSpace(string(it)); t != `""` && !isEmptyList(t) {
			return false
		}
	}
	return true
}

// isEmptyList tells whether a JSON value is [] (spaces allowed inside).
func isEmptyList(t string) bool {
	return strings.HasPrefix(t, "[") && strings.TrimSpace(t[1:]) == "]"
}

// chatBudget is the output of a chat completion without max_tokens: SGLang
// generates to the context budget (init_req_max_new_tokens: context length
// - 2 - prompt tokens) until the model samples EOS, which the mock never
// does, so the profile's output cap stands in for it. It tokenizes the
// prompt, once, to count it.
func (s *Server) chatBudget(ctx context.Context, prompt *engine.Request) (int, error) {
	if prompt.InputIDs == nil {
		tokens, err := s.tokenizePrompt(ctx, *prompt)
		if err != nil {
			return 0, err
		}
		prompt.InputIDs, prompt.Text = tokens, ""
	}
	return max(0, min(s.cfg.Profile.ContextLength-2-len(prompt.InputIDs), s.cfg.Profile.OutputCap())), nil
}

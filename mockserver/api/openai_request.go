package api

import (
	"context"
	"fmt"
	"strings"

	json "github.com/goccy/go-json"

	"github.com/sglmock/sglmock/mockserver/engine"
	"github.com/sglmock/sglmock/mockserver/tokenizer"
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
	Temperature   *float64       `json:"temperature"`
	// ReturnCachedTokensDetails adds SGLang's sglext.cached_tokens_details
	// to the response (a chunk of its own in a stream), with or without
	// --enable-cache-report.
	ReturnCachedTokensDetails bool `json:"return_cached_tokens_details"`
}

type completionBody struct {
	openAICommon
	Prompt json.RawMessage `json:"prompt"`
	Echo   bool            `json:"echo"`
	// Logprobs asks for logprobs with this many alternatives per position.
	Logprobs *integer `json:"logprobs"`
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type chatBody struct {
	openAICommon
	Messages            []chatMessage  `json:"messages"`
	MaxCompletionTokens *integer       `json:"max_completion_tokens"`
	ChatTemplateKwargs  map[string]any `json:"chat_template_kwargs"`
	InputIDs            []int32        `json:"input_ids"`
	Logprobs            bool           `json:"logprobs"`
	TopLogprobs         *integer       `json:"top_logprobs"`
}

// openAIExtraKey is the extra_key the OpenAI routes pass on: an empty one
// is none (serving_base.py's _compute_extra_key). cache_salt goes beside
// it, not into it (PR #30827).
func openAIExtraKey(extraKey *string) *string {
	if deref(extraKey) == "" {
		return nil
	}
	return extraKey
}

// prepareOpenAI validates the shared fields and plans copies of each
// prompt, prompt-major, each to generate maxNew(prompt) tokens.
func (s *Server) prepareOpenAI(ctx context.Context, b *openAICommon, prompts []engine.Request, maxNew func(*engine.Request) (int, error), lp logprobParams) (plan, error) {
	copies, err := copiesOf(b.N)
	if err != nil {
		return plan{}, err
	}
	if err := checkSequences(len(prompts), copies); err != nil {
		return plan{}, err
	}
	ns := cacheNamespace(openAIExtraKey(b.ExtraKey), deref(b.LoraPath), b.CacheSalt)
	p := plan{copies: copies, batch: len(prompts)*copies > 1}
	for i, prompt := range prompts {
		limit, err := maxNew(&prompt)
		if err != nil {
			return plan{}, err
		}
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
			it.req.Namespace = ns
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
// list of token ids or a list of such lists.
func parsePrompt(raw json.RawMessage) ([]engine.Request, error) {
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

// messageText flattens a chat message's content: a string or a list of
// parts, whose text parts ("text" or "input_text") are joined with a space,
// as SGLang flattens content for a template that takes a string
// (process_content_for_template_format).
func messageText(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var text string
	if err := json.Unmarshal(raw, &text); err == nil {
		return text, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", malformed("messages: content must be a string or a list of content parts")
	}
	texts := make([]string, 0, len(parts))
	for _, p := range parts {
		if p.Type == "text" || p.Type == "input_text" {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, " "), nil
}

// chatPrompt applies the chat template to messages, with the generation
// prompt and the request's chat_template_kwargs, as the server does before
// tokenizing a chat: the prompt's text, tokenized without the BOS a text
// prompt gets (the template writes its own). A template that cannot render
// them is the request's error.
func (s *Server) chatPrompt(messages []chatMessage, kwargs map[string]any) (engine.Request, error) {
	msgs := make([]tokenizer.Message, len(messages))
	for i, m := range messages {
		text, err := messageText(m.Content)
		if err != nil {
			return engine.Request{}, err
		}
		msgs[i] = tokenizer.Message{Role: m.Role, Content: text}
	}
	text, err := s.eng.Tokenizer().ApplyChatTemplate(msgs, true, kwargs)
	if err != nil {
		return engine.Request{}, err
	}
	return engine.Request{Text: text, Templated: true}, nil
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

package api

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/sglmock/sglmock/mockserver/engine"
)

// The render endpoints are vLLM's, not SGLang's: POST
// /v1/completions/render and /v1/chat/completions/render answer, without
// generating, the token ids the server would prefill for a request (the
// BOS the profile's tokenizer adds, the chat template), so a router that
// tokenizes through them (the llm-d router's token-producer) computes the
// very block hashes the replica's KV events announce. The shape is vLLM's
// GenerateRequest: completions answer a list, one per prompt; chat answers
// one object.

// renderedPrompt is vLLM's GenerateRequest as the render endpoints return
// it. Features (multimodal), token_offsets and assistant_tokens_mask are
// null: the mock serves text only and does not compute them.
type renderedPrompt struct {
	RequestID           string           `json:"request_id"`
	TokenIDs            []int32          `json:"token_ids"`
	Features            any              `json:"features"`
	SamplingParams      map[string]any   `json:"sampling_params"`
	Model               string           `json:"model"`
	Stream              bool             `json:"stream"`
	StreamOptions       *streamOptions   `json:"stream_options"`
	CacheSalt           *string          `json:"cache_salt"`
	TokenOffsets        any              `json:"token_offsets"`
	AssistantTokensMask *json.RawMessage `json:"assistant_tokens_mask,omitempty"`
}

// renderBody is a render request as both render endpoints read it, in one
// parse: the fields they use, and the sampling fields vLLM carries into a
// rendered request's sampling_params as given (the render endpoints do not
// read those, so a long value is repeated, never parsed again).
type renderBody struct {
	Model  string          `json:"model"`
	Prompt json.RawMessage `json:"prompt"`
	chatTemplateRequest
	MaxTokens           *integer       `json:"max_tokens"`
	MaxCompletionTokens *integer       `json:"max_completion_tokens"`
	Stream              bool           `json:"stream"`
	StreamOptions       *streamOptions `json:"stream_options"`
	CacheSalt           *string        `json:"cache_salt"`

	Temperature       json.RawMessage `json:"temperature"`
	TopP              json.RawMessage `json:"top_p"`
	TopK              json.RawMessage `json:"top_k"`
	MinP              json.RawMessage `json:"min_p"`
	Seed              json.RawMessage `json:"seed"`
	N                 json.RawMessage `json:"n"`
	Stop              json.RawMessage `json:"stop"`
	StopTokenIDs      json.RawMessage `json:"stop_token_ids"`
	PresencePenalty   json.RawMessage `json:"presence_penalty"`
	FrequencyPenalty  json.RawMessage `json:"frequency_penalty"`
	RepetitionPenalty json.RawMessage `json:"repetition_penalty"`
	IgnoreEOS         json.RawMessage `json:"ignore_eos"`
	SkipSpecialTokens json.RawMessage `json:"skip_special_tokens"`
	Logprobs          json.RawMessage `json:"logprobs"`
}

// maxRenderSamplingBytes bounds the sampling values a render answer
// repeats for every prompt, so that the answer stays linear in the body.
const maxRenderSamplingBytes = 64 << 10

// samplingParams returns the given sampling fields by key, checked for
// their JSON kind (a number, a bool, a string or a list, as vLLM's request
// model types them), or an error.
func (b *renderBody) samplingParams() (map[string]json.RawMessage, error) {
	out := make(map[string]json.RawMessage)
	size := 0
	for _, f := range []struct {
		key   string
		value json.RawMessage
		kinds string // the first bytes the value may start with
	}{
		{"temperature", b.Temperature, "-0123456789"}, {"top_p", b.TopP, "-0123456789"}, {"top_k", b.TopK, "-0123456789"},
		{"min_p", b.MinP, "-0123456789"}, {"seed", b.Seed, "-0123456789"}, {"n", b.N, "-0123456789"},
		{"stop", b.Stop, `"[`}, {"stop_token_ids", b.StopTokenIDs, "["},
		{"presence_penalty", b.PresencePenalty, "-0123456789"}, {"frequency_penalty", b.FrequencyPenalty, "-0123456789"},
		{"repetition_penalty", b.RepetitionPenalty, "-0123456789"}, {"ignore_eos", b.IgnoreEOS, "tf"},
		{"skip_special_tokens", b.SkipSpecialTokens, "tf"}, {"logprobs", b.Logprobs, "-0123456789tf"},
	} {
		if isNull(f.value) {
			continue
		}
		if !strings.ContainsRune(f.kinds, rune(f.value[0])) {
			return nil, malformed("%s: Input should be a valid %s, got %s", f.key, kindName(f.kinds), jsonKind(clip(string(f.value))))
		}
		out[f.key] = f.value
		size += len(f.value)
	}
	if size > maxRenderSamplingBytes {
		return nil, fmt.Errorf("The sampling parameters take %d bytes; the render endpoints repeat at most %d for each prompt.",
			size, maxRenderSamplingBytes)
	}
	return out, nil
}

func kindName(kinds string) string {
	switch kinds {
	case "tf":
		return "boolean"
	case "[":
		return "list"
	case `"[`:
		return "string or list of strings"
	}
	return "number"
}

// withMaxTokens is the sampling_params of one rendered prompt.
func withMaxTokens(params map[string]json.RawMessage, maxTokens int) map[string]any {
	out := make(map[string]any, len(params)+1)
	for k, v := range params {
		out[k] = v
	}
	out["max_tokens"] = maxTokens
	return out
}

// renderMaxTokens is vLLM's get_max_tokens: the output the request may ask
// for, at most the context left after the prompt, refused below 1 as
// vLLM's SamplingParams refuses it.
func (s *Server) renderMaxTokens(requested *int, promptLen int) (int, error) {
	limit := s.cfg.Profile.ContextLength - promptLen
	if requested != nil {
		limit = min(limit, *requested)
	}
	if limit < 1 {
		return 0, renderError{message: fmt.Sprintf("max_tokens must be at least 1, got %d.", limit), param: "max_tokens"}
	}
	return limit, nil
}

// renderError is a render refusal in vLLM's ErrorResponse shape.
type renderError struct{ message, param string }

func (e renderError) Error() string { return e.message }

// writeRenderRefusal answers a refused render: vLLM's envelope for its own
// refusals, SGLang's for the rest.
func writeRenderRefusal(c *exchange, err error) {
	var re renderError
	if !errors.As(err, &re) {
		writeRefusal(c, openAIEnvelope, err)
		return
	}
	writeJSON(c, http.StatusBadRequest, jsonObject{"error": jsonObject{
		"message": re.message, "type": "BadRequestError", "param": re.param, "code": http.StatusBadRequest,
	}})
}

func renderID(prefix string) string {
	id := uuid.New()
	return prefix + hex.EncodeToString(id[:])
}

// checkRenderModel answers vLLM's 404 for a model the server does not
// serve; an empty model is the served one.
func (s *Server) checkRenderModel(c *exchange, model string) bool {
	if model == "" || model == s.args.ServedModelName {
		return true
	}
	writeJSON(c, http.StatusNotFound, jsonObject{"error": jsonObject{
		"message": fmt.Sprintf("The model `%s` does not exist.", clip(model)),
		"type":    "NotFoundError", "param": "model", "code": http.StatusNotFound,
	}})
	return false
}

func (s *Server) renderCompletions(c *exchange) {
	var body renderBody
	if !s.readBody(c, &body) || !s.checkRenderModel(c, body.Model) {
		return
	}
	if isNull(body.Prompt) {
		writeValidationError(c, "prompt: Field required")
		return
	}
	prompts, err := parsePrompt(body.Prompt, false)
	if err != nil {
		writeValidationError(c, err.Error())
		return
	}
	if err := checkSequences(len(prompts), 1); err != nil {
		writeOpenAIError(c, err.Error())
		return
	}
	params, err := body.samplingParams()
	if err != nil {
		writeRefusal(c, openAIEnvelope, err)
		return
	}
	requested := 16 // CompletionRequest's default
	if body.MaxTokens != nil {
		requested = int(*body.MaxTokens)
	}
	// Every prompt is tokenized and checked before the answer starts, and
	// its ids kept, counted against the body budget with the body: a
	// render holds some 4 bytes a token beside its body. The answer is
	// encoded as it is written, one prompt at a time.
	ctx := c.Request.Context()
	hold := c.bodyHold
	out := make([]renderedPrompt, len(prompts))
	for i, p := range prompts {
		if ctx.Err() != nil {
			return // the client left: the rest is not rendered
		}
		ids, err := s.renderTokens(ctx, p)
		if err == nil {
			var maxTokens int
			if maxTokens, err = s.renderMaxTokens(&requested, len(ids)); err == nil {
				out[i] = s.rendered("cmpl-", ids, withMaxTokens(params, maxTokens), &body)
			}
		}
		if err != nil {
			writeRenderRefusal(c, err)
			return
		}
		if hold != nil && !hold.grow(int64(len(ids))*promptTokenBytes) {
			s.writeBusy(c, fmt.Sprintf("The server holds %d bytes of request bodies and renders already (--body-budget-bytes); "+
				"this render's token ids do not fit. Retry later, or render fewer prompts at once.", s.bodies.limit))
			return
		}
		prompts[i] = engine.Request{} // its text is no longer needed
	}
	if renderedIDs(out) <= answerChunk/8 {
		s.writeAnswer(c, nil, out) // short: marshalled whole
		return
	}
	s.writeStreamed(c, &answerWriter{s: s, w: c.Writer}, func(j *jsonSink) {
		j.rawString("[")
		for i := range out {
			if !j.ok() {
				return
			}
			if i > 0 {
				j.rawString(",")
			}
			encodeRendered(j, &out[i])
		}
		j.rawString("]")
	})
}

// renderedIDs counts the token ids of rendered prompts.
func renderedIDs(out []renderedPrompt) int {
	n := 0
	for _, r := range out {
		n += len(r.TokenIDs)
	}
	return n
}

// encodeRendered writes one rendered prompt, its token ids as they are
// written: exactly marshal(*r).
func encodeRendered(j *jsonSink, r *renderedPrompt) {
	ids := r.TokenIDs
	r.TokenIDs = nil
	head, tail, _ := bytes.Cut(marshal(*r), []byte(`"token_ids":null`))
	r.TokenIDs = ids
	j.raw(head)
	if ids == nil {
		j.rawString(`"token_ids":null`)
		j.raw(tail)
		return
	}
	j.rawString(`"token_ids":[`)
	for i, id := range ids {
		if i > 0 {
			j.buf = append(j.buf, ',')
		}
		j.buf = strconv.AppendInt(j.buf, int64(id), 10)
		if i%4096 == 0 {
			j.spill()
		}
	}
	j.rawString("]")
	j.raw(tail)
}

func (s *Server) renderChat(c *exchange) {
	var body renderBody
	if !s.readBody(c, &body) || !s.checkRenderModel(c, body.Model) {
		return
	}
	if len(body.Messages) == 0 {
		writeValidationError(c, "messages: Field required: a chat needs at least one message")
		return
	}
	params, err := body.samplingParams()
	if err != nil {
		writeRefusal(c, openAIEnvelope, err)
		return
	}
	prompt, err := s.chatPrompt(&body.chatTemplateRequest)
	if err != nil {
		writeRefusal(c, openAIEnvelope, err)
		return
	}
	ids, err := s.renderTokens(c.Request.Context(), prompt)
	if err != nil {
		writeRefusal(c, openAIEnvelope, err)
		return
	}
	// The output the chat endpoint would allow: max_completion_tokens,
	// else max_tokens (vLLM's order), at most the context left; without
	// either, the context budget.
	requested := body.MaxCompletionTokens.ptr()
	if requested == nil {
		requested = body.MaxTokens.ptr()
	}
	var limit int
	if requested != nil {
		limit, err = s.renderMaxTokens(requested, len(ids))
	} else {
		prompt.InputIDs = ids
		limit, err = s.chatBudget(c.Request.Context(), &prompt)
	}
	if err != nil {
		writeRenderRefusal(c, err)
		return
	}
	out := s.rendered("chatcmpl-", ids, withMaxTokens(params, limit), &body)
	null := json.RawMessage("null")
	out.AssistantTokensMask = &null
	s.writeAnswer(c, nil, out)
}

// renderTokens is the prompt as the engine would take it: token ids as
// given, text tokenized with the profile's BOS, both validated as a
// request would be.
func (s *Server) renderTokens(ctx context.Context, p engine.Request) ([]int32, error) {
	if p.InputIDs == nil {
		var err error
		if p.InputIDs, err = s.tokenizePrompt(ctx, p); err != nil {
			return nil, err
		}
	}
	p.Text, p.MaxNewTokens = "", 1
	if err := s.eng.Check(p); err != nil {
		return nil, err
	}
	return p.InputIDs, nil
}

func (s *Server) rendered(prefix string, ids []int32, params map[string]any, b *renderBody) renderedPrompt {
	return renderedPrompt{
		RequestID: renderID(prefix), TokenIDs: ids, SamplingParams: params,
		Model: s.args.ServedModelName, Stream: b.Stream, StreamOptions: b.StreamOptions, CacheSalt: b.CacheSalt,
	}
}

package api

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"
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

// renderSamplingKeys are the request fields vLLM carries into a rendered
// request's sampling_params, as given.
var renderSamplingKeys = []string{"temperature", "top_p", "top_k", "min_p", "seed", "n", "stop", "stop_token_ids",
	"presence_penalty", "frequency_penalty", "repetition_penalty", "ignore_eos", "skip_special_tokens", "logprobs"}

// renderSampling collects the sampling fields of body, with max_tokens the
// output the server would allow.
func renderSampling(body []byte, maxTokens int) map[string]any {
	var raw map[string]json.RawMessage
	json.Unmarshal(body, &raw) // the body was decoded once already
	out := map[string]any{"max_tokens": maxTokens}
	for _, k := range renderSamplingKeys {
		if v, ok := raw[k]; ok && !isNull(v) {
			out[k] = v
		}
	}
	return out
}

func renderID(prefix string) string {
	id := uuid.New()
	return prefix + hex.EncodeToString(id[:])
}

// checkRenderModel answers vLLM's 404 for a model the server does not
// serve; an empty model is the served one.
func (s *Server) checkRenderModel(c *gin.Context, model string) bool {
	if model == "" || model == s.args.ServedModelName {
		return true
	}
	writeJSON(c, http.StatusNotFound, gin.H{"error": gin.H{
		"message": fmt.Sprintf("The model `%s` does not exist.", clip(model)),
		"type":    "NotFoundError", "param": "model", "code": http.StatusNotFound,
	}})
	return false
}

func (s *Server) renderCompletions(c *gin.Context) {
	var body completionBody
	raw, ok := s.readRawBody(c, &body)
	if !ok || !s.checkRenderModel(c, body.Model) {
		return
	}
	if isNull(body.Prompt) {
		writeValidationError(c, "prompt: Field required")
		return
	}
	prompts, err := parsePrompt(body.Prompt)
	if err != nil {
		writeValidationError(c, err.Error())
		return
	}
	if err := checkSequences(len(prompts), 1); err != nil {
		writeOpenAIError(c, err.Error())
		return
	}
	maxTokens := 16
	if body.MaxTokens != nil {
		maxTokens = int(*body.MaxTokens)
	}
	out := make([]renderedPrompt, len(prompts))
	for i, p := range prompts {
		ids, err := s.renderTokens(p)
		if err != nil {
			writeOpenAIError(c, err.Error())
			return
		}
		out[i] = s.rendered("cmpl-", ids, raw, maxTokens, &body.openAICommon)
	}
	writeJSON(c, http.StatusOK, out)
}

func (s *Server) renderChat(c *gin.Context) {
	var body chatBody
	raw, ok := s.readRawBody(c, &body)
	if !ok || !s.checkRenderModel(c, body.Model) {
		return
	}
	if len(body.Messages) == 0 {
		writeValidationError(c, "messages: Field required: a chat needs at least one message")
		return
	}
	text, err := renderChat(body.Messages)
	if err != nil {
		writeValidationError(c, err.Error())
		return
	}
	prompt := engine.Request{Text: text}
	ids, err := s.renderTokens(prompt)
	if err != nil {
		writeOpenAIError(c, err.Error())
		return
	}
	// The output the chat endpoint would allow: max_completion_tokens or
	// max_tokens, else the context budget.
	maxTokens := body.MaxCompletionTokens.ptr()
	if maxTokens == nil || *maxTokens == 0 {
		maxTokens = body.MaxTokens.ptr()
	}
	limit := 0
	if maxTokens != nil {
		limit = *maxTokens
	} else {
		prompt.InputIDs = ids
		if limit, err = s.chatBudget(&prompt); err != nil {
			writeOpenAIError(c, err.Error())
			return
		}
	}
	out := s.rendered("chatcmpl-", ids, raw, limit, &body.openAICommon)
	null := json.RawMessage("null")
	out.AssistantTokensMask = &null
	writeJSON(c, http.StatusOK, out)
}

// renderTokens is the prompt as the engine would take it: token ids as
// given, text tokenized with the profile's BOS, both validated as a
// request would be.
func (s *Server) renderTokens(p engine.Request) ([]int32, error) {
	if p.InputIDs == nil {
		var err error
		if p.InputIDs, err = s.eng.Tokenize(p); err != nil {
			return nil, err
		}
	}
	p.Text, p.MaxNewTokens = "", 1
	if err := s.eng.Check(p); err != nil {
		return nil, err
	}
	return p.InputIDs, nil
}

func (s *Server) rendered(prefix string, ids []int32, raw []byte, maxTokens int, b *openAICommon) renderedPrompt {
	return renderedPrompt{
		RequestID: renderID(prefix), TokenIDs: ids, SamplingParams: renderSampling(raw, maxTokens),
		Model: s.args.ServedModelName, Stream: b.Stream, StreamOptions: b.StreamOptions, CacheSalt: b.CacheSalt,
	}
}

// readRawBody is readBody that also returns the body's bytes.
func (s *Server) readRawBody(c *gin.Context, v any) ([]byte, bool) {
	var raw json.RawMessage
	if !s.readBody(c, &raw) {
		return nil, false
	}
	if err := decodeJSON(raw, v); err != nil {
		writeValidationError(c, describeJSONError(err))
		return nil, false
	}
	return raw, true
}

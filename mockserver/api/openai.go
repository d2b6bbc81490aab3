package api

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	json "github.com/goccy/go-json"

	"github.com/gin-gonic/gin"

	"sglmock/mockserver/engine"
	"sglmock/mockserver/tokenizer"
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
	Messages            []chatMessage `json:"messages"`
	MaxCompletionTokens *integer      `json:"max_completion_tokens"`
	InputIDs            []int32       `json:"input_ids"`
	Logprobs            bool          `json:"logprobs"`
	TopLogprobs         *integer      `json:"top_logprobs"`
}

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

// openAIExtraKey is serving_base.py's _compute_extra_key: cache_salt then
// extra_key, concatenated without a separator, the empty ones skipped; none
// when both are empty.
func openAIExtraKey(cacheSalt, extraKey *string) *string {
	key := deref(cacheSalt) + deref(extraKey)
	if key == "" {
		return nil
	}
	return &key
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

// prepareOpenAI validates the shared fields and plans copies of each
// prompt, prompt-major, each to generate maxNew(prompt) tokens.
func (s *Server) prepareOpenAI(b *openAICommon, prompts []engine.Request, maxNew func(*engine.Request) (int, error), lp logprobParams) (plan, error) {
	copies, err := copiesOf(b.N)
	if err != nil {
		return plan{}, err
	}
	if err := checkSequences(len(prompts), copies); err != nil {
		return plan{}, err
	}
	ns := cacheNamespace(openAIExtraKey(b.CacheSalt, b.ExtraKey), deref(b.LoraPath))
	p := plan{copies: copies, batch: len(prompts)*copies > 1}
	for i, prompt := range prompts {
		limit, err := maxNew(&prompt)
		if err != nil {
			return plan{}, err
		}
		if lp.on && prompt.InputIDs == nil {
			// The input logprobs are of its tokens.
			if prompt.InputIDs, err = s.eng.Tokenize(prompt); err != nil {
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
		return []engine.Request{{Text: one}}, nil
	}
	var texts []string
	if err := json.Unmarshal(raw, &texts); err == nil && len(texts) > 0 {
		out := make([]engine.Request, len(texts))
		for i, t := range texts {
			out[i].Text = t
		}
		return out, nil
	}
	var ids []int32
	if err := json.Unmarshal(raw, &ids); err == nil && len(ids) > 0 {
		return []engine.Request{{InputIDs: ids}}, nil
	}
	var batch [][]int32
	if err := json.Unmarshal(raw, &batch); err == nil && len(batch) > 0 {
		out := make([]engine.Request, len(batch))
		for i, b := range batch {
			out[i].InputIDs = b
		}
		return out, nil
	}
	return nil, fmt.Errorf("prompt: must be a string, a list of strings, a list of token ids or a list of such lists")
}

func (s *Server) completions(c *gin.Context) {
	var body completionBody
	if !s.readBody(c, &body) {
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
	// CompletionRequest.max_tokens defaults to 16 and must be positive.
	maxTokens := 16
	if body.MaxTokens != nil {
		if maxTokens = int(*body.MaxTokens); maxTokens <= 0 {
			writeOpenAIError(c, fmt.Sprintf("max_tokens must be positive, got %d.", maxTokens))
			return
		}
	}
	// serving_completions.py: logprobs N asks for them with N alternatives
	// (and the tokens' text); with echo and a non-zero N they start at the
	// prompt's first token, so nothing of the prompt can be reused.
	var lp logprobParams
	if body.Logprobs != nil {
		if err := checkTopLogprobs("logprobs", int(*body.Logprobs)); err != nil {
			writeOpenAIError(c, err.Error())
			return
		}
		lp = logprobParams{on: true, start: -1, top: int(*body.Logprobs), text: true}
		if body.Echo && *body.Logprobs != 0 {
			lp.start = 0
		}
	}
	p, err := s.prepareOpenAI(&body.openAICommon, prompts, func(*engine.Request) (int, error) { return maxTokens, nil }, lp)
	if err != nil {
		writeOpenAIError(c, err.Error())
		return
	}
	r := openAIRun{s: s, c: c, common: &body.openAICommon, plan: p, object: "text_completion"}
	if body.Echo {
		r.echo = func(i int) string {
			prompt := prompts[i/p.copies]
			if prompt.InputIDs != nil {
				return tokenizer.Decode(prompt.InputIDs)
			}
			return prompt.Text
		}
	}
	r.run()
}

// messageText flattens a chat message's content: a string or a list of
// parts, of which the text parts count.
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
		return "", fmt.Errorf("messages: content must be a string or a list of content parts")
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String(), nil
}

// renderChat applies the chat template to messages, with the generation
// prompt, as the server does before tokenizing a chat.
func renderChat(messages []chatMessage) (string, error) {
	msgs := make([]tokenizer.Message, len(messages))
	for i, m := range messages {
		text, err := messageText(m.Content)
		if err != nil {
			return "", err
		}
		msgs[i] = tokenizer.Message{Role: m.Role, Content: text}
	}
	return tokenizer.ApplyChatTemplate(msgs, true), nil
}

func (s *Server) chatCompletions(c *gin.Context) {
	var body chatBody
	if !s.readBody(c, &body) {
		return
	}
	var prompt engine.Request
	if body.InputIDs != nil {
		prompt.InputIDs = body.InputIDs
	} else {
		if len(body.Messages) == 0 {
			writeValidationError(c, "messages: Field required: a chat needs at least one message")
			return
		}
		text, err := renderChat(body.Messages)
		if err != nil {
			writeValidationError(c, err.Error())
			return
		}
		prompt.Text = text
	}
	// SGLang takes max_completion_tokens or max_tokens, Python's "or": a
	// zero max_completion_tokens falls through to max_tokens.
	maxTokens := body.MaxCompletionTokens.ptr()
	if maxTokens == nil || *maxTokens == 0 {
		maxTokens = body.MaxTokens.ptr()
	}
	if ctxLen := s.cfg.Profile.ContextLength; maxTokens != nil && *maxTokens > ctxLen {
		writeOpenAIError(c, fmt.Sprintf("max_completion_tokens is too large: %d.This model supports at most %d completion tokens.",
			*maxTokens, ctxLen))
		return
	}
	maxNew := func(*engine.Request) (int, error) { return *maxTokens, nil }
	if maxTokens == nil {
		maxNew = s.chatBudget
	}
	// serving_chat.py: logprobs of the output, top_logprobs alternatives.
	lp := logprobParams{on: body.Logprobs, start: -1, top: 0, text: true}
	if body.TopLogprobs != nil {
		if err := checkTopLogprobs("top_logprobs", int(*body.TopLogprobs)); err != nil {
			writeOpenAIError(c, err.Error())
			return
		}
		lp.top = int(*body.TopLogprobs)
	}
	p, err := s.prepareOpenAI(&body.openAICommon, []engine.Request{prompt}, maxNew, lp)
	if err != nil {
		writeOpenAIError(c, err.Error())
		return
	}
	r := openAIRun{s: s, c: c, common: &body.openAICommon, plan: p, object: "chat.completion", chat: true}
	r.run()
}

// chatBudget is the output of a chat completion without max_tokens: SGLang
// generates to the context budget (init_req_max_new_tokens: context length
// - 2 - prompt tokens) until the model samples EOS, which the mock never
// does, so the profile's output cap stands in for it. It tokenizes the
// prompt, once, to count it.
func (s *Server) chatBudget(prompt *engine.Request) (int, error) {
	if prompt.InputIDs == nil {
		tokens, err := s.eng.Tokenize(*prompt)
		if err != nil {
			return 0, err
		}
		prompt.InputIDs, prompt.Text = tokens, ""
	}
	return max(0, min(s.cfg.Profile.ContextLength-2-len(prompt.InputIDs), s.cfg.Profile.OutputCap())), nil
}

// logprobs renders an output's logprobs from output position from on, as
// the endpoint's logprobs object, the echoed prompt's first when withInput;
// nil when the request asked for none.
func (r *openAIRun) logprobs(o *output, from int, withInput bool) any {
	l := o.logprobs()
	if l == nil {
		return nil
	}
	if r.chat {
		return toChatLogprobs(l.out[from:], l.outTops[from:])
	}
	entries, tops := l.out[from:], l.outTops[from:]
	if withInput {
		entries = append(slices.Clone(l.in), entries...)
		tops = append(slices.Clone(l.inTops), tops...)
	}
	return toCompletionLogprobs(entries, tops, o.item.logprobs.top > 0)
}

// openAIRun serves one completions or chat request.
type openAIRun struct {
	s      *Server
	c      *gin.Context
	common *openAICommon
	plan   plan
	object string
	chat   bool
	echo   func(i int) string
}

func (r *openAIRun) model() string {
	if r.common.Model != "" {
		return r.common.Model
	}
	return "default"
}

func (r *openAIRun) run() {
	streams, err := r.s.submit(r.c.Request.Context(), r.plan)
	if err != nil && r.c.Request.Context().Err() != nil {
		return // the client left while its prompts were cached
	}
	if err != nil {
		// SGLang kick-starts a stream's generator before answering, so a
		// stream refused before its first output gets the same 400.
		writeOpenAIError(r.c, err.Error())
		return
	}
	if r.common.Stream {
		r.stream(streams)
		return
	}
	outs, ok := collect(r.c.Request.Context(), r.plan.items, streams)
	if !ok {
		return
	}
	choices := make([]any, len(outs))
	for i, o := range outs {
		reason, matched := openAIFinish(o.last.Finish)
		text := o.text()
		if r.echo != nil {
			text = r.echo(i) + text
		}
		if r.chat {
			choices[i] = chatChoice{Index: i, Message: chatMessageOut{Role: "assistant", Content: text}, Logprobs: r.logprobs(o, 0, false),
				FinishReason: reason, MatchedStop: matched}
		} else {
			choices[i] = completionChoice{Index: i, Text: text, Logprobs: r.logprobs(o, 0, r.echo != nil), FinishReason: reason, MatchedStop: matched}
		}
	}
	u := r.s.usageOf(outs, r.plan.copies, true)
	writeJSON(r.c, http.StatusOK, openAIResponse{
		ID:       outs[0].rid,
		Object:   r.object,
		Created:  time.Now().Unix(),
		Model:    r.model(),
		Choices:  choices,
		Usage:    &u,
		Metadata: &metadata{WeightVersion: weightVersion},
	})
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
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		Model   string `json:"model"`
		Choices []any  `json:"choices"`
		Usage   any    `json:"usage"`
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

// stream serves a streaming request as SGLang's generators do. Nothing,
// not even the status line, goes out before the first output event (run
// only starts it once the request was accepted); a chat choice's role chunk
// goes out with its first content. An abort that carries a status code ends
// the stream with an error event. The chat finish chunks and the usage
// chunk follow the last output, carrying the id of the last event's
// request, as SGLang's loop variable leaves it.
func (r *openAIRun) stream(streams []*engine.Stream) {
	ctx, cancel := context.WithCancel(r.c.Request.Context())
	next, wait := events(ctx, streams)
	defer func() {
		cancel()
		wait()
	}()
	created := time.Now().Unix()
	object := "text_completion"
	if r.chat {
		object = "chat.completion.chunk"
	}
	outs := make([]*output, len(streams))
	sent := make([]string, len(streams)) // text already sent per choice
	for i, st := range streams {
		outs[i] = &output{item: r.plan.items[i], rid: st.RID()}
	}
	w := &sse{c: r.c}
	opts := r.common.StreamOptions
	continuous := opts != nil && opts.ContinuousUsageStats
	lastRID := outs[0].rid
	add := func(choice any, u *usage) {
		if !r.chat {
			w.add(marshal(streamChunk{ID: lastRID, Object: object, Created: created, Model: r.model(), Choices: []any{choice}, Usage: u}))
			return
		}
		// SGLang stamps each chat chunk and leaves "usage" out unless set.
		created = time.Now().Unix()
		w.add(marshal(openAIResponse{ID: lastRID, Object: object, Created: created, Model: r.model(), Choices: []any{choice}, Usage: u}))
	}
	var finished []*output // chat choices, in the order they finished
	for left := len(streams); left > 0; {
		t, err := next()
		if err != nil {
			disconnectAll(streams, true)
			return
		}
		o := outs[t.i]
		o.add(t.ev)
		fin := t.ev.Finish
		if fin != nil {
			left--
		}
		if !o.due() {
			continue
		}
		first := o.sent == 0
		o.sent++
		lastRID = o.rid
		// A stop string trims the final text, possibly below what was
		// already sent; sent text cannot be taken back, so nothing more goes.
		text, delta := o.text(), ""
		if strings.HasPrefix(text, sent[t.i]) {
			delta = text[len(sent[t.i]):]
			sent[t.i] = text
		}
		if first && r.echo != nil {
			delta = r.echo(t.i) + delta
		}
		var u *usage
		if continuous {
			cu := r.s.usageOf([]*output{o}, 1, false)
			u = &cu
		}
		// The logprobs of the tokens since the last chunk (and of the
		// echoed prompt with the first).
		var lps any
		if l := o.logprobs(); l != nil {
			if withInput := first && r.echo != nil && !r.chat; o.lpSent < len(l.out) || withInput {
				lps = r.logprobs(o, o.lpSent, withInput)
			}
			o.lpSent = len(l.out)
		}
		if r.chat {
			if first {
				empty := ""
				add(chatChunkChoice{Index: t.i, Delta: chatDelta{Role: "assistant", Content: &empty}}, nil)
			}
			if delta != "" {
				add(chatChunkChoice{Index: t.i, Delta: chatDelta{Content: &delta}, Logprobs: lps}, u)
			}
			if fin != nil {
				finished = append(finished, o)
			}
		} else {
			reason, matched := openAIFinish(fin)
			add(completionChoice{Index: t.i, Text: delta, Logprobs: lps, FinishReason: reason, MatchedStop: matched}, u)
		}
		if err := w.flush(); err != nil {
			disconnectAll(streams, true)
			return
		}
	}
	for _, o := range finished {
		// Current SGLang ends a chat choice with an empty delta.
		reason, matched := openAIFinish(o.last.Finish)
		add(chatChunkChoice{Index: o.item.index, Delta: chatDelta{}, FinishReason: reason, MatchedStop: matched}, nil)
	}
	if opts != nil && opts.IncludeUsage {
		u := r.s.usageOf(outs, r.plan.copies, true)
		ch := streamChunk{ID: lastRID, Object: object, Created: created, Model: r.model(), Choices: []any{}, Usage: u}
		if r.chat {
			ch.Created = time.Now().Unix()
		} else {
			ch.Usage = usageExcludeNone(u)
		}
		w.add(marshal(ch))
	}
	w.add([]byte("[DONE]"))
	w.flush()
}

// modelCard is one /v1/models entry.
func (s *Server) modelCard() gin.H {
	return gin.H{
		"id":            s.args.ServedModelName,
		"object":        "model",
		"created":       time.Now().Unix(),
		"owned_by":      "sglang",
		"root":          s.args.ServedModelName,
		"parent":        nil,
		"max_model_len": s.args.ContextLength,
	}
}

func (s *Server) listModels(c *gin.Context) {
	writeJSON(c, http.StatusOK, gin.H{"object": "list", "data": []gin.H{s.modelCard()}})
}

func (s *Server) getModel(c *gin.Context) {
	name := strings.TrimPrefix(c.Param("model"), "/")
	if name != s.args.ServedModelName {
		writeJSON(c, http.StatusNotFound, gin.H{"error": gin.H{
			"message": fmt.Sprintf("The model '%s' does not exist", name),
			"type":    "invalid_request_error",
			"param":   "model",
			"code":    "model_not_found",
		}})
		return
	}
	writeJSON(c, http.StatusOK, s.modelCard())
}

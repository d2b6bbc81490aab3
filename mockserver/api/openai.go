package api

import (
	"encoding/hex"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/sglmock/sglmock/mockserver/engine"
	"github.com/sglmock/sglmock/sim"
)

func (s *Server) completions(c *exchange) {
	var body completionBody
	if !s.readBody(c, &body) || !openAIHeaders(c, &body.openAICommon) {
		return
	}
	if isNull(body.Prompt) {
		writeValidationError(c, "prompt: Field required")
		return
	}
	prompts, err := parsePrompt(body.Prompt, body.promptPlain)
	if err != nil {
		writeRefusal(c, openAIEnvelope, err)
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
			writeRefusal(c, openAIEnvelope, err)
			return
		}
		lp = logprobParams{on: true, start: -1, top: int(*body.Logprobs), text: true}
		if body.Echo && *body.Logprobs != 0 {
			lp.start = 0
		}
	}
	p, err := s.prepareOpenAI(c.Request.Context(), &body.openAICommon, prompts, func(*engine.Request) (int, error) { return maxTokens, nil }, lp)
	if err != nil {
		writeRefusal(c, openAIEnvelope, err)
		return
	}
	r := openAIRun{s: s, c: c, common: &body.openAICommon, plan: p, object: "text_completion"}
	if body.Echo {
		r.echo = func(i int) string {
			prompt := prompts[i/p.copies]
			if prompt.InputIDs != nil {
				return s.eng.Tokenizer().Decode(prompt.InputIDs, false)
			}
			return prompt.Text
		}
	}
	r.run()
}

func (s *Server) chatCompletions(c *exchange) {
	var body chatBody
	if !s.readBody(c, &body) || !openAIHeaders(c, &body.openAICommon) {
		return
	}
	var prompt engine.Request
	if body.InputIDs != nil {
		prompt.InputIDs = body.InputIDs
	} else {
		switch {
		case body.Messages == nil:
			writeValidationError(c, "messages: Field required")
			return
		case len(body.Messages) == 0:
			writeRefusal(c, openAIEnvelope, errEmptyMessages)
			return
		}
		var err error
		if prompt, err = s.chatPrompt(&body.chatTemplateRequest); err != nil {
			writeRefusal(c, openAIEnvelope, err)
			return
		}
	}
	prompt.Route = sim.RouteChat
	// SGLang takes max_completion_tokens or max_tokens, Python's "or": a
	// zero max_completion_tokens falls through to max_tokens.
	maxTokens := body.MaxCompletionTokens.ptr()
	if maxTokens == nil || *maxTokens == 0 {
		maxTokens = body.MaxTokens.ptr()
	}
	// serving_chat.py checks server_args.context_length: the launch's, so
	// only when --context-length was given; otherwise the tokenizer
	// manager's context check answers.
	if ctxLen := s.args.ContextLength; ctxLen != nil && maxTokens != nil && *maxTokens > *ctxLen {
		writeOpenAIError(c, fmt.Sprintf("max_completion_tokens is too large: %d.This model supports at most %d completion tokens.",
			*maxTokens, *ctxLen))
		return
	}
	maxNew := func(*engine.Request) (int, error) { return *maxTokens, nil }
	if maxTokens == nil {
		maxNew = func(r *engine.Request) (int, error) { return s.chatBudget(c.Request.Context(), r) }
	}
	// serving_chat.py: logprobs of the output, top_logprobs alternatives.
	lp := logprobParams{on: body.Logprobs, start: -1, top: 0, text: true}
	if body.TopLogprobs != nil {
		if err := checkTopLogprobs("top_logprobs", int(*body.TopLogprobs)); err != nil {
			writeRefusal(c, openAIEnvelope, err)
			return
		}
		lp.top = int(*body.TopLogprobs)
	}
	p, err := s.prepareOpenAI(c.Request.Context(), &body.openAICommon, []engine.Request{prompt}, maxNew, lp)
	if err != nil {
		writeRefusal(c, openAIEnvelope, err)
		return
	}
	r := openAIRun{s: s, c: c, common: &body.openAICommon, plan: p, object: "chat.completion", chat: true}
	r.run()
}

// logprobs renders an output's logprobs from output position from on, as
// the endpoint's logprobs object, the echoed prompt's first when withInput;
// nil when the request asked for none.
func (r *openAIRun) logprobs(o *output, from int, withInput bool) any {
	v, ok := o.logprobView()
	if !ok {
		return nil
	}
	entries, tops := v.outputLists(from)
	if r.chat {
		return toChatLogprobs(entries, tops)
	}
	if withInput {
		in, inTops := v.inputLists()
		entries, tops = append(in, entries...), append(inTops, tops...)
	}
	return toCompletionLogprobs(entries, tops, o.item.logprobs.top > 0)
}

// openAIRun serves one completions or chat request.
type openAIRun struct {
	s      *Server
	c      *exchange
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
	if !r.common.Stream {
		r.plan.collected()
	}
	streams, hold, err := r.s.submit(r.c.Request.Context(), r.plan, r.s.received(r.c))
	defer hold.release()
	if err != nil && r.c.Request.Context().Err() != nil {
		return // the client left while its prompts were cached
	}
	if a, ok := schedulerRefusal(err); ok && r.common.Stream {
		// SGLang's scheduler queues the request already aborted: the
		// stream has begun when the abort comes back.
		r.streamRefused(a)
		return
	}
	if err != nil {
		// SGLang kick-starts a stream's generator before answering, so a
		// stream refused before its first output gets the same 400.
		writeRefusal(r.c, openAIEnvelope, err)
		return
	}
	if r.common.Stream {
		r.stream(streams, hold)
		return
	}
	aw := &answerWriter{s: r.s, w: r.c.Writer}
	var collected atomic.Bool
	hold.attach(collected.Load, aw.cutOff)
	outs, ok := r.s.collect(r.c.Request.Context(), r.plan.items, streams)
	if !ok {
		return
	}
	collected.Store(true)
	if a, ok := abortWithStatus(outs); ok {
		writeDetail(r.c, a)
		return
	}
	u := r.s.usageOf(outs, r.plan.copies, true)
	resp := openAIResponse{
		ID:       outs[0].rid,
		Object:   r.object,
		Created:  time.Now().Unix(),
		Model:    r.model(),
		Usage:    &u,
		Metadata: &metadata{WeightVersion: weightVersion},
		Sglext:   sglextOf(r.common, outs),
	}
	encode := func(j *jsonSink) { r.encodeAnswer(j, resp, outs) }
	if !short(outs) {
		r.s.writeStreamed(r.c, aw, encode)
		return
	}
	r.s.writeShort(r.c, aw, encode)
}

// stream serves a streaming request as SGLang's generators do. Nothing,
// not even the status line, goes out before the first output event (run
// only starts it once the request was accepted); a chat choice's role chunk
// goes out with its first content. An abort ends the choice with
// finish_reason "abort" (no mock abort carries an HTTP status, so there is
// no error event). The chat finish chunks and the usage
// chunk follow the last output, carrying the id of the last event's
// request, as SGLang's loop variable leaves it.
func (r *openAIRun) stream(streams []*engine.Stream, hold *budgetHold) {
	created := time.Now().Unix()
	object := r.chunkObject()
	w := r.s.newSSE(r.c)
	defer w.release()
	hold.attach(func() bool { return allEnded(streams) }, w.cutOff)
	opts := r.common.StreamOptions
	continuous := opts != nil && opts.ContinuousUsageStats
	lastRID := streams[0].RID()
	model := r.model()
	addCompletion := func(choice completionChoice, u *usage) {
		w.end(appendCompletionChunk(w.begin(), lastRID, object, created, model, &choice, u))
	}
	addChat := func(choice chatChunkChoice, u *usage) {
		// SGLang stamps each chat chunk and leaves "usage" out unless set.
		created = time.Now().Unix()
		w.end(appendChatChunk(w.begin(), lastRID, object, created, model, &choice, u))
	}
	var finished []*output // chat choices, in the order they finished
	failed := false        // an abort with a status ended the stream
	outs, ok := r.s.streamOutputs(r.c.Request.Context(), w, r.plan.items, streams, func(i int, o *output) {
		if failed {
			return
		}
		lastRID = o.rid
		if f := o.last.Finish; f != nil && f.StatusCode != 0 {
			// _generate_chat_stream and _generate_completion_stream: an
			// error event, and no more choices' chunks.
			w.add(streamErrorEvent(schedulerAbort{f.Message, f.StatusCode}))
			failed = true
			return
		}
		first := o.sent == 0
		delta := o.textDelta()
		if first && r.echo != nil {
			delta = r.echo(i) + delta
		}
		var u *usage
		if continuous {
			cu := r.s.usageOf([]*output{o}, 1, false)
			u = &cu
		}
		// The logprobs of the tokens since the last chunk (and of the
		// echoed prompt with the first).
		var lps any
		if v, ok := o.logprobView(); ok {
			if withInput := first && r.echo != nil && !r.chat; o.lpSent < v.outputs() || withInput {
				lps = r.logprobs(o, o.lpSent, withInput)
			}
			o.lpSent = v.outputs()
		}
		fin := o.last.Finish
		if !r.chat {
			reason, matched := openAIFinish(fin)
			addCompletion(completionChoice{Index: i, Text: delta, Logprobs: lps, FinishReason: reason, MatchedStop: matched}, u)
			return
		}
		if first {
			empty := ""
			addChat(chatChunkChoice{Index: i, Delta: chatDelta{Role: "assistant", Content: &empty}}, nil)
		}
		if delta != "" {
			addChat(chatChunkChoice{Index: i, Delta: chatDelta{Content: &delta}, Logprobs: lps}, u)
		}
		if fin != nil {
			finished = append(finished, o)
		}
	})
	if !ok {
		return
	}
	for _, o := range finished {
		// Current SGLang ends a chat choice with an empty delta.
		reason, matched := openAIFinish(o.last.Finish)
		addChat(chatChunkChoice{Index: o.item.index, Delta: chatDelta{}, FinishReason: reason, MatchedStop: matched}, nil)
	}
	if ext := sglextOf(r.common, outs); ext != nil {
		// A chunk of its own, before the usage chunk (_generate_chat_stream,
		// _generate_completion_stream): a stream response dumped whole, so
		// with "usage": null; the chat's is stamped when it is made.
		at := created
		if r.chat {
			at = time.Now().Unix()
		}
		w.add(marshal(streamChunk{ID: lastRID, Object: object, Created: at, Model: model, Choices: []any{}, Sglext: ext}))
	}
	if opts != nil && opts.IncludeUsage {
		r.addUsage(w, lastRID, created, r.s.usageOf(outs, r.plan.copies, true))
	}
	w.done()
}

// addUsage adds the final usage chunk of a stream.
func (r *openAIRun) addUsage(w *sse, id string, created int64, u usage) {
	ch := streamChunk{ID: id, Object: r.chunkObject(), Created: created, Model: r.model(), Choices: []any{}, Usage: u}
	if r.chat {
		ch.Created = time.Now().Unix()
	} else {
		ch.Usage = usageExcludeNone(u)
	}
	w.add(marshal(ch))
}

func (r *openAIRun) chunkObject() string {
	if r.chat {
		return "chat.completion.chunk"
	}
	return "text_completion"
}

// streamRefused answers a stream whose request SGLang's scheduler aborts
// as it queues it (a prompt of max_req_input_len tokens or more): HTTP
// 200, the error event, the usage chunk if asked for, which counts the one
// token SGLang leaves of the prompt (set_finish_with_abort), and [DONE].
func (r *openAIRun) streamRefused(a schedulerAbort) {
	w := &sse{c: r.c}
	w.add(streamErrorEvent(a))
	if opts := r.common.StreamOptions; opts != nil && opts.IncludeUsage {
		id := deref(r.common.RID)
		if id == "" {
			u := uuid.New()
			id = hex.EncodeToString(u[:])
		}
		r.addUsage(w, id, time.Now().Unix(), usage{PromptTokens: 1, TotalTokens: 1})
	}
	w.done()
}

// modelCard is one /v1/models entry.
func (s *Server) modelCard() jsonObject {
	return jsonObject{
		"id":            s.args.ServedModelName,
		"object":        "model",
		"created":       time.Now().Unix(),
		"owned_by":      "sglang",
		"root":          s.args.ServedModelName,
		"parent":        nil,
		"max_model_len": s.cfg.Profile.ContextLength,
	}
}

func (s *Server) listModels(c *exchange) {
	writeJSON(c, http.StatusOK, jsonObject{"object": "list", "data": []jsonObject{s.modelCard()}})
}

func (s *Server) getModel(c *exchange) {
	name := c.Param("model")
	if name != s.args.ServedModelName {
		writeJSON(c, http.StatusNotFound, jsonObject{"error": jsonObject{
			"message": fmt.Sprintf("The model '%s' does not exist", clip(name)),
			"type":    "invalid_request_error",
			"param":   "model",
			"code":    "model_not_found",
		}})
		return
	}
	writeJSON(c, http.StatusOK, s.modelCard())
}

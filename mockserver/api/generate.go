package api

import (
	"encoding/hex"
	"errors"
	"time"

	"github.com/google/uuid"
)

func (s *Server) generate(c *exchange) {
	var body generateBody
	if !s.readBody(c, &body) {
		return
	}
	p, err := s.parseGenerate(&body)
	if errors.Is(err, errMalformed) {
		writeRefusal(c, generateEnvelope, err)
		return
	}
	if body.Stream {
		s.streamGenerate(c, p, err)
		return
	}
	if err != nil {
		writeRefusal(c, generateEnvelope, err)
		return
	}
	streams, err := s.submit(c.Request.Context(), p, s.received(c))
	if err != nil {
		if c.Request.Context().Err() == nil {
			writeRefusal(c, generateEnvelope, err)
		}
		return
	}
	outs, ok := s.collect(c.Request.Context(), p.items, streams)
	if !ok {
		return // the client left; its requests are aborted
	}
	if a, ok := abortWithStatus(outs); ok {
		writeDetail(c, a)
		return
	}
	if !p.batch {
		s.writeAnswer(c, outs[0].response(false))
		return
	}
	resps := make([]generateResponse, len(outs))
	for i, o := range outs {
		resps[i] = o.response(false)
	}
	s.writeAnswer(c, resps)
}

// streamGenerate serves a streaming /generate. SGLang's generate_request
// returns its StreamingResponse before the request is even parsed, so the
// status line and headers go out at once, before prefill; a request refused
// after that (refused, or a refusal at submit) gets one error event.
func (s *Server) streamGenerate(c *exchange, p plan, refused error) {
	w := s.newSSE(c)
	if w.open() != nil {
		return
	}
	if refused != nil {
		streamError(w, refused.Error())
		return
	}
	streams, err := s.submit(c.Request.Context(), p, s.received(c))
	if a, ok := schedulerRefusal(err); ok && !p.batch && c.Request.Context().Err() == nil {
		s.streamSchedulerAbort(c, w, p.items[0], a)
		return
	}
	if err != nil {
		if c.Request.Context().Err() == nil {
			streamError(w, err.Error())
		}
		return
	}
	_, ok := s.streamOutputs(c.Request.Context(), w, p.items, streams, func(_ int, o *output) {
		w.add(marshal(o.response(p.batch)))
	})
	if ok {
		w.done()
	}
}

// streamSchedulerAbort is the one event of a /generate stream whose prompt
// SGLang's scheduler refuses as it queues it (validate_input_length, then
// set_finish_with_abort): an ordinary output whose finish_reason is the
// abort with status 400 and err_type BadRequestError, over the one token of
// prompt SGLang leaves the request, which the tokenizer manager yields to a
// stream (_handle_abort_finish_reason) where it raises for a plain answer;
// then [DONE].
func (s *Server) streamSchedulerAbort(c *exchange, w *sse, it item, a schedulerAbort) {
	rid := it.req.RID
	if rid == "" {
		u := uuid.New()
		rid = hex.EncodeToString(u[:])
	}
	code, errType := a.status, "BadRequestError"
	now := realtime(time.Now())
	meta := metaInfo{ID: rid, FinishReason: finishAbort{Type: "abort", Message: a.message, StatusCode: &code, ErrType: &errType},
		PromptTokens: 1, WeightVersion: weightVersion, E2ELatency: (s.eng.Now() - s.received(c)).Seconds(),
		ResponseSentToClientTS: &now}
	w.add(marshal(generateResponse{Text: "", OutputIDs: []int32{}, MetaInfo: meta}))
	w.done()
}

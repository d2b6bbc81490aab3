package api

import (
	"encoding/hex"
	"errors"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

func (s *Server) generate(c *exchange) {
	var body generateBody
	if !s.readBody(c, &body) {
		return
	}
	p, err := s.parseGenerate(c.Request.Context(), &body)
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
	p.collected()
	streams, hold, err := s.submit(c.Request.Context(), p, s.received(c))
	if err != nil {
		if c.Request.Context().Err() == nil {
			writeRefusal(c, generateEnvelope, err)
		}
		return
	}
	defer hold.release()
	aw := &answerWriter{s: s, w: c.Writer}
	var collected atomic.Bool
	hold.attach(collected.Load, aw.cutOff)
	outs, ok := s.collect(c.Request.Context(), p.items, streams)
	if !ok {
		return // the client left; its requests are aborted
	}
	collected.Store(true)
	if a, ok := abortWithStatus(outs); ok {
		writeDetail(c, a)
		return
	}
	s.writeGenerateAnswer(c, aw, outs, p.batch)
}

// streamGenerate serves a streaming /generate. SGLang's generate_request
// returns its StreamingResponse before the request is even parsed, so the
// status line and headers go out at once, before prefill; a request refused
// after that (refused, or a refusal at submit) gets one error event.
func (s *Server) streamGenerate(c *exchange, p plan, refused error) {
	w := s.newSSE(c)
	defer w.release()
	if w.open() != nil {
		return
	}
	if refused != nil {
		streamError(w, refused.Error())
		return
	}
	streams, hold, err := s.submit(c.Request.Context(), p, s.received(c))
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
	defer hold.release()
	hold.attach(func() bool { return allEnded(streams) }, w.cutOff)
	_, ok := s.streamOutputs(c.Request.Context(), w, p.items, streams, func(_ int, o *output) {
		if short([]*output{o}) {
			w.add(marshal(o.response(p.batch)))
			return
		}
		w.addEncoded(func(j *jsonSink) { encodeGenerate(j, o, p.batch) })
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
	meta := metaInfo{
		metaHead: metaHead{ID: rid, FinishReason: finishAbort{Type: "abort", Message: a.message, StatusCode: &code, ErrType: &errType},
			PromptTokens: 1, WeightVersion: weightVersion},
		metaTail: metaTail{E2ELatency: (s.eng.Now() - s.received(c)).Seconds(), ResponseSentToClientTS: &now},
	}
	w.add(marshal(generateResponse{Text: "", OutputIDs: []int32{}, MetaInfo: meta}))
	w.done()
}

package api

import (
	"errors"
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

package api

import (
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Answers encoded as they are written. A completions, chat or /generate
// answer is encoded from the request's own state, its outputs' ids and
// text, by hand rather than by marshal's reflection, and gives exactly the
// bytes marshal gives for the same answer (TestStreamedAnswersAreMarshal).
// A short one is encoded whole into a pooled buffer and written at once
// (writeShort); a long one (a batch of thousands of sequences, a logprob
// answer of tens of MB) 64 KiB at a time, each piece written before the
// next is encoded (writeStreamed): a client reading slowly pins one write
// buffer, not the answer. Its logprobs are computed as they are written,
// and the encoding runs twice, once to count the bytes for Content-Length
// (SGLang's JSONResponse sends one) and once to write them. Other answers
// are marshalled whole (writeAnswer).

// jsonSink receives an answer's bytes as they are encoded: with out nil it
// only counts them, otherwise it hands them to out whenever answerChunk
// have gathered. After out's first error nothing more is handed on, and
// the encoders stop early.
type jsonSink struct {
	buf []byte
	n   int64 // bytes encoded so far
	out func([]byte) error
	err error
	// cpu is the slot the encoding holds (cpu.go), given back while out
	// waits on the client and to the next in line at each chunk.
	cpu *cpuSlots
}

// raw appends bytes that are JSON already.
func (j *jsonSink) raw(b []byte) {
	j.buf = append(j.buf, b...)
	j.spill()
}

func (j *jsonSink) rawString(s string) {
	j.buf = append(j.buf, s...)
	j.spill()
}

// string appends s as a JSON string, escaped as marshal escapes it.
func (j *jsonSink) string(s string) {
	if plainJSON(s) {
		j.buf = append(append(append(j.buf, '"'), s...), '"')
		j.spill()
		return
	}
	j.raw(marshal(s))
}

// value appends v marshalled; the scalars a finish holds (null, a reason,
// a matched token or string) are written without marshal's reflection.
func (j *jsonSink) value(v any) {
	switch v := v.(type) {
	case nil:
		j.rawString("null")
	case string:
		j.string(v)
	case int32:
		j.int(int64(v))
	default:
		j.raw(marshal(v))
	}
}

// int appends a decimal integer.
func (j *jsonSink) int(v int64) {
	j.buf = strconv.AppendInt(j.buf, v, 10)
	j.spill()
}

// maxStringPiece is the most of a string escaped at once.
const maxStringPiece = 16 << 10

// str appends the concatenation of parts as one JSON string, escaped as
// marshal escapes it (no HTML escaping), a piece at a time: pieces are cut
// where a character starts, so an invalid byte becomes U+FFFD as it would
// in the whole. Every part but the last is valid UTF-8 (an echoed prompt),
// so cutting between parts changes nothing either.
func (j *jsonSink) str(parts ...[]byte) {
	j.buf = append(j.buf, '"')
	for _, s := range parts {
		for len(s) > 0 && j.err == nil {
			n := min(len(s), maxStringPiece)
			for n < len(s) && !utf8.RuneStart(s[n]) {
				n++
			}
			piece := string(s[:n])
			if plainJSON(piece) {
				j.buf = append(j.buf, piece...)
			} else {
				esc := marshal(piece)
				j.buf = append(j.buf, esc[1:len(esc)-1]...)
			}
			j.spill()
			s = s[n:]
		}
	}
	j.buf = append(j.buf, '"')
}

func (j *jsonSink) spill() {
	if len(j.buf) >= answerChunk {
		j.emit()
	}
}

// emit hands on what has gathered.
func (j *jsonSink) emit() {
	j.n += int64(len(j.buf))
	if j.out != nil && j.err == nil && len(j.buf) > 0 {
		j.cpu.give() // the write may wait on the client
		j.err = j.out(j.buf)
		j.cpu.take()
	} else {
		j.cpu.pace()
	}
	j.buf = j.buf[:0]
}

// ok reports whether encoding should go on.
func (j *jsonSink) ok() bool { return j.err == nil }

// encodedSize counts the bytes encode gives, holding at most a chunk.
func encodedSize(cpu *cpuSlots, encode func(*jsonSink)) int64 {
	j := &jsonSink{cpu: cpu}
	cpu.take()
	defer cpu.give()
	encode(j)
	j.emit()
	return j.n
}

// answerWriter writes one answer's pieces under the stall deadline, and
// can be cut off by the answer budget (cutPinned).
type answerWriter struct {
	s   *Server
	w   http.ResponseWriter
	cut atomic.Bool
}

func (a *answerWriter) write(b []byte) error {
	if a.cut.Load() {
		return errStalled
	}
	err := a.s.stalls.write(a.w, b)
	if err != nil && a.cut.Load() {
		return errStalled
	}
	return err
}

// cutOff fails the write in progress, and every later one.
func (a *answerWriter) cutOff() {
	a.cut.Store(true)
	http.NewResponseController(a.w).SetWriteDeadline(time.Now())
}

// writeStreamed writes the answer encode gives, with its Content-Length,
// as it is encoded. It returns the write's error (errStalled for a client
// that stopped reading or was cut off).
func (s *Server) writeStreamed(c *exchange, aw *answerWriter, encode func(*jsonSink)) error {
	h := c.Writer.Header()
	h["Content-Type"] = jsonContentType
	h.Set("Content-Length", strconv.FormatInt(encodedSize(s.cpu, encode), 10))
	c.Status(http.StatusOK)
	j := &jsonSink{out: aw.write, buf: make([]byte, 0, answerChunk+maxStringPiece), cpu: s.cpu}
	s.cpu.take()
	defer s.cpu.give()
	encode(j)
	j.emit()
	return j.err
}

// writeShort writes a short answer encode gives, encoded whole and sent
// with its Content-Length as writeAnswer sends a marshalled one: the
// encoders write a completions answer in a fraction of marshal's time,
// which walks it by reflection.
func (s *Server) writeShort(c *exchange, aw *answerWriter, encode func(*jsonSink)) {
	b, w := encodeWhole(encode)
	s.writeBytes(c, aw, b)
	w.done()
}

// encodeWhole returns the bytes encode gives, in the buffer of a sink of
// wholeAnswers that w.done gives back (b is not used after it).
func encodeWhole(encode func(*jsonSink)) (b []byte, w *wholeAnswer) {
	w = wholeAnswers.Get().(*wholeAnswer)
	w.j.buf, w.j.n, w.j.err, w.spilled = w.j.buf[:0], 0, nil, nil
	encode(&w.j)
	b = w.j.buf
	if w.spilled != nil {
		b = append(w.spilled, b...)
	}
	return b, w
}

// wholeAnswer is a sink that gathers a short answer whole: what it spills
// (an answer that passed answerChunk after all: short only estimates) goes
// to spilled.
type wholeAnswer struct {
	j       jsonSink
	spilled []byte
}

func newWholeAnswer() any {
	w := &wholeAnswer{}
	w.j.buf = make([]byte, 0, 2<<10)
	w.j.out = func(b []byte) error { w.spilled = append(w.spilled, b...); return nil }
	return w
}

// done gives w back to wholeAnswers unless its buffer grew long.
func (w *wholeAnswer) done() {
	w.spilled = nil
	if cap(w.j.buf) <= answerChunk+maxStringPiece {
		wholeAnswers.Put(w)
	}
}

// wholeAnswers are the sinks of short answers, each with its buffer.
var wholeAnswers = sync.Pool{New: newWholeAnswer}

// answerBytesEstimate is about what an output's answer takes encoded: its
// text, its ids, its logprob entries and a meta_info. An answer whose
// outputs together take less than answerChunk is encoded whole.
func (o *output) answerBytesEstimate() int64 {
	n := int64(len(o.text) + 8*len(o.ids) + 1024)
	if lp := o.item.logprobs; lp.on {
		positions := int64(len(o.ids) + len(o.item.req.InputIDs))
		n += positions * int64(1+lp.top) * 48
	}
	return n
}

// short reports whether the outputs' answer is short enough to encode
// whole.
func short(outs []*output) bool {
	var n int64
	for _, o := range outs {
		if n += o.answerBytesEstimate(); n > answerChunk {
			return false
		}
	}
	return true
}

// encodeGenerate writes o's /generate result object: exactly
// marshal(o.response(withIndex)).
func encodeGenerate(j *jsonSink, o *output, withIndex bool) {
	f, t := o.last.Finish, o.last.Truth
	j.rawString(`{"text":`)
	j.str(o.visibleText())
	j.rawString(`,"output_ids":[`)
	for i, id := range o.ids {
		if i > 0 {
			j.buf = append(j.buf, ',')
		}
		j.buf = strconv.AppendInt(j.buf, int64(id), 10)
		if i%4096 == 0 {
			j.spill()
			if !j.ok() {
				return
			}
		}
	}
	j.rawString(`],"meta_info":`)
	if f != nil && f.InWaitingQueue && t != nil {
		j.value(o.response(false).MetaInfo) // a few fields: no output
	} else {
		encodeMeta(j, o)
	}
	if withIndex {
		j.rawString(`,"index":`)
		j.int(int64(o.item.index))
	}
	j.rawString("}")
}

// encodeMeta writes o's meta_info, its logprob lists computed as they are
// written between its head and its tail.
func encodeMeta(j *jsonSink, o *output) {
	m := o.metaWithoutLogprobs()
	head, tail := marshal(m.metaHead), marshal(m.metaTail)
	j.raw(head[:len(head)-1])
	if v, ok := o.logprobView(); ok {
		top := v.top > 0
		j.rawString(`,"input_token_logprobs":`)
		encodeEntries(j, v.inputs(), false, func(i int) (tokenLogprob, []tokenLogprob) { return v.input(i, false) })
		j.rawString(`,"output_token_logprobs":`)
		encodeEntries(j, v.outputs(), true, func(i int) (tokenLogprob, []tokenLogprob) { return v.output(i, false) })
		if top {
			j.rawString(`,"input_top_logprobs":`)
			encodeTops(j, v.inputs(), false, func(i int) (tokenLogprob, []tokenLogprob) { return v.input(i, true) })
			j.rawString(`,"output_top_logprobs":`)
			encodeTops(j, v.outputs(), true, func(i int) (tokenLogprob, []tokenLogprob) { return v.output(i, true) })
		}
	}
	j.buf = append(j.buf, ',')
	j.raw(tail[1:])
}

// emptyList is how marshal writes an empty list: [] for one made empty,
// null for a nil slice.
func emptyList(made bool) string {
	if made {
		return "[]"
	}
	return "null"
}

// encodeList writes a list of n elements, each written by each; an empty
// one as emptyList(made).
func encodeList(j *jsonSink, n int, made bool, each func(i int)) {
	if n == 0 {
		j.rawString(emptyList(made))
		return
	}
	j.buf = append(j.buf, '[')
	for i := range n {
		if !j.ok() {
			return
		}
		if i > 0 {
			j.buf = append(j.buf, ',')
		}
		each(i)
		j.spill()
	}
	j.rawString("]")
}

// encodeEntries writes n logprob entries as a list.
func encodeEntries(j *jsonSink, n int, made bool, at func(int) (tokenLogprob, []tokenLogprob)) {
	encodeList(j, n, made, func(i int) {
		e, _ := at(i)
		j.buf = e.appendJSON(j.buf)
	})
}

// encodeTops writes n positions' alternatives as a list of lists, a
// position without any as null.
func encodeTops(j *jsonSink, n int, made bool, at func(int) (tokenLogprob, []tokenLogprob)) {
	encodeList(j, n, made, func(i int) {
		_, alts := at(i)
		if alts == nil {
			j.buf = append(j.buf, "null"...)
			return
		}
		j.buf = append(j.buf, '[')
		for k, e := range alts {
			if k > 0 {
				j.buf = append(j.buf, ',')
			}
			j.buf = e.appendJSON(j.buf)
		}
		j.buf = append(j.buf, ']')
	})
}

// writeGenerateAnswer writes a /generate answer: one result object, or a
// list of them for a batch.
func (s *Server) writeGenerateAnswer(c *exchange, aw *answerWriter, outs []*output, batch bool) {
	encode := func(j *jsonSink) {
		if !batch {
			encodeGenerate(j, outs[0], false)
			return
		}
		j.rawString("[")
		for i, o := range outs {
			if !j.ok() {
				return
			}
			if i > 0 {
				j.rawString(",")
			}
			encodeGenerate(j, o, false)
		}
		j.rawString("]")
	}
	if short(outs) {
		s.writeShort(c, aw, encode)
		return
	}
	s.writeStreamed(c, aw, encode)
}

// encodeAnswer writes a completions or chat answer: exactly marshal(resp)
// with the choices run builds for outs, each choice's text and logprobs
// encoded as they are written.
func (r *openAIRun) encodeAnswer(j *jsonSink, resp openAIResponse, outs []*output) {
	j.rawString(`{"id":`)
	j.string(resp.ID)
	j.rawString(`,"object":`)
	j.string(resp.Object)
	j.rawString(`,"created":`)
	j.int(resp.Created)
	j.rawString(`,"model":`)
	j.string(resp.Model)
	j.rawString(`,"choices":[`)
	for i, o := range outs {
		if !j.ok() {
			return
		}
		if i > 0 {
			j.rawString(",")
		}
		reason, matched := openAIFinish(o.last.Finish)
		j.rawString(`{"index":`)
		j.int(int64(i))
		if r.chat {
			j.rawString(`,"message":{"role":"assistant","content":`)
			j.str(o.visibleText())
			j.rawString(`,"reasoning_content":null,"tool_calls":null},"logprobs":`)
		} else {
			var echo []byte
			if r.echo != nil {
				echo = []byte(r.echo(i))
			}
			j.rawString(`,"text":`)
			j.str(echo, o.visibleText())
			j.rawString(`,"logprobs":`)
		}
		r.encodeLogprobs(j, o)
		j.rawString(`,"finish_reason":`)
		j.value(reason)
		j.rawString(`,"matched_stop":`)
		j.value(matched)
		j.rawString("}")
	}
	j.rawString("]")
	if u := resp.Usage; u != nil {
		j.rawString(`,"usage":{"prompt_tokens":`)
		j.int(int64(u.PromptTokens))
		j.rawString(`,"total_tokens":`)
		j.int(int64(u.TotalTokens))
		j.rawString(`,"completion_tokens":`)
		j.int(int64(u.CompletionTokens))
		j.rawString(`,"prompt_tokens_details":`)
		if d := u.PromptTokensDetails; d != nil {
			j.rawString(`{"cached_tokens":`)
			j.int(int64(d.CachedTokens))
			j.rawString("}")
		} else {
			j.rawString("null")
		}
		j.rawString(`,"reasoning_tokens":`)
		j.int(int64(u.ReasoningTokens))
		j.rawString("}")
	}
	if m := resp.Metadata; m != nil {
		j.rawString(`,"metadata":{"weight_version":`)
		j.string(m.WeightVersion)
		j.rawString("}")
	}
	if resp.Sglext != nil {
		j.rawString(`,"sglext":`)
		j.value(resp.Sglext)
	}
	j.rawString("}")
}

// encodeLogprobs writes a choice's logprobs object, computed position by
// position as it is written: exactly marshal(r.logprobs(o, 0, echo)).
func (r *openAIRun) encodeLogprobs(j *jsonSink, o *output) {
	v, ok := o.logprobView()
	if !ok {
		j.rawString("null")
		return
	}
	// Completions list the echoed prompt's positions first.
	inputs := 0
	if r.echo != nil && !r.chat {
		inputs = v.inputs()
	}
	n := inputs + v.outputs()
	at := func(i int, withTop bool) (tokenLogprob, []tokenLogprob) {
		if i < inputs {
			return v.input(i, withTop)
		}
		return v.output(i-inputs, withTop)
	}
	if r.chat {
		j.rawString(`{"content":[`)
		for i := range n {
			if !j.ok() {
				return
			}
			if i > 0 {
				j.rawString(",")
			}
			e, alts := at(i, true)
			j.value(toChatLogprobs([]tokenLogprob{e}, [][]tokenLogprob{alts}).Content[0])
		}
		j.rawString("]}")
		return
	}
	list := func(key string, each func(i int)) {
		j.rawString(key)
		encodeList(j, n, true, each)
	}
	list(`{"text_offset":`, func(int) { j.buf = append(j.buf, "-1"...) })
	list(`,"token_logprobs":`, func(i int) {
		if e, _ := at(i, false); e.none {
			j.buf = append(j.buf, "null"...)
		} else {
			j.buf = appendJSONFloat(j.buf, e.logprob)
		}
	})
	list(`,"tokens":`, func(i int) {
		if e, _ := at(i, false); e.text == nil {
			j.buf = append(j.buf, "null"...)
		} else {
			j.str([]byte(*e.text))
		}
	})
	if v.top == 0 {
		j.rawString(`,"top_logprobs":[]}`)
		return
	}
	list(`,"top_logprobs":`, func(i int) {
		_, alts := at(i, true)
		b, _ := topLogprobMap(alts).MarshalJSON()
		j.buf = append(j.buf, b...)
	})
	j.rawString("}")
}

// appendJSONFloat appends f as marshal writes a float64:
// the shortest decimal that reads back as f, in exponent form below 1e-6
// and from 1e21 on.
func appendJSONFloat(b []byte, f float64) []byte {
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	return strconv.AppendFloat(b, f, format, -1, 64)
}

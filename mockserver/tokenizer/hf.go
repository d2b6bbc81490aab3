package tokenizer

import (
	"strings"
)

// hfCodec is a loaded tokenizer, as Hugging Face's tokenizers library runs
// a tokenizer.json (and as Kimi's tiktoken tokenizer runs): added tokens
// are cut out of the text first; each part between them is normalized,
// pre-tokenized into pieces, and the model encodes each piece.
type hfCodec struct {
	model *bpe
	added *addedVocab
	norm  normalizer   // nil: none
	pre   preTokenizer // nil: the part is one piece
	// tokens[id] is the text the decoders see for id (a byte-level token's
	// bytes); stream[id] the text it adds to a stream of output; known[id]
	// whether id is in the vocabulary; special[id] whether it is a special
	// added token.
	tokens, stream []string
	known, special []bool
	dec            decoder // nil: tokens joined with spaces
	cleanUp        bool    // transformers' clean_up_tokenization_spaces
}

func (c *hfCodec) vocabSize() int64 { return int64(len(c.tokens)) }

func (c *hfCodec) valid(id int32) bool { return id >= 0 && int(id) < len(c.known) && c.known[id] }

func (c *hfCodec) appendToken(dst []byte, id int32) []byte {
	if !c.valid(id) {
		return dst
	}
	return append(dst, c.stream[id]...)
}

// decode is Hugging Face's decode: ids outside the vocabulary are skipped,
// as its id_to_token finds nothing for them.
func (c *hfCodec) decode(ids []int32, skipSpecial bool) string {
	toks := make([]string, 0, len(ids))
	for _, id := range ids {
		if c.valid(id) && !(skipSpecial && c.special[id]) {
			toks = append(toks, c.tokens[id])
		}
	}
	var s string
	if c.dec == nil {
		s = strings.Join(toks, " ")
	} else {
		s = strings.Join(c.dec(toks), "")
	}
	if c.cleanUp {
		s = cleanUpTokenizationSpaces(s)
	}
	return s
}

func (c *hfCodec) encode(dst []int32, text string, limit int, stop *interrupt) ([]int32, int) {
	e := encoding{dst: dst, start: len(dst), limit: limit, counting: limit == 0, stop: stop}
	var buf [16]segment
	for k, seg := range c.added.split(buf[:0], text, &c.added.raw) {
		if seg.token >= 0 {
			e.add(c.added.tokens[seg.token].id)
			continue
		}
		part := seg.text
		if c.norm != nil {
			part = c.norm(part)
		}
		var nbuf [4]segment
		for j, sub := range c.added.split(nbuf[:0], part, &c.added.norm) {
			switch {
			case sub.token >= 0:
				e.add(c.added.tokens[sub.token].id)
			case c.pre == nil:
				e.piece(c.model, sub.text)
			default:
				c.pre.split(sub.text, k == 0 && j == 0, func(piece string, _ bool) { e.piece(c.model, piece) })
			}
		}
	}
	return e.result()
}

// encoding collects the ids of a text while it has at most limit of them
// (limit < 0: no limit); past that it only counts, holding one piece's ids.
type encoding struct {
	dst          []int32
	start, limit int
	counting     bool
	n            int
	scratch      []int32
	// stop ends the encoding early: the pieces left are skipped.
	stop *interrupt
}

func (e *encoding) add(id int32) {
	if e.stop.after(0) {
		return
	}
	if e.counting {
		e.n++
		return
	}
	e.dst = append(e.dst, id)
	e.check()
}

func (e *encoding) piece(m *bpe, piece string) {
	if e.stop.after(len(piece)) {
		return
	}
	if e.counting {
		e.scratch = m.tokenize(e.scratch[:0], piece, e.stop)
		e.n += len(e.scratch)
		return
	}
	e.dst = m.tokenize(e.dst, piece, e.stop)
	e.check()
}

func (e *encoding) check() {
	if e.limit >= 0 && len(e.dst)-e.start > e.limit {
		e.n = len(e.dst) - e.start
		e.dst = e.dst[:e.start]
		e.counting = true
	}
}

func (e *encoding) result() ([]int32, int) {
	if !e.counting {
		e.n = len(e.dst) - e.start
	}
	return e.dst, e.n
}

package tokenizer

import (
	"context"
	"unicode/utf8"
)

// Tokenizer turns text into token ids and back, renders chat templates and
// picks the mock's output tokens. It is immutable once made (a loaded one's
// word cache is internally synchronized), so one value serves every
// goroutine of a server, and two servers with different tokenizers share
// nothing.
type Tokenizer struct {
	// name is "built-in" or the directory the tokenizer was loaded from.
	name string
	enc  codec
	// prefix and suffix are the ids EncodePrompt puts around a text (a
	// BOS, an EOS), as the tokenizer's post-processor does with
	// add_special_tokens.
	prefix, suffix []int32
	chat           *chatTemplate
	out            *outputVocab
	prompts        *promptCache // nil: none (the built-in tokenizer needs none)
}

// codec is a vocabulary and its encoding rules.
type codec interface {
	// encode appends the ids of text to dst (special tokens' text becomes
	// their ids, and nothing is added around it) and returns how many
	// there are. Past limit ids (limit < 0: no limit) it only counts them,
	// holding no more than a piece's, and dst is returned as it came. It
	// stops early, its result meaningless, when stop says so.
	encode(dst []int32, text string, limit int, stop *interrupt) ([]int32, int)
	// appendToken appends the text one token stands for in a stream of
	// output: the bytes of a byte-level token, a SentencePiece token with
	// its marker as a space. Concatenated, they are the output's text.
	appendToken(dst []byte, id int32) []byte
	// decode is the tokenizer's decode of a whole sequence (its decoders,
	// a leading space stripped where the tokenizer strips it).
	decode(ids []int32, skipSpecial bool) string
	// vocabSize is one past the largest id.
	vocabSize() int64
}

// Name is "built-in", or the directory of a loaded tokenizer.
func (t *Tokenizer) Name() string { return t.name }

// Encode appends the token ids of text to dst, with no special tokens
// added (Hugging Face's add_special_tokens=False); the text of a special
// token becomes its id.
func (t *Tokenizer) Encode(dst []int32, text string) []int32 {
	dst, _ = t.encode(dst, text, -1, nil)
	return dst
}

// encode is the codec's encode through the prompt cache.
func (t *Tokenizer) encode(dst []int32, text string, limit int, stop *interrupt) ([]int32, int) {
	if t.prompts == nil || !cacheable(text) {
		return t.enc.encode(dst, text, limit, stop)
	}
	if ids, ok := t.prompts.get(text); ok {
		if limit >= 0 && len(ids) > limit {
			return dst, len(ids)
		}
		return append(dst, ids...), len(ids)
	}
	start := len(dst)
	dst, n := t.enc.encode(dst, text, limit, stop)
	if (limit < 0 || n <= limit) && stop.err() == nil {
		t.prompts.put(text, dst[start:])
	}
	return dst, n
}

// EncodePrompt appends the token ids of a text prompt to dst, with the
// special tokens the tokenizer adds around one (a Llama tokenizer's BOS),
// as SGLang tokenizes a /generate text or a completions prompt. Prompts
// given as token ids are not encoded, so they never get a BOS.
func (t *Tokenizer) EncodePrompt(dst []int32, text string) []int32 {
	dst, _ = t.EncodeWithin(dst, text, true, -1)
	return dst
}

// EncodeWithin appends the ids of text to dst as EncodePrompt
// (addSpecial) or Encode do while there are at most limit of them (limit
// < 0: no limit), and returns them and their number. A text with more
// than limit tokens is only counted, holding at most a piece of it at a
// time: ids is then dst as it came, and n the count.
func (t *Tokenizer) EncodeWithin(dst []int32, text string, addSpecial bool, limit int) (ids []int32, n int) {
	return t.encodeWithin(dst, text, addSpecial, limit, nil)
}

// EncodeWithinContext is EncodeWithin stopped, with ctx's error, when ctx
// ends first: a request whose client left stops costing a core.
func (t *Tokenizer) EncodeWithinContext(ctx context.Context, dst []int32, text string, addSpecial bool, limit int) (ids []int32, n int, err error) {
	stop := newInterrupt(ctx)
	ids, n = t.encodeWithin(dst, text, addSpecial, limit, stop)
	if err := stop.err(); err != nil {
		return dst, 0, err
	}
	return ids, n, nil
}

func (t *Tokenizer) encodeWithin(dst []int32, text string, addSpecial bool, limit int, stop *interrupt) (ids []int32, n int) {
	start := len(dst)
	if !addSpecial {
		return t.encode(dst, text, limit, stop)
	}
	added := len(t.prefix) + len(t.suffix)
	inner := limit
	if limit >= 0 {
		inner = max(limit-added, 0)
		if limit < added {
			_, n := t.encode(nil, text, 0, stop)
			return dst, n + added
		}
	}
	dst = append(dst, t.prefix...)
	dst, n = t.encode(dst, text, inner, stop)
	if limit >= 0 && n > inner {
		return dst[:start], n + added
	}
	return append(dst, t.suffix...), n + added
}

// Count returns the number of tokens Encode gives text, holding at most
// one pre-tokenized piece at a time: measuring a huge text costs no memory
// in proportion to it.
func (t *Tokenizer) Count(text string) int {
	_, n := t.encode(nil, text, 0, nil)
	return n
}

// CountContext is Count stopped, with ctx's error, when ctx ends first.
func (t *Tokenizer) CountContext(ctx context.Context, text string) (int, error) {
	stop := newInterrupt(ctx)
	_, n := t.encode(nil, text, 0, stop)
	return n, stop.err()
}

// AppendDecode appends the text of one output token to dst. A stream's
// tokens appended one by one give the output's text, as SGLang's
// incremental detokenizer shows it: a byte-level token may end inside a
// UTF-8 character, which the next completes.
func (t *Tokenizer) AppendDecode(dst []byte, id int32) []byte { return t.enc.appendToken(dst, id) }

// Decode returns the text of ids as the tokenizer's decode gives it, with
// special tokens left out when skipSpecial (SGLang's skip_special_tokens).
// Bytes that are not UTF-8 become U+FFFD, as Python's decode does.
func (t *Tokenizer) Decode(ids []int32, skipSpecial bool) string {
	return validUTF8(t.enc.decode(ids, skipSpecial))
}

// VocabSize is one past the largest id the tokenizer produces or decodes.
func (t *Tokenizer) VocabSize() int64 { return t.enc.vocabSize() }

// validUTF8 replaces each invalid byte sequence with U+FFFD, as Python's
// bytes.decode("utf-8", "replace") does: one U+FFFD for each maximal
// subpart of a valid sequence (a character cut short is one U+FFFD), one
// for each other invalid byte.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	b := make([]byte, 0, len(s)+8)
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		if r == utf8.RuneError && n == 1 {
			b = utf8.AppendRune(b, utf8.RuneError)
			n = invalidSubpart(s)
		} else {
			b = append(b, s[:n]...)
		}
		s = s[n:]
	}
	return string(b)
}

// invalidSubpart is the length of the maximal subpart of a valid UTF-8
// sequence at the start of s, which does not begin with a valid character:
// a lead byte and the continuation bytes that may follow it, or 1.
func invalidSubpart(s string) int {
	lo, hi := byte(0x80), byte(0xBF)
	need := 0
	switch c := s[0]; {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c == 0xED:
		need, hi = 2, 0x9F
	case c >= 0xE1 && c <= 0xEF:
		need = 2
	case c == 0xF0:
		need, lo = 3, 0x90
	case c == 0xF4:
		need, hi = 3, 0x8F
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	}
	n := 1
	for ; n <= need && n < len(s); n++ {
		if s[n] < lo || s[n] > hi {
			break
		}
		lo, hi = 0x80, 0xBF
	}
	return n
}

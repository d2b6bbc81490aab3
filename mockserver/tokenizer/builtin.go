package tokenizer

import (
	"fmt"
	"strings"
)

// BuiltinOptions configure the built-in tokenizer.
type BuiltinOptions struct {
	// AddBOS begins every text prompt with BOS, as a Llama tokenizer does.
	AddBOS bool
	// ChatTemplate names a built-in chat template (ChatTemplates); ""
	// is ChatML.
	ChatTemplate string
}

// Builtin returns sglmock's own tokenizer: no vocabulary file, about 1.3
// tokens per English word, prefix-stable (see the package doc).
func Builtin(o BuiltinOptions) (*Tokenizer, error) {
	chat, err := builtinTemplate(o.ChatTemplate)
	if err != nil {
		return nil, err
	}
	t := &Tokenizer{name: BuiltinName, enc: builtinCodec{}, chat: chat, out: builtinOutput}
	if o.AddBOS {
		t.prefix = []int32{BOS}
	}
	return t, nil
}

// BuiltinName is the built-in tokenizer's Name.
const BuiltinName = "built-in"

// builtinCodec is the built-in vocabulary: ids are computed from the text,
// so it has no tables to load.
type builtinCodec struct{}

// Special token ids.
const (
	EOS     int32 = 256 // end of text
	IMStart int32 = 257 // start of a chat message
	IMEnd   int32 = 258 // end of a chat message
	// BOS begins a text prompt under a profile with add_bos_token, as a
	// Llama tokenizer adds it. Text without special-token markup never
	// produces it.
	BOS int32 = 259
	// The markers of the Llama 3 and Kimi K2 chat templates.
	StartHeader int32 = 260
	EndHeader   int32 = 261
	EOT         int32 = 262
	IMSystem    int32 = 263
	IMUser      int32 = 264
	IMAssistant int32 = 265
	IMMiddle    int32 = 266
	// The reasoning block of the thinking models' templates (Kimi K2.6).
	Think    int32 = 267
	ThinkEnd int32 = 268

	firstPiece  = 1024
	maxLetters  = 6
	alphabetLen = 26
)

var specials = []struct {
	id   int32
	text string
}{
	{EOS, builtinEOSText},
	{IMStart, "<|im_start|>"},
	{IMEnd, "<|im_end|>"},
	{BOS, builtinBOSText},
	{StartHeader, "<|start_header_id|>"},
	{EndHeader, "<|end_header_id|>"},
	{EOT, "<|eot_id|>"},
	{IMSystem, "<|im_system|>"},
	{IMUser, "<|im_user|>"},
	{IMAssistant, "<|im_assistant|>"},
	{IMMiddle, "<|im_middle|>"},
	{Think, "<think>"},
	{ThinkEnd, "</think>"},
}

// The built-in BOS and EOS texts, the chat templates' bos_token and
// eos_token.
const (
	builtinBOSText = "<|begin_of_text|>"
	builtinEOSText = "<|endoftext|>"
)

// blockStart[k] is the number of letter runs shorter than k letters, so runs of
// k letters occupy codes blockStart[k] .. blockStart[k+1]-1.
var blockStart = func() [maxLetters + 2]int64 {
	var b [maxLetters + 2]int64
	size := int64(1)
	for k := 1; k <= maxLetters+1; k++ {
		b[k] = b[k-1]
		if k > 1 {
			b[k] += size
		}
		size *= alphabetLen
	}
	return b
}()

// builtinVocabSize is one past the largest id the built-in tokenizer
// produces or decodes.
var builtinVocabSize = int64(firstPiece) + 4*blockStart[maxLetters+1]

func (builtinCodec) vocabSize() int64 { return builtinVocabSize }

// letterIndex maps a letter of either case to 0..25, anything else to -1.
var letterIndex = func() [256]int8 {
	var t [256]int8
	for i := range t {
		t[i] = -1
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = int8(c - 'a')
		t[c-'a'+'A'] = int8(c - 'a')
	}
	return t
}()

func isLower(c byte) bool { return c >= 'a' && c <= 'z' }

func isUpper(c byte) bool { return c >= 'A' && c <= 'Z' }

func (builtinCodec) encode(dst []int32, text string, limit int, stop *interrupt) ([]int32, int) {
	start, n := len(dst), 0
	// The bytes since the interrupt's last look are gathered here and
	// handed to it whole when it is due to look again (stop.due), the
	// same looks at the same tokens as handing it each token's.
	pending, due := 0, stop.due()
	for i := 0; i < len(text); n++ {
		var id int32
		at := i
		id, i = next(text, i)
		if pending += i - at; pending >= due {
			if stop.after(pending) {
				break
			}
			pending, due = 0, stop.due()
		}
		if limit < 0 || n < limit {
			dst = append(dst, id)
		}
	}
	if pending > 0 {
		stop.after(pending) // short of due: only counted
	}
	if limit >= 0 && n > limit {
		dst = dst[:start]
	}
	return dst, n
}

// next returns the id of the token that starts at text[i] and the index
// just past it.
func next(text string, i int) (int32, int) {
	c := text[i]
	j := i
	if c == ' ' {
		if i+1 == len(text) || letterIndex[text[i+1]] < 0 {
			return ' ', i + 1
		}
		j++ // a space before a letter starts a piece
	} else if letterIndex[c] < 0 {
		if c == '<' {
			if id, n := special(text[i:]); n > 0 {
				return id, i + n
			}
		}
		return int32(c), i + 1
	}
	// A piece: optional space, a letter of either case, then up to five
	// lower-case letters.
	first := text[j]
	code := int64(letterIndex[first])
	word := j
	end := min(len(text), j+maxLetters)
	for j++; j < end; j++ {
		d := text[j] - 'a'
		if d >= alphabetLen {
			break
		}
		code = code*alphabetLen + int64(d)
	}
	return pieceID(code, j-word, isUpper(first), word > i), j
}

func special(s string) (int32, int) {
	for _, sp := range specials {
		if strings.HasPrefix(s, sp.text) {
			return sp.id, len(sp.text)
		}
	}
	return 0, 0
}

func pieceID(code int64, n int, capital, space bool) int32 {
	id := int64(firstPiece) + 4*(blockStart[n]+code)
	if capital {
		id += 2
	}
	if space {
		id++
	}
	return int32(id)
}

// appendToken appends the text of one token id to dst. An id outside the
// vocabulary decodes as "<|unk_ID|>", so decoding never fails.
func (builtinCodec) appendToken(dst []byte, id int32) []byte {
	switch {
	case id >= 0 && id < 256:
		return append(dst, byte(id))
	case id >= 256 && id < firstPiece:
		for _, sp := range specials {
			if sp.id == id {
				return append(dst, sp.text...)
			}
		}
		return fmt.Appendf(dst, "<|reserved_%d|>", id)
	case int64(id) >= firstPiece && int64(id) < builtinVocabSize:
		v := int64(id) - firstPiece
		if v&1 == 1 {
			dst = append(dst, ' ')
		}
		capital := v&2 == 2
		v /= 4
		n := 1
		for v >= blockStart[n+1] {
			n++
		}
		code := v - blockStart[n]
		start := len(dst)
		for range n {
			dst = append(dst, 0)
		}
		for k := n - 1; k >= 0; k-- {
			dst[start+k] = byte('a' + code%alphabetLen)
			code /= alphabetLen
		}
		if capital {
			dst[start] -= 'a' - 'A'
		}
		return dst
	default:
		return fmt.Appendf(dst, "<|unk_%d|>", id)
	}
}

func (c builtinCodec) decode(ids []int32, skipSpecial bool) string {
	var b []byte
	for _, id := range ids {
		if skipSpecial && id >= 256 && id < firstPiece {
			continue
		}
		b = c.appendToken(b, id)
	}
	return string(b)
}

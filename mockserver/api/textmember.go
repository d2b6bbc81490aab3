package api

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
)

// A request body is mostly its prompt: 8,000 words are some 48 kB of one
// JSON string beside a few short fields. encoding/json reads every byte
// of a body twice, once to validate it and once to decode it, with a call
// per byte, and the prompt's bytes are most of that work. A body whose
// prompt is a plain string (plainString) is decoded without them instead:
// the body's top-level members are walked with bytes.IndexByte, the
// prompt's value is taken as it is, and the rest of the body, with null
// in the prompt's place, goes to the decoder. Anything the walk does not
// expect (an escaped or non-ASCII key, the key twice in any case, a
// prompt that is not a plain string, bad JSON) decodes the whole body as
// before, so the result and every error are the decoder's.

// textMember is a request body with a member that holds its prompt text.
type textMember interface {
	// textMember returns the member's key, where its raw value goes, and
	// where decodeAroundText records that the value is a plain string, so
	// that reading its text (plainText) does not look at it again.
	textMember() (key string, raw *json.RawMessage, plain *bool)
}

func (b *completionBody) textMember() (string, *json.RawMessage, *bool) {
	return "prompt", &b.Prompt, &b.promptPlain
}

func (b *generateBody) textMember() (string, *json.RawMessage, *bool) {
	return "text", &b.Text, &b.textPlain
}

// decodeBody decodes body into v, as json.Unmarshal does.
func decodeBody(body []byte, v any) error {
	if m, ok := v.(textMember); ok && decodeAroundText(body, m) {
		return nil
	}
	return json.Unmarshal(body, v)
}

// decodeAroundText decodes body into m with its text member read as it
// is. It reports false, leaving m zero, where the whole body must go to
// the decoder.
func decodeAroundText(body []byte, m textMember) bool {
	key, raw, plain := m.textMember()
	start, end, ok := memberValue(body, key)
	if !ok {
		return false
	}
	if !isPlainString(body[start:end]) {
		return false
	}
	rest := make([]byte, 0, len(body)-(end-start)+len("null"))
	rest = append(append(append(rest, body[:start]...), "null"...), body[end:]...)
	if err := json.Unmarshal(rest, m); err != nil {
		reflect.ValueOf(m).Elem().SetZero()
		return false
	}
	*raw, *plain = bytes.Clone(body[start:end]), true
	return true
}

// memberValue finds the value of the top-level member key of the JSON
// object body: body[start:end]. It reports false where body is not an
// object the walk reads, where a key is escaped or not ASCII (it could
// name key in a way the walk does not see), or where key is there twice
// in any case (encoding/json matches keys without case; the last wins).
func memberValue(body []byte, key string) (start, end int, ok bool) {
	i := skipSpace(body, 0)
	if i == len(body) || body[i] != '{' {
		return 0, 0, false
	}
	i = skipSpace(body, i+1)
	if i < len(body) && body[i] == '}' {
		return 0, 0, false
	}
	found := false
	for i < len(body) && body[i] == '"' {
		keyEnd, ok := skipString(body, i)
		if !ok {
			return 0, 0, false
		}
		k := body[i+1 : keyEnd-1]
		if bytes.IndexByte(k, '\\') >= 0 || !isASCII(k) {
			return 0, 0, false
		}
		i = skipSpace(body, keyEnd)
		if i == len(body) || body[i] != ':' {
			return 0, 0, false
		}
		valueStart := skipSpace(body, i+1)
		valueEnd, ok := skipValue(body, valueStart)
		if !ok {
			return 0, 0, false
		}
		if bytes.EqualFold(k, []byte(key)) {
			if found || string(k) != key {
				return 0, 0, false
			}
			found, start, end = true, valueStart, valueEnd
		}
		i = skipSpace(body, valueEnd)
		if i == len(body) {
			return 0, 0, false
		}
		switch body[i] {
		case ',':
			i = skipSpace(body, i+1)
		case '}':
			if skipSpace(body, i+1) != len(body) {
				return 0, 0, false
			}
			return start, end, found
		default:
			return 0, 0, false
		}
	}
	return 0, 0, false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just past the string that opens at b[i].
// The next quote is looked for once and kept until an escape passes it:
// looking for it again after each escape reads the rest of the string once
// an escape, quadratic in a prompt of escaped newlines.
func skipString(b []byte, i int) (int, bool) {
	i++
	quote := -1 // the first quote at or past i, once found
	for {
		if quote < i {
			q := bytes.IndexByte(b[i:], '"')
			if q < 0 {
				return 0, false
			}
			quote = i + q
		}
		e := bytes.IndexByte(b[i:quote], '\\')
		if e < 0 {
			return quote + 1, true
		}
		i += e + 2 // the escaped byte, a quote perhaps
		if i > len(b) {
			return 0, false
		}
	}
}

// skipValue returns the index just past the value that starts at b[i]:
// a string, an object or array with what it holds, or a literal up to the
// next delimiter. What the value holds is left for the decoder to check.
func skipValue(b []byte, i int) (int, bool) {
	if i == len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				end, ok := skipString(b, i)
				if !ok {
					return 0, false
				}
				i = end
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1, true
				}
			}
			i++
		}
		return 0, false
	}
	start := i
	for i < len(b) && strings.IndexByte(",}] \t\r\n", b[i]) < 0 {
		i++
	}
	return i, i > start
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

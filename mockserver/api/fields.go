package api

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// stringOrList is a JSON string or list of strings (SGLang's stop).
type stringOrList []string

func (s *stringOrList) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		*s = nil
		return nil
	}
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*s = []string{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return fmt.Errorf("stop: must be a string or a list of strings")
	}
	*s = many
	return nil
}

func isNull(b json.RawMessage) bool { return len(b) == 0 || bytes.Equal(b, []byte("null")) }

func isList(b json.RawMessage) bool { return len(b) > 0 && b[0] == '[' }

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// plainString is raw's text when raw is a JSON string with no escape, no
// control character and valid UTF-8, which decodes to its own bytes: a
// long prompt then costs one fast scan instead of a second decode. Any
// other string (or value) reports false, for the decoder to read.
func plainString(raw []byte) (string, bool) {
	return plainText(raw, false)
}

// plainText is plainString for a value already known to be a plain string
// when known is set (decodeAroundText checked it), which it does not check
// again: the check reads every byte of a long prompt.
func plainText(raw []byte, known bool) (string, bool) {
	if !known && !isPlainString(raw) {
		return "", false
	}
	return string(raw[1 : len(raw)-1]), true
}

// isPlainString reports whether plainString takes raw, without copying
// its text.
func isPlainString(raw []byte) bool {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return false
	}
	body := raw[1 : len(raw)-1]
	if bytes.IndexByte(body, '\\') >= 0 || bytes.IndexByte(body, '"') >= 0 {
		return false
	}
	// Eight bytes at a time while all are printable ASCII: a byte below
	// 0x20 or from 0x80 marks its word (a false mark only ends the fast
	// part early); the rest is checked byte by byte.
	const lows, highs = 0x2020202020202020, 0x8080808080808080
	i := 0
	for ; i+8 <= len(body); i += 8 {
		w := binary.LittleEndian.Uint64(body[i:])
		if ((w-lows)&^w|w)&highs != 0 {
			break
		}
	}
	for _, c := range body[i:] {
		if c < 0x20 {
			return false
		}
	}
	return utf8.Valid(body[i:])
}

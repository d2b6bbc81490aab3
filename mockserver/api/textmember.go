package api

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"sync"
)

// A request body is mostly its prompt: 8,000 words are some 48 kB of one
// JSON string beside a few short fields. encoding/json reads every byte
// of a body twice, once to validate it and once to decode it, with a call
// per byte, and the prompt's bytes are most of that work. A body whose
// prompt is a plain string (plainString) is decoded without them instead:
// the body's top-level members are walked once with bytes.IndexByte, the
// prompt's value is taken as it is, and the other members are decoded one
// at a time (below) or, failing that, the rest of the body, with null in
// the prompt's place, goes to the decoder. Anything the walk does not
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
	v := reflect.ValueOf(m).Elem()
	start, end, whole, ok := decodeMembers(body, v, key)
	if !ok || !isPlainString(body[start:end]) {
		v.SetZero()
		return false
	}
	if !whole {
		v.SetZero()
		rest := make([]byte, 0, len(body)-(end-start)+len("null"))
		rest = append(append(append(rest, body[:start]...), "null"...), body[end:]...)
		if err := json.Unmarshal(rest, m); err != nil {
			v.SetZero()
			return false
		}
	}
	*raw, *plain = bytes.Clone(body[start:end]), true
	return true
}

// The other members, one at a time. encoding/json spends a microsecond and
// more on a body's few short members (a scanner call per byte, a field
// looked up by name, the value by reflection), as much as the rest of a
// short request's decoding together. decodeMembers sets the members it
// reads exactly (a plain string, true or false, a literal handed to the
// field type's UnmarshalJSON) itself, and gives any other value to the
// decoder alone; where a key could name a field in a way it does not
// follow (another case, twice), or anything fails, the rest of the body
// goes to the decoder, so the result and every error are still the
// decoder's (TestDecodeBodyIsUnmarshal, FuzzDecodeBody). The same walk
// finds the text member, so a long prompt is scanned once.

// decodeMembers walks the top-level members of the object body once. It
// finds the member key, body[start:end], and decodes the others into the
// struct v. ok is false where body is not an object the walk reads
// (walkMembers), or where key is not there or is there twice in any case
// (encoding/json matches keys without case; the last wins). whole is false,
// with v partly set, where the other members must go to the decoder.
func decodeMembers(body []byte, v reflect.Value, key string) (start, end int, whole, ok bool) {
	fields := bodyFields(v.Type())
	var seen uint64 // the fields set, a bit for each (bodyField.n)
	found := false
	whole = true
	ok = walkMembers(body, func(k []byte, valueStart, valueEnd int) bool {
		if bytes.EqualFold(k, []byte(key)) {
			if found || string(k) != key {
				return false
			}
			found, start, end = true, valueStart, valueEnd
			return true
		}
		if whole {
			whole = decodeOther(v, fields, &seen, k, body[valueStart:valueEnd])
		}
		return true
	})
	return start, end, whole, ok && found
}

// decodeOther decodes the member key: value into v, or reports false.
func decodeOther(v reflect.Value, fields *fieldSet, seen *uint64, key, value []byte) bool {
	f, ok := fields.byName[string(key)]
	if !ok {
		// encoding/json ignores a key that names no field in any case,
		// but still checks its value.
		return !fields.folded(key) && json.Valid(value)
	}
	if *seen&(1<<f.n) != 0 {
		return false // the same key twice: the decoder keeps the last
	}
	*seen |= 1 << f.n
	return decodeMember(v.FieldByIndex(f.index), value)
}

// decodeMember sets field from its raw value as encoding/json would, or
// reports false.
func decodeMember(field reflect.Value, value []byte) bool {
	t := field.Type()
	switch {
	case t.Kind() == reflect.String && isPlainString(value):
		field.SetString(string(value[1 : len(value)-1]))
		return true
	case t.Kind() == reflect.Bool && (string(value) == "true" || string(value) == "false"):
		field.SetBool(string(value) == "true")
		return true
	case t.Kind() == reflect.Pointer && t.Implements(unmarshalerType) && isScalarLiteral(value):
		// The decoder hands a literal other than null to a new value's
		// UnmarshalJSON as it is.
		p := reflect.New(t.Elem())
		if p.Interface().(json.Unmarshaler).UnmarshalJSON(value) != nil {
			return false
		}
		field.Set(p)
		return true
	}
	return json.Unmarshal(value, field.Addr().Interface()) == nil
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// isScalarLiteral reports whether b is a JSON number, a plain string, true
// or false, exactly.
func isScalarLiteral(b []byte) bool {
	switch string(b) {
	case "true", "false":
		return true
	}
	return isPlainString(b) || isNumber(b)
}

// isNumber reports whether b is a JSON number: -?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?
func isNumber(b []byte) bool {
	i := 0
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i == len(b) || !isDigit(b[i]) {
			return false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i == len(b) || !isDigit(b[i]) {
			return false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	return i == len(b)
}

// fieldSet is the fields encoding/json decodes a body type's keys into.
type fieldSet struct {
	byName map[string]bodyField
	lower  map[string]bool // every name, lower-cased
}

type bodyField struct {
	index []int
	n     int // its place among the fields, below 64
}

// folded reports whether key names a field in another case.
func (fs *fieldSet) folded(key []byte) bool { return fs.lower[strings.ToLower(string(key))] }

var bodyFieldSets sync.Map // reflect.Type -> *fieldSet

// bodyFields returns the fields of the struct type t by the key that names
// each: its json tag's name, found in t and the structs t embeds, as
// encoding/json finds them for the body types (which have one field a
// name, all tagged). A name found twice, reached through an embedded
// pointer or past the 64th field (seen's bits) is left out (kept in
// lower), so its key sends the body to the decoder.
func bodyFields(t reflect.Type) *fieldSet {
	if fs, ok := bodyFieldSets.Load(t); ok {
		return fs.(*fieldSet)
	}
	fs := &fieldSet{byName: map[string]bodyField{}, lower: map[string]bool{}}
	leftOut := map[string]bool{}
	for n, f := range reflect.VisibleFields(t) {
		tag, ok := f.Tag.Lookup("json")
		if !ok || !f.IsExported() || f.Anonymous {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" || name == "" {
			continue
		}
		fs.lower[strings.ToLower(name)] = true
		if _, dup := fs.byName[name]; dup || n >= 64 || throughPointer(t, f.Index) {
			leftOut[name] = true
		}
		fs.byName[name] = bodyField{index: f.Index, n: n}
	}
	for name := range leftOut {
		delete(fs.byName, name)
	}
	bodyFieldSets.Store(t, fs)
	return fs
}

// throughPointer reports whether the field at index in t lies in a struct
// embedded by pointer, which may be nil.
func throughPointer(t reflect.Type, index []int) bool {
	for _, i := range index[:len(index)-1] {
		f := t.Field(i)
		if f.Type.Kind() == reflect.Pointer {
			return true
		}
		t = f.Type
	}
	return false
}

// walkMembers calls member with each top-level member of the JSON object
// body, its key's text and where its raw value lies in body, in order,
// while member reports true. It reports false where member did, or where body is not an object
// the walk reads: empty, a key escaped, not ASCII (it could name a field
// in a way the walk does not see) or holding a control character, bytes
// after it, anything out of place. A value's content is left to member to check.
func walkMembers(body []byte, member func(key []byte, valueStart, valueEnd int) bool) bool {
	i := skipSpace(body, 0)
	if i == len(body) || body[i] != '{' {
		return false
	}
	i = skipSpace(body, i+1)
	if i < len(body) && body[i] == '}' {
		return false
	}
	for i < len(body) && body[i] == '"' {
		keyEnd, ok := skipString(body, i)
		if !ok {
			return false
		}
		k := body[i+1 : keyEnd-1]
		if !isPlainString(body[i:keyEnd]) || !isASCII(k) {
			return false
		}
		i = skipSpace(body, keyEnd)
		if i == len(body) || body[i] != ':' {
			return false
		}
		valueStart := skipSpace(body, i+1)
		valueEnd, ok := skipValue(body, valueStart)
		if !ok || !member(k, valueStart, valueEnd) {
			return false
		}
		i = skipSpace(body, valueEnd)
		if i == len(body) {
			return false
		}
		switch body[i] {
		case ',':
			i = skipSpace(body, i+1)
		case '}':
			return skipSpace(body, i+1) == len(body)
		default:
			return false
		}
	}
	return false
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

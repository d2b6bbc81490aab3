package tokenizer

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Chat templates are Python jinja2 templates, rendered by transformers'
// apply_chat_template. The engine that runs them here
// (github.com/ardanlabs/jinja) differs from jinja2 in a few places a
// chat's prompt shows; prepareTemplate rewrites a template's source so the
// engine renders what jinja2 does:
//
//   - jinja2 reads every line break of the source (\r\n, \r) as \n and
//     drops one trailing newline (keep_trailing_newline is off);
//   - a string literal is a Python string: \uXXXX, \xXX, \r, octal and the
//     other escapes are decoded (the engine decodes \n, \t, \\ and quotes);
//   - {{ x }} prints str(x): None prints "None", a float 1.0 "1.0";
//   - the format filter is Python's % formatting; tojson is
//     transformers' (json.dumps, keys in order, an undefined value an
//     error); string is str().
//
// The rewrite keeps the template's meaning: a decoded literal is written
// back with only the escapes the engine reads, an output is wrapped in a
// call that prints as str() does, and those filters are renamed to
// filters the render supplies.

// Names the rewritten source calls; the render supplies them.
const (
	pyStrFunc = "__sglmock_str"
)

// pyFilters are the filters the engine has but prints differently from
// jinja2 under transformers, renamed to the render's own: format (the
// engine has none), tojson (the engine sorts an indented dict's keys and
// prints an undefined value, where Python keeps the order and fails) and
// string (None is "None", a float Python's repr).
var pyFilters = map[string]string{"format": "__sglmock_format", "tojson": "__sglmock_tojson", "string": "__sglmock_string"}

// tagKind is a piece of a template's source.
type tagKind int

const (
	tagText    tagKind = iota
	tagExpr            // {{ ... }}
	tagStmt            // {% ... %}
	tagComment         // {# ... #}
)

// tag is a piece of a template: text, or a tag with its delimiters'
// trim markers and its inner text.
type tag struct {
	kind                tagKind
	text                string // the text, or what is between the delimiters and trim markers
	trimLeft, trimRight bool
}

// scanTags cuts a template into text and tags as jinja2's lexer does:
// a tag ends at the first closer outside a string literal; a comment at
// the first #}. {% raw %} ... {% endraw %} is text.
func scanTags(src string) ([]tag, error) {
	var out []tag
	text := 0
	for i := 0; i < len(src); {
		j := strings.IndexByte(src[i:], '{')
		if j < 0 || i+j+1 >= len(src) {
			break
		}
		i += j
		var kind tagKind
		var closer string
		switch src[i+1] {
		case '{':
			kind, closer = tagExpr, "}}"
		case '%':
			kind, closer = tagStmt, "%}"
		case '#':
			kind, closer = tagComment, "#}"
		default:
			i++
			continue
		}
		if text < i {
			out = append(out, tag{kind: tagText, text: src[text:i]})
		}
		start := i + 2
		t := tag{kind: kind}
		if start < len(src) && src[start] == '-' {
			t.trimLeft = true
			start++
		}
		end, err := tagEnd(src, start, kind, closer)
		if err != nil {
			return nil, err
		}
		inner := src[start:end]
		after := end + 2
		if strings.HasSuffix(inner, "-") {
			t.trimRight, inner = true, inner[:len(inner)-1]
		}
		t.text = inner
		out = append(out, t)
		i, text = after, after
		if kind == tagStmt && firstWord(inner) == "raw" {
			// Everything up to {% endraw %} is text, tags included.
			k, n := findEndraw(src, after)
			if k < 0 {
				return nil, errors.New("a {% raw %} block has no {% endraw %}")
			}
			out = append(out, tag{kind: tagText, text: src[after:k]})
			endRaw := src[k:n]
			out = append(out, tag{kind: tagStmt, text: strings.Trim(endRaw[2:len(endRaw)-2], "-"),
				trimLeft: endRaw[2] == '-', trimRight: endRaw[len(endRaw)-3] == '-'})
			i, text = n, n
		}
	}
	if text < len(src) {
		out = append(out, tag{kind: tagText, text: src[text:]})
	}
	return out, nil
}

// maxNesting is the deepest a tag's brackets may nest. jinja2's parser
// recurses a dozen Python frames a bracket and fails past about 75 deep
// (RecursionError), so no template it renders comes near; a deeper one
// is refused before the rewrite, whose tuple check reads each bracket's
// span and would take time quadratic in such a source.
const maxNesting = 100

// tagEnd is where a tag's closer begins: the first one outside a string
// literal and outside brackets, as jinja2's lexer balances them (in a
// comment, the first one).
func tagEnd(src string, i int, kind tagKind, closer string) (int, error) {
	depth := 0
	for i < len(src) {
		c := src[i]
		if kind != tagComment {
			switch c {
			case '\'', '"':
				n, err := literalEnd(src, i)
				if err != nil {
					return 0, err
				}
				i = n
				continue
			case '(', '[', '{':
				if depth++; depth > maxNesting {
					return 0, fmt.Errorf("brackets nested more than %d deep (jinja2's parser runs out of recursion long before)", maxNesting)
				}
			case ')', ']':
				depth = max(depth-1, 0)
			case '}':
				if depth > 0 {
					depth--
					i++
					continue
				}
			}
		}
		if depth == 0 && strings.HasPrefix(src[i:], closer) || kind == tagComment && strings.HasPrefix(src[i:], closer) {
			return i, nil
		}
		i++
	}
	name := map[tagKind]string{tagExpr: "expression", tagStmt: "statement", tagComment: "comment"}[kind]
	return 0, fmt.Errorf("an unclosed %s tag", name)
}

// literalEnd is the index after the string literal that starts at i.
func literalEnd(src string, i int) (int, error) {
	quote := src[i]
	for j := i + 1; j < len(src); j++ {
		switch src[j] {
		case '\\':
			j++
		case quote:
			return j + 1, nil
		}
	}
	return 0, errors.New("an unterminated string literal")
}

// findEndraw finds the {% endraw %} tag at or after i: its start and end.
func findEndraw(src string, i int) (int, int) {
	for {
		k := strings.Index(src[i:], "{%")
		if k < 0 {
			return -1, -1
		}
		k += i
		e := strings.Index(src[k:], "%}")
		if e < 0 {
			return -1, -1
		}
		e += k + 2
		if firstWord(strings.Trim(src[k+2:e-2], "-")) == "endraw" {
			return k, e
		}
		i = k + 2
	}
}

// firstWord is the first identifier of a tag's text.
func firstWord(s string) string {
	s = strings.TrimLeft(s, " \t\n")
	n := 0
	for n < len(s) && isIdentByte(s[n]) {
		n++
	}
	return s[:n]
}

func isIdentByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// prepareTemplate rewrites a template's source for the engine (see the
// comment at the top of this file).
func prepareTemplate(src string) (string, error) {
	src = strings.ReplaceAll(src, "\r\n", "\n")
	src = strings.ReplaceAll(src, "\r", "\n")
	src = strings.TrimSuffix(src, "\n")
	tags, err := scanTags(src)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.Grow(len(src) + len(src)/8)
	for _, t := range tags {
		if t.kind == tagText {
			b.WriteString(t.text)
			continue
		}
		open, close := delimiters(t.kind)
		b.WriteString(open)
		if t.trimLeft {
			b.WriteByte('-')
		}
		inner := t.text
		if t.kind != tagComment {
			if inner, err = rewriteExpr(inner); err != nil {
				return "", err
			}
		}
		if t.kind == tagExpr {
			inner = " " + pyStrFunc + "((" + inner + ")) "
		}
		b.WriteString(inner)
		if t.trimRight {
			b.WriteByte('-')
		}
		b.WriteString(close)
	}
	return b.String(), nil
}

// delimiters are a tag's opening and closing delimiters.
func delimiters(k tagKind) (string, string) {
	switch k {
	case tagExpr:
		return "{{", "}}"
	case tagStmt:
		return "{%", "%}"
	}
	return "{#", "#}"
}

// rewriteExpr rewrites a tag's expressions: string literals decoded as
// Python decodes them and written back with the escapes the engine reads,
// number literals as the engine reads them, pyFilters renamed.
func rewriteExpr(s string) (string, error) {
	var b strings.Builder
	afterPipe := false
	// parens holds, for each open parenthesis, the bracket that closes
	// it: a tuple literal, which the engine cannot read, is written as a
	// list.
	var parens []byte
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '(':
			closer := byte(')')
			if prev := lastNonSpace(b.String()); !isIdentByte(prev) && prev != ')' && prev != ']' && isTuple(s, i) {
				c, closer = '[', ']'
			}
			parens = append(parens, closer)
			b.WriteByte(c)
			i, afterPipe = i+1, false
		case c == ')' && len(parens) > 0:
			b.WriteByte(parens[len(parens)-1])
			parens = parens[:len(parens)-1]
			i, afterPipe = i+1, false
		case c == '\'' || c == '"':
			end, err := literalEnd(s, i)
			if err != nil {
				return "", err
			}
			v, err := decodePyLiteral(s[i+1 : end-1])
			if err != nil {
				return "", fmt.Errorf("string literal %s: %w", clipText(s[i:end]), err)
			}
			b.WriteString(engineLiteral(v))
			i, afterPipe = end, false
		case c >= '0' && c <= '9' && (i == 0 || s[i-1] != '.' && !isIdentByte(s[i-1])):
			n := numberEnd(s, i)
			b.WriteString(engineNumber(s[i:n]))
			i, afterPipe = n, false
		case isIdentByte(c) && (c < '0' || c > '9'):
			n := i
			for n < len(s) && isIdentByte(s[n]) {
				n++
			}
			word := s[i:n]
			if renamed, ok := pyFilters[word]; ok && afterPipe {
				word = renamed
			}
			b.WriteString(word)
			i, afterPipe = n, false
		default:
			if c == '|' {
				afterPipe = true
			} else if c != ' ' && c != '\t' && c != '\n' {
				afterPipe = false
			}
			if c == '}' && lastNonSpace(b.String()) == '}' {
				// The engine ends a tag at the first }}: a nested
				// dict's braces are kept apart.
				b.WriteByte(' ')
			}
			b.WriteByte(c)
			i++
		}
	}
	return b.String(), nil
}

// lastNonSpace is the last byte of s that is not white space (0: none).
func lastNonSpace(s string) byte {
	s = strings.TrimRight(s, " \t\n")
	if s == "" {
		return 0
	}
	return s[len(s)-1]
}

// isTuple reports whether the parenthesis at i opens a tuple: a comma at
// its own level before its closing parenthesis.
func isTuple(s string, i int) bool {
	depth := 0
	for j := i; j < len(s); j++ {
		switch s[j] {
		case '\'', '"':
			end, err := literalEnd(s, j)
			if err != nil {
				return false
			}
			j = end - 1
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			depth--
			if depth == 0 {
				return false
			}
		case ',':
			if depth == 1 {
				return true
			}
		}
	}
	return false
}

// numberEnd is the end of the number literal at i, as jinja2 reads one:
// digits (with underscores), a fraction, an exponent.
func numberEnd(s string, i int) int {
	digits := func(i int) int {
		for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '_' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9') {
			i++
		}
		return i
	}
	n := digits(i)
	if n+1 < len(s) && s[n] == '.' && s[n+1] >= '0' && s[n+1] <= '9' {
		n = digits(n + 1)
	}
	if n < len(s) && (s[n] == 'e' || s[n] == 'E') {
		k := n + 1
		if k < len(s) && (s[k] == '+' || s[k] == '-') {
			k++
		}
		if k < len(s) && s[k] >= '0' && s[k] <= '9' {
			n = digits(k)
		}
	}
	return n
}

// engineNumber writes a number literal as the engine reads it: without
// underscores, and a float with an exponent always with a fraction
// (jinja2 reads 1e20 as a float, the engine as 1 and a name).
func engineNumber(lit string) string {
	lit = strings.ReplaceAll(lit, "_", "")
	if e := strings.IndexAny(lit, "eE"); e >= 0 && !strings.Contains(lit[:e], ".") {
		lit = lit[:e] + ".0" + lit[e:]
	}
	return lit
}

func clipText(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// engineLiteral writes s as a literal the engine reads back as s: it
// decodes only \\, \', \", \n and \t.
func engineLiteral(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('\'')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			b.WriteString(`\\`)
		case '\'':
			b.WriteString(`\'`)
		case '\n':
			b.WriteString(`\n`)
		case '\t':
			b.WriteString(`\t`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// decodePyLiteral decodes the body of a template's string literal as
// jinja2 does: value.encode("ascii", "backslashreplace").decode(
// "unicode-escape"). A character outside ASCII stands for its own escape
// first, so a backslash before one keeps both.
func decodePyLiteral(body string) (string, error) {
	if !strings.Contains(body, `\`) {
		return body, nil
	}
	var ascii strings.Builder
	for _, r := range body {
		switch {
		case r < utf8.RuneSelf:
			ascii.WriteRune(r)
		case r <= 0xff:
			fmt.Fprintf(&ascii, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(&ascii, `\u%04x`, r)
		default:
			fmt.Fprintf(&ascii, `\U%08x`, r)
		}
	}
	s := ascii.String()
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		if i+1 >= len(s) {
			return "", errors.New(`\ at end of string`)
		}
		i++
		switch e := s[i]; e {
		case '\n':
		case '\\', '\'', '"':
			b.WriteByte(e)
		case 'a':
			b.WriteByte(0x07)
		case 'b':
			b.WriteByte(0x08)
		case 'f':
			b.WriteByte(0x0c)
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'v':
			b.WriteByte(0x0b)
		case '0', '1', '2', '3', '4', '5', '6', '7':
			n := i + 1
			for n < len(s) && n < i+3 && s[n] >= '0' && s[n] <= '7' {
				n++
			}
			v, _ := strconv.ParseUint(s[i:n], 8, 32)
			b.WriteRune(rune(v))
			i = n - 1
		case 'x', 'u', 'U':
			digits := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			hex := s[i+1 : min(i+1+digits, len(s))]
			v, err := strconv.ParseUint(hex, 16, 32)
			if len(hex) < digits || err != nil || strings.ContainsAny(hex, "+-") {
				return "", fmt.Errorf(`truncated \%c escape`, e)
			}
			if v > utf8.MaxRune {
				return "", fmt.Errorf(`illegal Unicode character \%s`, s[i:i+1+digits])
			}
			b.WriteRune(rune(v))
			i += digits
		case 'N':
			return "", errors.New(`\N{...} escapes are not supported`)
		default:
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return b.String(), nil
}

package tokenizer

import "strings"

// How SGLang hands a chat template a message whose content is a list of
// parts (jinja_template_utils.detect_jinja_template_content_format): as
// the list, to a template that names a modality or loops over a
// message's content; joined into one string, to any other.
const (
	contentString = "string"
	contentOpenAI = "openai"
)

// detectContentFormat is SGLang's detection: "openai" when the source
// mentions image, audio, video or vision, or when a for loop iterates
// message.content (or msg's, or m's: message['content'] too, through
// filters, tests and slices); else "string".
func detectContentFormat(src string) string {
	for _, kw := range []string{"image", "audio", "video", "vision"} {
		if strings.Contains(src, kw) {
			return contentOpenAI
		}
	}
	src = strings.ReplaceAll(strings.ReplaceAll(src, "\r\n", "\n"), "\r", "\n")
	tags, err := scanTags(src)
	if err != nil {
		return contentString // SGLang: a template it cannot parse is "string"
	}
	for _, t := range tags {
		if t.kind == tagStmt && firstWord(t.text) == "for" && iteratesContent(loopIter(t.text)) {
			return contentOpenAI
		}
	}
	return contentString
}

// exprToken is a token of a template expression: a name, a string
// literal's body, or a punctuation character.
type exprToken struct {
	kind byte // 'n' name, 's' string, 'p' punctuation, '0' number
	text string
}

// exprTokens cuts an expression into tokens.
func exprTokens(s string) []exprToken {
	var out []exprToken
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			i++
		case c == '\'' || c == '"':
			end, err := literalEnd(s, i)
			if err != nil {
				return append(out, exprToken{'p', s[i:]})
			}
			body, err := decodePyLiteral(s[i+1 : end-1])
			if err != nil {
				body = s[i+1 : end-1]
			}
			out = append(out, exprToken{'s', body})
			i = end
		case isIdentByte(c):
			n := i
			for n < len(s) && isIdentByte(s[n]) {
				n++
			}
			kind := byte('n')
			if c >= '0' && c <= '9' {
				kind = '0'
			}
			out = append(out, exprToken{kind, s[i:n]})
			i = n
		default:
			out = append(out, exprToken{'p', string(c)})
			i++
		}
	}
	return out
}

// loopIter is the iterated expression of a for tag's text ("for x in
// ITER if cond recursive"): the tokens after the top-level "in", up to a
// top-level "if" or "recursive".
func loopIter(stmt string) []exprToken {
	toks := exprTokens(stmt)
	depth, start := 0, -1
	for i, t := range toks {
		switch {
		case t.kind == 'p' && strings.Contains("([{", t.text):
			depth++
		case t.kind == 'p' && strings.Contains(")]}", t.text):
			depth--
		case depth == 0 && t.kind == 'n' && t.text == "in" && start < 0:
			start = i + 1
		case depth == 0 && start >= 0 && t.kind == 'n' && (t.text == "if" || t.text == "recursive"):
			return toks[start:i]
		}
	}
	if start < 0 {
		return nil
	}
	return toks[start:]
}

// iteratesContent reports whether an iterated expression is a message's
// content as SGLang's _is_var_or_elems_access sees it: message.content
// or message['content'] (of message, msg or m), perhaps sliced, then
// perhaps filtered or tested.
func iteratesContent(toks []exprToken) bool {
	for len(toks) >= 2 && toks[0] == (exprToken{'p', "("}) && toks[len(toks)-1] == (exprToken{'p', ")"}) {
		toks = toks[1 : len(toks)-1]
	}
	if len(toks) < 3 || toks[0].kind != 'n' {
		return false
	}
	switch toks[0].text {
	case "message", "msg", "m":
	default:
		return false
	}
	rest := toks[1:]
	switch {
	case rest[0] == (exprToken{'p', "."}) && rest[1] == (exprToken{'n', "content"}):
		rest = rest[2:]
	case len(rest) >= 3 && rest[0] == (exprToken{'p', "["}) && rest[1] == (exprToken{'s', "content"}) && rest[2] == (exprToken{'p', "]"}):
		rest = rest[3:]
	default:
		return false
	}
	// Slices: [a:b], [::-1] ...
	for len(rest) > 0 && rest[0] == (exprToken{'p', "["}) {
		end, colon, depth := -1, false, 0
		for i, t := range rest {
			if t.kind != 'p' {
				continue
			}
			switch t.text {
			case "[", "(", "{":
				depth++
			case "]", ")", "}":
				depth--
			case ":":
				colon = colon || depth == 1
			}
			if depth == 0 {
				end = i
				break
			}
		}
		if end < 0 || !colon {
			return false
		}
		rest = rest[end+1:]
	}
	return len(rest) == 0 || rest[0] == (exprToken{'p', "|"}) || rest[0] == (exprToken{'n', "is"})
}

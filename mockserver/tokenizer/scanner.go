package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// Character classes as the regex engines of Hugging Face (Oniguruma) and
// tiktoken (fancy-regex) read \s, \p{L} and \p{N}: Unicode's White_Space,
// Letter and Number.
func isWhiteSpace(r rune) bool { return unicode.IsSpace(r) }

func isLetter(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z'
	}
	return unicode.IsLetter(r)
}

func isNumber(r rune) bool {
	if r < utf8.RuneSelf {
		return '0' <= r && r <= '9'
	}
	return unicode.IsNumber(r)
}

// The pre-tokenizer patterns of the GPT-4 family, which the Llama 3 and
// Qwen tokenizers use. They match everywhere (every character is a letter,
// a number, white space or something else), so a text splits into
// consecutive matches, which cl100kScanner finds without the regex engine.
const (
	cl100kPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	qwenPattern   = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// scanners are the patterns with a scanner of their own: its maximum run
// of digits in one piece.
var scanners = map[string]int{cl100kPattern: 3, qwenPattern: 1}

// cl100kScanner matches cl100kPattern (digits = 3) or qwenPattern
// (digits = 1), alternative by alternative as the backtracking engine
// tries them.
type cl100kScanner struct{ digits int }

func (c cl100kScanner) each(s string, yield func(int, int) bool) {
	for i := 0; i < len(s); {
		end := c.match(s, i)
		if !yield(i, end) {
			return
		}
		i = end
	}
}

// match returns the end of the match that starts at s[i].
func (c cl100kScanner) match(s string, i int) int {
	r, n := utf8.DecodeRuneInString(s[i:])
	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if r == '\'' {
		if k := contraction(s[i+1:]); k > 0 {
			return i + 1 + k
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if isLetter(r) {
		return letters(s, i+n)
	}
	if r != '\r' && r != '\n' && !isNumber(r) && i+n < len(s) {
		if r2, n2 := utf8.DecodeRuneInString(s[i+n:]); isLetter(r2) {
			return letters(s, i+n+n2)
		}
	}
	// \p{N}{1,digits}
	if isNumber(r) {
		j := i + n
		for k := 1; k < c.digits && j < len(s); k++ {
			r2, n2 := utf8.DecodeRuneInString(s[j:])
			if !isNumber(r2) {
				break
			}
			j += n2
		}
		return j
	}
	// ' '?[^\s\p{L}\p{N}]+[\r\n]*
	j := i
	if r == ' ' {
		j++
	}
	if j < len(s) {
		if r2, _ := utf8.DecodeRuneInString(s[j:]); isOther(r2) {
			for j < len(s) {
				r3, n3 := utf8.DecodeRuneInString(s[j:])
				if !isOther(r3) {
					break
				}
				j += n3
			}
			for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
				j++
			}
			return j
		}
	}
	// r is white space: the run of it is s[i:e].
	e, lastNewline, last := i, -1, i
	for e < len(s) {
		r2, n2 := utf8.DecodeRuneInString(s[e:])
		if !isWhiteSpace(r2) {
			break
		}
		if r2 == '\r' || r2 == '\n' {
			lastNewline = e
		}
		last = e
		e += n2
	}
	switch {
	case lastNewline >= 0: // \s*[\r\n]+: up to the run's last line break
		return lastNewline + 1
	case e == len(s): // \s+(?!\S) at the end of the text
		return e
	case last > i: // \s+(?!\S): all but the run's last character
		return last
	}
	return e // \s+
}

// isOther is [^\s\p{L}\p{N}].
func isOther(r rune) bool { return !isWhiteSpace(r) && !isLetter(r) && !isNumber(r) }

// letters returns the end of the run of letters from s[i].
func letters(s string, i int) int {
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if !isLetter(r) {
			break
		}
		i += n
	}
	return i
}

// contraction returns the length of the contraction suffix ('s, 't, 're,
// 've, 'm, 'll, 'd in any case) that s, the text after an apostrophe,
// begins with, or 0.
func contraction(s string) int {
	lower := func(i int) byte {
		if i < len(s) && 'A' <= s[i] && s[i] <= 'Z' {
			return s[i] + 'a' - 'A'
		}
		if i < len(s) {
			return s[i]
		}
		return 0
	}
	switch lower(0) {
	case 's', 't', 'm', 'd':
		return 1
	case 'r', 'v':
		if lower(1) == 'e' {
			return 2
		}
	case 'l':
		if lower(1) == 'l' {
			return 2
		}
	}
	return 0
}

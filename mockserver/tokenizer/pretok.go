package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
)

// preTokenizer splits normalized text into the pieces the model encodes
// one by one, as a Hugging Face pre-tokenizer does.
type preTokenizer interface {
	// split calls emit with each non-empty piece of s, in order. first
	// says s begins the whole input (Metaspace's prepend_scheme "first"
	// prepends only there).
	split(s string, first bool, emit func(piece string, first bool))
}

// splitBehavior is what a split does with the text a pattern matches.
type splitBehavior int

const (
	isolated           splitBehavior = iota // a piece of its own
	removed                                 // dropped
	mergedWithPrevious                      // joined to the piece before
	mergedWithNext                          // joined to the piece after
	contiguous                              // runs of matches joined into one piece
)

var splitBehaviors = map[string]splitBehavior{
	"Isolated": isolated, "Removed": removed, "MergedWithPrevious": mergedWithPrevious,
	"MergedWithNext": mergedWithNext, "Contiguous": contiguous,
}

// matcher finds the matches of a pattern: each calls yield with the start
// and end of every non-overlapping match of s, in order, until yield
// returns false.
type matcher interface {
	each(s string, yield func(start, end int) bool)
}

// splitPre is Hugging Face's Split pre-tokenizer (and the regex step of
// ByteLevel): the text between matches and the matches become pieces as
// the behavior says; invert swaps the two.
type splitPre struct {
	m        matcher
	behavior splitBehavior
	invert   bool
}

func (p *splitPre) split(s string, first bool, emit func(string, bool)) {
	// pending is a piece held back for a match that may join it.
	pendStart, pendEnd, pendMatch := -1, -1, false
	flush := func() {
		if pendStart >= 0 && pendEnd > pendStart {
			emit(s[pendStart:pendEnd], first && pendStart == 0)
		}
		pendStart = -1
	}
	piece := func(start, end int, match bool) {
		if start == end {
			return
		}
		if p.invert {
			match = !match
		}
		switch {
		case p.behavior == removed && match:
			return
		case p.behavior == mergedWithPrevious && match && pendStart >= 0 && !pendMatch:
			pendEnd = end
		case p.behavior == mergedWithNext && pendStart >= 0 && pendMatch && !match:
			pendEnd = end
		case p.behavior == contiguous && pendStart >= 0 && pendMatch == match:
			pendEnd = end
		default:
			flush()
			pendStart, pendEnd = start, end
		}
		pendMatch = match
	}
	i := 0
	p.m.each(s, func(start, end int) bool {
		piece(i, start, false)
		piece(start, end, true)
		i = end
		return true
	})
	piece(i, len(s), false)
	flush()
}

// literalMatcher matches a fixed string.
type literalMatcher string

func (l literalMatcher) each(s string, yield func(int, int) bool) {
	for i := 0; ; {
		j := strings.Index(s[i:], string(l))
		if j < 0 || !yield(i+j, i+j+len(l)) {
			return
		}
		i += j + len(l)
	}
}

// classMatcher matches one character of a class.
type classMatcher func(rune) bool

func (c classMatcher) each(s string, yield func(int, int) bool) {
	for i, r := range s {
		if c(r) && !yield(i, i+utf8.RuneLen(r)) {
			return
		}
	}
}

// regexMatcher matches a regular expression with the backtracking engine
// (lookarounds and Unicode classes, as Oniguruma, which Hugging Face
// uses, and fancy-regex, which tiktoken uses, have them). The engine works
// on characters, so a long text goes through it a window at a time, and
// only the matches that end well before the window's end are taken: the
// rest are found again at the start of the next window.
type regexMatcher struct{ re *regexp2.Regexp }

// regexWindow is the bytes of text the engine sees at once, regexMargin
// the part of it at the end whose matches the next window finds again.
const (
	regexWindow = 64 << 10
	regexMargin = 16 << 10
)

func (r regexMatcher) each(s string, yield func(int, int) bool) {
	for base, width := 0, regexWindow; base < len(s); {
		end := min(base+width, len(s))
		for end < len(s) && !utf8.RuneStart(s[end]) {
			end++
		}
		found := r.matchAll(s[base:end], base)
		next := end
		if end < len(s) {
			// Keep the matches that end before the margin; a window
			// whose first match runs into it is widened instead.
			trusted := end - regexMargin
			k := 0
			for k < len(found) && found[k][1] <= trusted {
				k++
			}
			switch {
			case k > 0:
				next = found[k-1][1]
			case len(found) > 0 && found[0][0] < trusted:
				width *= 2
				continue
			default:
				next = trusted // no match starts before the margin
				for !utf8.RuneStart(s[next]) {
					next++
				}
			}
			found = found[:k]
		}
		for _, f := range found {
			if !yield(f[0], f[1]) {
				return
			}
		}
		base, width = next, regexWindow
	}
}

// matchAll returns the non-empty matches of window, as offsets past base.
func (r regexMatcher) matchAll(window string, base int) [][2]int {
	var found [][2]int
	m, err := r.re.FindStringMatch(window)
	for err == nil && m != nil {
		if start, length := m.Group.ByteRange(); length > 0 {
			found = append(found, [2]int{base + start, base + start + length})
		}
		m, err = r.re.FindNextMatch(m)
	}
	return found
}

// byteLevelPre is Hugging Face's ByteLevel pre-tokenizer: a space before
// the text when add_prefix_space, then (use_regex) GPT-2's split. The
// byte-to-character mapping it also does is the model's business here:
// byte-level models work on raw bytes.
type byteLevelPre struct {
	addPrefixSpace bool
	re             *splitPre // nil without use_regex
}

func (p *byteLevelPre) split(s string, first bool, emit func(string, bool)) {
	if s == "" {
		return // Hugging Face's prepend leaves an empty text empty
	}
	if p.addPrefixSpace && !strings.HasPrefix(s, " ") {
		s = " " + s
	}
	if p.re == nil {
		emit(s, first)
		return
	}
	p.re.split(s, first, emit)
}

// metaspacePre is Hugging Face's Metaspace pre-tokenizer: spaces become
// the replacement character (▁), one is prepended as the scheme says, and
// with split the text is cut before each.
type metaspacePre struct {
	replacement string
	prepend     string // "always", "first" or "never"
	splitOn     bool
}

func (p *metaspacePre) split(s string, first bool, emit func(string, bool)) {
	if s == "" {
		return // Hugging Face's prepend leaves an empty text empty
	}
	s = strings.ReplaceAll(s, " ", p.replacement)
	if !strings.HasPrefix(s, p.replacement) && (p.prepend == "always" || p.prepend == "first" && first) {
		s = p.replacement + s
	}
	if !p.splitOn {
		emit(s, first)
		return
	}
	(&splitPre{m: literalMatcher(p.replacement), behavior: mergedWithNext}).split(s, first, emit)
}

// digitsPre is Hugging Face's Digits: runs of digits, or each digit alone.
type digitsPre struct{ individual bool }

func (p *digitsPre) split(s string, first bool, emit func(string, bool)) {
	behavior := contiguous
	if p.individual {
		behavior = isolated
	}
	(&splitPre{m: classMatcher(unicode.IsNumber), behavior: behavior}).split(s, first, emit)
}

// whitespaceSplitPre is WhitespaceSplit: pieces between white space.
type whitespaceSplitPre struct{}

func (whitespaceSplitPre) split(s string, first bool, emit func(string, bool)) {
	(&splitPre{m: classMatcher(unicode.IsSpace), behavior: removed}).split(s, first, emit)
}

// sequencePre runs pre-tokenizers one after another over every piece.
type sequencePre []preTokenizer

func (p sequencePre) split(s string, first bool, emit func(string, bool)) {
	if len(p) == 0 {
		emit(s, first)
		return
	}
	p[0].split(s, first, func(piece string, f bool) { p[1:].split(piece, f, emit) })
}

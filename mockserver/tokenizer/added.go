package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// addedToken is a token of Hugging Face's added vocabulary: matched in the
// text before the model sees it, as a whole.
type addedToken struct {
	id      int32
	content string
	// special tokens are left out of a decode that skips them.
	special bool
	// normalized tokens are matched in normalized text, the others in the
	// text as given.
	normalized bool
	// lstrip and rstrip take the white space before or after the token
	// with it; singleWord matches only between non-word characters.
	lstrip, rstrip, singleWord bool
}

// addedVocab finds added tokens in text, leftmost first and, of those
// starting at one place, the longest, as Hugging Face's Aho-Corasick
// matcher does.
type addedVocab struct {
	tokens []addedToken
	// raw and norm index the tokens matched in raw and normalized text.
	raw, norm trie
}

func newAddedVocab(tokens []addedToken) *addedVocab {
	v := &addedVocab{tokens: tokens}
	for i, t := range tokens {
		if t.content == "" {
			continue
		}
		if t.normalized {
			v.norm.add(t.content, i)
		} else {
			v.raw.add(t.content, i)
		}
	}
	return v
}

// segment is a part of the text: an added token (index into tokens) or
// text between them (token -1).
type segment struct {
	text  string
	token int
}

// split cuts s at the tokens t indexes, appending the parts to segs.
func (v *addedVocab) split(segs []segment, s string, t *trie) []segment {
	if t.empty() || s == "" {
		return append(segs, segment{s, -1})
	}
	done := 0 // end of the last token taken
	for i := 0; i < len(s); {
		if !t.first[s[i]] {
			i++
			continue
		}
		k, end := t.longest(s, i)
		if k < 0 {
			i++
			continue
		}
		tok := &v.tokens[k]
		start := i
		if tok.singleWord && (endsWithWord(s[:start]) || startsWithWord(s[end:])) {
			// The text it matched stays text: the search goes on after
			// it, as Hugging Face's non-overlapping matcher does.
			i = end
			continue
		}
		if tok.lstrip {
			for start > done {
				r, n := utf8.DecodeLastRuneInString(s[:start])
				if !isWhiteSpace(r) {
					break
				}
				start -= n
			}
		}
		if tok.rstrip {
			for end < len(s) {
				r, n := utf8.DecodeRuneInString(s[end:])
				if !isWhiteSpace(r) {
					break
				}
				end += n
			}
		}
		if start > done {
			segs = append(segs, segment{s[done:start], -1})
		}
		segs = append(segs, segment{s[start:end], k})
		done, i = end, end
	}
	if done < len(s) {
		segs = append(segs, segment{s[done:], -1})
	}
	return segs
}

// isWordChar is \w as Rust's regex reads it.
func isWordChar(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r) ||
		unicode.Is(unicode.Mc, r) || unicode.Is(unicode.Pc, r) || unicode.Is(unicode.Nl, r)
}

func endsWithWord(s string) bool {
	r, n := utf8.DecodeLastRuneInString(s)
	return n > 0 && isWordChar(r)
}

func startsWithWord(s string) bool {
	r, n := utf8.DecodeRuneInString(s)
	return n > 0 && isWordChar(r)
}

// trie is a byte trie over token texts.
type trie struct {
	nodes []trieNode
	first [256]bool // bytes a token starts with
}

type trieNode struct {
	next  map[byte]int32
	token int // index of the token ending here, or -1
}

func (t *trie) empty() bool { return len(t.nodes) == 0 }

func (t *trie) add(s string, token int) {
	if len(t.nodes) == 0 {
		t.nodes = append(t.nodes, trieNode{token: -1})
	}
	t.first[s[0]] = true
	n := int32(0)
	for i := 0; i < len(s); i++ {
		c, ok := t.nodes[n].next[s[i]]
		if !ok {
			c = int32(len(t.nodes))
			t.nodes = append(t.nodes, trieNode{token: -1})
			if t.nodes[n].next == nil {
				t.nodes[n].next = map[byte]int32{}
			}
			t.nodes[n].next[s[i]] = c
		}
		n = c
	}
	if t.nodes[n].token < 0 { // the first of equal contents wins
		t.nodes[n].token = token
	}
}

// longest returns the longest token starting at s[i] and its end, or -1.
func (t *trie) longest(s string, i int) (token, end int) {
	token, end = -1, -1
	n := int32(0)
	for j := i; j < len(s); j++ {
		c, ok := t.nodes[n].next[s[j]]
		if !ok {
			break
		}
		n = c
		if k := t.nodes[n].token; k >= 0 {
			token, end = k, j+1
		}
	}
	return token, end
}

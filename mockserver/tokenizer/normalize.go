package tokenizer

import (
	"strings"

	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites a segment of text before it is pre-tokenized, as a
// Hugging Face normalizer does. Text between added tokens is normalized
// segment by segment.
type normalizer func(s string) string

func sequenceNormalizer(steps []normalizer) normalizer {
	return func(s string) string {
		for _, n := range steps {
			s = n(s)
		}
		return s
	}
}

func unicodeNormalizer(f norm.Form) normalizer { return f.String }

func lowercaseNormalizer(s string) string { return strings.ToLower(s) }

func prependNormalizer(prefix string) normalizer {
	return func(s string) string {
		if s == "" {
			return s
		}
		return prefix + s
	}
}

// replaceNormalizer replaces every match of a pattern.
func replaceNormalizer(m matcher, content string) normalizer {
	return func(s string) string {
		var b strings.Builder
		i := 0
		m.each(s, func(start, end int) bool {
			b.WriteString(s[i:start])
			b.WriteString(content)
			i = end
			return true
		})
		if i == 0 && b.Len() == 0 {
			return s
		}
		b.WriteString(s[i:])
		return b.String()
	}
}

func stripNormalizer(left, right bool) normalizer {
	return func(s string) string {
		if left {
			s = strings.TrimLeftFunc(s, isWhiteSpace)
		}
		if right {
			s = strings.TrimRightFunc(s, isWhiteSpace)
		}
		return s
	}
}

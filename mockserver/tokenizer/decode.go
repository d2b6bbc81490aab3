package tokenizer

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// decoder turns a sequence of token texts back into text, as a Hugging
// Face decoder's decode_chain does; the results are joined.
type decoder func(tokens []string) []string

func sequenceDecoder(steps []decoder) decoder {
	return func(tokens []string) []string {
		for _, d := range steps {
			tokens = d(tokens)
		}
		return tokens
	}
}

// byteLevelDecoder joins byte-level tokens. The tokens a byte-level
// codec hands it are already bytes (see hfCodec.tokens): it only makes the
// whole valid UTF-8, as from_utf8_lossy does.
func byteLevelDecoder(tokens []string) []string {
	return []string{validUTF8(strings.Join(tokens, ""))}
}

func replaceDecoder(m matcher, content string) decoder {
	r := replaceNormalizer(m, content)
	return func(tokens []string) []string {
		for i, t := range tokens {
			tokens[i] = r(t)
		}
		return tokens
	}
}

// byteFallbackDecoder turns runs of "<0xAB>" tokens into their bytes: a
// run that is valid UTF-8 becomes its text, any other one U+FFFD per byte.
func byteFallbackDecoder(tokens []string) []string {
	out := tokens[:0:0]
	var run []byte
	flush := func() {
		if len(run) == 0 {
			return
		}
		if utf8.Valid(run) {
			out = append(out, string(run))
		} else {
			for range run {
				out = append(out, "\uFFFD")
			}
		}
		run = run[:0]
	}
	for _, t := range tokens {
		if b, ok := byteToken(t); ok {
			run = append(run, b)
			continue
		}
		flush()
		out = append(out, t)
	}
	flush()
	return out
}

// byteToken parses a byte fallback token, "<0xAB>".
func byteToken(t string) (byte, bool) {
	if len(t) != 6 || !strings.HasPrefix(t, "<0x") || t[5] != '>' {
		return 0, false
	}
	v, err := strconv.ParseUint(t[3:5], 16, 8)
	return byte(v), err == nil
}

func fuseDecoder(tokens []string) []string { return []string{strings.Join(tokens, "")} }

// stripDecoder takes up to start copies of content from the front of each
// token and up to stop from its end.
func stripDecoder(content string, start, stop int) decoder {
	return func(tokens []string) []string {
		for i, t := range tokens {
			for k := 0; k < start && strings.HasPrefix(t, content); k++ {
				t = t[len(content):]
			}
			for k := 0; k < stop && strings.HasSuffix(t, content); k++ {
				t = t[:len(t)-len(content)]
			}
			tokens[i] = t
		}
		return tokens
	}
}

// metaspaceDecoder turns the replacement character back into spaces, but
// for the first token's when a space was prepended in encoding.
func metaspaceDecoder(replacement string, prepended bool) decoder {
	return func(tokens []string) []string {
		for i, t := range tokens {
			if i == 0 && prepended {
				t = strings.ReplaceAll(t, replacement, "")
			} else {
				t = strings.ReplaceAll(t, replacement, " ")
			}
			tokens[i] = t
		}
		return tokens
	}
}

// cleanUpTokenizationSpaces is transformers' clean_up_tokenization: the
// space a word-level tokenizer puts before punctuation and contractions
// goes. The replacements run one after another, as Python's chain does.
func cleanUpTokenizationSpaces(s string) string {
	for _, r := range cleanUps {
		s = strings.ReplaceAll(s, r[0], r[1])
	}
	return s
}

var cleanUps = [...][2]string{
	{" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
	{" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
}

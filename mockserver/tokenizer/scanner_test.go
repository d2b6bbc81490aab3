package tokenizer

import (
	"github.com/sglmock/sglmock/internal/norace"

	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/dlclark/regexp2/v2"
)

// splits returns the pieces a matcher cuts s into.
func splits(m matcher, s string) []string {
	var out []string
	(&splitPre{m: m, behavior: isolated}).split(s, true, func(p string, _ bool) { out = append(out, p) })
	return out
}

// wholeRegex matches with the regex engine over the whole text at once:
// the reference for the scanners and for regexMatcher's windows.
type wholeRegex struct{ re *regexp2.Regexp }

func (w wholeRegex) each(s string, yield func(int, int) bool) {
	for _, f := range (regexMatcher{w.re}).matchAll(s, 0) {
		if !yield(f[0], f[1]) {
			return
		}
	}
}

// pieces of text the random strings are made of: every class the
// patterns tell apart, and the runs and joins where they differ.
var scannerAlphabet = []string{
	"a", "Z", "é", "ß", "日", "本", "ж", "ا", "'", "'s", "'S", "'ll", "'Re", "'d", "'x", "0", "7", "٣", "½", "Ⅻ",
	" ", "  ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u2003", "\u3000", "\u0085", ".", ",", "!", "?", "-", "(", ")",
	"{", "}", "\"", "🙂", "👍🏽", "\u200d", "\x00", "\x7f", "_", "$", "€", "😀a", "a\u0301",
}

func randomText(r *rand.Rand, n int) string {
	var b strings.Builder
	for range n {
		b.WriteString(scannerAlphabet[r.IntN(len(scannerAlphabet))])
	}
	return b.String()
}

// The GPT-4-family scanner splits exactly as the regex engine does.
func TestCL100KScannerMatchesRegex(t *testing.T) {
	norace.Skip(t, "checks the scanner against the regex engine")
	r := rand.New(rand.NewPCG(1, 2))
	for pat, digits := range scanners {
		ref := wholeRegex{regexp2.MustCompile(pat, regexp2.None)}
		fast := cl100kScanner{digits: digits}
		for i := range 3000 {
			s := randomText(r, 1+i%40)
			if got, want := splits(fast, s), splits(ref, s); !slices.Equal(got, want) {
				t.Fatalf("digits %d, %q:\n got %q\nwant %q", digits, s, got, want)
			}
		}
	}
}

func FuzzCL100KScanner(f *testing.F) {
	for _, s := range []string{"Hello world", "  x\n\n y", "don't 12345", "日本語 🙂"} {
		f.Add(s)
	}
	ref := wholeRegex{regexp2.MustCompile(cl100kPattern, regexp2.None)}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8Valid(s) {
			return // text reaches the tokenizer as valid UTF-8 (JSON)
		}
		if got, want := splits(cl100kScanner{digits: 3}, s), splits(ref, s); !slices.Equal(got, want) {
			t.Fatalf("%q:\n got %q\nwant %q", s, got, want)
		}
	})
}

// A text longer than the regex window splits as it would in one pass.
func TestRegexWindows(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	re := regexp2.MustCompile(kimiPattern, regexp2.None)
	var b strings.Builder
	for b.Len() < 5*regexWindow {
		b.WriteString(randomText(r, 50))
		if r.IntN(40) == 0 { // long runs, across window ends
			b.WriteString(strings.Repeat("x", r.IntN(3*regexMargin)))
		}
	}
	s := b.String()
	got, want := splits(regexMatcher{re}, s), splits(wholeRegex{re}, s)
	if !slices.Equal(got, want) {
		for i := range min(len(got), len(want)) {
			if got[i] != want[i] {
				t.Fatalf("piece %d: got %q, want %q", i, got[i], want[i])
			}
		}
		t.Fatalf("got %d pieces, want %d", len(got), len(want))
	}
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

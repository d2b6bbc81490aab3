package tokenizer

import (
	"slices"
	"testing"
)

// Added tokens are cut out as Hugging Face's AddedVocabulary does:
// leftmost and longest, lstrip and rstrip taking the white space beside
// them (never what an earlier token took), single_word tokens only
// between non-word characters, the search going on after a match it
// discards.
func TestAddedTokenSplit(t *testing.T) {
	v := newAddedVocab([]addedToken{
		{id: 0, content: "<l>", lstrip: true},
		{id: 1, content: "<r>", rstrip: true},
		{id: 2, content: "xa", singleWord: true},
		{id: 3, content: "a"},
		{id: 4, content: "<lr>", lstrip: true, rstrip: true},
		{id: 5, content: "<", singleWord: true},
	})
	tests := []struct {
		text string
		want []segment
	}{
		{"b  <l>c", []segment{{"b", -1}, {"  <l>", 0}, {"c", -1}}},
		{"b<r> \t c", []segment{{"b", -1}, {"<r> \t ", 1}, {"c", -1}}},
		{"<r> <l>", []segment{{"<r> ", 1}, {"<l>", 0}}},
		{" <lr>\n", []segment{{" <lr>\n", 4}}},
		// "xa" after a letter is no single word; its "a" is not looked
		// at again.
		{"yxa b", []segment{{"yxa b", -1}}},
		{"y xa b", []segment{{"y ", -1}, {"xa", 2}, {" b", -1}}},
		{"ba", []segment{{"b", -1}, {"a", 3}}},
		{"b<l>", []segment{{"b", -1}, {"<l>", 0}}},
		{"(<)", []segment{{"(", -1}, {"<", 5}, {")", -1}}},
		{"\u00a0<l>", []segment{{"\u00a0<l>", 0}}},
	}
	for _, tt := range tests {
		if got := v.split(nil, tt.text, &v.raw); !slices.Equal(got, tt.want) {
			t.Errorf("split(%q): got %+v, want %+v", tt.text, got, tt.want)
		}
	}
}

// Prepending to an empty text leaves it empty (Hugging Face's
// NormalizedString.prepend): an empty prompt has no tokens but its BOS.
func TestPrependToEmpty(t *testing.T) {
	for name, p := range map[string]preTokenizer{
		"Metaspace": &metaspacePre{replacement: "▁", prepend: "always", splitOn: true},
		"ByteLevel": &byteLevelPre{addPrefixSpace: true},
	} {
		var got []string
		p.split("", true, func(piece string, _ bool) { got = append(got, piece) })
		if len(got) != 0 {
			t.Errorf("%s of an empty text: got %q, want nothing", name, got)
		}
	}
}

package tokenizer

import (
	"slices"
	"strings"
	"testing"
)

// Kimi's encode cuts runs of more than 25,000 characters of white space or
// of anything else, and texts every 400,000 characters, before tiktoken
// splits them.
func TestTiktokenChunks(t *testing.T) {
	var got []int
	record := tiktokenChunks{inner: preFunc(func(s string) { got = append(got, len([]rune(s))) })}
	tests := []struct {
		text string
		want []int
	}{
		{strings.Repeat("a", 25000), []int{25000}},
		{strings.Repeat("a", 25001), []int{25000, 1}},
		{strings.Repeat("a", 20000) + strings.Repeat(" ", 30000) + "b", []int{45000, 5001}},
		{strings.Repeat("日", 60000), []int{25000, 25000, 10000}},
		{strings.Repeat("ab ", 150000), []int{400000, 50000}},
		{"x" + strings.Repeat("\x1c", 25001), []int{25001, 1}}, // Python counts U+001C as space
	}
	for _, tt := range tests {
		got = nil
		record.split(tt.text, true, nil)
		if !slices.Equal(got, tt.want) {
			t.Errorf("%d characters: got pieces of %v characters, want %v", len([]rune(tt.text)), got, tt.want)
		}
	}
}

// preFunc is a pre-tokenizer that hands each text to a function.
type preFunc func(string)

func (f preFunc) split(s string, _ bool, _ func(string, bool)) { f(s) }

package tokenizer

import (
	"fmt"
	"slices"
)

// words are the mock's output vocabulary: common English words of at most
// five letters, so each is one piece and round-trips through Encode.
var words = [...]string{
	"the", "of", "and", "to", "in", "is", "that", "for", "it", "as",
	"was", "with", "be", "by", "on", "not", "he", "this", "are", "or",
	"his", "from", "at", "which", "but", "have", "an", "had", "they", "you",
	"were", "their", "one", "all", "we", "can", "her", "has", "there", "been",
	"if", "more", "when", "will", "would", "who", "so", "no", "she", "other",
	"its", "may", "these", "what", "them", "than", "some", "him", "time", "into",
	"only", "do", "could", "new", "about", "two", "then", "first", "also", "any",
	"like", "our", "over", "such", "even", "just", "most", "made", "after", "where",
	"years", "those", "many", "well", "used", "being", "make", "each", "much", "way",
	"three", "same", "might", "work", "must", "year", "back", "great", "under", "long",
	"world", "still", "good", "since", "life", "both", "water", "place", "while", "state",
	"here", "few", "house", "part", "know", "take", "found", "small", "given", "large",
	"point", "every", "right", "case", "often", "model", "cache", "token", "fast", "batch",
	"value", "data", "order", "early", "light", "level", "field", "local", "power", "road",
	"never", "again", "shape", "keep", "mean", "own", "show", "real", "plan", "test",
	"third", "clear", "close", "quite", "rate", "cost", "step", "less", "near", "sure",
}

// outputVocab is what a tokenizer generates: the ids of capitalized words
// for the first position, of " word" for the others, and of a comma and a
// period.
type outputVocab struct {
	first, later  []int32
	comma, period int32
	punct         bool // whether commas and periods are generated
	// punctRuns allows a comma or period right after another. A
	// vocabulary with tokens such as ".," must not: the pair would
	// re-tokenize as one token.
	punctRuns bool
}

// builtinOutput is the built-in tokenizer's output vocabulary: every
// word is one piece, and no piece joins two punctuation bytes.
var builtinOutput = func() *outputVocab {
	o := &outputVocab{comma: ',', period: '.', punct: true, punctRuns: true}
	var c builtinCodec
	for _, w := range words {
		later, _ := c.encode(nil, " "+w, -1, nil)
		first, _ := c.encode(nil, capitalized(w), -1, nil)
		o.later, o.first = append(o.later, later[0]), append(o.first, first[0])
	}
	return o
}()

// capitalized is w with its first letter in upper case.
func capitalized(w string) string { return string(w[0]-'a'+'A') + w[1:] }

// mix is SplitMix64's finalizer: a fast, well-spread 64-bit hash step.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// PromptHash summarizes a prompt for OutputToken. Identical prompts give
// identical outputs, as greedy decoding of a real model does.
func PromptHash(ids []int32) uint64 {
	h := uint64(len(ids))
	for _, id := range ids {
		h = (h ^ uint64(uint32(id))) * 0x100000001b3
	}
	return mix(h)
}

// OutputToken returns the token a prompt with hash h generates at output
// position i (0-based). Position 0 is a capitalized word with no leading
// space; later positions are a word with one, or now and then a comma or a
// period. The ids re-tokenize to themselves once decoded, so a chat that
// sends the answer back extends its cached prompt.
func (t *Tokenizer) OutputToken(h uint64, i int) int32 {
	o := t.out
	r := draw(h, i)
	if i == 0 {
		return o.first[r%uint64(len(o.first))]
	}
	if p := punct(r); o.punct && p <= 1 && (o.punctRuns || i == 1 || punct(draw(h, i-1)) > 1) {
		if p == 0 {
			return o.period
		}
		return o.comma
	}
	return o.later[r%uint64(len(o.later))]
}

// draw is the random number behind output position i.
func draw(h uint64, i int) uint64 { return mix(h ^ mix(uint64(i))) }

// punct is 0 for a period, 1 for a comma, more for a word: one position
// in eight is punctuation.
func punct(r uint64) uint64 { return (r >> 32) % 16 }

// outputFor picks a loaded tokenizer's output vocabulary from the words
// the built-in one generates: the tokens of "Word" (or " Word") for the
// first position and of " word" for the others, kept only if the text of
// any two in a row re-tokenizes to the same two ids after the chat
// template's generation prompt, where the answer goes. So a multi-turn
// chat that sends the answer back extends its cached prompt, as with a
// real model. Commas and periods are kept if they round-trip too.
func outputFor(t *Tokenizer) (*outputVocab, error) {
	ctx := "Hi:\n"
	if t.chat != nil {
		if s, err := t.chat.render(Chat{Messages: []Message{{Role: "user", Content: "Hi"}}, AddGenerationPrompt: true}); err == nil {
			ctx = s
		}
	}
	ctxIDs := t.Encode(nil, ctx)
	// roundTrips reports whether ids, one token each, read back as
	// themselves after the context.
	roundTrips := func(ids ...int32) bool {
		text := []byte(ctx)
		for _, id := range ids {
			text = t.AppendDecode(text, id)
		}
		got := t.Encode(nil, string(text))
		return len(got) == len(ctxIDs)+len(ids) && slices.Equal(got[:len(ctxIDs)], ctxIDs) && slices.Equal(got[len(ctxIDs):], ids)
	}
	// single returns the one token text is after the context.
	single := func(text string) (int32, bool) {
		ids := t.Encode(nil, ctx+text)
		if len(ids) != len(ctxIDs)+1 || !slices.Equal(ids[:len(ctxIDs)], ctxIDs) {
			return 0, false
		}
		id := ids[len(ids)-1]
		return id, string(t.AppendDecode(nil, id)) == text
	}
	o := &outputVocab{}
	var later []int32
	for _, w := range words {
		first, ok := single(capitalized(w))
		if !ok {
			if first, ok = single(" " + capitalized(w)); !ok {
				continue
			}
		}
		if id, ok := single(" " + w); ok && roundTrips(first, id) {
			o.first = append(o.first, first)
			later = append(later, id)
		}
	}
	if len(o.first) == 0 {
		return nil, fmt.Errorf("none of the output words is one token that re-tokenizes to itself: the mock cannot generate text with this vocabulary")
	}
	// A later word stays if it reads back after every first word and
	// before and after every other later word.
	anchor := o.first[0]
	for _, a := range later {
		ok := true
		for _, b := range later {
			if !roundTrips(anchor, a, b) {
				ok = false
				break
			}
		}
		if ok {
			o.later = append(o.later, a)
		}
	}
	if len(o.later) == 0 {
		o.later = later[:1]
	}
	comma, okc := single(",")
	period, okp := single(".")
	if okc && okp {
		ok := true
		for _, w := range o.later {
			for _, p := range []int32{comma, period} {
				ok = ok && roundTrips(anchor, w, p) && roundTrips(anchor, p, w)
			}
		}
		if ok {
			o.comma, o.period, o.punct = comma, period, true
			o.punctRuns = roundTrips(anchor, comma, period) && roundTrips(anchor, period, comma) &&
				roundTrips(anchor, comma, comma) && roundTrips(anchor, period, period)
		}
	}
	return o, nil
}

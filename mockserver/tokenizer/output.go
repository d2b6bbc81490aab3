package tokenizer

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
	// punctRuns allows a comma or period right after another. A
	// vocabulary with tokens such as ".," must not: the pair would
	// re-tokenize as one token.
	punctRuns bool
}

// builtinOutput is the built-in tokenizer's output vocabulary: every
// word is one piece, and no piece joins two punctuation bytes.
var builtinOutput = func() *outputVocab {
	o := &outputVocab{comma: ',', period: '.', punctRuns: true}
	var c builtinCodec
	for _, w := range words {
		o.later = append(o.later, c.encode(nil, " "+w)[0])
		o.first = append(o.first, c.encode(nil, string(w[0]-'a'+'A')+w[1:])[0])
	}
	return o
}()

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
	switch punct(r) {
	case 0:
		if o.punctRuns || i == 1 || punct(draw(h, i-1)) > 1 {
			return o.period
		}
	case 1:
		if o.punctRuns || i == 1 || punct(draw(h, i-1)) > 1 {
			return o.comma
		}
	}
	return o.later[r%uint64(len(o.later))]
}

// draw is the random number behind output position i.
func draw(h uint64, i int) uint64 { return mix(h ^ mix(uint64(i))) }

// punct is 0 for a period, 1 for a comma, more for a word: one position
// in eight is punctuation.
func punct(r uint64) uint64 { return (r >> 32) % 16 }

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

// wordIDs[i] and capitalIDs[i] are the ids of " word" and "Word".
var wordIDs, capitalIDs = func() (sp, cp [len(words)]int32) {
	for i, w := range words {
		sp[i] = Encode(nil, " "+w)[0]
		cp[i] = Encode(nil, string(w[0]-'a'+'A')+w[1:])[0]
	}
	return sp, cp
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
// period.
func OutputToken(h uint64, i int) int32 {
	r := mix(h ^ mix(uint64(i)))
	w := r % uint64(len(words))
	if i == 0 {
		return capitalIDs[w]
	}
	switch (r >> 32) % 16 {
	case 0:
		return '.'
	case 1:
		return ','
	}
	return wordIDs[w]
}

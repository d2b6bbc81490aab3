package harness

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
)

// fillerWords are common short English words: one token each in most
// tokenizers (and in sglmock's), so a filler of n words is close to n
// tokens and its size can be adjusted a token at a time.
var fillerWords = strings.Fields(`time year people way day man thing woman life child world school state
family student group country problem hand part place case week company system program question work
government number night point home water room mother area money story fact month lot right study book
eye job word business issue side kind head house service friend father power hour game line end member
law car city name team minute idea kid body back parent face others level office door health person
art war history party result change morning reason research girl guy moment air teacher force order`)

// NoncePosition says where a leg's nonce goes.
type NoncePosition string

// Nonce positions: at the start the nonce makes the whole prompt new to the
// cache; at the end everything before it is still shared, which is why the
// checks flag it.
const (
	NonceStart NoncePosition = "start"
	NonceEnd   NoncePosition = "end"
)

// lcg is a 64-bit linear congruential generator: the filler only needs to be
// deterministic, not random.
type lcg uint64

func (x *lcg) next() uint64 {
	*x = *x*6364136223846793005 + 1442695040888963407
	return uint64(*x) >> 17
}

// fillerText returns n deterministic filler words in sentences of twelve.
// seed picks the sequence and its first word (the seed modulo the word
// list), so prompts of different seeds share at most their first word (when
// the seeds are equal modulo the list's length) and rarely more.
func fillerText(seed uint64, n int) string {
	var sb strings.Builder
	x := lcg(seed*2654435761 + 1)
	for i := range n {
		w := fillerWords[x.next()%uint64(len(fillerWords))]
		if i == 0 {
			w = fillerWords[seed%uint64(len(fillerWords))]
		}
		if i%12 == 0 {
			if i > 0 {
				sb.WriteString(". ")
			}
			sb.WriteString(strings.ToUpper(w[:1]) + w[1:])
		} else {
			sb.WriteByte(' ')
			sb.WriteString(w)
		}
	}
	if n > 0 {
		sb.WriteByte('.')
	}
	return sb.String()
}

// Token ids a prompt sent as input ids uses: clear of byte and special
// tokens in sglmock (below 1024) and inside the vocabulary of any model
// with at least 32k tokens.
const (
	idBase  = 1024
	idRange = 30000
)

func fillerIDs(seed uint64, n int) []int {
	ids := make([]int, n)
	x := lcg(seed*2654435761 + 1)
	for i := range ids {
		ids[i] = idBase + int(x.next()%idRange)
	}
	return ids
}

// nonceText renders a unique id (a UUID) as four capitalised six-letter
// words. Its first token is as unlikely to repeat as the id itself: a hex
// UUID starts with one of sixteen characters, so two of them often share a
// first token, which a cache check would count as reuse.
func nonceText(id string) string {
	h := sha256.Sum256([]byte(id))
	words := make([]string, 4)
	for i := range words {
		v := binary.BigEndian.Uint64(h[i*8:])
		w := make([]byte, 6)
		for j := range w {
			w[j] = 'a' + byte(v%26)
			v /= 26
		}
		w[0] -= 'a' - 'A'
		words[i] = string(w)
	}
	return strings.Join(words, " ") + ":"
}

// nonceIDs renders a unique id as eight token ids.
func nonceIDs(id string) []int {
	h := sha256.Sum256([]byte(id))
	ids := make([]int, 8)
	for i := range ids {
		ids[i] = idBase + int(binary.BigEndian.Uint32(h[i*4:])%idRange)
	}
	return ids
}

// promptBuilder builds prompts of a given size in server tokens: with
// /tokenize when the server has it, else from the prompt_tokens a probe
// request reports.
type promptBuilder struct {
	c *Client
	// tokensPerWord is learnt from every count the server gives.
	tokensPerWord float64
	noTokenize    bool
	probed        bool
	// overhead is the tokens a prompt has beyond its words (BOS, a
	// template) when sizing from reported counts.
	overhead int
	// sized remembers the size that hit each target (by the nonce's
	// presence and position), so the next leg of that size usually needs
	// one /tokenize call.
	sized map[wordsKey]size
}

type wordsKey struct {
	target int
	nonce  bool
	pos    NoncePosition
}

// size is a filler's length: words, then pad one-token pieces after them
// (a word can be two tokens, so words alone may step over the target).
type size struct{ words, pad int }

// padPiece is one token in the tokenizers of every model served: a space
// and a one-letter word.
const padPiece = " a"

// maxSizingCalls bounds the /tokenize calls that size one prompt: a
// bisection over ten million words takes 24.
const maxSizingCalls = 32

func newPromptBuilder(c *Client) *promptBuilder {
	return &promptBuilder{c: c, tokensPerWord: 1.3, sized: map[wordsKey]size{}}
}

// compose joins the filler and the nonce.
func compose(filler, nonce string, pos NoncePosition) string {
	switch {
	case nonce == "":
		return filler
	case pos == NonceEnd:
		return filler + " " + nonce
	default:
		return nonce + " " + filler
	}
}

// text is the prompt of a size: the filler seeded by seed, its pad, and
// the nonce.
func (sz size) text(seed uint64, nonce string, pos NoncePosition) string {
	return compose(fillerText(seed, sz.words)+strings.Repeat(padPiece, sz.pad), nonce, pos)
}

// build returns a prompt of target server tokens (as near as the tokenizer
// allows) from the filler seeded by seed, with the nonce of id (none when
// id is ""), and the tokens the server counts for it (0 when it cannot be
// known before sending).
//
// With /tokenize the size is found in two steps, each bounded whatever the
// server answers: the most words whose count is at most the target (a
// secant step where the count moves, bisection of the bracket otherwise,
// never more words than target tokens, since every word is at least one),
// then one-token pads up to the target.
func (b *promptBuilder) build(ctx context.Context, target int, seed uint64, id string, pos NoncePosition) (Prompt, int, error) {
	if b.c.InputIDs {
		var nonce []int
		if id != "" {
			nonce = nonceIDs(id)
		}
		filler := fillerIDs(seed, max(0, target-len(nonce)))
		if pos == NonceEnd {
			return Prompt{IDs: append(filler, nonce...)}, len(filler) + len(nonce), nil
		}
		return Prompt{IDs: append(nonce, filler...)}, len(filler) + len(nonce), nil
	}
	nonce := ""
	if id != "" {
		nonce = nonceText(id)
	}
	if b.noTokenize {
		if err := b.learnFromProbe(ctx); err != nil {
			return Prompt{}, 0, err
		}
		n := min(target, max(1, int(math.Round(float64(target-b.overhead)/b.tokensPerWord))))
		return Prompt{Text: compose(fillerText(seed, n), nonce, pos)}, 0, nil
	}
	key := wordsKey{target, id != "", pos}
	calls := 0
	best, bestCount := size{}, -1
	// count tokenizes a size and keeps the nearest to the target.
	count := func(sz size) (int, error) {
		calls++
		c, err := b.c.Tokenize(ctx, sz.text(seed, nonce, pos))
		if err != nil {
			return 0, err
		}
		if bestCount < 0 || abs(c-target) < abs(bestCount-target) {
			best, bestCount = sz, c
		}
		return c, nil
	}
	err := b.size(key, count, &calls)
	if errors.Is(err, errNoTokenize) {
		b.noTokenize = true
		return b.build(ctx, target, seed, id, pos)
	}
	if err != nil {
		return Prompt{}, 0, err
	}
	b.sized[key] = best
	return Prompt{Text: best.text(seed, nonce, pos)}, bestCount, nil
}

// size searches for the size whose count is the target, calling count at
// most maxSizingCalls times in all.
func (b *promptBuilder) size(key wordsKey, count func(size) (int, error), calls *int) error {
	target := key.target
	n := min(target, max(1, int(math.Round(float64(target)/b.tokensPerWord))))
	if sz, ok := b.sized[key]; ok {
		c, err := count(sz)
		if err != nil || c == target {
			return err
		}
		n = sz.words
	}
	// Words: lo is the most words known to count at most the target (0
	// words count the BOS or template alone), hi the fewest known to count
	// more.
	lo, loCount, hi := 0, 0, target+1
	for *calls < maxSizingCalls && hi-lo > 1 {
		c, err := count(size{words: n})
		if err != nil {
			return err
		}
		if c == target {
			return nil
		}
		if c < target {
			lo, loCount = n, c
		} else {
			hi = n
		}
		if c > 0 {
			b.tokensPerWord = min(8, max(0.125, float64(c)/float64(n)))
		}
		next := n + int(math.Round(float64(target-c)/b.tokensPerWord))
		if next <= lo || next >= hi {
			next = lo + (hi-lo)/2 // the secant left the bracket: bisect
		}
		n = next
	}
	if lo == 0 {
		return nil // even one word counts more than the target
	}
	// Pads: each is one token, so the gap is the pads to add; a tokenizer
	// that merges them is corrected from its own count.
	pad := target - loCount
	for *calls < maxSizingCalls && pad > 0 && pad <= target {
		c, err := count(size{words: lo, pad: pad})
		if err != nil || c == target {
			return err
		}
		pad += target - c
	}
	return nil
}

// probeWords is the size of the probe that learns the tokens per word from
// a server without /tokenize.
const probeWords = 200

// learnFromProbe sends two short prompts once (max_new_tokens 1) and reads
// their reported prompt tokens: the slope is the tokens per word, the rest
// the fixed overhead (BOS, template).
func (b *promptBuilder) learnFromProbe(ctx context.Context) error {
	if b.probed {
		return nil
	}
	b.probed = true
	var counts [2]int
	for i, n := range []int{probeWords, 2 * probeWords} {
		g, err := b.c.Generate(ctx, Prompt{Text: fillerText(uint64(7919+i), n)}, 1, "", false)
		if err != nil {
			return fmt.Errorf("sizing probe: %w", err)
		}
		counts[i] = g.PromptTokens
	}
	b.tokensPerWord = float64(counts[1]-counts[0]) / probeWords
	if b.tokensPerWord <= 0 {
		return fmt.Errorf("sizing probe: the server reported %d and %d prompt tokens for %d and %d words", counts[0], counts[1], probeWords, 2*probeWords)
	}
	b.tokensPerWord = min(8, max(0.125, b.tokensPerWord))
	b.overhead = max(0, counts[0]-int(math.Round(b.tokensPerWord*probeWords)))
	return nil
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

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
	// words remembers the word count that hit each target (by the nonce's
	// presence and position), so the next leg of that size usually needs
	// one /tokenize call.
	words map[wordsKey]int
}

type wordsKey struct {
	target int
	nonce  bool
	pos    NoncePosition
}

func newPromptBuilder(c *Client) *promptBuilder {
	return &promptBuilder{c: c, tokensPerWord: 1.3, words: map[wordsKey]int{}}
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

// build returns a prompt of target server tokens (as near as the tokenizer
// allows) from the filler seeded by seed, with the nonce of id (none when
// id is ""), and the tokens the server counts for it (0 when it cannot be
// known before sending).
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
		n := max(1, int(math.Round(float64(target-b.overhead)/b.tokensPerWord)))
		return Prompt{Text: compose(fillerText(seed, n), nonce, pos)}, 0, nil
	}
	key := wordsKey{target, id != "", pos}
	n, ok := b.words[key]
	if !ok {
		n = max(1, int(math.Round(float64(target)/b.tokensPerWord)))
	}
	bestText, bestCount, bestDiff, bestN := "", 0, math.MaxInt, n
	seen := map[int]bool{}
	for range 16 {
		text := compose(fillerText(seed, n), nonce, pos)
		count, err := b.c.Tokenize(ctx, text)
		if errors.Is(err, errNoTokenize) {
			b.noTokenize = true
			return b.build(ctx, target, seed, id, pos)
		}
		if err != nil {
			return Prompt{}, 0, err
		}
		if d := abs(count - target); d < bestDiff {
			bestText, bestCount, bestDiff, bestN = text, count, d, n
		}
		if count == target || seen[n] {
			break
		}
		seen[n] = true
		if count > 0 {
			b.tokensPerWord = float64(count) / float64(n)
		}
		step := int(math.Round(float64(target-count) / b.tokensPerWord))
		if step == 0 {
			step = sign(target - count)
		}
		n = max(1, n+step)
	}
	b.words[key] = bestN
	return Prompt{Text: bestText}, bestCount, nil
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
	b.overhead = max(0, counts[0]-int(math.Round(b.tokensPerWord*probeWords)))
	return nil
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func sign(x int) int {
	switch {
	case x > 0:
		return 1
	case x < 0:
		return -1
	}
	return 0
}

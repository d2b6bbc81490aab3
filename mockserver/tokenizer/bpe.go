package tokenizer

import (
	"hash/maphash"
	"strings"
	"sync/atomic"
	"unicode/utf8"
)

// bpe is a byte-pair-encoding model: a piece of pre-tokenized text starts
// as one symbol per byte (byte-level models: GPT-2, Llama 3, Qwen, Kimi)
// or per character (SentencePiece-style models: Llama 2, Mistral, Gemma,
// whose missing characters fall back to byte tokens), and the adjacent
// pair of lowest rank merges until none can.
type bpe struct {
	// vocab maps a token's text to its id: the raw bytes for a
	// byte-level model, the vocabulary's string otherwise.
	vocab map[string]int32
	// rank tells whether two adjacent symbols merge: the merge's rank
	// (lower first) and the merged token's id.
	rank ranker
	// byteLevel starts a piece from its bytes, byteIDs[b] being each
	// byte's token.
	byteLevel bool
	// byteFallback turns a character missing from the vocabulary into its
	// UTF-8 bytes' tokens ("<0xE6>"), byteIDs[b]; -1 where absent.
	byteFallback bool
	byteIDs      [256]int32
	// unk replaces a character that has no token (-1: none, and the
	// character is dropped, as Hugging Face drops it); fuseUnk makes a
	// run of them one unk.
	unk     int32
	fuseUnk bool
	// wholeFirst looks a piece up whole before merging (Hugging Face's
	// ignore_merges, tiktoken's rule).
	wholeFirst bool
	cache      *wordCache
	// words, if set, cuts a long piece of SentencePiece-style text into
	// words that merge alone (see wordSplitter).
	words *wordSplitter
}

// ranker returns the rank and merged id of the symbols piece[a:b] and
// piece[b:c], or ok false if they do not merge.
type ranker func(piece string, a, b, c int32, left, right int32) (rank, id int32, ok bool)

// mergeTable ranks merges as a Hugging Face tokenizer.json lists them:
// the pair of ids (left<<32 | right) gives the rank and the merged id.
type mergeTable map[uint64]merge

type merge struct{ rank, id int32 }

func (t mergeTable) rank(_ string, _, _, _ int32, left, right int32) (int32, int32, bool) {
	m, ok := t[uint64(uint32(left))<<32|uint64(uint32(right))]
	return m.rank, m.id, ok
}

// rankByText ranks merges as tiktoken does: two symbols merge when their
// joined bytes are a token, and the token's id is its rank.
func rankByText(vocab map[string]int32) ranker {
	return func(piece string, a, _, c int32, _, _ int32) (int32, int32, bool) {
		id, ok := vocab[piece[a:c]]
		return id, id, ok
	}
}

// symbol is a token of a piece being merged: its id, the bytes it covers
// and its neighbours (-1 at the ends).
type symbol struct {
	id         int32
	start, end int32
	prev, next int32
}

// candidate is a pair that may merge: the left symbol's index, the
// merge's rank and the merged id.
type candidate struct{ rank, pos, id int32 }

func (a candidate) less(b candidate) bool {
	return a.rank < b.rank || a.rank == b.rank && a.pos < b.pos
}

// maxCachedPiece is the longest piece the word cache keeps (Hugging Face
// caches pieces shorter than 256 bytes too).
const maxCachedPiece = 255

// tokenize appends the ids of one pre-tokenized piece to dst; a long
// piece stops early, between its words or cuts, when stop says so.
func (m *bpe) tokenize(dst []int32, piece string, stop *interrupt) []int32 {
	if piece == "" {
		return dst
	}
	if m.wholeFirst {
		if id, ok := m.vocab[piece]; ok {
			return append(dst, id)
		}
	}
	if m.words != nil && len(piece) > maxCachedPiece {
		for len(piece) > 0 && !stop.after(0) {
			var word string
			word, piece = m.words.next(piece)
			dst = m.tokenizeWord(dst, word, stop)
			stop.after(len(word))
		}
		return dst
	}
	return m.tokenizeWord(dst, piece, stop)
}

// tokenizeWord appends the ids of a piece the word splitter does not cut
// (a word of a long SentencePiece text may itself be long: a run of
// Chinese, a URL), through the word cache when it is short.
func (m *bpe) tokenizeWord(dst []int32, piece string, stop *interrupt) []int32 {
	if len(piece) <= maxCachedPiece && m.cache != nil {
		if ids, ok := m.cache.get(piece); ok {
			return append(dst, ids...)
		}
		start := len(dst)
		dst = m.merge(dst, piece)
		m.cache.put(piece, dst[start:])
		return dst
	}
	for len(piece) > maxMergePiece {
		cut := maxMergePiece
		for cut > 0 && !utf8.RuneStart(piece[cut]) {
			cut--
		}
		dst = m.merge(dst, piece[:cut])
		piece = piece[cut:]
		if stop.after(cut) {
			return dst
		}
	}
	return m.merge(dst, piece)
}

// maxMergePiece bounds the bytes one merge works on. Merging costs some
// 200 bytes of memory per byte of the piece, so a longer piece (a run of
// one letter, a blob without a space: no text has such a word) is merged
// in cuts of this size at character boundaries, and a request cannot make
// one merge cost gigabytes. Hugging Face merges it whole; the ids can
// differ from its only next to the cuts.
const maxMergePiece = 64 << 10

// merge runs the merges over piece, the pair of lowest rank first and the
// leftmost of equal ranks, as Hugging Face's and tiktoken's BPE do.
func (m *bpe) merge(dst []int32, piece string) []int32 {
	var buf [64]symbol
	syms := m.symbols(buf[:0], piece)
	if len(syms) < 2 {
		for _, s := range syms {
			dst = append(dst, s.id)
		}
		return dst
	}
	var hbuf [64]candidate
	h := candidates(hbuf[:0])
	for i := 0; i+1 < len(syms); i++ {
		if r, id, ok := m.rank(piece, syms[i].start, syms[i].end, syms[i+1].end, syms[i].id, syms[i+1].id); ok {
			h.push(candidate{r, int32(i), id})
		}
	}
	for len(h) > 0 {
		top := h.pop()
		left := &syms[top.pos]
		if left.end == left.start || left.next < 0 {
			continue // merged into its left neighbour, or now the last
		}
		right := &syms[left.next]
		if r, id, ok := m.rank(piece, left.start, left.end, right.end, left.id, right.id); !ok || id != top.id || r != top.rank {
			continue // a neighbour changed since this pair was ranked
		}
		left.id, left.end, left.next = top.id, right.end, right.next
		right.end = right.start // gone
		if left.next >= 0 {
			syms[left.next].prev = top.pos
			nx := &syms[left.next]
			if r, id, ok := m.rank(piece, left.start, left.end, nx.end, left.id, nx.id); ok {
				h.push(candidate{r, top.pos, id})
			}
		}
		if left.prev >= 0 {
			pv := &syms[left.prev]
			if r, id, ok := m.rank(piece, pv.start, pv.end, left.end, pv.id, left.id); ok {
				h.push(candidate{r, left.prev, id})
			}
		}
	}
	for i := int32(0); i >= 0; i = syms[i].next {
		dst = append(dst, syms[i].id)
	}
	return dst
}

// symbols splits piece into its first symbols: bytes, or characters with
// byte fallback and unknowns.
func (m *bpe) symbols(syms []symbol, piece string) []symbol {
	add := func(id int32, start, end int) {
		n := int32(len(syms))
		syms = append(syms, symbol{id: id, start: int32(start), end: int32(end), prev: n - 1, next: n + 1})
	}
	if m.byteLevel {
		for i := 0; i < len(piece); i++ {
			add(m.byteIDs[piece[i]], i, i+1)
		}
	} else {
		unkStart, unkEnd := -1, -1
		flushUnk := func() {
			if unkStart >= 0 {
				add(m.unk, unkStart, unkEnd)
				unkStart = -1
			}
		}
		for i := 0; i < len(piece); {
			_, n := utf8.DecodeRuneInString(piece[i:])
			if id, ok := m.vocab[piece[i:i+n]]; ok {
				flushUnk()
				add(id, i, i+n)
			} else if m.byteFallback && m.hasBytes(piece[i:i+n]) {
				for j := i; j < i+n; j++ {
					add(m.byteIDs[piece[j]], j, j+1)
				}
			} else if m.unk >= 0 {
				if unkStart >= 0 && !m.fuseUnk {
					flushUnk()
				}
				if unkStart < 0 {
					unkStart = i
				}
				unkEnd = i + n
			}
			i += n
		}
		flushUnk()
	}
	if len(syms) > 0 {
		syms[len(syms)-1].next = -1
	}
	// The links were written for consecutive symbols; a dropped
	// character leaves none missing, since nothing was appended for it.
	return syms
}

// wordSplitter cuts SentencePiece-style text (no pre-tokenizer: a
// Llama 2 or Mistral text is one piece) before each "▁" that follows
// another character: no merge can join the two sides, because no token's
// text has a character and then "▁" there (the few that do, listed in
// spans, keep the cut from places they occur). The words then merge
// alone, as they would in the whole, and the word cache serves them.
type wordSplitter struct {
	marker string
	// spans are the tokens with a character before a marker, and the
	// offsets of those markers in them.
	spans []span
}

type span struct {
	text string
	at   []int
}

// maxSpans bounds the tokens that may cross a cut; a vocabulary with more
// is merged whole.
const maxSpans = 256

// newWordSplitter returns the splitter of a vocabulary, or nil if too
// many of its tokens cross the places it would cut.
func newWordSplitter(marker string, vocab map[string]int32) *wordSplitter {
	w := &wordSplitter{marker: marker}
	for tok := range vocab {
		var at []int
		for i := len(marker); i < len(tok); {
			k := strings.Index(tok[i:], marker)
			if k < 0 {
				break
			}
			if !strings.HasSuffix(tok[:i+k], marker) {
				at = append(at, i+k)
			}
			i += k + len(marker)
		}
		if len(at) > 0 {
			if len(w.spans) == maxSpans {
				return nil
			}
			w.spans = append(w.spans, span{tok, at})
		}
	}
	return w
}

// next returns s's first word and the rest.
func (w *wordSplitter) next(s string) (word, rest string) {
	for i := len(w.marker); i < len(s); {
		k := strings.Index(s[i:], w.marker)
		if k < 0 {
			break
		}
		p := i + k
		if !strings.HasSuffix(s[:p], w.marker) && !w.crossed(s, p) {
			return s[:p], s[p:]
		}
		i = p + len(w.marker)
	}
	return s, ""
}

// crossed reports whether a token that crosses the cut at s[p] occurs there.
func (w *wordSplitter) crossed(s string, p int) bool {
	for _, sp := range w.spans {
		for _, a := range sp.at {
			if p-a >= 0 && p-a+len(sp.text) <= len(s) && s[p-a:p-a+len(sp.text)] == sp.text {
				return true
			}
		}
	}
	return false
}

// hasBytes reports whether every byte of s has a fallback token.
func (m *bpe) hasBytes(s string) bool {
	for i := 0; i < len(s); i++ {
		if m.byteIDs[s[i]] < 0 {
			return false
		}
	}
	return true
}

// candidates is a binary min-heap of merge candidates.
type candidates []candidate

func (h *candidates) push(c candidate) {
	*h = append(*h, c)
	a := *h
	for i := len(a) - 1; i > 0; {
		p := (i - 1) / 2
		if !a[i].less(a[p]) {
			break
		}
		a[i], a[p] = a[p], a[i]
		i = p
	}
}

func (h *candidates) pop() candidate {
	a := *h
	top := a[0]
	last := len(a) - 1
	a[0] = a[last]
	a = a[:last]
	for i := 0; ; {
		l, r, min := 2*i+1, 2*i+2, i
		if l < len(a) && a[l].less(a[min]) {
			min = l
		}
		if r < len(a) && a[r].less(a[min]) {
			min = r
		}
		if min == i {
			break
		}
		a[i], a[min] = a[min], a[i]
		i = min
	}
	*h = a
	return top
}

// wordCache remembers the ids of recent pieces: a fixed number of slots,
// each holding the last piece hashed to it, read and written without
// locks. Text is mostly common words, so most pieces skip the merges.
type wordCache struct {
	seed  maphash.Seed
	slots []atomic.Pointer[cachedWord]
}

type cachedWord struct {
	piece string
	ids   []int32
}

// wordCacheSlots is the cache's size: 64k pieces, a few MB.
const wordCacheSlots = 1 << 16

func newWordCache() *wordCache {
	return &wordCache{seed: maphash.MakeSeed(), slots: make([]atomic.Pointer[cachedWord], wordCacheSlots)}
}

func (c *wordCache) slot(piece string) *atomic.Pointer[cachedWord] {
	return &c.slots[maphash.String(c.seed, piece)&(wordCacheSlots-1)]
}

func (c *wordCache) get(piece string) ([]int32, bool) {
	if w := c.slot(piece).Load(); w != nil && w.piece == piece {
		return w.ids, true
	}
	return nil, false
}

func (c *wordCache) put(piece string, ids []int32) {
	// The piece may alias a large request body: keep a copy.
	c.slot(piece).Store(&cachedWord{piece: string([]byte(piece)), ids: append([]int32(nil), ids...)})
}

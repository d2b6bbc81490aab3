// Package radixcache is the token radix tree that SGLang's scheduler uses as
// its prefix (KV) cache, as a pure data structure: no clock, no goroutines,
// no I/O. It is not safe for concurrent use; the engine that owns it
// serializes every call.
//
// # Model
//
// The tree stores token-id sequences ([]int32) in compressed form: each node
// holds a run of tokens, and a path from the root spells a cached prefix. A
// cached token stands for one KV-pool slot, so the tree's token count is the
// KV memory the cache occupies.
//
// Every key lives in a namespace (SGLang's extra_key, cache_salt or LoRA
// adapter). Keys in different namespaces never share a node, even when their
// tokens agree.
//
// With a page size P > 1, matching and insertion work in whole pages: keys are
// floored to a multiple of P, and two keys that differ anywhere inside a page
// diverge at that page's start. A partial page never matches.
//
// # Bigram keys
//
// Under EAGLE-family speculative decoding (EAGLE, NEXTN, EAGLE3,
// FROZEN_KV_MTP) SGLang keys the cache on bigrams, pairs of adjacent tokens:
// a key of n tokens is n-1 units, and every length the tree reports counts
// units. NewBigram builds such a tree. A repeated prompt then reuses one
// token less than under token keys, and two prompts that share only their
// first token (a BOS) share nothing.
//
// # Operations, as SGLang defines them
//
//   - Match walks from the root and returns the matched length and the node
//     where the match ends. A match that ends inside a node splits it there,
//     so the returned node ends exactly at the match. Every node on the path,
//     including a node that is then split, becomes most recently used. Match
//     does not lock.
//   - Insert walks like Match, splits where the key leaves the tree, adds the
//     unmatched remainder as a new leaf and returns how many tokens already
//     existed (the caller frees its duplicate KV slots).
//   - Lock and Unlock (SGLang's inc_lock_ref and dec_lock_ref) count
//     references on every node from a node up to the root. Tokens of nodes
//     with a reference are protected; the rest are evictable.
//   - Evict frees at least the asked number of tokens, or all it can, by
//     deleting whole unlocked leaves, least recently used first, and
//     cascading to parents that become unlocked leaves.
//   - Reset empties the tree, as /flush_cache does.
//   - DFSWeightOrder orders requests by the nodes their matches end in, as
//     SGLang's dfs-weight schedule policy does: a node's children in the
//     order their first pages were added (a split's upper part takes the
//     place of the node it splits, as in SGLang's dict of children).
//
// A Tree[V] carries a value of type V on each node, given by the Insert
// that added the node's tokens and kept by both parts of a split: the
// engine stores the inserting request's id, so a match tells which request
// it reuses.
//
// Recency is a logical counter that every Match and Insert advances, so
// eviction order is a deterministic function of the operations: the mock must
// be exact. Evictable leaves are kept in a heap ordered by recency, so Evict
// never scans the tree.
//
// # What a scheduler may reuse
//
// SGLang never serves a whole prompt from the cache: the last token must be
// computed to get logits. ReusablePrefixLen gives the longest prefix a
// request may match: len-1 tokens, floored to a page multiple (len-2 units
// under bigram keys).
//
// # Events
//
// Observe makes the tree tell an Observer of every page it stores (a new
// node's pages, after the page they hang from), removes (an evicted
// leaf's pages) and clears (Reset, and the empty start), as SGLang's radix
// cache records its KV events. An observed tree keeps each page's digest,
// SGLang's: SHA-256 chained over the previous page's digest and the page's
// token ids as 4-byte little-endian integers (both tokens of each bigram
// in a bigram tree), the first 64 bits of which are the page's block hash
// (Digest.Hash). The digest depends on the tokens only, not on the
// namespace. Pages lists an observed tree's pages, and PageSet replays
// the events as a subscriber does, so the two can be compared.
//
// # The host tier (HiCache)
//
// EnableHost turns the tree into SGLang's HiRadixCache: a node's KV lives on
// the device, on the host, or on both. Tokens, Evictable and Protected
// count the device; the host pool has its own capacity (HostTier), its own
// LRU eviction and its own counts (Stats.HostTokens, HostOnly,
// HostReserved).
//
//   - Insert counts a hit on every node its key passes through that is on
//     the device, and on the leaf it adds (HiRadixCache._inc_hit_count);
//     InsertChunk, for a prompt chunk that is not the last, counts none
//     (chunked=True). A node whose hits reach HostTier.WriteThreshold (1 for
//     write_through, 2 for write_through_selective) is backed up: it takes
//     host slots, evicting host-only leaves for its size when the pool is
//     short, and is locked until the engine reports the write done
//     (HostWriteDone), which announces its host copy. A node is backed up
//     only after its parent, so backed-up nodes form a prefix of each path.
//     A node Insert passes through that is only on the host gets device KV
//     again, silently, as SGLang's insert does.
//   - Evict deletes a device leaf without a host copy, as before; one with
//     a host copy leaves the device but stays in the tree, host-only
//     (SGLang's evicted node); under write_back (threshold 0) a leaf without
//     a copy is written to the host first, or stays on the device when the
//     host pool has no room. Device leaves are nodes with no child on the
//     device. Writes the tree starts are collected for the engine
//     (TakeHostWrites), which charges their transfer.
//   - Match returns the device part of a match; MatchTiers also the
//     host-only continuation (host_hit_length), where it ends, and the
//     deepest backed-up node (last_host_node). LoadBack brings a host-only
//     run back to the device. EvictHost frees host-only leaves that no
//     ProtectHost holds, least recently used first. HostReserve takes host
//     slots outside the tree (a prefetch's buffer) and InsertHost hangs the
//     pages a prefetch fetched from storage after the node it started from,
//     as a host-only leaf in those slots.
//
// A tree with a host tier keeps every page's digest, which SGLang's storage
// backends use as page keys. Its events carry their medium (TierObserver):
// a node is stored on the device when inserted, on the host when its write
// is done or when a prefetch inserts it; it is removed from the device
// when evicted there and from the host when the host evicts it; a load
// back stores it on the device again. A plain Observer hears the device's
// events only. With HostTier.UntieredEvents (SGLang before PR #22894) the
// events tell the tree's membership alone: a node inserted on the device is
// stored there, and a node leaving the tree, from either tier, is removed
// from the device; the host, a device eviction of a backed-up node, a load
// back and a prefetch's insertion are silent.
//
// # Handles
//
// A *Node returned by Match or Insert stays valid across later splits (a split
// keeps the original node as the lower part) until the node leaves the tree
// (evicted from every tier it was on) or the tree is reset. Lock and Unlock report a stale handle as an error instead of
// corrupting counts.
package radixcache

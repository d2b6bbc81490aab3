package compat

import (
	"fmt"
	"slices"
	"strings"
)

// Rules are the behaviours in which the SGLang releases the mock knows
// differ. Each field is true where a release follows the newer behaviour;
// Table describes each one.
type Rules struct {
	// EvictShortfall: an allocation the free KV cannot hold evicts cached
	// prefixes for the shortfall only, not for the whole allocation.
	EvictShortfall bool
	// AbortPendingChunk: an abort during a chunked prefill stops the
	// request at the next scheduler step, freeing the chunk in flight
	// uncached.
	AbortPendingChunk bool
	// GenerateCacheSalt: /generate takes cache_salt, and every route keys
	// the radix cache on the pair (extra_key, cache_salt).
	GenerateCacheSalt bool
	// BatchRemovedPages: an evicted radix node's pages are one
	// BlockRemoved event, not one each.
	BatchRemovedPages bool
	// CoalesceKVEvents: stores that chain and removals in a row are
	// coalesced into one KV event.
	CoalesceKVEvents bool
	// SpecOverlap: the overlap scheduler stays on under every speculative
	// algorithm.
	SpecOverlap bool
	// LoadSnapshot: /v1/loads and /get_load read the schedulers' load
	// snapshots: a server of one DP rank reports rank 0, and /v1/loads
	// carries no aggregate.
	LoadSnapshot bool
	// PrefetchTimeout: HiCache's storage prefetch stops on the timeout
	// policy by default, after 2 s plus 0.1 s per 1024 tokens, at most
	// 30 s.
	PrefetchTimeout bool
	// HostKVEvents: HiCache's KV events follow the tiers: a host copy is
	// stored on CPU_PINNED, a device eviction to the host removes the
	// pages from the GPU, a load back stores them there again, and a host
	// eviction removes them from CPU_PINNED.
	HostKVEvents bool
}

// Rule is one row of the table: a field of Rules, what SGLang did before
// and after, the pull requests that changed it, the SGLang function that
// carries it, and the first known release that has it.
type Rule struct {
	// Name is the rule's name in tables and messages; Title says what it
	// does in one line.
	Name, Title string
	// PRs are the sgl-project/sglang pull requests that made the change.
	PRs []int
	// Function is where SGLang carries the rule.
	Function string
	// Old and New say what SGLang does without and with the rule.
	Old, New string
	// Since is the first known release that has the rule.
	Since string
	// Field names the Rules field, as the Go code spells it.
	Field string
	field func(*Rules) *bool
}

// table lists the rules, one row a field of Rules. Since is the first
// release of Known that contains every pull request of the row.
func table() []Rule {
	return []Rule{
		{
			Name: "evict-shortfall", Title: "eviction frees the KV shortfall, not the whole allocation",
			PRs: []int{32016}, Since: "0.5.17",
			Function: "mem_cache/common.py evict_from_tree_cache",
			Old:      "an allocation the free KV cannot hold evicts cached prefixes for the whole allocation",
			New:      "it evicts for the shortfall only",
			Field:    "EvictShortfall", field: func(r *Rules) *bool { return &r.EvictShortfall },
		},
		{
			Name: "abort-pending-chunk", Title: "an abort during a chunked prefill runs no later chunk and frees the chunk in flight uncached",
			PRs: []int{28086}, Since: "0.5.17",
			Function: "managers/scheduler.py Scheduler.process_pending_chunked_abort",
			Old:      "an abort during a chunked prefill only marks the request: every chunk runs, one token is sampled, and the whole prompt is cached",
			New:      "no later chunk runs, and the chunk in flight is freed without being cached",
			Field:    "AbortPendingChunk", field: func(r *Rules) *bool { return &r.AbortPendingChunk },
		},
		{
			Name: "generate-cache-salt", Title: "/generate takes cache_salt; every route keys the cache on the pair (extra_key, cache_salt)",
			PRs: []int{30827}, Since: "0.5.17",
			Function: "managers/io_struct.py GenerateReqInput.cache_salt; mem_cache RadixKey",
			Old:      "/generate ignores cache_salt; the OpenAI routes put cache_salt before extra_key in one string (OpenAIServingBase._compute_extra_key)",
			New:      "every route takes cache_salt, and the radix key is the pair (extra_key, cache_salt); an empty salt is none",
			Field:    "GenerateCacheSalt", field: func(r *Rules) *bool { return &r.GenerateCacheSalt },
		},
		{
			Name: "batch-removed-pages", Title: "an evicted radix node's pages are one BlockRemoved event",
			PRs: []int{29265}, Since: "0.5.17",
			Function: "mem_cache/events.py KVCacheEventMixin._record_remove_event",
			Old:      "one BlockRemoved event per evicted page",
			New:      "one BlockRemoved event per evicted radix node",
			Field:    "BatchRemovedPages", field: func(r *Rules) *bool { return &r.BatchRemovedPages },
		},
		{
			Name: "coalesce-kv-events", Title: "KV events coalesce: a node's pages, stores that chain and removals in a row are one event",
			PRs: []int{31479}, Since: "0.5.18",
			Function: "mem_cache/events.py KVCacheEventRecorder.enqueue",
			Old:      "one BlockStored event per stored page",
			New:      "a radix node's pages are one BlockStored; a store that hangs from the last page of the store before it extends that event, and removals in a row are one event",
			Field:    "CoalesceKVEvents", field: func(r *Rules) *bool { return &r.CoalesceKVEvents },
		},
		{
			Name: "speculative-overlap", Title: "every speculative algorithm keeps the overlap scheduler, and with it the flush window after a response",
			PRs: []int{17260, 23000, 27964}, Since: "0.5.17",
			Function: "arg_groups/speculative_hook.py _handle_dflash, _handle_ngram, _handle_frozen_kv_mtp, _handle_eagle_family",
			Old:      "DFLASH, NGRAM, FROZEN_KV_MTP, and EAGLE, EAGLE3 or STANDALONE with --speculative-eagle-topk > 1 turn the overlap scheduler off, and with it the flush window after a response",
			New:      "every speculative algorithm keeps the overlap scheduler (off only on CPU, or with --disable-overlap-schedule)",
			Field:    "SpecOverlap", field: func(r *Rules) *bool { return &r.SpecOverlap },
		},
		{
			Name: "load-snapshot", Title: "/v1/loads and /get_load read the schedulers' load snapshots: one DP rank is rank 0, and no aggregate",
			PRs: []int{26348}, Since: "0.5.17",
			Function: "managers/load_snapshot.py LoadSnapshot.from_get_loads_output, LoadSnapshot.to_dict; entrypoints/v1_loads.py get_loads",
			Old: "a server of one DP rank (its scheduler's dp_rank None) leaves dp_rank out of its /v1/loads load, labels its gauges dp_rank=\"None\", " +
				"keeps no load for ?dp_rank=0 and says \"dp_rank\": null in /get_load; /v1/loads carries dp_rank_count and aggregate, and each load ends with num_total_reqs",
			New: "every load has its dp_rank, 0 on a server of one rank, and ?dp_rank=0 keeps it; /v1/loads is timestamp, version and loads, " +
				"each load in LoadSnapshot.to_dict's order (max_running_requests after max_total_num_tokens) without num_total_reqs",
			Field: "LoadSnapshot", field: func(r *Rules) *bool { return &r.LoadSnapshot },
		},
		{
			Name: "prefetch-timeout", Title: "HiCache's storage prefetch stops on the timeout policy by default: 2 s plus 0.1 s per 1024 tokens, at most 30 s",
			PRs: []int{23309}, Since: "0.5.12",
			Function: "mem_cache/hicache_storage.py PrefetchTimeoutConfig; server_args.py hicache_storage_prefetch_policy",
			Old: "--hicache-storage-prefetch-policy defaults to best_effort; the timeout policy waits 1 s plus 0.25 s per 1024 tokens, with no cap, " +
				"and prefetch_timeout_max is left to the backend",
			New:   "the policy defaults to timeout, which waits 2 s plus 0.1 s per 1024 tokens, at most prefetch_timeout_max (30 s)",
			Field: "PrefetchTimeout", field: func(r *Rules) *bool { return &r.PrefetchTimeout },
		},
		{
			// Since is inferred: #22894 was merged on 2026-04-20, after
			// v0.5.10.post1 (2026-04-08), whose tag lacks it; 0.5.11's tag is
			// not in the mirror read, but PyPI's release workflow was fixed to
			// publish v0.5.11 on 2026-05-05 (#24417) and nightly wheels were
			// 0.5.12 development builds by 2026-05-09, both after the merge.
			Name: "host-kv-events", Title: "HiCache's KV events follow the tiers: CPU_PINNED for the host copy, GPU removed at a device eviction and stored at a load back",
			PRs: []int{22894}, Since: "0.5.11",
			Function: "mem_cache/hiradix_cache.py HiRadixCache.writing_check, _evict_backuped, evict_host, load_back, _insert_helper_host",
			Old: "only the device's tree is announced: a node is stored on GPU when inserted and removed from GPU when it leaves the tree, " +
				"from the device or from the host; a host copy, a device eviction of a backed-up node, a load back and a prefetch's host pages send nothing",
			New: "a write-through's host copy, once written, and a prefetch's host pages are stored on CPU_PINNED; a device eviction of a backed-up node " +
				"removes its pages from GPU and a load back stores them there again; a host eviction removes them from CPU_PINNED",
			Field: "HostKVEvents", field: func(r *Rules) *bool { return &r.HostKVEvents },
		},
	}
}

// Table returns the rules, in the order of the Rules fields.
func Table() []Rule { return table() }

// In reports whether rs has the rule.
func (r Rule) In(rs Rules) bool { return *r.field(&rs) }

// PRList is the rule's pull requests as "#17260, #23000".
func (r Rule) PRList() string {
	s := make([]string, len(r.PRs))
	for i, pr := range r.PRs {
		s[i] = fmt.Sprintf("#%d", pr)
	}
	return strings.Join(s, ", ")
}

// Default is the release the mock follows unless told otherwise: the first
// SGLang release with every rule of the table (issue notes: PR #31479,
// merged after 0.5.17 was released on 2026-08-08; 0.5.18 was released on
// 2026-08-25).
const Default = "0.5.18"

// known are the releases a server may be told to be, in order. Before
// 0.5.17 only releases older than upstream commit ec075d8 (2026-05-29) are
// listed, which has only PRs #22894 and #23309 (#23309 merged 2026-05-12:
// 0.5.11 was out by 2026-05-09, when nightly wheels became 0.5.12.dev, and
// 0.5.12 holds DeepSeek V4, merged 2026-05-07, and was out by 2026-05-18):
// which of the rules 0.5.13 to 0.5.16 contain is not established.
var known = [...]string{"0.5.10", "0.5.10.post1", "0.5.11", "0.5.12", "0.5.17", Default, "0.5.19"}

// Known lists the releases the mock can follow, oldest first.
func Known() []string { return known[:] }

// rulesOf is the rules version v has: those whose Since it has reached.
func rulesOf(v Version) Rules {
	var rs Rules
	for _, r := range table() {
		since, err := ParseVersion(r.Since)
		if err != nil {
			panic(err) // the table's own versions parse
		}
		*r.field(&rs) = v.Compare(since) >= 0
	}
	return rs
}

// ErrUnknownRelease is a release the mock cannot follow.
var ErrUnknownRelease = fmt.Errorf("not a release sglmock follows: it follows SGLang %s (default %s); "+
	"a release between two of these may hold some of the rules that changed between them, so it is not guessed",
	strings.Join(known[:], ", "), Default)

// For returns the rules of a known release ("0.5.12", "v0.5.12"); "" is
// Default. Any other version is ErrUnknownRelease.
func For(release string) (Rules, error) {
	v, err := Canonical(release)
	if err != nil {
		return Rules{}, err
	}
	pv, _ := ParseVersion(v)
	return rulesOf(pv), nil
}

// Canonical returns a known release's name as Known spells it ("v0.5.12"
// is "0.5.12"); "" is Default.
func Canonical(release string) (string, error) {
	if release == "" {
		return Default, nil
	}
	v, err := ParseVersion(release)
	if err == nil {
		for _, k := range known {
			if kv, _ := ParseVersion(k); kv.Compare(v) == 0 && !strings.Contains(release, "+") {
				return k, nil
			}
		}
	}
	return "", fmt.Errorf("%q: %w", release, ErrUnknownRelease)
}

// Presence is whether a reported version has a rule.
type Presence int

// A version has a rule (Yes), lacks it (No), or lies between the last
// known release without it and the first with it, or is no version at
// all (Unknown).
const (
	Unknown Presence = iota
	Yes
	No
)

// Has tells whether an SGLang server reporting version has the rule
// selected by on (func(r Rules) bool { return r.GenerateCacheSalt }): Yes
// from the first known release that has it, No up to the last known
// release before that, Unknown in between or for a version that does not
// parse.
func Has(version string, on func(Rules) bool) Presence {
	v, err := ParseVersion(version)
	if err != nil {
		return Unknown
	}
	releases := sortedVersions(known[:])
	first := slices.IndexFunc(releases, func(k Version) bool { return on(rulesOf(k)) })
	switch {
	case first < 0:
		return No
	case v.Compare(releases[first]) >= 0:
		return Yes
	case first > 0 && v.Compare(releases[first-1]) <= 0:
		return No
	}
	return Unknown
}

// FirstWith is the first known release that has the rule selected by on,
// "" if none does.
func FirstWith(on func(Rules) bool) string {
	for _, k := range sortedVersions(known[:]) {
		if on(rulesOf(k)) {
			return k.String()
		}
	}
	return ""
}

// Group is a run of known releases that share their rules.
type Group struct {
	Releases []string
	Rules    Rules
}

// Groups splits Known into runs of releases with the same rules, oldest
// first.
func Groups() []Group {
	var gs []Group
	for _, k := range known {
		rs, _ := For(k)
		if n := len(gs); n > 0 && gs[n-1].Rules == rs {
			gs[n-1].Releases = append(gs[n-1].Releases, k)
			continue
		}
		gs = append(gs, Group{Releases: []string{k}, Rules: rs})
	}
	return gs
}

// Summary says which rules of the table rs has: "every rule", "none of the
// rules", "all but coalesce-kv-events" or "only evict-shortfall".
func (rs Rules) Summary() string {
	var have, lack []string
	for _, r := range table() {
		if r.In(rs) {
			have = append(have, r.Name)
		} else {
			lack = append(lack, r.Name)
		}
	}
	switch {
	case len(lack) == 0:
		return "every rule"
	case len(have) == 0:
		return "none of the rules"
	case len(lack) <= len(have):
		return "all but " + strings.Join(lack, ", ")
	}
	return "only " + strings.Join(have, ", ")
}

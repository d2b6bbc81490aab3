package engine

import (
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/sglmock/sglmock/compat"
	"github.com/sglmock/sglmock/mockserver/profile"
	"github.com/sglmock/sglmock/mockserver/tokenizer"
	"github.com/sglmock/sglmock/radixcache"
)

// req is a request inside the scheduler.
type req struct {
	rid, ns   string
	tokens    []int32
	hash      uint64 // tokenizer.PromptHash(tokens): picks the output words
	maxNew    int
	stopIDs   []int32 // honoured unless ignore_eos, as in SGLang
	ignoreEOS bool
	stop      []string
	maxStop   int // longest stop string
	maxCached int // the most prompt tokens it may take from the cache
	stream    *Stream
	noMetrics bool       // kept out of Counters
	rng       *rand.Rand // speculative acceptance draws, this request's alone

	// generatedRID: the engine made the rid (a fresh uuid4), so no stored
	// truth has it.
	generatedRID bool

	seq      uint64                   // arrival order
	rank     int                      // the DP rank it runs on
	node     *radixcache.Node[string] // the cache node it holds locked
	cached   int
	kvLen    int     // tokens of fill() in KV (cached or computed)
	refill   []int32 // prompt and output of a retracted request, to prefill again
	private  int     // KV tokens it owns outside the tree
	outputs  []int32
	text     []byte // decoded outputs, for stop strings
	spec     SpecStats
	abortMsg string        // set when an abort is requested
	lastSent time.Duration // arrival, or its last output a waiting client was sent
	left     bool          // its client disconnected: an abort is due
	leftWait bool          // ... while waiting for one response (not a stream)
	abortDue time.Duration
	done     bool
	truth    Truth
	// HiCache: the tiers of its match at admission, the tokens it loaded
	// back from the host, and its prefetch from storage.
	match    radixcache.TierMatch[string]
	loaded   int
	prefetch *PrefetchRecord

	// Scheduling policy (policy.go). entry orders its entries into the
	// waiting queue (SGLang's wait_queue_entry_time, set again when it is
	// queued again); priority is its priority under priority scheduling,
	// hasPriority whether the client gave one; routingKey its routing key.
	entry       uint64
	priority    int
	hasPriority bool
	routingKey  string
	// prefixLen is SGLang's len(req.prefix_indices) as preemption reads
	// it: the cached prefix admission last matched, kept when the request
	// had to wait, 0 after a retraction or preemption. (In SGLang lpm's
	// and dfs-weight's matches set it too; priority scheduling, its only
	// reader, runs with fcfs and lof alone.)
	prefixLen int
}

// seqKV is how many tokens of the request's sequence have KV: what its
// prefill has computed so far, then every output but the last (whose KV the
// next round computes).
func (r *req) seqKV() int {
	if len(r.outputs) == 0 || r.refill != nil {
		return r.kvLen
	}
	return len(r.tokens) + len(r.outputs) - 1
}

// chunk is one request's share of a prefill batch.
type chunk struct {
	r        *req
	prefix   int // tokens of its sequence already in KV
	tokens   int // tokens it computes
	cost     time.Duration
	newAdmit bool
	loaded   int // tokens it loaded back from the host for this chunk
}

// gain is one request's share of a decode round.
type gain struct {
	r   *req
	n   int // tokens it gains
	ctx int // its context at the round's start
}

// iteration is one scheduler step: a prefill batch or a decode round.
type iteration struct {
	start, dur time.Duration
	prefill    []chunk
	decode     []gain
	kv         int // KV slots allocated for the step
	pending    int // prompt tokens still to prefill after this batch
	load       int // tokens loaded back from the host for the batch (HiCache)
}

func (it *iteration) end() time.Duration { return it.start + it.dur }

// scheduler is SGLang's scheduler on a modelled clock. It is not safe for
// concurrent use: the engine loop owns it.
type scheduler struct {
	prof        *profile.Profile
	rules       compat.Rules  // the profile's SGLang release's
	flushBusy   time.Duration // the profile's flush window after a finish
	tok         *tokenizer.Tokenizer
	tree        *radixcache.Tree[string] // nil when the radix cache is disabled; a node's value is the rid of the request that inserted it
	log         *slog.Logger
	logInterval int
	now         time.Duration
	rank        int        // the DP rank
	rng         *rand.Rand // cost jitter
	waiting     []*req
	chunked     *req // the request whose prefill is split over iterations
	running     []*req
	active      map[string]*req
	privateKV   int
	inflight    *iteration
	aborts      int // active requests with an abort pending
	flush       *pendingFlush
	flushes     []FlushRecord
	settledAt   time.Duration // a flush finds the server idle from here on
	departed    []*req        // requests whose client left, abort due
	stopping    bool          // the engine is closing: every abort ends its request
	ratio       tokenRatio
	policy      *schedPolicy
	batchFull   bool // no prefill until a request finishes or is retracted
	onFinish    func(t *Truth, generatedRID bool)
	counters    Counters
	// Reused: one iteration is planned or in flight at a time.
	prefillIt, decodeIt iteration
	seqBuf              []int32 // builds prompt+output for the finish insert
	report              reporter
	// Decode lines written, the modelled time of the last, and the least
	// modelled time between two (decodeLineDue).
	decodeLines                   int
	lastDecodeLine, decodeLineGap time.Duration
	events                        *cacheEvents // nil without Config.CacheEvents
	// peers are the ranks of a DP-attention group with the overlap
	// scheduler on, this one included: each is idle for a flush only
	// when all are (see flushIdle). Nil otherwise.
	peers []*scheduler
	// ranBatch says a batch completed since the rank last reported its
	// load to the dispatcher.
	ranBatch bool
	hi       *hiCache // nil without HiCache
}

// jitterStream picks the cost-jitter draws' PCG stream, seeded with the
// profile's seed: one draw per iteration, in order.
const jitterStream = 0x6a09e667f3bcc909

// newScheduler makes DP rank rank's scheduler; each rank draws its cost
// jitter from a stream of its own.
func newScheduler(p *profile.Profile, tok *tokenizer.Tokenizer, disableCache bool, log *slog.Logger, logInterval, rank int) *scheduler {
	s := &scheduler{
		prof:        p,
		rules:       p.Rules(),
		flushBusy:   p.FlushBusyAfterFinish(),
		tok:         tok,
		log:         log,
		logInterval: logInterval,
		rank:        rank,
		rng:         rand.New(rand.NewPCG(p.Seed, jitterStream+uint64(rank))),
		active:      make(map[string]*req),
		ratio:       newTokenRatio(p.ScheduleConservativeness()),
		policy:      newSchedPolicy(p, !disableCache, rank),
	}
	if !disableCache {
		newTree := radixcache.New[string]
		if p.BigramKeys() {
			newTree = radixcache.NewBigram[string]
		}
		tree, err := newTree(p.PageSize)
		if err != nil {
			panic(err) // the profile was validated
		}
		s.tree = tree
	}
	return s
}

// advance moves the modelled clock of an idle scheduler to time at, when
// a call or a wake-up comes later than it; it never goes back.
func (s *scheduler) advance(at time.Duration) { s.now = max(s.now, at) }

func (s *scheduler) capacity() int { return s.prof.MaxTotalTokens }

func (s *scheduler) treeStats() radixcache.Stats {
	if s.tree == nil {
		return radixcache.Stats{}
	}
	return s.tree.Stats()
}

// allocated is the KV slots taken: the cache's tokens, the requests'
// private tokens and what the iteration in flight has allocated.
func (s *scheduler) allocated() int {
	u := s.treeStats().Tokens + s.privateKV
	if s.inflight != nil {
		u += s.inflight.kv
	}
	return u
}

// free is the KV slots nothing holds.
func (s *scheduler) free() int { return s.capacity() - s.allocated() }

// used is the KV in use as SGLang reports it (num_used_tokens, token
// usage): the pool less its free slots and the evictable cache, which no
// request holds.
func (s *scheduler) used() int { return s.allocated() - s.treeStats().Evictable }

func (s *scheduler) idle() bool {
	return len(s.waiting) == 0 && s.chunked == nil && len(s.running) == 0 && s.inflight == nil
}

// ensureFree evicts cached prefixes until n KV slots are free, if it can,
// as SGLang's evict_from_tree_cache does for a standard allocator, for
// prefill and decode alike: for the shortfall (the evict-shortfall rule,
// PR #32016), or in releases before it for the whole allocation.
func (s *scheduler) ensureFree(n int) {
	short := n - s.free()
	if short <= 0 || s.tree == nil {
		return
	}
	if !s.rules.EvictShortfall {
		short = n
	}
	s.evict(short)
}

// evict is the tree cache's evict for n tokens: it counts an eviction
// that freed tokens as update_eviction_metrics does, and schedules the
// write-backs it started under HiCache.
func (s *scheduler) evict(n int) {
	if freed := s.tree.Evict(n); freed > 0 {
		s.counters.Evictions++
		s.counters.EvictedTokens += int64(freed)
	}
	if s.hi != nil {
		s.takeHostWrites() // write-backs of what it evicted
	}
}

func (s *scheduler) setPrivate(r *req, private int) {
	s.privateKV += private - r.private
	r.private = private
}

// enqueue takes a new request, as SGLang's scheduler does
// (_add_request_to_queue): under priority scheduling one without a
// priority gets the least preferred; without it, one with a priority is
// aborted with 503 if the profile says so.
func (s *scheduler) enqueue(r *req) {
	if _, dup := s.active[r.rid]; dup {
		panic("engine: duplicate rid " + r.rid) // Submit checks rids first
	}
	switch {
	case s.policy.priority && !r.hasPriority:
		r.priority = defaultPriority(s.prof.ScheduleLowPriorityValuesFirst)
	case !s.policy.priority && r.hasPriority && s.prof.AbortOnPriorityWhenDisabled:
		s.finish(r, Finish{Reason: FinishAbort, Message: PriorityDisabledMessage, StatusCode: 503}, nil, max(s.now, r.truth.Arrival))
		return
	}
	s.active[r.rid] = r
	s.queue(r)
}

// PriorityDisabledMessage is SGLang's abort message for a request that
// gives a priority to a server without priority scheduling, under
// --abort-on-priority-when-disabled (_set_or_validate_priority).
const PriorityDisabledMessage = "Using priority is disabled for this server. Please send a new request without a priority."

// queue appends r to the waiting queue, stamping its entry.
func (s *scheduler) queue(r *req) {
	r.entry = s.policy.nextEntry
	s.policy.nextEntry++
	s.waiting = append(s.waiting, r)
	// A request queued again (retracted or preempted) is looked up in
	// storage again now, as _add_request_to_queue does; a new one at its
	// arrival.
	at := r.truth.Arrival
	if r.truth.Scheduled() {
		at = s.now
	}
	s.startPrefetch(r, at)
}

// prepare does what SGLang's scheduler does before it picks a batch:
// the aborts due, and a parked flush. The group then plans the batch
// (group.plan): a prefill batch if any prompt can be admitted, else a
// decode round over the running batch.
func (s *scheduler) prepare() {
	s.pollHiCache()
	s.abortDeparted(s.now)
	s.reapAborted()
	s.serviceFlush()
}

// nextArrival is the earliest arrival still ahead of the modelled clock
// among the waiting requests.
func (s *scheduler) nextArrival() (time.Duration, bool) {
	var next time.Duration
	found := false
	for _, r := range s.waiting {
		if a := r.truth.Arrival; a > s.now && (!found || a < next) {
			next, found = a, true
		}
	}
	return next, found
}

// planPrefill forms a prefill batch as SGLang's get_new_batch_prefill and
// PrefillAdder do: the schedule policy orders the queue, then the chunked
// request's next chunk goes first, then waiting requests in that order
// while the memory budget (see prefillBudget), the token budgets and the
// running-request bound allow. The first request that does not fit stops
// the batch; when memory or request slots ran out, no prefill is tried
// again until a request finishes or is retracted (SGLang's batch_is_full),
// unless priority preemption may make room: then at every iteration, and
// a full batch takes a request only by preempting running ones for it.
func (s *scheduler) planPrefill() *iteration {
	preempt := s.policy.preempt
	if preempt {
		s.batchFull = false // SGLang tries preemption at every prefill
	}
	if s.chunked == nil && (s.batchFull || len(s.waiting) == 0) {
		return nil
	}
	slots := s.prof.RankMaxRunningRequests() - len(s.running)
	if s.chunked != nil {
		slots--
	}
	if s.chunked == nil && slots <= 0 && !preempt {
		s.batchFull = true
		return nil
	}
	s.policy.calcPriority(s)
	budget, chunking := s.prof.ChunkBudget()
	remInput := s.prof.MaxPrefillTokens
	page := s.prof.PageSize
	it := &s.prefillIt
	*it = iteration{start: s.now, prefill: it.prefill[:0]}
	b := s.newPrefillBudget()
	if r := s.chunked; r != nil {
		// The chunked request must progress: its chunk is bounded by what
		// memory remains only when something remains.
		limit := budget
		if rem := int(b.remainingTotal(s)); rem > 0 {
			limit = min(limit, rem)
		}
		limit = max(limit-limit%page, page)
		m := min(r.remainingFill(), limit)
		expected := 0
		if m == r.remainingFill() {
			expected = r.expectedNew()
		}
		b.reserve(m, expected)
		it.prefill = append(it.prefill, chunk{r: r, prefix: r.kvLen, tokens: m})
		it.kv += m
		budget -= b.ceilPage(m)
		remInput -= b.ceilPage(m)
		if m < r.remainingFill() {
			budget = 0 // still chunking: nothing else joins
		}
	}
	// full is SGLang's batch_is_full once the batch holds as many
	// requests as may run: from then on each request needs a preemption.
	full := false
	var preempted []*req
	defer func() {
		for _, r := range preempted {
			s.queue(r)
		}
	}()
	for i := 0; i < len(s.waiting) && budget > 0 && remInput > 0; {
		r := s.waiting[i]
		if r.truth.Arrival > s.now {
			break // it has not arrived yet on the modelled clock
		}
		if !s.prefetchReady(r) {
			i++ // its prefetch from storage goes on: the next may run
			continue
		}
		if slots <= 0 {
			full = true
		}
		if full {
			var freed []*req
			if preempt {
				freed = s.preemptFor(r, &b)
			}
			if freed == nil {
				s.batchFull = true
				break
			}
			preempted = append(preempted, freed...)
		}
		s.admit(r) // its prefix is locked: not evictable for this test
		extend := r.remainingFill()
		expected := r.expectedNew()
		m := extend
		if r.ignoreEOS && s.tree == nil {
			// SGLang's add_one_req_ignore_eos: the same budget, a stricter
			// test, and a chunk of whatever the chunk budget has left.
			if !b.fitsIgnoringEOS(s, it, r, extend) {
				s.batchFull = true
				break
			}
			expected = min(r.maxNew, clipMaxNewTokens)
			if chunking && extend > budget {
				m, expected = budget, 0
			}
		} else {
			if !b.fits(s, extend, expected) {
				s.unadmit(r) // the head of the queue waits for room; FCFS
				// With HiCache, SGLang tries again at once when nothing
				// runs: a write-through ending frees room.
				s.batchFull = s.hi == nil || len(it.prefill) > 0 || len(s.running) > 0
				break
			}
			if s.hi != nil && !chunking && len(it.prefill) > 0 && b.ceilPage(extend-r.match.Host) >= remInput {
				// Without chunking a request that cannot join leaves before
				// its host hit is loaded back (add_one_req tests the extend
				// less the host hit first), so its KV stays on the host.
				s.unadmit(r)
				break
			}
			if r.loaded = s.loadBack(r, r.match); r.loaded > 0 {
				extend = r.remainingFill()
				m = extend
			}
			switch {
			case !chunking && len(it.prefill) > 0 && b.ceilPage(extend) >= remInput:
				m = 0 // without chunking only the first prompt may exceed the budget
			case chunking && b.ceilPage(extend) > budget:
				m = budget - budget%page
				expected = 0
			}
		}
		if m == 0 {
			s.unadmit(r)
			break
		}
		s.noteCached(r)
		if i == 0 {
			// Clear the slot before advancing past it: the backing array
			// outlives the slice's start, and a finished request must not
			// stay reachable through it.
			s.waiting[0] = nil
			s.waiting = s.waiting[1:]
		} else {
			s.waiting = slices.Delete(s.waiting, i, i+1)
		}
		if r.truth.Retractions == 0 {
			r.truth.Admitted = s.now
		}
		b.reserve(m, expected)
		it.prefill = append(it.prefill, chunk{r: r, prefix: r.kvLen, tokens: m, newAdmit: true, loaded: r.loaded})
		it.kv += m
		it.load += r.loaded
		budget -= b.ceilPage(m)
		remInput -= b.ceilPage(m)
		slots--
		if m < extend {
			s.chunked = r
			break
		}
		if !b.hasCapacity(s) {
			s.batchFull = true
			break
		}
	}
	if len(it.prefill) == 0 {
		return nil
	}
	var total float64
	for i := range it.prefill {
		c := &it.prefill[i]
		secs := s.prof.PrefillChunkSeconds(c.prefix, c.tokens)
		c.cost = profile.Duration(secs)
		total += secs
	}
	compute := s.jitter(total)
	if it.load > 0 {
		// The batch's forward waits for each layer's KV as it loads.
		compute = s.hi.cfg.LoadBackSeconds(compute, it.load)
	}
	it.pending = s.pendingTokens(it)
	s.ensureFree(it.kv)
	it.dur = profile.Duration(compute + s.takeBlock())
	return it
}

// pendingTokens is SGLang's #pending-token for a planned prefill batch: the
// tokens the waiting requests still need, and what the chunked request
// still needs after this batch's chunk.
func (s *scheduler) pendingTokens(it *iteration) int {
	n := 0
	for _, r := range s.waiting {
		n += len(r.fill())
	}
	if r := s.chunked; r != nil {
		for _, c := range it.prefill {
			if c.r == r {
				n += r.remainingFill() - c.tokens
			}
		}
	}
	return n
}

// admit matches the request's reusable prefix and locks it. unadmit undoes
// that when the request has to keep waiting.
func (s *scheduler) admit(r *req) {
	if s.tree == nil {
		return
	}
	// All but the last token may match (its logits must be computed), and
	// no more than logprob_start_len; the tree floors the key to pages and,
	// under bigram keys, matches one unit fewer.
	fill := r.fill()
	limit := min(len(fill)-1, r.maxCached)
	var node *radixcache.Node[string]
	var cached int
	if s.hi != nil {
		r.match = s.tree.MatchTiers(r.ns, fill[:max(limit, 0)])
		cached, node = r.match.Device, r.match.DeviceNode
	} else {
		cached, node = s.tree.Match(r.ns, fill[:max(limit, 0)])
	}
	if err := s.tree.Lock(node); err != nil {
		panic(err) // a node Match just returned is live
	}
	r.node, r.kvLen, r.prefixLen = node, cached, cached
	s.noteCached(r)
}

// noteCached records the request's cached tokens, once loaded back, on its
// first admission: a retracted request's hits are never cached tokens again
// (SGLang's retracted_stain). With HiCache it splits them by tier as
// prepare_for_extend does: the storage part is what its prefetch brought
// (at most the host hit), host the rest of the host hit, device what
// remains of the cached tokens (so a host hit too short to load back is
// still counted as host, as SGLang counts it).
func (s *scheduler) noteCached(r *req) {
	if r.truth.Retractions > 0 || r.node == nil {
		return
	}
	r.cached = r.kvLen
	r.truth.CachedTokens = r.kvLen
	r.truth.ReusedFrom = r.node.Value()
	if s.hi != nil {
		hostHit := r.match.Host
		storage := 0
		if r.prefetch != nil {
			storage = min(hostHit, r.prefetch.Tokens)
		}
		r.truth.Tiers = &CacheTiers{Device: max(0, r.kvLen-hostHit), Host: hostHit - storage, Storage: storage,
			Backend: s.hi.stats.StorageClass}
		r.truth.LoadBackTokens = r.loaded
		r.truth.Prefetch = r.prefetch
	}
}

func (s *scheduler) unadmit(r *req) {
	if r.node != nil {
		s.unlock(r)
	}
	r.kvLen = 0
	r.loaded = 0
	if r.truth.Retractions == 0 {
		r.cached = 0
		r.truth.CachedTokens, r.truth.ReusedFrom = 0, ""
		r.truth.Tiers, r.truth.LoadBackTokens = nil, 0
	}
}

func (s *scheduler) unlock(r *req) {
	if err := s.tree.Unlock(r.node); err != nil {
		panic(err) // the request holds this lock
	}
	r.node = nil
}

// planDecode plans a decode round over the running batch, SGLang's
// update_running_batch: if the step does not fit the KV pool, requests are
// retracted first; otherwise the token ratio decays by one step.
func (s *scheduler) planDecode() *iteration {
	if len(s.running) == 0 {
		return nil
	}
	if s.decodeFits(s.running) {
		s.ratio.decayStep()
	} else {
		s.retractDecode()
		s.batchFull = false
		if len(s.running) == 0 {
			return nil // the last request was aborted: out of memory
		}
	}
	it := &s.decodeIt
	*it = iteration{start: s.now, decode: it.decode[:0]}
	ctx := 0
	for _, r := range s.running {
		n := min(s.drawAccept(r), r.maxNew-len(r.outputs))
		c := len(r.tokens) + len(r.outputs)
		it.decode = append(it.decode, gain{r: r, n: n, ctx: c})
		it.kv += n
		ctx += c
	}
	secs := s.jitter(s.prof.DecodeRoundSeconds(len(s.running), ctx))
	s.ensureFree(it.kv)
	it.dur = profile.Duration(secs + s.takeBlock())
	return it
}

// drawAccept draws how many tokens a round gives r: 1 without speculative
// decoding, else 1 plus the drafts accepted in a row. Only r's own RNG is
// used, so other requests never change r's draws.
func (s *scheduler) drawAccept(r *req) int {
	spec := s.prof.Speculative
	if spec == nil {
		return 1
	}
	k := 1
	for _, a := range spec.AcceptProbs {
		if r.rng.Float64() >= a {
			break
		}
		k++
	}
	return k
}

func (s *scheduler) jitter(seconds float64) float64 {
	if s.prof.Jitter == 0 {
		return seconds
	}
	return seconds * max(0, 1+s.prof.Jitter*s.rng.NormFloat64())
}

// complete applies a finished iteration at its end time.
func (s *scheduler) complete(it *iteration) {
	s.now = it.end()
	s.inflight = nil
	s.ranBatch = true
	if it.prefill != nil {
		s.completePrefill(it)
	} else {
		s.completeDecode(it)
	}
	// The iteration's lists are reused by the next one: drop their request
	// pointers now, so that a finished request is not kept reachable.
	clear(it.prefill)
	clear(it.decode)
}

func (s *scheduler) completePrefill(it *iteration) {
	running := len(s.running)
	defer func() {
		s.logPrefill(s.recordPrefill(it, running))
		s.publishCacheEvents()
	}()
	for _, c := range it.prefill {
		r := c.r
		r.truth.Prefill = append(r.truth.Prefill, ChunkRecord{
			Start: it.start, Duration: it.dur, Cost: c.cost, Prefix: c.prefix, Tokens: c.tokens, Batch: len(it.prefill),
			LoadBack: c.loaded,
		})
		if r.abortMsg != "" && r.kvLen+c.tokens < len(r.fill()) && s.rules.AbortPendingChunk {
			// Aborted while a chunk that is not its last ran: SGLang's
			// process_pending_chunked_abort releases it before that chunk
			// is cached (release_kv_cache with is_insert=False, PR #28086),
			// so the chunk is freed and only the chunks before it stay
			// cached; no later chunk runs.
			continue
		}
		r.kvLen += c.tokens
		// With HiCache, where each insertion counts a hit, the last chunk is
		// inserted once: at the finish, when it ends the request
		// (cache_finished_req), else now (cache_unfinished_req).
		deferred := s.hi != nil && r.remainingFill() == 0
		prefilled := r.fill()[:r.kvLen]
		if !deferred {
			s.cacheUnfinished(r)
		}
		if r.remainingFill() > 0 {
			continue // chunked: the next chunk comes in a later iteration
		}
		if s.chunked == r {
			s.chunked = nil
		}
		if r.refill != nil {
			r.refill = nil // prompt and output are back in KV
		} else {
			r.truth.FirstToken, r.truth.Prefilled = s.now, true
		}
		if r.maxNew == 0 {
			fin := Finish{Reason: FinishLength, Length: 0}
			if r.abortMsg != "" {
				fin = Finish{Reason: FinishAbort, Message: r.abortMsg}
			}
			s.finish(r, fin, nil, s.now)
			continue
		}
		s.emit(r, 1)
		if !r.done {
			if deferred {
				s.cacheKey(r, prefilled)
			}
			s.running = append(s.running, r)
		}
	}
}

// cacheUnfinished inserts the prompt computed so far and moves the
// request's lock to the new end (SGLang's cache_unfinished_req), so a long
// prompt becomes shareable chunk by chunk.
func (s *scheduler) cacheUnfinished(r *req) { s.cacheKey(r, r.fill()[:r.kvLen]) }

// cacheKey is cacheUnfinished for the prefilled tokens key.
func (s *scheduler) cacheKey(r *req, key []int32) {
	if s.tree == nil {
		s.setPrivate(r, r.kvLen)
		return
	}
	var node *radixcache.Node[string]
	if r.remainingFill() > 0 {
		// A chunk that is not the last counts no hit (SGLang's
		// stash_chunked_request inserts with chunked=True).
		_, node = s.tree.InsertChunk(r.ns, key, r.rid)
	} else {
		_, node = s.tree.Insert(r.ns, key, r.rid)
	}
	if s.hi != nil {
		s.takeHostWrites()
	}
	if err := s.tree.Lock(node); err != nil {
		panic(err)
	}
	s.unlock(r)
	r.node = node
	s.setPrivate(r, r.kvLen-node.PrefixLen())
}

func (s *scheduler) completeDecode(it *iteration) {
	spec := s.prof.Speculative
	for _, g := range it.decode {
		r := g.r
		if r.done {
			continue
		}
		r.truth.Rounds = append(r.truth.Rounds, RoundRecord{
			Start: it.start, Duration: it.dur, Gained: g.n, Batch: len(it.decode), Context: g.ctx, Count: 1,
		})
		if spec != nil {
			r.spec.VerifyCt++
			r.spec.AcceptedDrafts += g.n - 1
			r.spec.ProposedDrafts += spec.NumDraftTokens - 1
			// SGLang's update_spec_acceptance_histogram: the list grows
			// to the largest count seen.
			if accepted := g.n - 1; accepted >= len(r.spec.Histogram) {
				r.spec.Histogram = append(r.spec.Histogram, make([]int, accepted+1-len(r.spec.Histogram))...)
			}
			r.spec.Histogram[g.n-1]++
		}
		s.emit(r, g.n)
	}
	s.running = slices.DeleteFunc(s.running, func(r *req) bool { return r.done })
	if l, due := s.recordDecode(it); due {
		s.logDecode(l)
		s.publishCacheEvents()
	}
}

// emit generates up to n tokens for r, stops at the first finishing
// condition, and sends them as one event.
func (s *scheduler) emit(r *req, n int) {
	start := len(r.outputs)
	var fin *Finish
	if r.abortMsg != "" {
		// Aborted while its step ran: the step's tokens come with the
		// abort, which SGLang checks before any other finishing condition.
		for range n {
			r.outputs = append(r.outputs, s.tok.OutputToken(r.hash, len(r.outputs)))
		}
		fin = &Finish{Reason: FinishAbort, Message: r.abortMsg}
	}
	for i := 0; i < n && fin == nil; i++ {
		tok := s.tok.OutputToken(r.hash, len(r.outputs))
		r.outputs = append(r.outputs, tok)
		fin = s.checkFinished(r)
	}
	if fin == nil && len(r.outputs)%forceStreamInterval == 0 {
		s.sentIntermediate(r)
	}
	s.setPrivate(r, r.seqKV()-r.lockedLen())
	added := len(r.outputs) - start
	if !r.noMetrics {
		s.counters.GenerationTokens += int64(added)
	}
	if fin != nil {
		s.finish(r, *fin, r.outputs[start:], s.now)
		return
	}
	if r.stream.onlyLast.Load() {
		return // push would drop it
	}
	r.stream.push(Event{
		Tokens:           r.outputs[start:len(r.outputs):len(r.outputs)],
		CompletionTokens: len(r.outputs),
		PromptTokens:     len(r.tokens),
		CachedTokens:     r.cached,
		Tiers:            r.truth.Tiers,
		Retractions:      r.truth.Retractions,
		At:               s.now,
		Arrival:          r.truth.Arrival,
		Admitted:         r.truth.Admitted,
		FirstToken:       r.truth.FirstToken,
		DPRank:           r.rank,
	})
}

func (r *req) lockedLen() int {
	if r.node == nil {
		return 0
	}
	return r.node.PrefixLen()
}

// checkFinished applies SGLang's order: length, then stop token ids, then
// stop strings in the output text.
func (s *scheduler) checkFinished(r *req) *Finish {
	if len(r.outputs) >= r.maxNew {
		return &Finish{Reason: FinishLength, Length: len(r.outputs)}
	}
	last := r.outputs[len(r.outputs)-1]
	if slices.Contains(r.stopIDs, last) {
		matched := last // a copy, so that last stays off the heap
		return &Finish{Reason: FinishStop, MatchedToken: &matched}
	}
	if len(r.stop) > 0 {
		before := len(r.text)
		r.text = s.tok.AppendDecode(r.text, last)
		// A stop string that ends in this token starts in the tail; none
		// ended earlier, so its first occurrence in the text is here.
		from := max(0, before-r.maxStop+1)
		tail := string(r.text[from:])
		for _, st := range r.stop {
			if i := strings.Index(tail, st); i >= 0 {
				return &Finish{Reason: FinishStop, MatchedString: &st, MatchedAt: from + i}
			}
		}
	}
	return nil
}

// finish ends r at time at: its committed KV goes into the cache (SGLang's
// cache_finished_req: prompt and outputs but the last token), its lock and
// private KV are released, and the last event carries the truth.
func (s *scheduler) finish(r *req, fin Finish, last []int32, at time.Duration) {
	if r.done {
		return
	}
	r.done = true
	if r.abortMsg != "" {
		s.aborts--
	}
	if len(r.truth.Prefill) > 0 {
		// The request was in a batch: the server settles only after it,
		// and the batch has room again.
		s.settledAt = max(s.settledAt, at+s.flushBusy)
		s.batchFull = false
	}
	if s.tree != nil && r.admitted() {
		s.seqBuf = append(append(s.seqBuf[:0], r.tokens...), r.outputs...)
		s.tree.Insert(r.ns, s.seqBuf[:r.seqKV()], r.rid)
		s.unlock(r)
		if s.hi != nil {
			s.takeHostWrites()
		}
	}
	s.dropPrefetch(r)
	s.setPrivate(r, 0)
	if s.chunked == r {
		s.chunked = nil
	}
	s.waiting = slices.DeleteFunc(s.waiting, func(x *req) bool { return x == r })
	delete(s.active, r.rid)

	r.truth.CompletionTokens = len(r.outputs)
	r.truth.Finished = at
	if !r.truth.Scheduled() {
		r.truth.Admitted = at // it leaves the queue now, aborted
	}
	r.truth.Finish = fin
	r.truth.Spec = r.spec
	if !r.noMetrics {
		s.counters.Requests++
		s.counters.PromptTokens += int64(len(r.tokens))
		s.counters.CachedTokens += int64(r.cached)
		// By source, as SGLang's cached_tokens_total counts a request with
		// cached tokens: its details, or all on the device without HiCache.
		switch t := r.truth.Tiers; {
		case r.cached == 0:
		case t != nil:
			s.counters.CachedDevice += int64(t.Device)
			s.counters.CachedHost += int64(t.Host)
			s.counters.CachedStorage += int64(t.Storage)
		default:
			s.counters.CachedDevice += int64(r.cached)
		}
		s.counters.SpecVerifyCalls += int64(r.spec.VerifyCt)
		if fin.Reason == FinishAbort {
			s.counters.Aborted++
		}
	}
	// The request is done: nothing changes its truth from here on, so the
	// last event shares it.
	truth := &r.truth
	ev := Event{
		Tokens:           last,
		CompletionTokens: len(r.outputs),
		PromptTokens:     len(r.tokens),
		CachedTokens:     r.cached,
		Tiers:            r.truth.Tiers,
		Retractions:      r.truth.Retractions,
		At:               at,
		Arrival:          r.truth.Arrival,
		Admitted:         r.truth.Admitted,
		FirstToken:       r.truth.FirstToken,
		Finish:           &fin,
		Truth:            truth,
		DPRank:           r.rank,
	}
	if s.prof.Speculative != nil && r.spec.VerifyCt > 0 {
		spec := r.spec
		ev.Spec = &spec
	}
	if s.onFinish != nil {
		s.onFinish(truth, r.generatedRID)
	}
	r.stream.push(ev)
}

func (r *req) admitted() bool { return r.node != nil }

// wake is when an engine with nothing to run must look again: a parked
// flush succeeds when the server settles, or times out at its deadline; an
// abort for a departed client comes due.
func (s *scheduler) wake() (time.Duration, bool) {
	at, due := s.nextAbortDue()
	if t, ok := s.hiCacheWake(); ok && (!due || t < at) {
		at, due = t, true
	}
	if f := s.flush; f != nil {
		flushAt := f.deadline
		if settled := s.flushSettledAt(); s.idle() && s.flushReady() && s.hiCacheDrained() && settled < flushAt {
			flushAt = settled
		}
		if !due || flushAt < at {
			at, due = flushAt, true
		}
	}
	return at, due
}

// requestRNG seeds a request's acceptance draws from the profile seed and a
// key: the client's rid, or the arrival number when the engine named it.
func requestRNG(seed uint64, key string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(key))
	return rand.New(rand.NewPCG(seed, h.Sum64()))
}

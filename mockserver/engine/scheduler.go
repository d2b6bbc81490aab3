package engine

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"sglmock/mockserver/profile"
	"sglmock/mockserver/tokenizer"
	"sglmock/radixcache"
)

// req is a request inside the scheduler.
type req struct {
	rid, ns  string
	tokens   []int32
	hash     uint64 // tokenizer.PromptHash(tokens): picks the output words
	maxNew   int
	stopIDs  []int32 // honoured unless ignore_eos, as in SGLang
	stop     []string
	maxStop  int // longest stop string
	reuseCap int // longest prefix it may take from the cache
	stream   *Stream
	internal bool       // kept out of Counters
	rng      *rand.Rand // speculative acceptance draws, this request's alone

	seq      uint64           // arrival order
	node     *radixcache.Node // the cache node it holds locked
	cached   int
	kvLen    int // prompt tokens in KV (cached or computed)
	private  int // KV tokens it owns outside the tree
	outputs  []int32
	text     []byte // decoded outputs, for stop strings
	spec     SpecStats
	abortMsg string // set when an abort is requested
	done     bool
	truth    Truth
}

func (r *req) remainingPrompt() int { return len(r.tokens) - r.kvLen }

// reservation is the KV the request may still need: the rest of its prompt
// and every token it may still generate. Admission keeps room for all of it,
// so a running request never has to be preempted.
func (r *req) reservation() int { return r.remainingPrompt() + r.maxNew - len(r.outputs) }

// seqKV is how many tokens of the request's sequence have KV: the prompt so
// far, and every output but the last (whose KV the next round computes).
func (r *req) seqKV() int {
	if len(r.outputs) == 0 {
		return r.kvLen
	}
	return len(r.tokens) + len(r.outputs) - 1
}

// chunk is one request's share of a prefill batch.
type chunk struct {
	r        *req
	prefix   int
	m        int
	cost     time.Duration
	newAdmit bool
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
}

func (it *iteration) end() time.Duration { return it.start + it.dur }

// FlushRecord is one /flush_cache call and its outcome.
type FlushRecord struct {
	At       time.Duration // when it was asked, simulated
	Timeout  time.Duration
	Answered time.Duration // when it was answered, simulated
	Outcome  string        // "flushed", or the error text
	Queued   int           // requests queued when asked
	Running  int           // requests running when asked
}

type pendingFlush struct {
	record   FlushRecord
	deadline time.Duration
	reply    chan error
}

// scheduler is SGLang's scheduler on a modelled clock. It is not safe for
// concurrent use: the engine loop owns it.
type scheduler struct {
	prof         *profile.Profile
	tree         *radixcache.Tree // nil when the radix cache is disabled
	log          *slog.Logger
	logInterval  int
	now          time.Duration
	rng          *rand.Rand // cost jitter
	waiting      []*req
	chunked      *req // the request whose prefill is split over iterations
	running      []*req
	active       map[string]*req
	privateKV    int
	inflight     *iteration
	aborts       int // active requests with an abort pending
	flush        *pendingFlush
	flushes      []FlushRecord
	onFinish     func(*Truth)
	clock        func() time.Duration // the engine's simulated now, between boundaries
	counters     Counters
	chunkBuf     []chunk // reused: one iteration is in flight at a time
	gainBuf      []gain
	seqBuf       []int32 // builds prompt+output for the finish insert
	window       window
	lastHitRate  float64
	lastThruput  float64
	decodeRounds int
}

// Counters are cumulative since the engine started; a flush does not reset
// them (they feed Prometheus counters, which only grow).
type Counters struct {
	Requests         int64 // finished, aborts included
	Aborted          int64
	PromptTokens     int64
	CachedTokens     int64
	GenerationTokens int64
}

// window holds what a flush resets: the speculative averages and the
// generation-throughput window.
type window struct {
	specTokens, specRounds     int64
	specAccepted, specProposed int64
	genTokens                  int64
	genSince                   time.Duration
}

const maxFlushRecords = 1000

func newScheduler(p *profile.Profile, disableCache bool, log *slog.Logger, logInterval int) *scheduler {
	s := &scheduler{
		prof:        p,
		log:         log,
		logInterval: logInterval,
		rng:         rand.New(rand.NewPCG(p.Seed, 0x6a09e667f3bcc909)),
		active:      make(map[string]*req),
	}
	if !disableCache {
		tree, err := radixcache.New(p.PageSize)
		if err != nil {
			panic(err) // the profile was validated
		}
		s.tree = tree
	}
	return s
}

func (s *scheduler) capacity() int { return s.prof.MaxTotalTokens }

// current is the simulated time for something that happens between
// iteration boundaries (a call served while an iteration runs): s.now is
// the last boundary.
func (s *scheduler) current() time.Duration {
	if s.clock == nil {
		return s.now
	}
	return max(s.now, s.clock())
}

func (s *scheduler) treeStats() radixcache.Stats {
	if s.tree == nil {
		return radixcache.Stats{}
	}
	return s.tree.Stats()
}

// used is the KV in use: the cache's tokens, the requests' private tokens
// and what the iteration in flight has allocated.
func (s *scheduler) used() int {
	u := s.treeStats().Tokens + s.privateKV
	if s.inflight != nil {
		u += s.inflight.kv
	}
	return u
}

func (s *scheduler) idle() bool {
	return len(s.waiting) == 0 && s.chunked == nil && len(s.running) == 0 && s.inflight == nil
}

// ensureFree evicts cached prefixes until n KV slots are free, if it can.
func (s *scheduler) ensureFree(n int) {
	if short := n - (s.capacity() - s.used()); short > 0 && s.tree != nil {
		s.tree.Evict(short)
	}
}

func (s *scheduler) setPrivate(r *req, private int) {
	s.privateKV += private - r.private
	r.private = private
}

func (s *scheduler) enqueue(r *req) {
	if _, dup := s.active[r.rid]; dup {
		panic("engine: duplicate rid " + r.rid) // Submit checks rids first
	}
	s.active[r.rid] = r
	s.waiting = append(s.waiting, r)
}

// plan picks the next iteration, SGLang's way: handle aborts and a parked
// flush, then a prefill batch if any prompt can be admitted, else a decode
// round over the running batch. It returns nil when there is nothing to do.
func (s *scheduler) plan() *iteration {
	s.reapAborted()
	s.serviceFlush()
	if it := s.planPrefill(); it != nil {
		return it
	}
	return s.planDecode()
}

func (s *scheduler) planPrefill() *iteration {
	budget, chunking := s.prof.ChunkBudget()
	page := s.prof.PageSize
	it := &iteration{start: s.now, prefill: s.chunkBuf[:0]}
	defer func() { s.chunkBuf = it.prefill[:0] }()
	reserved := 0
	for _, r := range s.running {
		reserved += r.reservation()
	}
	// reserved is what requests may still need beyond this iteration; what
	// this iteration computes is in it.kv, so each token is counted once.
	if r := s.chunked; r != nil {
		m := min(r.remainingPrompt(), budget-budget%page)
		reserved += r.reservation() - m
		it.prefill = append(it.prefill, chunk{r: r, prefix: r.kvLen, m: m})
		it.kv += m
		budget -= m
		if m < r.remainingPrompt() {
			budget = 0 // still chunking: nothing else joins
		}
	}
	slots := s.prof.MaxRunningRequests - len(s.running)
	if s.chunked != nil {
		slots--
	}
	for len(s.waiting) > 0 && slots > 0 && budget > 0 {
		r := s.waiting[0]
		s.admit(r)
		extend := r.remainingPrompt()
		free := s.capacity() - s.used() - it.kv + s.treeStats().Evictable
		if r.reservation() > free-reserved {
			s.unadmit(r) // the head of the queue waits for room; FCFS
			break
		}
		m := extend
		if len(it.prefill) > 0 && extend > budget && !chunking {
			s.unadmit(r)
			break
		}
		if chunking && extend > budget {
			m = budget - budget%page
			if m == 0 {
				s.unadmit(r)
				break
			}
		}
		s.waiting = s.waiting[1:]
		r.truth.Admitted = s.now
		reserved += r.reservation() - m
		it.prefill = append(it.prefill, chunk{r: r, prefix: r.kvLen, m: m, newAdmit: true})
		it.kv += m
		budget -= m
		slots--
		if m < extend {
			s.chunked = r
			break
		}
	}
	if len(it.prefill) == 0 {
		return nil
	}
	var total float64
	for i := range it.prefill {
		c := &it.prefill[i]
		secs := s.prof.PrefillChunkSeconds(c.prefix, c.m)
		c.cost = profile.Duration(secs)
		total += secs
	}
	it.dur = profile.Duration(s.jitter(total))
	s.ensureFree(it.kv)
	s.logPrefill(it)
	return it
}

// admit matches the request's reusable prefix and locks it. unadmit undoes
// that when the request has to keep waiting.
func (s *scheduler) admit(r *req) {
	if s.tree == nil {
		return
	}
	limit := min(s.tree.ReusablePrefixLen(len(r.tokens)), r.reuseCap)
	matched, node := s.tree.Match(r.ns, r.tokens[:max(limit, 0)])
	if err := s.tree.Lock(node); err != nil {
		panic(err) // a node Match just returned is live
	}
	r.node, r.cached, r.kvLen = node, matched, matched
	r.truth.CachedTokens = matched
	r.truth.ReusedFrom = node.Owner()
}

func (s *scheduler) unadmit(r *req) {
	if r.node != nil {
		s.unlock(r)
	}
	r.cached, r.kvLen = 0, 0
	r.truth.CachedTokens, r.truth.ReusedFrom = 0, ""
}

func (s *scheduler) unlock(r *req) {
	if err := s.tree.Unlock(r.node); err != nil {
		panic(err) // the request holds this lock
	}
	r.node = nil
}

func (s *scheduler) planDecode() *iteration {
	if len(s.running) == 0 {
		return nil
	}
	it := &iteration{start: s.now, decode: s.gainBuf[:0]}
	defer func() { s.gainBuf = it.decode[:0] }()
	ctx := 0
	for _, r := range s.running {
		n := min(s.drawAccept(r), r.maxNew-len(r.outputs))
		c := len(r.tokens) + len(r.outputs)
		it.decode = append(it.decode, gain{r: r, n: n, ctx: c})
		it.kv += n
		ctx += c
	}
	it.dur = profile.Duration(s.jitter(s.prof.DecodeRoundSeconds(len(s.running), ctx)))
	s.ensureFree(it.kv)
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
	if it.prefill != nil {
		s.completePrefill(it)
	} else {
		s.completeDecode(it)
	}
}

func (s *scheduler) completePrefill(it *iteration) {
	for _, c := range it.prefill {
		r := c.r
		r.kvLen += c.m
		r.truth.Prefill = append(r.truth.Prefill, ChunkRecord{
			Start: it.start, Duration: it.dur, Cost: c.cost, Prefix: c.prefix, Tokens: c.m, Batch: len(it.prefill),
		})
		s.cacheUnfinished(r)
		if r.remainingPrompt() > 0 {
			continue // chunked: the next chunk comes in a later iteration
		}
		if s.chunked == r {
			s.chunked = nil
		}
		r.truth.FirstToken = s.now
		if r.abortMsg != "" {
			continue // reaped at the next boundary
		}
		if r.maxNew == 0 {
			s.finish(r, Finish{Reason: FinishLength, Length: 0}, nil)
			continue
		}
		s.emit(r, 1)
		if !r.done {
			s.running = append(s.running, r)
		}
	}
}

// cacheUnfinished inserts the prompt computed so far and moves the
// request's lock to the new end (SGLang's cache_unfinished_req), so a long
// prompt becomes shareable chunk by chunk.
func (s *scheduler) cacheUnfinished(r *req) {
	if s.tree == nil {
		s.setPrivate(r, r.kvLen)
		return
	}
	_, node := s.tree.InsertOwned(r.ns, r.tokens[:r.kvLen], r.rid)
	if err := s.tree.Lock(node); err != nil {
		panic(err)
	}
	s.unlock(r)
	r.node = node
	s.setPrivate(r, r.kvLen-node.PrefixLen())
}

func (s *scheduler) completeDecode(it *iteration) {
	s.decodeRounds++
	spec := s.prof.Speculative
	for _, g := range it.decode {
		r := g.r
		if r.done || r.abortMsg != "" {
			continue
		}
		r.truth.Rounds = append(r.truth.Rounds, RoundRecord{
			Start: it.start, Duration: it.dur, Gained: g.n, Batch: len(it.decode), Context: g.ctx,
		})
		if spec != nil {
			r.spec.VerifyCt++
			r.spec.AcceptedDrafts += g.n - 1
			r.spec.ProposedDrafts += spec.NumDraftTokens - 1
			r.spec.Histogram[g.n-1]++
			s.window.specTokens += int64(g.n)
			s.window.specRounds++
			s.window.specAccepted += int64(g.n - 1)
			s.window.specProposed += int64(spec.NumDraftTokens - 1)
		}
		s.emit(r, g.n)
	}
	s.running = slices.DeleteFunc(s.running, func(r *req) bool { return r.done })
	if s.logInterval > 0 && s.decodeRounds%s.logInterval == 0 {
		s.logDecode()
	}
}

// emit generates up to n tokens for r, stops at the first finishing
// condition, and sends them as one event.
func (s *scheduler) emit(r *req, n int) {
	start := len(r.outputs)
	var fin *Finish
	for i := 0; i < n && fin == nil; i++ {
		tok := tokenizer.OutputToken(r.hash, len(r.outputs))
		r.outputs = append(r.outputs, tok)
		fin = s.checkFinished(r)
	}
	s.setPrivate(r, r.seqKV()-r.lockedLen())
	added := len(r.outputs) - start
	if !r.internal {
		s.counters.GenerationTokens += int64(added)
	}
	s.window.genTokens += int64(added)
	if fin != nil {
		s.finish(r, *fin, r.outputs[start:])
		return
	}
	r.stream.push(Event{
		Tokens:           r.outputs[start:len(r.outputs):len(r.outputs)],
		CompletionTokens: len(r.outputs),
		PromptTokens:     len(r.tokens),
		CachedTokens:     r.cached,
		At:               s.now,
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
		return &Finish{Reason: FinishStop, MatchedToken: &last}
	}
	if len(r.stop) > 0 {
		before := len(r.text)
		r.text = tokenizer.AppendDecode(r.text, last)
		tail := string(r.text[max(0, before-r.maxStop+1):])
		for _, st := range r.stop {
			if strings.Contains(tail, st) {
				return &Finish{Reason: FinishStop, MatchedString: &st}
			}
		}
	}
	return nil
}

// finish ends r: its committed KV goes into the cache (SGLang's
// cache_finished_req: prompt and outputs but the last token), its lock and
// private KV are released, and the last event carries the truth.
func (s *scheduler) finish(r *req, fin Finish, last []int32) {
	if r.done {
		return
	}
	r.done = true
	if r.abortMsg != "" {
		s.aborts--
	}
	if s.tree != nil && r.admitted() {
		s.seqBuf = append(append(s.seqBuf[:0], r.tokens...), r.outputs...)
		s.tree.InsertOwned(r.ns, s.seqBuf[:r.seqKV()], r.rid)
		s.unlock(r)
	}
	s.setPrivate(r, 0)
	if s.chunked == r {
		s.chunked = nil
	}
	s.waiting = slices.DeleteFunc(s.waiting, func(x *req) bool { return x == r })
	delete(s.active, r.rid)

	r.truth.CompletionTokens = len(r.outputs)
	r.truth.Finished = s.now
	r.truth.Finish = fin
	r.truth.Spec = r.spec
	if !r.internal {
		s.counters.Requests++
		s.counters.PromptTokens += int64(len(r.tokens))
		s.counters.CachedTokens += int64(r.cached)
		if fin.Reason == FinishAbort {
			s.counters.Aborted++
		}
	}
	truth := r.truth
	ev := Event{
		Tokens:           last,
		CompletionTokens: len(r.outputs),
		PromptTokens:     len(r.tokens),
		CachedTokens:     r.cached,
		At:               s.now,
		Finish:           &fin,
		Truth:            &truth,
	}
	if s.prof.Speculative != nil && r.spec.VerifyCt > 0 {
		spec := r.spec
		ev.Spec = &spec
	}
	if s.onFinish != nil {
		s.onFinish(&truth)
	}
	r.stream.push(ev)
}

func (r *req) admitted() bool { return r.node != nil }

// requestAbort aborts r now if it only waits, else at the next boundary.
func (s *scheduler) requestAbort(r *req, msg string) {
	if r.done || s.active[r.rid] != r {
		return
	}
	if r.abortMsg == "" {
		r.abortMsg = msg
		s.aborts++
	}
	if s.inflight == nil || !r.inFlight(s.inflight) {
		// Finished now, between boundaries: stamp it with the current time.
		boundary := s.now
		s.now = s.current()
		s.finish(r, Finish{Reason: FinishAbort, Message: r.abortMsg}, nil)
		s.now = boundary
		s.running = slices.DeleteFunc(s.running, func(x *req) bool { return x.done })
	}
}

func (r *req) inFlight(it *iteration) bool {
	for _, c := range it.prefill {
		if c.r == r {
			return true
		}
	}
	for _, g := range it.decode {
		if g.r == r {
			return true
		}
	}
	return false
}

// reapAborted finishes every request with an abort pending, in arrival
// order so that their cache inserts, and so eviction order, are
// deterministic.
func (s *scheduler) reapAborted() {
	if s.aborts == 0 {
		return
	}
	var aborted []*req
	for _, r := range s.active {
		if r.abortMsg != "" {
			aborted = append(aborted, r)
		}
	}
	slices.SortFunc(aborted, func(a, b *req) int { return cmp.Compare(a.seq, b.seq) })
	for _, r := range aborted {
		s.finish(r, Finish{Reason: FinishAbort, Message: r.abortMsg}, nil)
	}
	s.running = slices.DeleteFunc(s.running, func(r *req) bool { return r.done })
}

func (s *scheduler) abortAll(msg string) {
	for _, r := range s.active {
		if r.abortMsg == "" {
			r.abortMsg = msg
			s.aborts++
		}
	}
	if s.inflight == nil {
		s.reapAborted()
	}
}

// requestFlush answers a /flush_cache: at once when idle or when it may not
// wait; otherwise it parks until idle or its deadline.
func (s *scheduler) requestFlush(timeout time.Duration, reply chan error) {
	now := s.current()
	rec := FlushRecord{At: now, Timeout: timeout, Queued: len(s.waiting), Running: len(s.running)}
	if s.chunked != nil {
		rec.Running++
	}
	switch {
	case s.idle():
		s.doFlush()
		s.answerFlush(rec, nil, reply, now)
	case timeout <= 0:
		s.answerFlush(rec, ErrFlushBusy, reply, now)
		s.log.Warn(fmt.Sprintf("Cache not flushed because there are pending requests. #queue-req: %d, #running-req: %d", rec.Queued, rec.Running))
	case s.flush != nil:
		s.answerFlush(rec, ErrFlushInProgress, reply, now)
	default:
		s.flush = &pendingFlush{record: rec, deadline: now + timeout, reply: reply}
	}
}

// serviceFlush runs at every iteration boundary for a parked flush.
func (s *scheduler) serviceFlush() {
	f := s.flush
	if f == nil {
		return
	}
	switch {
	case s.idle():
		s.flush = nil
		s.doFlush()
		s.answerFlush(f.record, nil, f.reply, s.now)
	case s.now >= f.deadline:
		s.flush = nil
		s.answerFlush(f.record, ErrFlushTimeout, f.reply, s.now)
	}
}

func (s *scheduler) answerFlush(rec FlushRecord, err error, reply chan error, at time.Duration) {
	rec.Answered = at
	rec.Outcome = "flushed"
	if err != nil {
		rec.Outcome = err.Error()
	}
	if len(s.flushes) == maxFlushRecords {
		s.flushes = slices.Delete(s.flushes, 0, 1)
	}
	s.flushes = append(s.flushes, rec)
	reply <- err
}

// doFlush resets the cache and what SGLang's flush resets: the speculative
// averages and the throughput window. Lifetime counters stay.
func (s *scheduler) doFlush() {
	if s.tree != nil {
		s.tree.Reset()
	}
	s.window = window{genSince: s.now}
	s.lastThruput = 0
	s.lastHitRate = 0
	s.log.Info("Cache flushed successfully!")
}

func (s *scheduler) logPrefill(it *iteration) {
	newSeq, newTok, cached := 0, 0, 0
	defer func() {
		if s.log.Enabled(context.Background(), slog.LevelInfo) {
			s.log.Info(fmt.Sprintf("Prefill batch. #new-seq: %d, #new-token: %d, #cached-token: %d, token usage: %.2f, #running-req: %d, #queue-req: %d",
				newSeq, newTok, cached, s.tokenUsage(), len(s.running), len(s.waiting)))
		}
	}()
	for _, c := range it.prefill {
		newTok += c.m
		if c.newAdmit {
			newSeq++
			cached += c.r.cached
		}
	}
	if newTok+cached > 0 {
		s.lastHitRate = float64(cached) / float64(newTok+cached)
	}
}

func (s *scheduler) logDecode() {
	elapsed := (s.now - s.window.genSince).Seconds()
	if elapsed > 0 {
		s.lastThruput = float64(s.window.genTokens) / elapsed
	}
	s.window.genTokens, s.window.genSince = 0, s.now
	if !s.log.Enabled(context.Background(), slog.LevelInfo) {
		return
	}
	accept := ""
	if s.prof.Speculative != nil {
		accept = fmt.Sprintf("accept len: %.2f, ", s.avgAccept())
	}
	tokens := 0
	for _, r := range s.running {
		tokens += r.seqKV()
	}
	s.log.Info(fmt.Sprintf("Decode batch. #running-req: %d, #token: %d, token usage: %.2f, %scuda graph: True, gen throughput (token/s): %.2f, #queue-req: %d",
		len(s.running), tokens, s.tokenUsage(), accept, s.lastThruput, len(s.waiting)))
}

func (s *scheduler) tokenUsage() float64 { return float64(s.used()) / float64(s.capacity()) }

func (s *scheduler) avgAccept() float64 {
	if s.window.specRounds == 0 {
		return 0
	}
	return float64(s.window.specTokens) / float64(s.window.specRounds)
}

func (s *scheduler) avgAcceptRate() float64 {
	if s.window.specProposed == 0 {
		return 0
	}
	return float64(s.window.specAccepted) / float64(s.window.specProposed)
}

// Stats is a snapshot of the engine's state.
type Stats struct {
	Counters
	Now     time.Duration // simulated time since start
	Running int           // decoding or prefilling
	Queued  int
	// Prefilling counts the request being prefilled in chunks (one of
	// Running, outside SGLang's running batch); ChunkedPending is its
	// prompt tokens not yet prefilled.
	Prefilling, ChunkedPending int
	// QueuedTokens sums the queued requests' tokens (SGLang's seqlen).
	QueuedTokens int
	// KV pool, in tokens.
	KVUsed, KVCapacity int
	// Radix cache, in tokens.
	CacheTokens, CacheEvictable, CacheProtected int
	// LastGenThroughput is tokens/s over the last decode log interval.
	LastGenThroughput float64
	// LastCacheHitRate is cached/(cached+new) of the last prefill batch.
	LastCacheHitRate float64
	// SpecRounds and AvgSpecAcceptLength are since start or the last flush;
	// AvgSpecAcceptLength means nothing while SpecRounds is 0.
	SpecRounds          int64
	AvgSpecAcceptLength float64
	// AvgSpecAcceptRate is accepted / proposed drafts over the same window.
	AvgSpecAcceptRate float64
	Idle              bool
}

func (s *scheduler) stats() Stats {
	ts := s.treeStats()
	running := len(s.running)
	prefilling, chunkedPending := 0, 0
	if s.chunked != nil {
		running++
		prefilling, chunkedPending = 1, s.chunked.remainingPrompt()
	}
	queuedTokens := 0
	for _, r := range s.waiting {
		queuedTokens += len(r.tokens) + len(r.outputs)
	}
	return Stats{
		Prefilling:          prefilling,
		ChunkedPending:      chunkedPending,
		QueuedTokens:        queuedTokens,
		Counters:            s.counters,
		Now:                 s.now,
		Running:             running,
		Queued:              len(s.waiting),
		KVUsed:              s.used(),
		KVCapacity:          s.capacity(),
		CacheTokens:         ts.Tokens,
		CacheEvictable:      ts.Evictable,
		CacheProtected:      ts.Protected,
		LastGenThroughput:   s.lastThruput,
		LastCacheHitRate:    s.lastHitRate,
		SpecRounds:          s.window.specRounds,
		AvgSpecAcceptLength: s.avgAccept(),
		AvgSpecAcceptRate:   s.avgAcceptRate(),
		Idle:                s.idle(),
	}
}

// requestRNG seeds a request's acceptance draws from the profile seed and a
// key: the client's rid, or the arrival number when the engine named it.
func requestRNG(seed uint64, key string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(key))
	return rand.New(rand.NewPCG(seed, h.Sum64()))
}

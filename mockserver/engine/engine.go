package engine

import (
	"cmp"
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/sglmock/sglmock/mockserver/hicache"
	"github.com/sglmock/sglmock/mockserver/profile"
	"github.com/sglmock/sglmock/mockserver/tokenizer"
)

// DefaultSpinWindow is the spin window a real-time server uses: above this
// machine's timer lateness (p99 0.2-0.6 ms measured by
// BenchmarkWakeLateness), so the timer never overshoots the deadline and the
// final approach is a poll. A 2 ms window measured worse tails over HTTP on
// two cores: the spinning goroutine competes with the handlers.
const DefaultSpinWindow = time.Millisecond

// maxSpinShare bounds the share of wall time the loop may spend polling:
// at a high speedup every deadline is within the window, and an unbounded
// poll would take a core for good. Past the share, the loop sleeps on its
// timer and wakes a little late.
const maxSpinShare = 0.25

// Config configures an Engine.
type Config struct {
	// Profile is the modelled deployment. The engine copies it.
	Profile *profile.Profile
	// Speedup runs this many simulated seconds per wall second; 0 means 1.
	Speedup float64
	// DisableRadixCache turns prefix caching off (--disable-radix-cache):
	// nothing matches and a request's KV is freed when it finishes.
	DisableRadixCache bool
	// SpinWindow is how long before each deadline the loop stops sleeping
	// and polls the clock, for wake-ups precise to microseconds in real
	// time (a plain timer wakes about 0.6 ms late here, 60 ms of simulated
	// time at speedup 100), within a quarter of the wall time. Leave it 0
	// under testing/synctest, whose timers fire exactly and whose clock a
	// poll would never advance.
	SpinWindow time.Duration
	// Clock tells the wall time; nil means the system clock. The engine
	// reads it to stamp arrivals and calls, and to know when a modelled
	// deadline has come; the modelled timeline never depends on it.
	Clock Clock
	// Logger receives SGLang's "Prefill batch, ..." and "Decode batch, ..."
	// lines at info level; nil discards them.
	Logger *slog.Logger
	// DecodeLogInterval is the number of decode batches between decode log
	// lines, throughput updates and speculative fold-ins (SGLang's
	// --decode-log-interval); 0 means 40.
	DecodeLogInterval int
	// TruthCapacity and TruthBytes bound the finished requests' ground
	// truths kept for Truth: by count (0 means DefaultTruthCapacity) and
	// by the bytes they hold, as Truth.Bytes counts them (0 means
	// DefaultTruthBytes). The oldest goes first.
	TruthCapacity int
	TruthBytes    int64
	// OnFinish, if set, is called with every finished request's truth
	// (internal requests included), every decode round in its own
	// record, on the engine goroutine, before the last event is
	// delivered. It must be fast and must not call the engine.
	OnFinish func(*Truth)
	// CacheEvents, if set, is told of every change to the radix cache's
	// pages and asked to publish them where SGLang does (SGLang's
	// --kv-events-config; see CacheEvents). RankCacheEvents, if set, has
	// one for each DP rank instead, as SGLang runs a publisher per rank;
	// without it rank 0 reports to CacheEvents and the others to none.
	CacheEvents     CacheEvents
	RankCacheEvents []CacheEvents
	// Tokenizer tokenizes text prompts and picks the output tokens; nil
	// means the built-in one, with the profile's add_bos_token and
	// chat_template.
	Tokenizer *tokenizer.Tokenizer
	// HiCacheStorageDir is the file storage backend's directory (SGLang's
	// SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR); HiCacheStore, if set, is the
	// storage tier instead of one the engine makes, so that engines can
	// share one. ServedModelName names the file backend's pages (the
	// profile's when empty).
	HiCacheStorageDir string
	HiCacheStore      hicache.Store
	ServedModelName   string
}

// Clock tells the wall time.
type Clock interface{ Now() time.Time }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// call is an operation for the loop goroutine, stamped with the simulated
// time it was asked at.
type call struct {
	at  time.Duration
	run func(at time.Duration)
}

// Engine is the simulated SGLang deployment: one goroutine owns a
// scheduler per DP rank and the dispatcher in front of them, and waits on
// modelled deadlines; every method is safe for concurrent use.
type Engine struct {
	prof    *profile.Profile
	tok     *tokenizer.Tokenizer
	speedup float64
	spin    time.Duration
	// ranks are the DP ranks' schedulers, in rank order; groups the sets
	// of them whose iterations run together (group); dispatch picks a
	// rank for each request. The loop goroutine owns all three, and
	// flushes, the record of flush calls.
	ranks     []*scheduler
	groups    []*group
	dispatch  *dispatcher
	flushes   flushLog
	inbox     chan call
	clock     Clock
	stop      chan struct{}
	done      chan struct{}
	closing   atomic.Bool
	wallStart time.Time
	truths    *truthStore
	arrivals  atomic.Uint64
	// reached is the latest simulated time the loop has seen the wall
	// clock pass: waiting for an earlier one needs no clock reading.
	reached time.Duration
	// spinShare bounds the loop's polling (maxSpinShare); spinCredit is
	// the polling it may still do, earned at that share of the wall time
	// since spinEarned.
	spinShare  float64
	spinCredit time.Duration
	spinEarned time.Time

	ridsMu sync.Mutex
	rids   map[string]struct{} // active request ids, for the duplicate check
}

// New starts an engine. Close stops it.
func New(cfg Config) (*Engine, error) {
	if cfg.Profile == nil {
		return nil, fmt.Errorf("engine: no profile")
	}
	if err := cfg.Profile.Validate(); err != nil {
		return nil, err
	}
	if cfg.Speedup == 0 {
		cfg.Speedup = 1
	}
	if !(cfg.Speedup > 0 && cfg.Speedup <= 1e9) { // NaN too
		return nil, fmt.Errorf("engine: speedup must be in (0, 1e9], got %v", cfg.Speedup)
	}
	if cfg.SpinWindow < 0 {
		return nil, fmt.Errorf("engine: spin window must be >= 0, got %v", cfg.SpinWindow)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = systemClock{}
	}
	if cfg.DecodeLogInterval == 0 {
		cfg.DecodeLogInterval = 40
	}
	if cfg.TruthCapacity == 0 {
		cfg.TruthCapacity = DefaultTruthCapacity
	}
	if cfg.TruthBytes == 0 {
		cfg.TruthBytes = DefaultTruthBytes
	}
	if cfg.TruthCapacity < 0 || cfg.TruthBytes < 0 {
		return nil, fmt.Errorf("engine: truth bounds must be >= 0, got %d truths and %d bytes", cfg.TruthCapacity, cfg.TruthBytes)
	}
	// The engine keeps its own copy: a caller that changes its profile
	// afterwards changes nothing here.
	prof := cfg.Profile.Clone()
	if cfg.Tokenizer == nil {
		tok, err := tokenizer.Builtin(tokenizer.BuiltinOptions{AddBOS: prof.AddBOSToken, ChatTemplate: prof.ChatTemplate})
		if err != nil {
			return nil, fmt.Errorf("engine: %w", err)
		}
		cfg.Tokenizer = tok
	}
	if n := len(cfg.RankCacheEvents); n != 0 && n != prof.Ranks() {
		return nil, fmt.Errorf("engine: %d KV event sinks for %d DP ranks", n, prof.Ranks())
	}
	e := &Engine{
		prof:      prof,
		tok:       cfg.Tokenizer,
		speedup:   cfg.Speedup,
		spin:      cfg.SpinWindow,
		spinShare: maxSpinShare,
		dispatch:  newDispatcher(prof),
		inbox:     make(chan call),
		clock:     cfg.Clock,
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
		wallStart: cfg.Clock.Now(),
		truths:    newTruthStore(cfg.TruthCapacity, cfg.TruthBytes),
		rids:      make(map[string]struct{}),
	}
	if prof.HiCacheConfig() != nil && cfg.DisableRadixCache {
		return nil, profile.ErrHiCacheWithoutRadixCache
	}
	onFinish := func(t *Truth, generatedRID bool) {
		e.ridsMu.Lock()
		delete(e.rids, t.RID)
		e.ridsMu.Unlock()
		if cfg.OnFinish != nil {
			cfg.OnFinish(t)
		}
		e.truths.add(t.compact(), !generatedRID)
	}
	for r := range prof.Ranks() {
		s := newScheduler(prof, cfg.Tokenizer, cfg.DisableRadixCache, rankLogger(cfg.Logger, prof, r), cfg.DecodeLogInterval, r)
		s.decodeLineGap = time.Duration(float64(decodeLineWallGap) * e.speedup)
		s.onFinish = onFinish
		sink := cfg.CacheEvents
		if len(cfg.RankCacheEvents) > 0 {
			sink = cfg.RankCacheEvents[r]
		} else if r > 0 {
			sink = nil
		}
		if sink != nil {
			s.observeCache(sink, e.wallAt)
		}
		if prof.HiCacheConfig() != nil {
			// Each rank has its own host pool; the storage backend is one
			// store that every rank reads and writes (a directory, or a
			// distributed store), as SGLang's ranks share it.
			hc, err := newHiCache(prof, s.tree, cfg)
			if err != nil {
				return nil, fmt.Errorf("engine: HiCache: %w", err)
			}
			s.hi = hc
			if cfg.HiCacheStore == nil && hc.store != nil {
				cfg.HiCacheStore = hc.store
			}
		}
		e.ranks = append(e.ranks, s)
	}
	shareStore(e.ranks)
	e.groups = groupRanks(prof, e.ranks)
	e.spinEarned = e.wallStart
	go e.loop()
	return e, nil
}

// rankLogger is the logger of rank r's scheduler, whose lines carry what
// SGLang's scheduler processes prefix theirs with (configure_scheduler_process:
// "DP1 TP1"): dp_rank with several ranks and, with tp_size > 1, tp_rank,
// the tensor-parallel rank that logs for the rank (its attention group's
// first; each replica's first without DP attention, and 0 on one rank).
func rankLogger(l *slog.Logger, p *profile.Profile, r int) *slog.Logger {
	if p.Ranks() > 1 {
		l = l.With(slog.Int("dp_rank", r))
	}
	if p.TensorParallel() > 1 {
		l = l.With(slog.Int("tp_rank", RankTPRank(p, r)))
	}
	return l
}

// RankTPRank is the tensor-parallel rank of DP rank r's scheduler that
// logs and reports metrics for it (attn_tp_rank 0): r x tp_size/dp_size
// under DP attention, where the ranks split one tensor-parallel group, 0
// in each replica without it.
func RankTPRank(p *profile.Profile, r int) int {
	if p.DPAttention() {
		return r * (p.TensorParallel() / p.Ranks())
	}
	return 0
}

// groupRanks sorts the ranks into groups: all in one under DP attention,
// where a rank with nothing of its own is also busy for a flush while the
// others run if the overlap scheduler is on (the profile's flush window,
// and the release runs the speculative algorithm with it: OverlapOff);
// one group a rank otherwise.
func groupRanks(p *profile.Profile, ranks []*scheduler) []*group {
	if !p.DPAttention() {
		groups := make([]*group, len(ranks))
		for i, s := range ranks {
			groups[i] = &group{ranks: []*scheduler{s}}
		}
		return groups
	}
	if p.OverlapOff() == "" {
		for _, s := range ranks {
			s.peers = ranks
		}
	}
	return []*group{{ranks: ranks, noMix: p.Speculative != nil}}
}

// Close aborts every request and stops the engine. It is safe to call more
// than once.
func (e *Engine) Close() {
	if e.closing.CompareAndSwap(false, true) {
		close(e.stop)
	}
	<-e.done
}

// Profile returns the engine's copy of its profile: do not modify it.
func (e *Engine) Profile() *profile.Profile { return e.prof }

// Tokenizer returns the engine's tokenizer.
func (e *Engine) Tokenizer() *tokenizer.Tokenizer { return e.tok }

// Speedup returns the simulated seconds per wall second.
func (e *Engine) Speedup() float64 { return e.speedup }

// Now returns the simulated time since the engine started.
func (e *Engine) Now() time.Duration {
	return time.Duration(float64(e.clock.Now().Sub(e.wallStart)) * e.speedup)
}

// wallAt returns the wall time at which simulated time sim is reached.
func (e *Engine) wallAt(sim time.Duration) time.Time {
	return e.wallStart.Add(time.Duration(float64(sim) / e.speedup))
}

// send hands op to the loop goroutine, which runs it before its next
// step, with the simulated time it was asked at; it does not wait for op
// to run.
func (e *Engine) send(op func(at time.Duration)) error {
	return e.sendAt(e.Now(), op)
}

// sendAt is send with the simulated time the call counts from.
func (e *Engine) sendAt(at time.Duration, op func(at time.Duration)) error {
	select {
	case e.inbox <- call{at: at, run: op}:
		return nil
	case <-e.done:
		return ErrClosed
	}
}

// do runs op on the loop goroutine and waits for it.
func (e *Engine) do(op func(at time.Duration)) error {
	ran := make(chan struct{})
	c := call{at: e.Now(), run: func(at time.Duration) { op(at); close(ran) }}
	select {
	case e.inbox <- c:
		<-ran
		return nil
	case <-e.done:
		return ErrClosed
	}
}

// Submit validates and tokenizes r on the caller's goroutine, then queues
// it. Validation errors are *InvalidRequestError with SGLang's message.
func (e *Engine) Submit(r Request) (*Stream, error) { return e.SubmitAt(r, e.Now()) }

// SubmitAt is Submit for a request that arrived at simulated time arrival
// (at most now): the HTTP layer gives the time its body had arrived, so
// the mock's own decoding and tokenizing never count as the model's time.
func (e *Engine) SubmitAt(r Request, arrival time.Duration) (*Stream, error) {
	arrival = min(max(arrival, 0), e.Now())
	if err := checkRoutedRank(r.RoutedDPRank, len(e.ranks)); err != nil {
		return nil, err
	}
	seq := e.arrivals.Add(1)
	tokens, err := e.prompt(context.Background(), r)
	if err != nil {
		return nil, err
	}
	if err := e.validate(r, tokens); err != nil {
		return nil, err
	}
	q := &req{
		noMetrics: r.NoMetrics,
		seq:       seq,
		rid:       r.RID,
		ns:        r.Namespace,
		tokens:    tokens,
		hash:      tokenizer.PromptHash(tokens),
		maxNew:    clipMaxNew(e.prof, len(tokens), r.MaxNewTokens),
		maxCached: len(tokens),
	}
	for _, st := range r.Stop {
		if st != "" { // an empty stop string would match before any output
			q.stop = append(q.stop, st)
			q.maxStop = max(q.maxStop, len(st))
		}
	}
	rngKey := r.RID
	if q.rid == "" {
		id := uuid.New()
		q.rid, q.generatedRID = hex.EncodeToString(id[:]), true // SGLang's uuid4().hex
		rngKey = "#" + strconv.FormatUint(seq, 10)
	}
	q.ignoreEOS = r.IgnoreEOS
	if !r.IgnoreEOS {
		q.stopIDs = slices.Clone(r.StopTokenIDs)
	}
	if r.ReturnLogprob && r.LogprobStartLen >= 0 {
		q.maxCached = r.LogprobStartLen
	}
	if e.prof.Speculative != nil {
		q.rng = requestRNG(e.prof.Seed, rngKey)
	}
	q.routingKey = r.RoutingKey
	if r.Priority == nil && e.prof.EnablePriorityScheduling {
		// The tokenizer manager's _set_default_priority.
		r.Priority = e.prof.DefaultPriorityValue
	}
	if r.Priority != nil {
		q.priority, q.hasPriority = *r.Priority, true
	}
	q.truth = Truth{RID: q.rid, PromptTokens: len(tokens), Arrival: arrival, Internal: r.Internal, NoMetrics: r.NoMetrics, Route: r.Route, PromptHash: q.hash, SampleOf: r.SampleOf, Salted: r.Salted}
	q.lastSent = arrival
	// Sized for short generations; long ones grow as they go.
	q.outputs = make([]int32, 0, min(q.maxNew, 256))
	q.truth.Rounds = make([]RoundRecord, 0, min(max(q.maxNew-1, 0), 64))
	q.stream = newStream(e, q)
	q.stream.onlyLast.Store(r.OnlyLast)
	e.ridsMu.Lock()
	_, dup := e.rids[q.rid]
	if !dup {
		e.rids[q.rid] = struct{}{}
	}
	e.ridsMu.Unlock()
	if dup {
		return nil, &InvalidRequestError{Message: fmt.Sprintf("Duplicate request ID detected: %s", q.rid)}
	}
	// Hand the request over without waiting for the loop to run it: the
	// loop takes it before its next step, and the stream reports the rest.
	// It counts from its arrival: the time this goroutine spent tokenizing
	// is the mock's own CPU, which the model does not charge.
	// The controller picks its rank when the loop takes it, in arrival
	// order, with the loads the ranks reported until then.
	routed := r.RoutedDPRank // the closure keeps this, not all of r
	if err := e.sendAt(arrival, func(time.Duration) {
		q.rank = e.dispatch.dispatch(routed, len(tokens))
		q.truth.DPRank = q.rank
		e.ranks[q.rank].enqueue(q)
	}); err != nil {
		e.ridsMu.Lock()
		delete(e.rids, q.rid)
		e.ridsMu.Unlock()
		return nil, err
	}
	return q.stream, nil
}

// Tokenize returns r's prompt as Submit sees it: a copy of InputIDs, or
// Text tokenized. A text too long for the context length is refused as
// Submit refuses it, without being tokenized in full. Tokenizing stops,
// with ctx's error, when ctx ends (the client left).
func (e *Engine) Tokenize(ctx context.Context, r Request) ([]int32, error) {
	tokens, err := e.prompt(ctx, r)
	if err != nil {
		return nil, err
	}
	if r.InputIDs != nil {
		tokens = slices.Clone(tokens)
	}
	return tokens, nil
}

// prompt returns r's prompt: InputIDs itself, or Text tokenized. A text
// that does not fit the context length is only counted past it, which
// holds no more than a piece of it at a time, and refused with SGLang's
// message: a 100 MB prompt costs no more memory than its body.
func (e *Engine) prompt(ctx context.Context, r Request) ([]int32, error) {
	if r.InputIDs != nil {
		return r.InputIDs, nil
	}
	// About one token per 4 bytes of English: one allocation, usually;
	// a text past the context length is only counted.
	ctxLen := e.prof.ContextLength
	dst := make([]int32, 0, min(len(r.Text)/4+8, ctxLen))
	tokens, n, err := e.tok.EncodeWithinContext(ctx, dst, r.Text, !r.Templated, ctxLen-1)
	if err != nil {
		return nil, err
	}
	if n >= ctxLen {
		return nil, inputTooLong(n, ctxLen)
	}
	return tokens, nil
}

// Check applies Submit's validation to r without queueing it, for callers
// that must refuse a group of requests before submitting any of them.
func (e *Engine) Check(r Request) error {
	tokens, err := e.prompt(context.Background(), r)
	if err != nil {
		return err
	}
	return e.validate(r, tokens)
}

// Bounds on what one request may ask for. SGLang has none of these; each
// sizes an allocation, a loop per output token or a record the engine
// keeps, so the mock bounds them generously.
const (
	// MaxRIDBytes bounds a request id, which the ground truth keeps.
	MaxRIDBytes = 512
	// MaxRoutingKeyBytes bounds a routing key, which the request keeps.
	MaxRoutingKeyBytes = 512
	// MaxNamespaceBytes bounds a cache namespace (extra_key, cache_salt
	// and the LoRA adapter together), which the cache keeps.
	MaxNamespaceBytes = 1024
	// MaxStopStrings and MaxStopStringBytes bound the stop strings, which
	// are searched for at every output token.
	MaxStopStrings     = 32
	MaxStopStringBytes = 256
	// MaxStopTokenIDs bounds stop_token_ids, searched at every token.
	MaxStopTokenIDs = 1024
	// maxListedIDs bounds the ids an out-of-vocabulary message lists.
	maxListedIDs = 1024
)

// validate applies SGLang's checks, with its messages: the tokenizer
// manager's (vocabulary, context length, then the sampling parameters'
// SamplingParams.verify), then the scheduler's max_req_input_len
// (validate_input_length); then the mock's own bounds.
func (e *Engine) validate(r Request, tokens []int32) error {
	ctxLen := e.prof.ContextLength
	if len(tokens) == 0 {
		return &InvalidRequestError{Message: "The input is empty: it must have at least one token."}
	}
	vocab := e.tok.VocabSize()
	for _, id := range tokens {
		if id < 0 {
			return &InvalidRequestError{Message: fmt.Sprintf(
				"The input_ids contain a token id %d outside the vocabulary [0, %d).", id, vocab)}
		}
		if int64(id) >= vocab {
			return &InvalidRequestError{Message: fmt.Sprintf(
				"The input_ids %s contains values greater than the vocab size (%d).", pythonList(tokens), vocab)}
		}
	}
	switch {
	case len(tokens) >= ctxLen:
		return inputTooLong(len(tokens), ctxLen)
	case r.MaxNewTokens > ctxLen-len(tokens):
		// Compared so that it cannot overflow, and summed for the message
		// in uint64, which holds any int plus a prompt length: Python's
		// ints print the exact total.
		return &InvalidRequestError{Message: fmt.Sprintf(
			"Requested token count exceeds the model's maximum context length of %d tokens. "+
				"You requested a total of %d tokens: %d tokens from the input messages and %d tokens for the completion. "+
				"Please reduce the number of tokens in the input messages or the completion to fit within the limit.",
			ctxLen, uint64(len(tokens))+uint64(r.MaxNewTokens), len(tokens), r.MaxNewTokens)}
	}
	if err := r.Sampling.verify(r.MaxNewTokens, e.tok.VocabSize()); err != nil {
		return err
	}
	if maxInput := e.prof.MaxReqInputLen(); len(tokens) >= maxInput {
		return &InvalidRequestError{Scheduler: true, Message: fmt.Sprintf(
			"Input length (%d tokens) exceeds the maximum allowed length (%d tokens). "+
				"Use a shorter input or enable --allow-auto-truncate.", len(tokens), maxInput)}
	}
	return checkBounds(r)
}

// checkBounds applies the mock's bounds on request ids, namespaces and stop
// conditions.
func checkBounds(r Request) error {
	refuse := func(format string, args ...any) error {
		return &InvalidRequestError{Message: fmt.Sprintf(format, args...)}
	}
	switch {
	case len(r.RID) > MaxRIDBytes:
		return refuse("The rid must be at most %d bytes, got %d.", MaxRIDBytes, len(r.RID))
	case len(r.RoutingKey) > MaxRoutingKeyBytes:
		return refuse("The routing key must be at most %d bytes, got %d.", MaxRoutingKeyBytes, len(r.RoutingKey))
	case len(r.Namespace) > MaxNamespaceBytes:
		return refuse("The cache namespace (extra_key, cache_salt and lora_path together) must be at most %d bytes, got %d.",
			MaxNamespaceBytes, len(r.Namespace))
	case len(r.Stop) > MaxStopStrings:
		return refuse("stop must have at most %d strings, got %d.", MaxStopStrings, len(r.Stop))
	case len(r.StopTokenIDs) > MaxStopTokenIDs:
		return refuse("stop_token_ids must have at most %d ids, got %d.", MaxStopTokenIDs, len(r.StopTokenIDs))
	}
	for _, st := range r.Stop {
		if len(st) > MaxStopStringBytes {
			return refuse("Each stop string must be at most %d bytes, got one of %d.", MaxStopStringBytes, len(st))
		}
	}
	return nil
}

func inputTooLong(n, ctxLen int) error {
	return &InvalidRequestError{Message: fmt.Sprintf(
		"The input (%d tokens) is longer than the model's context length (%d tokens).", n, ctxLen)}
}

// pythonList renders ids as Python prints a list: "[1, 2, 3]". Past
// maxListedIDs ids it ends with ", ...]", so that a message stays short
// however long the list.
func pythonList(ids []int32) string {
	shown := ids[:min(len(ids), maxListedIDs)]
	b := make([]byte, 0, len(shown)*8+8)
	b = append(b, '[')
	for i, id := range shown {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = strconv.AppendInt(b, int64(id), 10)
	}
	if len(shown) < len(ids) {
		b = append(b, ", ..."...)
	}
	return string(append(b, ']'))
}

func (e *Engine) abort(r *req) {
	e.do(func(at time.Duration) { e.ranks[r.rank].requestAbort(r, at) })
}

// Abort aborts requests as /abort_request does, and reports whether rid was
// active. As in SGLang, rid must be an active request's id (the tokenizer
// manager checks), and every rank's scheduler then aborts every active
// request whose id starts with rid (the controller sends the abort to all),
// in arrival order.
func (e *Engine) Abort(rid string) bool {
	var found bool
	e.do(func(at time.Duration) {
		for _, s := range e.ranks {
			_, ok := s.active[rid]
			found = found || ok
		}
		if !found {
			return
		}
		var matched []*req
		for _, s := range e.ranks {
			for id, r := range s.active {
				if strings.HasPrefix(id, rid) {
					matched = append(matched, r)
				}
			}
		}
		slices.SortFunc(matched, func(a, b *req) int { return cmp.Compare(a.seq, b.seq) })
		for _, r := range matched {
			e.ranks[r.rank].requestAbort(r, at)
		}
	})
	return found
}

// AbortAll aborts every active request.
func (e *Engine) AbortAll() {
	e.do(func(time.Duration) {
		for _, s := range e.ranks {
			s.abortActive()
		}
	})
}

// Flush empties the prefix cache of every DP rank that is idle. With
// timeout > 0 a busy rank parks the flush until it is idle or timeout
// (simulated time) has passed. The answer comes when every rank has
// answered, and is the first answer, as SGLang's tokenizer manager gives
// it (FlushRecord.Ranks). origin says who asks, for FlushHistory and the
// log. It returns nil, ErrFlushBusy, ErrFlushTimeout or
// ErrFlushInProgress. ctx only stops the caller's wait: a parked flush
// whose caller gave up still runs, as in SGLang, and FlushHistory shows it
// pending meanwhile.
func (e *Engine) Flush(ctx context.Context, timeout time.Duration, origin string) error {
	var c *flushCall
	if err := e.do(func(at time.Duration) {
		c = e.flushes.start(at, timeout, origin, len(e.ranks))
		for _, s := range e.ranks {
			s.requestFlush(at, timeout, origin, c)
		}
	}); err != nil {
		return err
	}
	select {
	case err := <-c.reply:
		return err
	case <-ctx.Done():
		e.send(func(at time.Duration) {
			if slices.Contains(e.flushes.pending, c) {
				c.clientLeft(max(e.ranks[0].now, at))
			}
			for _, s := range e.ranks {
				s.flushClientLeft(c, at)
			}
		})
		return ctx.Err()
	case <-e.done:
		return ErrClosed
	}
}

// Stats returns a snapshot of counters, queue, KV pool and cache, every
// rank's together (see RankStats).
func (e *Engine) Stats() Stats { return sumStats(e.RankStats()) }

// RankStats returns each DP rank's snapshot, in rank order.
func (e *Engine) RankStats() []Stats {
	var out []Stats
	if e.do(func(time.Duration) {
		for _, s := range e.ranks {
			out = append(out, s.stats())
		}
	}) != nil {
		out = make([]Stats, len(e.ranks))
		for i := range out {
			out[i].Idle = true
		}
	}
	return out
}

// Ranks is the number of DP ranks.
func (e *Engine) Ranks() int { return len(e.ranks) }

// FlushHistory returns the answered flush calls, oldest first, then those
// still parked on some rank, marked Pending.
func (e *Engine) FlushHistory() []FlushRecord {
	var out []FlushRecord
	e.do(func(time.Duration) { out = e.flushes.history() })
	return out
}

// Truth returns the stored ground truth of a finished request: its decode
// rounds merged into runs (see RoundRecord). It is the engine's: do not
// modify it.
func (e *Engine) Truth(rid string) (*Truth, bool) { return e.truths.get(rid) }

// Truths returns the stored ground truths of finished requests, the
// server's own (warmup, health checks) left out, in arrival order.
func (e *Engine) Truths() []*Truth {
	return e.truths.all(func(t *Truth) bool { return !t.Internal })
}

// TruthUsage returns how many ground truths are stored and the bytes they
// hold (Truth.Bytes), within Config.TruthCapacity and Config.TruthBytes.
func (e *Engine) TruthUsage() (truths int, bytes int64) { return e.truths.usage() }

// loop owns the schedulers: it plans each group's next iteration, waits
// for the earliest modelled end, and applies that iteration; between and
// during iterations it serves calls. The modelled clock only moves to an
// iteration's modelled end, to a call or an arrival while idle, or to a
// wake-up a scheduler asked for: a host stall or a late timer delays
// delivery but never moves the timeline.
func (e *Engine) loop() {
	defer close(e.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		for _, g := range e.groups {
			if !g.busy {
				g.plan()
			}
		}
		g, at, wake := e.nextEvent()
		if g == nil {
			for _, s := range e.ranks {
				s.publishCacheEvents()
			}
			if !e.idle(timer) {
				e.shutdown()
				return
			}
			continue
		}
		reached, ok := e.waitUntil(at, timer)
		switch {
		case wake:
			if reached {
				g.advance(at)
			}
		case reached || !ok:
			g.complete()
			e.reportLoads(g)
		}
		if !ok {
			e.shutdown()
			return
		}
	}
}

// nextEvent is what the loop waits for next, when a group is busy: the
// earliest end of an iteration in flight (ties to the first group), or,
// earlier, the wake-up of a group that idles meanwhile (wake). Nil when
// every group idles.
func (e *Engine) nextEvent() (next *group, at time.Duration, wake bool) {
	for _, g := range e.groups {
		if g.busy && (next == nil || g.end < at) {
			next, at = g, g.end
		}
	}
	if next == nil || len(e.groups) == 1 {
		return next, at, false
	}
	for _, g := range e.groups {
		if w, due := g.wake(); !g.busy && due && w < at {
			next, at, wake = g, w, true
		}
	}
	return next, at, wake
}

// reportLoads sends the controller the load of every rank of g that ran a
// batch, as each rank's batch output carries it to the tokenizer manager,
// which forwards it (WatchLoadUpdateReq): its running and waiting
// requests, and its used and waiting tokens (num_total_tokens).
func (e *Engine) reportLoads(g *group) {
	if !e.dispatch.readsLoads() {
		return
	}
	for _, s := range g.ranks {
		if !s.ranBatch {
			continue
		}
		s.ranBatch = false
		st := s.stats()
		e.dispatch.report(s.rank, st.Running-st.Prefilling+st.Queued, st.KVUsed+st.QueuedTokens)
	}
}

// serve runs a call: the groups that idle move their clocks to when it
// was asked.
func (e *Engine) serve(c call) {
	for _, g := range e.groups {
		if !g.busy {
			g.advance(c.at)
		}
	}
	c.run(c.at)
}

// interrupted reports whether a call served during a wait may have given
// work to a group that idles, whose iteration could end before the one
// waited for: only with several groups.
func (e *Engine) interrupted() bool {
	if len(e.groups) == 1 {
		return false
	}
	for _, g := range e.groups {
		if !g.busy {
			return true
		}
	}
	return false
}

// idle waits, with nothing to run, for the next call or for the earliest
// wake-up a scheduler asked for, whichever comes first. A wake-up moves
// the modelled clock to exactly that time. It returns false if the engine
// is closing.
func (e *Engine) idle(timer *time.Timer) bool {
	var at time.Duration
	due := false
	for _, g := range e.groups {
		if w, ok := g.wake(); ok && (!due || w < at) {
			at, due = w, true
		}
	}
	if !due {
		select {
		case c := <-e.inbox:
			e.serve(c)
			return true
		case <-e.stop:
			return false
		}
	}
	wait := e.wallAt(at).Sub(e.clock.Now())
	if wait <= 0 {
		e.advanceIdle(at)
		return true
	}
	timer.Reset(wait)
	select {
	case c := <-e.inbox:
		timer.Stop()
		e.serve(c)
	case <-timer.C:
		e.advanceIdle(at)
	case <-e.stop:
		timer.Stop()
		return false
	}
	return true
}

// advanceIdle moves every group's clock to at: they all idle.
func (e *Engine) advanceIdle(at time.Duration) {
	for _, g := range e.groups {
		g.advance(at)
	}
}

// servePending serves the calls already waiting without blocking. It
// returns false if the engine is closing.
func (e *Engine) servePending() bool {
	for {
		// One case and a default: a receive that finds no sender takes no
		// lock, which an engine that never waits does every iteration.
		select {
		case c := <-e.inbox:
			e.serve(c)
		default:
			return !e.closing.Load()
		}
	}
}

func (e *Engine) shutdown() {
	for _, s := range e.ranks {
		s.stopping = true
		s.abortActive()
	}
	for _, s := range e.ranks {
		if f := s.flush; f != nil {
			s.flush = nil
			f.call.answer(s.rank, ErrClosed, max(s.now, e.Now()))
		}
	}
}

// waitUntil serves calls until the wall clock reaches simulated time sim
// (reached). It sleeps on a timer to SpinWindow before the deadline, then
// polls, as long as its polling stays within maxSpinShare of the wall
// time; past that it sleeps to the deadline. An engine that runs behind
// the wall clock (a host too slow for the speedup) does not wait, but
// still serves the calls already waiting, once per iteration. With several
// groups it returns early after a call that may have given an idle group
// work. ok is false if the engine is closing.
func (e *Engine) waitUntil(sim time.Duration, timer *time.Timer) (reached, ok bool) {
	if sim <= e.reached {
		return true, e.servePending() // the wall clock is past it already
	}
	deadline := e.wallAt(sim)
	polling := false
	for {
		now := e.clock.Now()
		remaining := deadline.Sub(now)
		if remaining <= 0 {
			e.reached = sim
			return true, e.servePending()
		}
		sleep := remaining - e.spin
		if sleep <= 0 && !polling {
			if polling = e.mayPoll(now, remaining); !polling {
				sleep = remaining
			}
		}
		if sleep > 0 {
			timer.Reset(sleep)
			select {
			case c := <-e.inbox:
				timer.Stop()
				e.serve(c)
				if e.interrupted() {
					return false, true
				}
			case <-timer.C:
			case <-e.stop:
				timer.Stop()
				return false, false
			}
			continue
		}
		if !e.servePending() {
			return false, false
		}
		runtime.Gosched()
	}
}

// mayPoll reports whether the loop may poll the clock for the remaining
// wait, and if so charges it to the spin credit. The credit grows at
// spinShare of the wall time, up to ten windows, so polling takes at most
// that share of a core however short the waits.
func (e *Engine) mayPoll(now time.Time, remaining time.Duration) bool {
	earned := time.Duration(float64(now.Sub(e.spinEarned)) * e.spinShare)
	e.spinCredit = min(e.spinCredit+earned, 10*e.spin)
	e.spinEarned = now
	if e.spinCredit < remaining {
		return false
	}
	e.spinCredit -= remaining
	return true
}

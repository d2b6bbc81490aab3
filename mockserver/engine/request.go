package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// Request is one generation request, as SGLang's scheduler receives it.
type Request struct {
	// RID identifies the request (SGLang's rid). Empty means the engine
	// assigns one.
	RID string
	// Namespace partitions the prefix cache (SGLang's extra_key, cache_salt
	// or LoRA adapter): requests in different namespaces never share a prefix.
	Namespace string
	// InputIDs is the prompt; when nil, Text is tokenized. Submit keeps
	// the slice without copying it (a long prompt is most of a request's
	// bytes), so the caller must not change it afterwards.
	InputIDs []int32
	Text     string
	// Templated marks a Text rendered from a chat template: it is
	// tokenized without the special tokens the tokenizer adds around a
	// prompt (a BOS), since the template writes its own, as SGLang's
	// apply_chat_template(tokenize=True) encodes it.
	Templated bool
	// MaxNewTokens is the most tokens to generate; 0 runs the prefill only.
	MaxNewTokens int
	// StopTokenIDs and Stop end generation at a token id or once the output
	// text contains a string. The mock never samples EOS, so IgnoreEOS
	// changes no output; it drops StopTokenIDs, as SGLang does, and
	// without the radix cache it selects SGLang's stricter admission
	// (add_one_req_ignore_eos).
	StopTokenIDs []int32
	Stop         []string
	IgnoreEOS    bool
	// ReturnLogprob with LogprobStartLen >= 0 caps prefix reuse at
	// LogprobStartLen tokens, as SGLang does: those logprobs need computing.
	ReturnLogprob   bool
	LogprobStartLen int
	// Sampling are the sampling parameters SGLang verifies; they change
	// nothing the mock generates.
	Sampling Sampling
	// Internal marks the server's own requests (health checks, warmup):
	// they run like any other but stay out of Truths (/sim/requests), which
	// lists the clients' requests.
	Internal bool
	// NoMetrics keeps a request out of Counters and the metrics, as
	// SGLang's log_metrics=false keeps a health check out of its metrics.
	// SGLang's warmup request is an ordinary request: it counts.
	NoMetrics bool
	// Route labels the endpoint and prompt form that sent the request
	// (sim's Route values); the engine only keeps it in the truth.
	Route string
	// SampleOf is, for one of the n copies of parallel sampling, the rid
	// of the server's own request that prefilled their prompt first; the
	// engine only keeps it in the truth.
	SampleOf string
	// Salted marks a request that carried a cache_salt, whether or not its
	// route takes it in the release (Namespace says what it took); the
	// engine only keeps it in the truth.
	Salted bool
	// RoutedDPRank, if set, pins the request to that DP rank (SGLang's
	// routed_dp_rank, or the deprecated data_parallel_rank): it must name
	// one, except that 0 is ignored on a deployment of one rank.
	RoutedDPRank *int
	// Priority is the request's priority (SGLang's priority): under
	// priority scheduling it orders the queue and may preempt running
	// requests; without it, it is ignored, or the request is refused when
	// the profile's abort_on_priority_when_disabled says so. Nil is none.
	Priority *int
	// RoutingKey groups requests for the routing-key policy (SGLang's
	// routing_key, the x-smg-routing-key header on the OpenAI routes).
	RoutingKey string
	// OnlyLast marks a request whose reader waits for its end
	// (Stream.Collect): its stream keeps only the last event from the
	// start, so that a reader collecting many streams one after the other
	// has nothing queued for those it has not reached.
	OnlyLast bool
}

// Finish reasons, as SGLang spells them.
const (
	FinishLength = "length"
	FinishStop   = "stop"
	FinishAbort  = "abort"
)

// Finish says why and how a request ended.
type Finish struct {
	Reason string // FinishLength, FinishStop or FinishAbort
	// Length is the number of generated tokens, for FinishLength.
	Length int
	// MatchedToken or MatchedString is what stopped a FinishStop request.
	MatchedToken  *int32
	MatchedString *string
	// MatchedAt is the byte offset in the output's text at which
	// MatchedString begins: where SGLang's detokenizer trims the text.
	MatchedAt int
	// Message explains a FinishAbort: SGLang's "Aborted" for a request in
	// a batch, "Abort in waiting queue" for a queued one.
	Message string
	// StatusCode is the HTTP status a FinishAbort carries when the
	// scheduler, not a client, aborted the request (SGLang's FINISH_ABORT
	// status_code): 500 for OutOfMemoryMessage. 0 is a client's abort,
	// which has none.
	StatusCode int
	// InWaitingQueue marks an abort of a request still in the waiting
	// queue: SGLang's tokenizer manager, not a batch output, answers it,
	// with a finish_reason of type and message only and a meta_info
	// without prompt or cached tokens.
	InWaitingQueue bool
}

// SGLang's abort messages.
const (
	AbortedMessage      = "Aborted"                // FINISH_ABORT() of a request in a batch
	WaitingQueueMessage = "Abort in waiting queue" // a request aborted before it ran
)

// SpecStats counts a request's speculative decoding rounds.
type SpecStats struct {
	VerifyCt       int   // draft+verify rounds
	AcceptedDrafts int   // drafts accepted over all rounds (bonus tokens excluded)
	ProposedDrafts int   // drafts proposed: VerifyCt * (num_draft_tokens-1)
	Histogram      []int // Histogram[a]: rounds that accepted a drafts; as long as the largest a seen, plus one
}

// Event is one step of a request's output. The first event comes out of
// prefill with the first token; the last one carries Finish and Truth.
type Event struct {
	Tokens           []int32 // new tokens (several under speculative decoding)
	CompletionTokens int     // generated so far
	PromptTokens     int
	CachedTokens     int
	// Tiers splits CachedTokens by tier under HiCache (nil without it).
	Tiers *CacheTiers
	At    time.Duration // simulated time since the engine started
	// Arrival, Admitted and FirstToken are when the request arrived, left
	// the waiting queue (its first admission) and had its first token from
	// prefill, as Truth has them; the last event of a request that never
	// got that far has its Truth say so (Truth.Scheduled, Truth.Prefilled).
	Arrival, Admitted, FirstToken time.Duration
	Finish                        *Finish
	// Retractions counts the times the request was retracted so far
	// (SGLang's num_retractions).
	Retractions int
	Spec        *SpecStats // on the last event, with speculative decoding
	Truth       *Truth     // on the last event
	DPRank      int        // the DP rank that runs the request
}

// ChunkRecord is one prefill chunk of a request.
type ChunkRecord struct {
	Start    time.Duration // batch start, simulated
	Duration time.Duration // the whole batch's modelled duration
	Cost     time.Duration // this chunk's own modelled cost
	Prefix   int           // tokens already in KV
	Tokens   int           // tokens computed
	Batch    int           // chunks in the batch
	// LoadBack is the tokens loaded back from the host for it (HiCache):
	// the batch's Duration overlaps their transfer with its compute.
	LoadBack int
}

// RoundRecord is one decode round a request took part in or, in a stored
// truth, a run of Count rounds back to back (each starting where the last
// ended), in batches of the same size, each gaining the same tokens: Start
// and Context are the first round's, Duration the run's total. Count times
// Gained is the run's tokens, and the sums over a request's records are
// exact either way.
type RoundRecord struct {
	Start    time.Duration
	Duration time.Duration // the round's (the run's) modelled duration
	Gained   int           // tokens this request gained each round
	Batch    int           // requests in each round
	Context  int           // this request's context at the (first) round's start
	Count    int           // rounds: 1, or the run's length
}

// Truth is the modelled ground truth of one request. It does not keep the
// request's cache namespace, which a client may make long.
type Truth struct {
	RID              string
	PromptTokens     int
	CachedTokens     int
	CompletionTokens int
	// ReusedFrom is the request whose inserted tokens the cached prefix
	// ends in ("" when nothing was cached, or the tokens came from the
	// storage tier).
	ReusedFrom string
	// Tiers splits CachedTokens by the tier each token came from, under
	// HiCache (nil without it); LoadBackTokens were loaded back from the
	// host in its first prefill batch, and Prefetch is its prefetch from
	// the storage tier, if it had one.
	Tiers          *CacheTiers
	LoadBackTokens int
	Prefetch       *PrefetchRecord
	Arrival        time.Duration // simulated times since the engine started
	// Admitted is when the request left the waiting queue: into its first
	// prefill batch or, aborted while it waited, at its finish.
	Admitted time.Duration
	// FirstToken is when the prefill gave the first token, if Prefilled:
	// a request aborted while it waited, or while its prompt was
	// prefilled in chunks, has none.
	FirstToken time.Duration
	Prefilled  bool
	Finished   time.Duration
	Prefill    []ChunkRecord
	Rounds     []RoundRecord
	Finish     Finish
	Spec       SpecStats
	// Retractions counts the times decode ran out of KV and retracted the
	// request, or a request of higher priority preempted it: its KV was
	// freed, and it was queued and prefilled again.
	Retractions int
	Internal    bool
	NoMetrics   bool
	// Route is the Request's; PromptHash identifies its prompt tokens
	// (tokenizer.PromptHash), so a client can tell a repeated prompt from
	// one that only shares a prefix.
	Route      string
	PromptHash uint64
	SampleOf   string // the Request's
	Salted     bool   // the Request's
	// DPRank is the DP rank that ran the request (SGLang's meta_info
	// dp_rank): its cache is the only one the request could reuse.
	DPRank int
}

// TTFT is the time from arrival to the first token; it means nothing
// unless Prefilled.
func (t *Truth) TTFT() time.Duration { return t.FirstToken - t.Arrival }

// E2E is the time from arrival to finish.
func (t *Truth) E2E() time.Duration { return t.Finished - t.Arrival }

// QueueTime is the time from arrival to admission (or, for a request
// aborted while it waited, to its abort).
func (t *Truth) QueueTime() time.Duration { return t.Admitted - t.Arrival }

// Scheduled reports whether the request entered a prefill batch, where
// SGLang observes its queue time; a request aborted while it waited never
// did.
func (t *Truth) Scheduled() bool { return len(t.Prefill) > 0 }

// Stream delivers one request's events. A slow reader never stalls the
// engine, and what it costs is bounded: past maxQueuedEvents queued events,
// a new event is merged into the last one queued (its tokens appended, the
// rest its own), as SGLang's tokenizer manager hands a client that lags the
// latest output with every token since. A reader that keeps up reuses the
// same few slots and sees every event.
type Stream struct {
	rid          string
	promptTokens int
	engine       *Engine
	req          *req

	mu     sync.Mutex
	events []Event // queued from head on
	head   int
	ended  bool  // the last event has been queued
	final  Event // the last event, once ended
	// onlyLast: Collect waits, so only the last event is kept and wakes
	// the reader; atomic, so the engine skips building the others.
	onlyLast atomic.Bool
	notify   chan struct{}
	// mergedTokens marks the last queued event's Tokens as the stream's
	// own array, built by merging, which later merges may append to.
	mergedTokens bool
}

// maxQueuedEvents bounds the events a stream queues for a reader that
// lags; later ones are merged into the last.
const maxQueuedEvents = 1024

func newStream(e *Engine, r *req) *Stream {
	return &Stream{rid: r.rid, promptTokens: len(r.tokens), engine: e, req: r, notify: make(chan struct{}, 1)}
}

// RID is the request's id.
func (s *Stream) RID() string { return s.rid }

// WallAt returns the wall time at which the request's engine reaches
// simulated time sim: when an event stamped sim is delivered, the host
// keeping up.
func (s *Stream) WallAt(sim time.Duration) time.Time { return s.engine.wallAt(sim) }

// PromptTokens is the number of prompt tokens after tokenization.
func (s *Stream) PromptTokens() int { return s.promptTokens }

// pop takes the next queued event; s.mu is held.
func (s *Stream) pop() (Event, bool) {
	if s.head == len(s.events) {
		return Event{}, false
	}
	ev := s.events[s.head]
	s.events[s.head] = Event{}
	if s.head++; s.head == len(s.events) {
		s.events, s.head = s.events[:0], 0
	}
	return ev, true
}

// Next returns the next event, io.EOF after the last one, or ctx's error.
func (s *Stream) Next(ctx context.Context) (Event, error) {
	for {
		s.mu.Lock()
		ev, ok := s.pop()
		ended := s.ended
		s.mu.Unlock()
		if ok {
			return ev, nil
		}
		if ended {
			return Event{}, io.EOF
		}
		select {
		case <-s.notify:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// TryNext returns the next event if one is queued, without waiting; ok is
// false when none is (after the last event, always).
func (s *Stream) TryNext() (ev Event, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pop()
}

// Ended reports whether the request's last event has been delivered to the
// stream: the engine is done with it, and what is left is for the reader.
func (s *Stream) Ended() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

// Abort asks the engine to abort the request: it leaves the queue, or its KV
// and cache locks are released at the next iteration boundary. It is a no-op
// once the request has finished.
func (s *Stream) Abort() { s.engine.abort(s.req) }

// Disconnect tells the engine the request's client left: SGLang aborts the
// request only later (2 s later for a stream; for a client that waited for
// one response, when its 4 s wait times out or its next 50-token output
// goes out), and until then it runs. streaming says which kind of client
// it was. It is a no-op once the request has finished.
func (s *Stream) Disconnect(streaming bool) {
	s.engine.do(func(at time.Duration) { s.engine.ranks[s.req.rank].disconnect(s.req, at, streaming) })
}

// Collect waits for the request's end and returns its last event and its
// whole output, every token in order, waking once rather than per event;
// the events before the last are not kept. It returns ctx's error if ctx
// ends first. The output is the engine's: do not modify it.
func (s *Stream) Collect(ctx context.Context) (last Event, output []int32, err error) {
	s.onlyLast.Store(true)
	for {
		s.mu.Lock()
		if s.ended {
			last = s.final
			s.events, s.head = nil, 0
			s.mu.Unlock()
			// The engine appends to outputs no more once the request ended,
			// which the lock has ordered before this read.
			out := s.req.outputs
			return last, out[:len(out):len(out)], nil
		}
		s.mu.Unlock()
		select {
		case <-s.notify:
		case <-ctx.Done():
			return Event{}, nil, ctx.Err()
		}
	}
}

func (s *Stream) push(ev Event) {
	if ev.Finish == nil && s.onlyLast.Load() {
		return
	}
	s.mu.Lock()
	if len(s.events)-s.head >= maxQueuedEvents {
		s.mergeLast(ev)
	} else {
		s.events = append(s.events, ev)
		s.mergedTokens = false
	}
	if ev.Finish != nil {
		s.ended, s.final = true, ev
	}
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// mergeLast merges ev into the last queued event: the tokens of both, in
// order, and ev's counts, time and finish. The engine's token slices are
// never appended to: the first merge copies them. s.mu is held.
func (s *Stream) mergeLast(ev Event) {
	last := &s.events[len(s.events)-1]
	tokens := last.Tokens
	if !s.mergedTokens {
		tokens = append(make([]int32, 0, 2*(len(tokens)+len(ev.Tokens))), tokens...)
		s.mergedTokens = true
	}
	ev.Tokens = append(tokens, ev.Tokens...)
	*last = ev
}

// Errors from Submit and Flush. The HTTP layer answers each flush outcome
// with SGLang's text (api's flushMessage).
var (
	ErrClosed = errors.New("engine: closed")
	// ErrFlushBusy: a flush that may not wait found requests queued or
	// running.
	ErrFlushBusy = errors.New("engine: flush refused: the server is busy")
	// ErrFlushSettling is ErrFlushBusy when nothing is queued or running
	// but the last iteration that finished a request has not settled
	// (flush_busy_after_finish_s).
	ErrFlushSettling = fmt.Errorf("%w: the last batch is settling", ErrFlushBusy)
	// ErrFlushLockstep is ErrFlushBusy on a DP-attention rank with nothing
	// of its own while another rank runs: it runs idle batches with the
	// others, and SGLang's overlap scheduler holds the last one.
	ErrFlushLockstep = fmt.Errorf("%w: another DP rank runs, and this one runs idle batches in lockstep with it", ErrFlushBusy)
	// ErrFlushTimeout: a flush that waited for idle reached its deadline.
	ErrFlushTimeout = errors.New("engine: flush timed out waiting for idle")
	// ErrFlushInProgress: another flush is waiting for idle.
	ErrFlushInProgress = errors.New("engine: another flush is waiting")
)

// InvalidRequestError is a request SGLang would refuse before scheduling it;
// its message is SGLang's.
type InvalidRequestError struct {
	Message string
	// Scheduler marks a refusal of SGLang's scheduler rather than its
	// tokenizer manager: a prompt of max_req_input_len tokens or more,
	// which the scheduler queues already aborted (validate_input_length,
	// status 400, its prompt replaced by one token), so that an OpenAI
	// stream answers it with HTTP 200 and an error event.
	Scheduler bool
}

func (e *InvalidRequestError) Error() string { return e.Message }

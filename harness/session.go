package harness

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/sglmock/sglmock/compat"
	"github.com/sglmock/sglmock/sim"
)

// FlushPolicy says how a method empties the prefix cache before a leg.
// Real SGLang refuses a flush sent right after a response for a short
// while (HTTP 400 "Flush cache failed."), so a refused flush is retried;
// Retries 0 is the script that tries once. Timeout > 0 sends
// /flush_cache?timeout=S, which makes the server wait up to S of its
// seconds for idle.
type FlushPolicy struct {
	Retries   int
	RetryWait time.Duration
	Timeout   float64
}

// FlushRecord is the flush before one leg: every attempt, in order.
type FlushRecord struct {
	Attempts []FlushAttempt `json:"attempts"`
}

// OK tells whether the last attempt was accepted.
func (r *FlushRecord) OK() bool {
	return len(r.Attempts) > 0 && r.Attempts[len(r.Attempts)-1].OK()
}

// Progress is told what the harness is doing; the command shows a status
// line on a terminal and prints each row as it finishes.
type Progress interface {
	// Start announces the number of legs in the run.
	Start(legs int)
	// Leg announces the leg about to be sent and the time the run is
	// predicted to take from now, this leg included.
	Leg(desc string, left ETA)
	// Done says a leg finished.
	Done()
	// Row says a row finished: the last of rep.Rows, or of rep.Stream.
	// rep is the report so far; it must not be kept past the call.
	Row(rep *Report)
	// Finish ends the display.
	Finish()
}

// NoProgress shows nothing.
type NoProgress struct{}

func (NoProgress) Start(int)       {}
func (NoProgress) Leg(string, ETA) {}
func (NoProgress) Done()           {}
func (NoProgress) Row(*Report)     {}
func (NoProgress) Finish()         {}

// newID is a random UUID: a nonce no earlier prompt can share.
func newID() string { return uuid.NewString() }

// tracker is the session's side of Progress: it holds the run's plan,
// times each leg on the wall clock and predicts the time left before each
// leg is sent.
type tracker struct {
	p   Progress
	now func() time.Time
	// speedup turns the model's simulated seconds into wall seconds.
	speedup float64
	// model is the server's cost model; nil when there is none.
	model    Predictor
	plan     []plannedLeg
	next     int
	legStart time.Time
	done     []doneLeg
}

// doneLeg is a leg of the plan and the wall seconds it took, its flush
// included.
type doneLeg struct {
	leg     plannedLeg
	seconds float64
}

func newTracker(p Progress) *tracker {
	if p == nil {
		p = NoProgress{}
	}
	return &tracker{p: p, now: time.Now, speedup: 1}
}

// Start announces the run's legs, in the order they are sent.
func (t *tracker) Start(plan []plannedLeg) {
	t.plan = plan
	t.p.Start(len(plan))
}

// Leg announces the next leg of the plan, with the time left.
func (t *tracker) Leg(desc string) {
	t.legStart = t.now()
	t.p.Leg(desc, t.eta())
}

// Done records the leg's wall time.
func (t *tracker) Done() {
	if t.next < len(t.plan) {
		t.done = append(t.done, doneLeg{t.plan[t.next], t.now().Sub(t.legStart).Seconds()})
	}
	t.next++
	t.p.Done()
}

func (t *tracker) Row(rep *Report) { t.p.Row(rep) }
func (t *tracker) Finish()         { t.p.Finish() }

// Options are what every method shares.
type Options struct {
	// Flush is how a flush before a leg is made and retried.
	Flush FlushPolicy
	// AllowSharedPrefix tolerates this many reused tokens beyond the
	// measured shared floor before a leg counts as poisoned.
	AllowSharedPrefix int
	// Progress is told about each leg; nil shows nothing.
	Progress Progress
	// NewID makes nonces and rids; nil means random UUIDs. Tests pass a
	// counter so the output is deterministic.
	NewID func() string
	// CostModel turns the server's /sim/profile into the cost model that
	// predicts the time left (the dry run's). nil, a failure or a server
	// without /sim/ leaves the prediction to the legs done so far.
	CostModel func(*sim.Profile) (Predictor, error)
}

// Server describes the server a report was measured on.
type Server struct {
	Backend Backend `json:"backend"`
	// Mock is the sglmock profile name, "" for a server without /sim/.
	Mock string `json:"mock,omitempty"`
	// Speedup converts the wall clock to the server's simulated seconds;
	// 1 for a real server.
	Speedup float64 `json:"speedup"`
	// SharedFloor is the cached tokens two unrelated nonce prompts share
	// (a BOS token, a chat template's head); -1 when the server reports
	// no cached tokens.
	SharedFloor int `json:"shared_floor"`
	// DPRanks is how many DP ranks the server runs, each with a prefix
	// cache of its own (placement.go); 0 for one, or when it does not say.
	DPRanks int `json:"dp_ranks,omitempty"`
	// HiCacheStorage is the server's HiCache storage backend, which
	// /flush_cache does not clear ("" for none, or not asked: only the
	// flush method asks).
	HiCacheStorage string `json:"hicache_storage_backend,omitempty"`
	// SGLangVersion is the "version" an SGLang server's /server_info
	// reports, "" when it reports none; the rules of that release decide
	// what a method may rely on (package compat).
	SGLangVersion string `json:"sglang_version,omitempty"`
}

// session is one run against one server: the client, the prompt builder,
// what /sim/ says, the measured shared floor.
type session struct {
	c        *Client
	opt      Options
	prog     *tracker
	builder  *promptBuilder
	sim      *sim.Profile
	server   Server
	expected map[[3]int]*sim.Expectation
	// reportsCached: a repeated prompt reported its reuse, so a missing
	// cached_tokens means 0.
	reportsCached bool
	// notes are findings of the session (the floor probe's) that every row
	// carries.
	notes []Cause
}

// MaxTokens bounds a prompt and an output: far beyond any model's context,
// and small enough that building a prompt cannot exhaust memory.
const MaxTokens = 10_000_000

// maxRepeat bounds --repeat.
const maxRepeat = 10_000

// validateCommon checks what both methods take.
// maxFlushTimeout bounds a flush's ?timeout=: a year of the server's time.
const maxFlushTimeout = 365 * 24 * 3600

func validateCommon(points []Point, opt Options) error {
	if len(points) == 0 {
		return errors.New("no context to measure")
	}
	for _, p := range points {
		if p.Tokens < 16 || p.Tokens > MaxTokens {
			return fmt.Errorf("context %d: a prompt needs 16..%d tokens", p.Tokens, MaxTokens)
		}
	}
	if f := opt.Flush; f.Retries < 0 || f.RetryWait < 0 || !(f.Timeout >= 0 && f.Timeout <= maxFlushTimeout) {
		return fmt.Errorf("flush retries and retry wait must be >= 0 and the timeout a number in 0..%g", float64(maxFlushTimeout))
	}
	return nil
}

// LongestPrompt is the longest prompt a server of context length ctxLen
// takes with maxNew tokens to generate: SGLang refuses a prompt of
// context_length - 6 tokens or more (max_req_input_len) and one whose
// prompt and output pass the context length.
func LongestPrompt(ctxLen, maxNew int) int { return min(ctxLen-7, ctxLen-maxNew) }

// startSession asks the server for /sim/ and its context length, refuses
// a context the server would refuse (before any request is sent), and
// measures the shared floor.
func startSession(ctx context.Context, c *Client, opt Options, points []Point, maxNew int) (*session, error) {
	s, err := newSession(ctx, c, opt)
	if err != nil {
		return nil, err
	}
	if err := checkContexts(ctx, c, points, maxNew); err != nil {
		return nil, err
	}
	if err := s.measureFloor(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// checkContexts refuses a context the server cannot take with maxNew
// tokens of output, from the context length its /v1/models reports
// (max_model_len, as SGLang and vLLM give it); a server that reports none
// is not checked.
func checkContexts(ctx context.Context, c *Client, points []Point, maxNew int) error {
	ctxLen, err := c.ContextLength(ctx)
	if err != nil || ctxLen <= 0 {
		return err
	}
	longest := LongestPrompt(ctxLen, maxNew)
	for _, p := range points {
		if p.Tokens > longest {
			return fmt.Errorf("context %d %w: it is %d, and with %d new tokens the longest prompt it takes is %d tokens",
				p.Tokens, ErrContextTooLong, ctxLen, maxNew, max(longest, 0))
		}
	}
	return nil
}

// ErrContextTooLong is a context the server cannot take.
var ErrContextTooLong = errors.New("does not fit the server's context length")

func newSession(ctx context.Context, c *Client, opt Options) (*session, error) {
	if opt.NewID == nil {
		opt.NewID = newID
	}
	s := &session{c: c, opt: opt, prog: newTracker(opt.Progress), builder: newPromptBuilder(c),
		expected: map[[3]int]*sim.Expectation{}}
	if c.Backend != SGLang && c.Model == "" {
		if err := c.discoverModel(ctx); err != nil {
			return nil, err
		}
	}
	p, err := c.SimInfo(ctx)
	if err != nil {
		return nil, err
	}
	s.sim = p
	s.server = Server{Backend: c.Backend, Speedup: 1}
	ranks, err := c.DPRanks(ctx)
	if err != nil {
		return nil, err
	}
	if ranks > 1 {
		s.server.DPRanks = ranks
	}
	if c.Backend == SGLang {
		if s.server.SGLangVersion, err = c.SGLangVersion(ctx); err != nil {
			return nil, err
		}
	}
	if p != nil {
		s.server.Mock, s.server.Speedup = p.Name, p.Speedup
		s.prog.speedup = p.Speedup
		if opt.CostModel != nil {
			// A profile the command cannot read costs the ETA its model,
			// not the run.
			if m, err := opt.CostModel(p); err == nil {
				s.prog.model = m
			}
		}
	}
	return s, nil
}

// saltCause says why the salt method's legs may not be kept apart: an
// SGLang server before PR #30827 ignores cache_salt on /generate, which
// the method sends it to. The OpenAI routes, which the other backends use,
// take it in every SGLang release.
func (s *session) saltCause() (Cause, bool) {
	if s.c.Backend != SGLang {
		return Cause{}, false
	}
	p, why, ok := generateSaltDoubt(s.server.SGLangVersion)
	if !ok {
		return Cause{}, false
	}
	if p == compat.No {
		why += ", so the salt keeps no leg cold"
	}
	return Cause{Level: Suspect, Text: why + "; keep the legs apart with nonce or flush+nonce"}, true
}

// seconds converts a wall duration to the server's seconds.
func (s *session) seconds(d time.Duration) float64 { return d.Seconds() * s.server.Speedup }

// floorRepeats is how many times the floor probe repeats its nonce: 64
// nonces are 512 token ids, or some 800 tokens of text.
const floorRepeats = 64

// measureFloor sends two prompts that are nothing but two unrelated
// nonces and records the cached tokens of the second: what every prompt
// shares on this server whatever it says (a BOS token, a template's head).
// Only reuse beyond it poisons a leg. A third request repeats the first
// prompt: it must reuse it, which tells whether the server reports cached
// tokens at all. SGLang's OpenAI routes report them only with
// --enable-cache-report and only when they are not 0 (null otherwise), so
// once a repeat has shown a number, a null means 0.
func (s *session) measureFloor(ctx context.Context) error {
	ids := []string{s.opt.NewID(), s.opt.NewID()}
	var gens []*Generation
	for i, id := range []string{ids[0], ids[1], ids[0]} {
		// The nonce repeated to a few hundred tokens: longer than any
		// page, so the repeat reuses whole pages on any page size.
		p := Prompt{Text: strings.Repeat(nonceText(id)+" ", floorRepeats), DPRank: probeRank(s.server.DPRanks)}
		for range floorRepeats {
			p.IDs = append(p.IDs, nonceIDs(id)...)
		}
		g, err := s.c.Generate(ctx, p, 1, fmt.Sprintf("floor-%d-%s", i+1, id), false)
		if err != nil {
			return fmt.Errorf("measuring the shared prefix floor: %w", err)
		}
		gens = append(gens, g)
	}
	for i, g := range gens {
		if bad := impossibleCounts(g); len(bad) > 0 {
			s.server.SharedFloor = -1
			s.notes = append(s.notes, Cause{Level: Suspect, Text: fmt.Sprintf("floor probe %d: the server reported impossible counts: %s, so the shared floor is unknown and reuse is checked against 0", i+1, strings.Join(bad, ", "))})
			return nil
		}
	}
	s.reportsCached = gens[2].CachedKnown && gens[2].CachedTokens > 0
	switch {
	case gens[1].CachedKnown && 2*gens[1].CachedTokens > gens[1].PromptTokens:
		// Two prompts that share nothing but a BOS or a template's head
		// cannot share half their tokens.
		s.server.SharedFloor = -1
		s.notes = append(s.notes, Cause{Level: Suspect, Text: fmt.Sprintf("floor probe: two unrelated prompts reportedly share %d of %d tokens, which no cache does, so the shared floor is unknown and reuse is checked against 0", gens[1].CachedTokens, gens[1].PromptTokens)})
	case gens[1].CachedKnown:
		s.server.SharedFloor = gens[1].CachedTokens
	case s.reportsCached:
		s.server.SharedFloor = 0
	default:
		s.server.SharedFloor = -1
	}
	return nil
}

// cached is a generation's cached tokens, nil when unknown.
func (s *session) cached(g *Generation) *int {
	switch {
	case g.CachedKnown:
		c := g.CachedTokens
		return &c
	case s.reportsCached:
		c := 0
		return &c
	}
	return nil
}

// flush empties the prefix cache as the policy says, retrying refusals
// (HTTP 400) after RetryWait. Any other status ends the tries.
func (s *session) flush(ctx context.Context) (*FlushRecord, error) {
	rec := &FlushRecord{}
	for try := 0; ; try++ {
		a, err := s.c.FlushOnce(ctx, s.opt.Flush.Timeout)
		if err != nil {
			return rec, err
		}
		if err := s.verifyRanks(ctx, &a); err != nil {
			return rec, err
		}
		rec.Attempts = append(rec.Attempts, a)
		if a.OK() || (a.Status != 400 && len(a.RefusedRanks) == 0) || try >= s.opt.Flush.Retries {
			return rec, nil
		}
		t := time.NewTimer(s.opt.Flush.RetryWait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return rec, ctx.Err()
		}
	}
}

// expect fetches (once) the model's prediction for a lone request.
func (s *session) expect(ctx context.Context, prompt, cached, completion int) (*sim.Expectation, error) {
	k := [3]int{prompt, cached, completion}
	if e, ok := s.expected[k]; ok {
		return e, nil
	}
	e, err := s.c.Expect(ctx, prompt, cached, completion)
	if err != nil {
		return nil, err
	}
	s.expected[k] = e
	return e, nil
}

// flushCause describes a flush that was not accepted.
func flushCause(leg string, r *FlushRecord) string {
	last := r.Attempts[len(r.Attempts)-1]
	tries := "1 try"
	if n := len(r.Attempts); n > 1 {
		tries = fmt.Sprintf("%d tries", n)
	}
	if len(last.RefusedRanks) > 0 {
		return fmt.Sprintf("flush before leg %s answered HTTP 200 (the first DP rank's answer) but refused by %s (%s): those ranks' caches were not flushed",
			leg, strings.Join(last.RefusedRanks, ", "), tries)
	}
	verb := "refused"
	if last.Status != 400 {
		verb = "failed"
	}
	cause := fmt.Sprintf("flush before leg %s %s (%s): HTTP %d %q", leg, verb, tries, last.Status, strings.TrimSpace(last.Body))
	if last.Status == http.StatusNotFound {
		cause += " (no flush route: vLLM serves POST /reset_prefix_cache only when started with VLLM_SERVER_DEV_MODE=1; SGLang's is /flush_cache)"
	}
	return cause
}

package engine

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglmock/sglmock/mockserver/profile"
	"github.com/sglmock/sglmock/mockserver/tokenizer"
)

func TestClipMaxNewTokens(t *testing.T) {
	p := &profile.Profile{ContextLength: 1000, MaxTotalTokens: 1000, PageSize: 1}
	tests := []struct {
		name                        string
		ctx, pool, page, in, maxNew int
		want                        int
	}{
		{"fits", 1000, 1000, 1, 10, 500, 500},
		// max_req_len = ctx-1, and one more for the token being computed.
		{"input+max_new = context", 1000, 5000, 1, 10, 990, 988},
		// The pool: page-ceiled input, max_new and a page stay below it.
		{"pool bound", 1000, 1000, 1, 10, 990, 988},
		{"pool bound, page 16", 1000, 1000, 16, 10, 990, 967},
		{"nothing left", 1000, 1000, 1, 999, 1, 0},
	}
	for _, tt := range tests {
		p.ContextLength, p.MaxTotalTokens, p.PageSize = tt.ctx, tt.pool, tt.page
		if got := clipMaxNew(p, tt.in, tt.maxNew); got != tt.want {
			t.Errorf("%s: clipMaxNew(input %d, max_new %d): got %d, want %d", tt.name, tt.in, tt.maxNew, got, tt.want)
		}
	}
	// The engine applies it: a request asking for the whole context
	// generates two tokens fewer and finishes on length.
	synctest.Test(t, func(t *testing.T) {
		p := loadProfile(t, "default")
		e := startEngine(t, Config{Profile: p})
		defer e.Close()
		last, _ := run(t, e, Request{InputIDs: prompt(1, 100), MaxNewTokens: p.ContextLength - 100})
		if want := p.ContextLength - 102; last.CompletionTokens != want || last.Finish.Length != want {
			t.Fatalf("max_new_tokens = context - input: got %d tokens, finish %+v, want %d", last.CompletionTokens, last.Finish, want)
		}
	})
}

func TestTokenRatioDecaysToItsFloor(t *testing.T) {
	// NewTokenRatioTracker.from_server_args: init 0.7 x conservativeness
	// (0.3 under DP attention), floor 0.14 x init, 600 steps between.
	for _, tc := range []struct {
		name                   string
		conservativeness       float64
		init, afterHalf, floor float64
	}{
		{"default", 1, 0.7, 0.7 - 300*(0.7-0.098)/600, 0.098},
		{"dp attention", 0.3, 0.21, 0.21 - 300*(0.21-0.0294)/600, 0.0294},
	} {
		r := newTokenRatio(tc.conservativeness)
		if r.current != tc.init {
			t.Fatalf("%s: initial ratio: got %v, want %v", tc.name, r.current, tc.init)
		}
		for range 300 {
			r.decayStep()
		}
		if math.Abs(r.current-tc.afterHalf) > 1e-12 {
			t.Fatalf("%s: after 300 decode batches: got %v, want %v", tc.name, r.current, tc.afterHalf)
		}
		for range 1000 {
			r.decayStep()
		}
		if math.Abs(r.current-tc.floor) > 1e-12 {
			t.Fatalf("%s: after 1300 decode batches: got %v, want the floor %v", tc.name, r.current, tc.floor)
		}
		r.reset()
		if r.current != tc.init {
			t.Fatalf("%s: reset: got %v, want %v", tc.name, r.current, tc.init)
		}
	}
}

// ratioPool is a 10000-token pool with an 8192-token context.
func ratioPool(t *testing.T) *profile.Profile {
	p := loadProfile(t, "default")
	p.ContextLength, p.MaxTotalTokens = 8192, 10000
	return p
}

// readUntil reads s until an event with at least n completion tokens.
func readUntil(t *testing.T, s *Stream, n int) []Event {
	t.Helper()
	var evs []Event
	for {
		ev, err := s.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
		if ev.CompletionTokens >= n || ev.Finish != nil {
			return evs
		}
	}
}

// A running request reserves only min(remaining output, 4096) x the token
// ratio, which decays from 0.7 by (0.7-0.098)/600 a decode batch. a (100
// prompt tokens, 5000 outputs) runs alone; after j decode rounds b (3000 +
// 4096 + one page = 7097) fits iff 7097 < 10000 - (100+j) - 4096 x (0.7 -
// j x decay), i.e. from j = 21. Once b is refused, no prefill is tried until
// a request finishes (SGLang's batch_is_full), however far the ratio decays.
func TestAdmissionReservesTheExpectedOutput(t *testing.T) {
	for _, tt := range []struct {
		after  int // b arrives while a's round after+1 runs
		admits bool
	}{{30, true}, {10, false}} {
		synctest.Test(t, func(t *testing.T) {
			e := startEngine(t, Config{Profile: ratioPool(t)})
			defer e.Close()
			a := submit(t, e, Request{RID: "a", InputIDs: prompt(1, 100), MaxNewTokens: 5000})
			readUntil(t, a, 1+tt.after)
			b := submit(t, e, Request{RID: "b", InputIDs: prompt(2, 3000), MaxNewTokens: 4096})
			eva, evb := drain(t, a), drain(t, b)
			ta, tb := eva[len(eva)-1].Truth, evb[len(evb)-1].Truth
			want := ta.Finished
			if tt.admits {
				r := ta.Rounds[tt.after] // b is considered when this round ends
				want = r.Start + r.Duration
			}
			if tb.Admitted != want {
				t.Fatalf("b arriving during a's round %d: admitted at %v, want %v (a finished at %v)",
					tt.after+1, tb.Admitted, want, ta.Finished)
			}
			checkDrained(t, e)
		})
	}
}

// When decode runs out of KV, SGLang's retract_decode frees the request it
// prefers least to keep: the fewest outputs, then the longest prompt. a (40
// prompt tokens) and b (20) both ask for 6000 tokens of a 10000 pool; b is
// admitted while a runs, both run until the pool is full after 4970 rounds,
// and a is retracted. Its KV is freed without caching its output; it goes to the
// back of the queue, behind c, which waited; it is prefilled again (its 40
// cached prompt tokens reused, its 4971 outputs recomputed) once b
// finishes, and reports one retraction and its original cached tokens.
func TestRetraction(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		e := startEngine(t, Config{Profile: ratioPool(t), Logger: slog.New(slog.NewTextHandler(&buf, nil))})
		defer e.Close()
		pa := prompt(1, 40)
		a := submit(t, e, Request{RID: "a", InputIDs: pa, MaxNewTokens: 6000})
		b := submit(t, e, Request{RID: "b", InputIDs: prompt(2, 20), MaxNewTokens: 6000})
		evb := readUntil(t, b, 4502)
		c := submit(t, e, Request{RID: "c", InputIDs: prompt(3, 1000), MaxNewTokens: 10})
		eva := drain(t, a)
		evb = append(evb, drain(t, b)...)
		evc := drain(t, c)
		ta, tb, tc := eva[len(eva)-1].Truth, evb[len(evb)-1].Truth, evc[len(evc)-1].Truth

		if aEnd := ta.Prefill[0].Start + ta.Prefill[0].Duration; ta.Admitted != 0 || tb.Admitted != aEnd {
			t.Fatalf("a and b: admitted at %v and %v, want 0 and right after a's prefill (%v)", ta.Admitted, tb.Admitted, aEnd)
		}
		if ta.Retractions != 1 || tb.Retractions != 0 || tc.Retractions != 0 || eva[len(eva)-1].Retractions != 1 {
			t.Fatalf("retractions: a %d (last event %d), b %d, c %d; want 1, 0, 0", ta.Retractions, eva[len(eva)-1].Retractions, tb.Retractions, tc.Retractions)
		}
		if len(ta.Prefill) != 2 || ta.Prefill[1].Prefix != 40 || ta.Prefill[1].Tokens != 4971 {
			t.Fatalf("a's prefills %+v, want a second one recomputing 4971 outputs after its 40 cached prompt tokens", ta.Prefill)
		}
		again := ta.Prefill[1].Start
		if tc.Admitted >= again || again != tb.Finished {
			t.Fatalf("a prefilled again at %v; c admitted at %v and b finished at %v: want c first, a when b finished", again, tc.Admitted, tb.Finished)
		}
		if ta.CachedTokens != 0 || eva[len(eva)-1].CachedTokens != 0 || ta.Admitted != 0 {
			t.Fatalf("a after readmission: cached %d, admitted %v; want its first admission's 0 and 0", ta.CachedTokens, ta.Admitted)
		}
		// Its output is whole and continues where it stopped.
		var out []int32
		for _, ev := range eva {
			out = append(out, ev.Tokens...)
		}
		h := tokenizer.PromptHash(pa)
		for i, tok := range out {
			if tok != builtinTok.OutputToken(h, i) {
				t.Fatalf("a's output token %d: got %d, want %d", i, tok, builtinTok.OutputToken(h, i))
			}
		}
		if len(out) != 6000 || ta.CompletionTokens != 6000 {
			t.Fatalf("a: %d tokens streamed, %d reported, want 6000", len(out), ta.CompletionTokens)
		}
		// SGLang's retraction counters: one request, its 40 prompt tokens
		// and the 4971 outputs it had.
		if st := e.Stats(); st.RetractedRequests != 1 || st.RetractedInputTokens != 40 || st.RetractedOutputTokens != 4971 {
			t.Fatalf("retraction counters: %d requests, %d input, %d output tokens; want 1, 40, 4971",
				st.RetractedRequests, st.RetractedInputTokens, st.RetractedOutputTokens)
		}
		const warn = "KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_tokens_gained: 4970, #new_token_ratio: 0.0980 -> 0.8317"
		if !strings.Contains(buf.String(), warn) {
			t.Fatalf("log lacks %q", warn)
		}
		checkDrained(t, e)
	})
}

// Used tokens are SGLang's num_used_tokens: the pool less its free slots
// and the evictable cache. An idle server holding a cached prompt uses
// nothing; a running request uses its locked prefix and its own KV.
func TestUsedTokensLeaveOutTheEvictableCache(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := loadProfile(t, "default")
		p.ChunkedPrefillSize = 4096
		e := startEngine(t, Config{Profile: p})
		defer e.Close()
		run(t, e, Request{RID: "big", InputIDs: prompt(1, 10000), MaxNewTokens: 1})
		st := e.Stats()
		if st.KVUsed != 0 || st.CacheTokens != 10000 || st.CacheEvictable != 10000 || st.KVFree != st.KVCapacity-10000 {
			t.Fatalf("idle with a cached prompt: used %d, cache %d (evictable %d), free %d of %d; want 0 used", st.KVUsed, st.CacheTokens, st.CacheEvictable, st.KVFree, st.KVCapacity)
		}
		a := submit(t, e, Request{RID: "a", InputIDs: prompt(2, 3000), MaxNewTokens: 1000})
		evs := readUntil(t, a, 11)
		time.Sleep(time.Microsecond) // the 11th token's round is over; the 12th is in flight
		st = e.Stats()
		// a holds its 3000 prompt tokens (locked in the cache) and 10 of its
		// 11 outputs; the next round has allocated one more.
		if want := 3000 + 10 + 1; st.KVUsed != want || st.CacheEvictable != 10000 || st.KVFree != st.KVCapacity-want-10000 {
			t.Fatalf("a running after %d tokens: used %d, evictable %d, free %d; want used %d", evs[len(evs)-1].CompletionTokens, st.KVUsed, st.CacheEvictable, st.KVFree, want)
		}
		// A long prompt prefilled in chunks is counted as chunked and running.
		b := submit(t, e, Request{RID: "b", InputIDs: prompt(3, 9000), MaxNewTokens: 1})
		time.Sleep(50 * time.Millisecond)
		if st := e.Stats(); st.Prefilling != 1 || st.Running != 2 || st.QueuedTokens != 0 {
			t.Fatalf("b in chunked prefill: prefilling %d, running %d, queued tokens %d; want 1, 2 (a and b), 0", st.Prefilling, st.Running, st.QueuedTokens)
		}
		drain(t, b)
		a.Abort()
		drain(t, a)
		checkDrained(t, e)
	})
}

// outputsAt counts the tokens t had at simulated time at: the prefill's
// first token and every round that had ended by then.
func outputsAt(t *Truth, at time.Duration) int {
	n := 0
	if len(t.Prefill) > 0 {
		n = 1
	}
	for _, r := range t.Rounds {
		if r.Start+r.Duration <= at {
			n += r.Gained * r.Count
		}
	}
	return n
}

// Under speculative decoding SGLang's retract_decode does not sort the
// batch: it retracts from its back. a is admitted first and b right after
// it; with their own acceptance draws b has generated more than a when the
// pool runs out, yet b, the request that joined last, is retracted (sorting
// by output would have retracted a).
func TestSpeculativeRetractionTakesTheBackOfTheBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := loadProfile(t, "llama-8b-eagle3-h100")
		p.ContextLength, p.MaxTotalTokens = 8192, 10000
		e := startEngine(t, Config{Profile: p})
		defer e.Close()
		a := submit(t, e, Request{RID: "a", InputIDs: prompt(1, 20), MaxNewTokens: 6000})
		b := submit(t, e, Request{RID: "b", InputIDs: prompt(2, 40), MaxNewTokens: 6000})
		eva, evb := drain(t, a), drain(t, b)
		ta, tb := eva[len(eva)-1].Truth, evb[len(evb)-1].Truth
		if ta.Retractions != 0 || tb.Retractions != 1 || len(tb.Prefill) != 2 {
			t.Fatalf("retractions: a %d, b %d (b prefilled %d times); want b, the back of the batch, retracted once", ta.Retractions, tb.Retractions, len(tb.Prefill))
		}
		// The retraction came when b's last round before it ended.
		var at time.Duration
		for _, r := range tb.Rounds {
			if r.Start < tb.Prefill[1].Start {
				at = max(at, r.Start+r.Duration)
			}
		}
		if oa, ob := outputsAt(ta, at), outputsAt(tb, at); oa != 4919 || ob != 5011 {
			t.Fatalf("outputs when the pool ran out at %v: a %d, b %d; want 4919 and 5011 (b ahead of a)", at, oa, ob)
		}
		if ta.CompletionTokens != 6000 || tb.CompletionTokens != 6000 {
			t.Fatalf("completion tokens: a %d, b %d, want 6000 each", ta.CompletionTokens, tb.CompletionTokens)
		}
		checkDrained(t, e)
	})
}

// A lone request that still cannot get its decode KV once every other
// request is retracted is aborted by SGLang's retract_decode with status
// 500. Under EAGLE3 a round reserves 2 x max(3 x 1, 4) = 8 slots; a
// 100-token prompt in a 1000-token pool asks for 898 tokens, all the pool
// allows (init_req_max_new_tokens), but once fewer than 8 slots are free,
// at 894 or more outputs, the next round does not fit and nothing is left
// to retract. Its KV is freed without caching its output.
func TestLoneRequestOutOfMemoryIsAborted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		p := loadProfile(t, "llama-8b-eagle3-h100")
		p.ContextLength, p.MaxTotalTokens = 1000, 1000
		e := startEngine(t, Config{Profile: p, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
		defer e.Close()
		last, _ := run(t, e, Request{RID: "a", InputIDs: prompt(1, 100), MaxNewTokens: 898})
		f, tr := last.Finish, last.Truth
		if f.Reason != FinishAbort || f.Message != OutOfMemoryMessage || f.StatusCode != 500 {
			t.Fatalf("finish %+v, want SGLang's out-of-memory abort with status 500", *f)
		}
		// Before the last round it had < 894 outputs, so that round fit.
		n := tr.CompletionTokens
		lastRound := tr.Rounds[len(tr.Rounds)-1]
		if free := 1000 - (100 + n - 1); n < 894 || n > 897 || n-lastRound.Gained >= 894 || free >= 8 {
			t.Fatalf("aborted with %d outputs (%d free slots, the last round gave %d); want the first count at which fewer than 8 slots are free",
				n, free, lastRound.Gained)
		}
		if st := e.Stats(); st.Aborted != 1 || st.Requests != 1 {
			t.Fatalf("counters: %d aborted of %d, want 1 of 1", st.Aborted, st.Requests)
		}
		// Its KV is released without being cached (release_req, is_insert
		// False): the prompt its prefill inserted stays (99 bigrams, EAGLE3
		// keying the tree on them), its outputs do not.
		if st := e.Stats(); st.CacheTokens != 99 {
			t.Fatalf("cache after the abort: %d tokens, want the prompt's 99 bigrams", st.CacheTokens)
		}
		if !strings.Contains(buf.String(), OutOfMemoryMessage) {
			t.Fatalf("log lacks %q", OutOfMemoryMessage)
		}
		checkDrained(t, e)
	})
}

// Without the radix cache SGLang admits ignore_eos requests through
// add_one_req_ignore_eos (bench_serving sends ignore_eos by default), which
// reserves every request's whole output and admits a request only if the
// batch, sorted by what each may still generate, can run to its end. With
// a 40000-token pool, eight requests of 1000 prompt and 8000 output
// tokens: the first runs alone; the next prefill admits three more, and the
// fifth would leave 40000 - 1000 - 3 x 1001 - 1000 - 5 x 7999 = -4998 <=
// 5 slots for its batch of five; so the last four wait until the first
// finishes, and nothing is ever retracted. PrefillAdder's usual test (the
// output clipped to 4096 and scaled by 0.7) admits more and retracts.
func TestIgnoreEOSAdmissionWithoutRadixCache(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := loadProfile(t, "default")
		p.MaxTotalTokens = 40000
		e := startEngine(t, Config{Profile: p, DisableRadixCache: true})
		defer e.Close()
		var streams []*Stream
		for i := range 8 {
			streams = append(streams, submit(t, e, Request{RID: fmt.Sprint(i), InputIDs: prompt(int32(i), 1000), MaxNewTokens: 8000, IgnoreEOS: true}))
		}
		var truths []*Truth
		for _, s := range streams {
			evs := drain(t, s)
			truths = append(truths, evs[len(evs)-1].Truth)
		}
		first := truths[0].Prefill[0]
		for i, tr := range truths {
			want := first.Start + first.Duration // the second prefill batch
			switch {
			case i == 0:
				want = 0
			case i >= 4:
				want = truths[0].Finished
			}
			if tr.Admitted != want || tr.Retractions != 0 || tr.CompletionTokens != 8000 {
				t.Fatalf("request %d: admitted at %v with %d retractions, %d tokens; want admitted at %v, never retracted, 8000 tokens",
					i, tr.Admitted, tr.Retractions, tr.CompletionTokens, want)
			}
		}
		checkDrained(t, e)
	})
}

// A log point takes the KV pool's split and the last retraction's count,
// which it then clears, as SGLang's metrics reporter does; token_usage is
// rounded to two decimals, the unrounded ratio kept beside it.
func TestLogPointTakesPoolAndRetractions(t *testing.T) {
	p := loadProfile(t, "default")
	p.ContextLength, p.MaxTotalTokens = 1000, 1000
	s := newScheduler(p, builtinTok, false, slog.New(slog.DiscardHandler), 40, 0)
	s.tree.Insert("", prompt(1, 300), "a") // cached, unlocked: evictable
	s.privateKV = 125                      // held by requests
	s.report.retracted = 2
	s.logPool()
	got := s.report.logged
	want := SchedulerStats{Logged: true, UsedTokens: 125, AvailableTokens: 575, EvictableTokens: 300, FullTokenUsage: 0.125,
		TokenUsage: 0.12, RetractedReqs: 2}
	if got != want {
		t.Fatalf("logged %+v, want %+v", got, want)
	}
	s.logPool()
	if s.report.logged.RetractedReqs != 0 {
		t.Fatalf("a second log point: %d retracted, want 0", s.report.logged.RetractedReqs)
	}
}

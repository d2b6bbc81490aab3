package engine

import (
	"bytes"
	"context"
	"log/slog"
	"math"
	"math/rand/v2"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglmock/sglmock/mockserver/profile"
)

func TestSpeedupScalesWallTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := loadProfile(t, "kimi-k2.6-rtx6000")
		e := startEngine(t, Config{Profile: p, Speedup: 10})
		defer e.Close()
		last, wall := run(t, e, Request{RID: "a", InputIDs: prompt(1, 45507), MaxNewTokens: 1})
		want := p.Expect(45507, 0, 1).TTFT
		if last.Truth.TTFT() != want {
			t.Fatalf("simulated TTFT: got %v, want %v", last.Truth.TTFT(), want)
		}
		if d := wall - want/10; d < -time.Nanosecond || d > time.Nanosecond {
			t.Fatalf("wall time at speedup 10: got %v, want %v", wall, want/10)
		}
	})
}

// Jitter scales each iteration's modelled cost by max(0, 1 + jitter x z),
// z one standard normal draw per iteration from the seeded jitter stream:
// the durations are exactly that, the same for the same seed, different for
// another, and exactly the model's without jitter (the default).
func TestJitterIsSeededAndOffByDefault(t *testing.T) {
	const promptLen, outputs = 3000, 20
	durations := func(jitter float64, seed uint64) []time.Duration {
		var out []time.Duration
		synctest.Test(t, func(t *testing.T) {
			p := loadProfile(t, "default")
			if p.Jitter != 0 {
				t.Fatalf("the default profile has jitter %v, want 0", p.Jitter)
			}
			p.Jitter, p.Seed = jitter, seed
			e := startEngine(t, Config{Profile: p})
			defer e.Close()
			last, _ := run(t, e, Request{RID: "a", InputIDs: prompt(1, promptLen), MaxNewTokens: outputs})
			out = append(out, last.Truth.Prefill[0].Duration)
			for _, r := range last.Truth.Rounds {
				out = append(out, r.Duration)
			}
		})
		return out
	}
	// model is what the cost model gives, jittered by rng's draws when set.
	model := func(jitter float64, seed uint64) []time.Duration {
		p := loadProfile(t, "default")
		rng := rand.New(rand.NewPCG(seed, jitterStream))
		scale := func(secs float64) time.Duration {
			if jitter != 0 {
				secs *= max(0, 1+jitter*rng.NormFloat64())
			}
			return profile.Duration(secs)
		}
		out := []time.Duration{scale(p.PrefillChunkSeconds(0, promptLen))}
		for i := 1; i < outputs; i++ {
			out = append(out, scale(p.DecodeRoundSeconds(1, promptLen+i)))
		}
		return out
	}
	exact, j1, j1again, j2 := durations(0, 1), durations(0.1, 1), durations(0.1, 1), durations(0.1, 2)
	if want := model(0, 1); !slices.Equal(exact, want) {
		t.Fatalf("without jitter: %v, want the model's %v", exact, want)
	}
	if want := model(0.1, 1); !slices.Equal(j1, want) || slices.Equal(j1, exact) {
		t.Fatalf("jitter 0.1, seed 1: %v, want %v", j1, want)
	}
	if !slices.Equal(j1, j1again) {
		t.Fatal("same seed, same jitter: different timings")
	}
	if want := model(0.1, 2); !slices.Equal(j2, want) || slices.Equal(j1, j2) {
		t.Fatalf("jitter 0.1, seed 2: %v, want %v (and not seed 1's)", j2, want)
	}
}

func TestCountersAndThroughput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := loadProfile(t, "default")
		e := startEngine(t, Config{Profile: p, DecodeLogInterval: 10})
		defer e.Close()
		ids := prompt(1, 1000)
		run(t, e, Request{RID: "a", InputIDs: ids, MaxNewTokens: 11})
		last, _ := run(t, e, Request{RID: "b", InputIDs: ids, MaxNewTokens: 11})
		st := e.Stats()
		want := Counters{Requests: 2, PromptTokens: 2000, CachedTokens: 999, GenerationTokens: 22, CachedDevice: 999}
		if st.Counters != want {
			t.Fatalf("counters: got %+v, want %+v", st.Counters, want)
		}
		// Every 10th decode batch is a decode log: the throughput is the
		// decode tokens (prefill's first token left out) since the last
		// one. a's 10 rounds logged at a's finish; b's 10 rounds, 10 tokens,
		// log at b's finish.
		ta, _ := e.Truth("a")
		b := last.Truth
		elapsed := (b.Finished - ta.Finished).Seconds()
		if got, want := st.LastGenThroughput, 10/elapsed; math.Abs(got-want) > 1e-9*want {
			t.Fatalf("last gen throughput: got %.3f, want %.3f tokens/s (10 tokens over %v)", got, want, b.Finished-ta.Finished)
		}
		// The decode log zeroes the cache hit rate, as SGLang's gauge.
		if st.LastCacheHitRate != 0 {
			t.Fatalf("hit rate after a decode log: got %v, want 0", st.LastCacheHitRate)
		}
		// A prefill batch sets it; a flush keeps it and the throughput.
		run(t, e, Request{RID: "c", InputIDs: ids, MaxNewTokens: 1})
		if err := e.Flush(context.Background(), time.Second, "test"); err != nil { // waits out the overlap window
			t.Fatal(err)
		}
		if after := e.Stats(); after.LastCacheHitRate != 999.0/1000 || after.LastGenThroughput != st.LastGenThroughput {
			t.Fatalf("after a prefill and a flush: hit rate %v, throughput %v; want 0.999 and %v kept", after.LastCacheHitRate, after.LastGenThroughput, st.LastGenThroughput)
		}
	})
}

func TestLogprobStartLenCapsReuse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := startEngine(t, Config{Profile: loadProfile(t, "default")})
		defer e.Close()
		ids := prompt(1, 200)
		run(t, e, Request{RID: "a", InputIDs: ids, MaxNewTokens: 1})
		tests := []struct {
			name       string
			logprob    bool
			start      int
			wantCached int
		}{
			{"no logprobs", false, 0, 199},
			{"logprob_start_len -1", true, -1, 199},
			{"logprob_start_len 50", true, 50, 50},
			{"logprob_start_len 0", true, 0, 0},
		}
		for _, tt := range tests {
			last, _ := run(t, e, Request{InputIDs: ids, MaxNewTokens: 1, ReturnLogprob: tt.logprob, LogprobStartLen: tt.start})
			if last.CachedTokens != tt.wantCached {
				t.Errorf("%s: cached %d, want %d", tt.name, last.CachedTokens, tt.wantCached)
			}
		}
	})
}

func TestNamespacesNeverShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := startEngine(t, Config{Profile: loadProfile(t, "default")})
		defer e.Close()
		ids := prompt(1, 300)
		run(t, e, Request{RID: "a", Namespace: "salt-1", InputIDs: ids, MaxNewTokens: 1})
		other, _ := run(t, e, Request{RID: "b", Namespace: "salt-2", InputIDs: ids, MaxNewTokens: 1})
		same, _ := run(t, e, Request{RID: "c", Namespace: "salt-1", InputIDs: ids, MaxNewTokens: 1})
		if other.CachedTokens != 0 || same.CachedTokens != 299 {
			t.Fatalf("cached: other namespace %d, same namespace %d, want 0 and 299", other.CachedTokens, same.CachedTokens)
		}
	})
}

func TestSGLangLogLines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		logger := slog.New(slog.NewTextHandler(&buf, nil))
		p := loadProfile(t, "llama-8b-eagle3-h100")
		e := startEngine(t, Config{Profile: p, Logger: logger, DecodeLogInterval: 2})
		defer e.Close()
		run(t, e, Request{RID: "a", InputIDs: prompt(1, 300), MaxNewTokens: 30})
		if err := e.Flush(context.Background(), time.Second, "test"); err != nil {
			t.Fatal(err)
		}
		for _, re := range []string{
			`Prefill batch, #new-seq: 1, #new-token: 300, #cached-token: 0, token usage: 0\.00, #running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: False, input throughput \(token/s\): \d+\.\d\d"`,
			`Decode batch, #running-req: 1, #token: \d+, token usage: 0\.00, accept len: \d\.\d\d, accept rate: \d\.\d\d, cuda graph: True, gen throughput \(token/s\): \d+\.\d\d, #queue-req: 0"`,
			`Cache flushed successfully!`,
		} {
			if !regexp.MustCompile(re).Match(buf.Bytes()) {
				t.Errorf("log lacks a line matching %q:\n%s", re, buf.String())
			}
		}
		// SGLang's own log parser (debug_utils/log_parser.py) reads every
		// decode line by "#running-req: N, #token: N".
		parser := regexp.MustCompile(`#running-req: \d+, #token: \d+`)
		decodes := 0
		for line := range strings.Lines(buf.String()) {
			if strings.Contains(line, "Decode batch") {
				decodes++
				if !parser.MatchString(line) {
					t.Errorf("SGLang's log parser cannot read %q", line)
				}
			}
		}
		if decodes == 0 {
			t.Fatal("no decode line logged")
		}
	})
}

func TestNewRejectsBadConfig(t *testing.T) {
	p, err := profile.Load("default")
	if err != nil {
		t.Fatal(err)
	}
	bad := *p
	bad.PageSize = 0
	for name, cfg := range map[string]Config{
		"no profile":       {},
		"invalid profile":  {Profile: &bad},
		"negative speedup": {Profile: p, Speedup: -1},
		"NaN speedup":      {Profile: p, Speedup: math.NaN()},
		"infinite speedup": {Profile: p, Speedup: math.Inf(1)},
		"negative spin":    {Profile: p, SpinWindow: -time.Millisecond},
	} {
		if e, err := New(cfg); err == nil {
			e.Close()
			t.Errorf("%s: got no error", name)
		}
	}
}

// A health check (SGLang's log_metrics=false) stays out of the counters;
// the warmup request, an ordinary request on SGLang, counts. Both stay
// out of Truths, which lists the clients' requests; OnFinish sees all.
func TestInternalRequestsAndCounters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var seen []string
		e := startEngine(t, Config{Profile: loadProfile(t, "default"), OnFinish: func(tr *Truth) { seen = append(seen, tr.RID) }})
		defer e.Close()
		run(t, e, Request{RID: "health", InputIDs: []int32{0}, MaxNewTokens: 1, Internal: true, NoMetrics: true})
		run(t, e, Request{RID: "warmup", InputIDs: prompt(2, 5), MaxNewTokens: 1, Internal: true})
		run(t, e, Request{RID: "user", InputIDs: prompt(1, 10), MaxNewTokens: 2})
		if st := e.Stats(); st.Counters != (Counters{Requests: 2, PromptTokens: 15, GenerationTokens: 3}) {
			t.Fatalf("counters: got %+v, want the warmup and the user request", st.Counters)
		}
		if !slices.Equal(seen, []string{"health", "warmup", "user"}) {
			t.Fatalf("OnFinish saw %q, want every request", seen)
		}
		var listed []string
		for _, tr := range e.Truths() {
			listed = append(listed, tr.RID)
		}
		if !slices.Equal(listed, []string{"user"}) {
			t.Fatalf("Truths lists %q, want the client's request only", listed)
		}
	})
}

// Admission is SGLang's PrefillAdder arithmetic, each KV token counted
// once. a's last chunk (200 of 600) reserves 200+1+100 of what remains
// (1000 - 400 locked = 600), leaving 299; b needs its extend, its output
// and a page (100+N+1) strictly below that: N = 197 joins a's last chunk,
// N = 198 waits for a to finish.
func TestAdmissionFillsThePoolExactly(t *testing.T) {
	for _, tt := range []struct {
		maxNew int
		joins  bool
	}{{197, true}, {198, false}} {
		synctest.Test(t, func(t *testing.T) {
			p := loadProfile(t, "default")
			p.ContextLength, p.MaxTotalTokens, p.ChunkedPrefillSize = 1000, 1000, 400
			e := startEngine(t, Config{Profile: p})
			defer e.Close()
			a := submit(t, e, Request{RID: "a", InputIDs: prompt(1, 600), MaxNewTokens: 100})
			synctest.Wait() // a's first chunk is in flight
			b := submit(t, e, Request{RID: "b", InputIDs: prompt(2, 100), MaxNewTokens: tt.maxNew})
			ea, eb := drain(t, a), drain(t, b)
			ta, tb := ea[len(ea)-1].Truth, eb[len(eb)-1].Truth
			joined := tb.Prefill[0].Start == ta.Prefill[1].Start && tb.Prefill[0].Batch == 2
			if len(ta.Prefill) != 2 || joined != tt.joins || (!tt.joins && tb.Admitted != ta.Finished) {
				t.Fatalf("b with max_new_tokens %d: prefill %+v, admitted %v; a's chunks %+v, finished %v; want joined=%v",
					tt.maxNew, tb.Prefill, tb.Admitted, ta.Prefill, ta.Finished, tt.joins)
			}
			checkDrained(t, e)
		})
	}
}

// Calls served while an iteration runs are stamped with their own time, not
// the iteration's start: a flush's timeout counts from when it was asked, and
// a queued request aborted mid-iteration finishes when it was aborted.
func TestCallsBetweenBoundariesUseTheCurrentTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := loadProfile(t, "kimi-k2.6-rtx6000")
		p.MaxRunningRequests = 1
		e := startEngine(t, Config{Profile: p})
		defer e.Close()
		a := submit(t, e, Request{RID: "a", InputIDs: prompt(1, 45507), MaxNewTokens: 2}) // 23.72 s prefill
		b := submit(t, e, Request{RID: "b", InputIDs: prompt(2, 10), MaxNewTokens: 1})
		time.Sleep(5 * time.Second)
		b.Abort()
		evb := drain(t, b)
		if got := evb[0].Truth.Finished; got != 5*time.Second {
			t.Fatalf("queued request aborted at 5 s: finished at %v", got)
		}
		// Asked at 5 s with 20 s to wait: at the 23.72 s boundary a still
		// decodes, and the deadline (25 s) has not passed; the flush goes
		// through once a's last round has settled (the profile's 50 ms).
		if err := e.Flush(context.Background(), 20*time.Second, "test"); err != nil {
			t.Fatalf("flush asked at 5 s with a 20 s timeout: %v", err)
		}
		eva := drain(t, a)
		hist := e.FlushHistory()
		settled := eva[len(eva)-1].Truth.Finished + p.FlushBusyAfterFinish()
		if len(hist) != 1 || hist[0].At != 5*time.Second || hist[0].Answered != settled {
			t.Fatalf("flush record %+v, want asked at 5 s and answered when a settled (%v)", hist, settled)
		}
	})
}

// Under EAGLE, EAGLE3, NEXTN and FROZEN_KV_MTP SGLang keys the radix cache
// on bigrams: the same 100-token prompt again reuses 98 tokens, not 99;
// other algorithms reuse 99.
func TestEagleFamilyReusesOneTokenLess(t *testing.T) {
	for _, tt := range []struct {
		algorithm string
		cached    int
	}{{"EAGLE", 98}, {"EAGLE3", 98}, {"NEXTN", 98}, {"FROZEN_KV_MTP", 98}, {"DFLASH", 99}, {"NGRAM", 99}, {"", 99}} {
		synctest.Test(t, func(t *testing.T) {
			p := loadProfile(t, "llama-8b-eagle3-h100")
			if tt.algorithm == "" {
				p.Speculative = nil
			} else {
				spec := *p.Speculative
				spec.Algorithm = tt.algorithm
				p.Speculative = &spec
			}
			e := startEngine(t, Config{Profile: p})
			defer e.Close()
			run(t, e, Request{InputIDs: prompt(1, 100), MaxNewTokens: 1})
			again, _ := run(t, e, Request{InputIDs: prompt(1, 100), MaxNewTokens: 1})
			if again.CachedTokens != tt.cached {
				t.Fatalf("%q: the same prompt again: cached %d, want %d", tt.algorithm, again.CachedTokens, tt.cached)
			}
			checkDrained(t, e)
		})
	}
}

// Llama's tokenizer begins every text prompt with BOS (add_bos_token), so
// two prompts that differ from their first character still share one
// cached token under token keys (none under EAGLE3's bigram keys); prompts
// sent as input_ids get no BOS.
func TestBOSIsSharedByTextPrompts(t *testing.T) {
	const rest = " Summarize the two-point method for measuring decode speed."
	for _, tt := range []struct {
		name      string
		addBOS    bool
		eagle3    bool
		ids       bool
		cached    int
		bosPrompt int // tokens added to the text's own
	}{
		{"BOS, token keys", true, false, false, 1, 1},
		{"BOS, EAGLE3 bigram keys", true, true, false, 0, 1},
		{"no BOS", false, false, false, 0, 0},
		{"BOS profile, input_ids", true, false, true, 0, 0},
	} {
		synctest.Test(t, func(t *testing.T) {
			p := loadProfile(t, "llama-8b-eagle3-h100")
			p.AddBOSToken = tt.addBOS
			if !tt.eagle3 {
				p.Speculative = nil
			}
			e := startEngine(t, Config{Profile: p})
			defer e.Close()
			var last Event
			for _, nonce := range []string{"3f2a9c1e", "b71d04aa"} {
				r := Request{Text: nonce + rest, MaxNewTokens: 1}
				if tt.ids {
					r = Request{InputIDs: builtinTok.Encode(nil, r.Text), MaxNewTokens: 1}
				}
				last, _ = run(t, e, r)
			}
			if want := builtinTok.Count("b71d04aa"+rest) + tt.bosPrompt; last.CachedTokens != tt.cached || last.PromptTokens != want {
				t.Fatalf("%s: second nonce-prefixed prompt: cached %d of %d, want %d of %d", tt.name, last.CachedTokens, last.PromptTokens, tt.cached, want)
			}
		})
	}
}

// stallClock is the system clock plus a jump: a host that stalled, or a
// timer that fired late, puts the wall clock ahead of the modelled one.
type stallClock struct{ stall atomic.Int64 }

func (c *stallClock) Now() time.Time { return time.Now().Add(time.Duration(c.stall.Load())) }

// Wall lateness never moves the modelled timeline: while the engine is
// busy, each iteration starts exactly where the last one ended, so a 700 ms
// stall in the middle of two requests leaves every truth as it was.
func TestHostStallLeavesTheTruthUnchanged(t *testing.T) {
	truths := func(stall time.Duration) []*Truth {
		var out []*Truth
		synctest.Test(t, func(t *testing.T) {
			clock := &stallClock{}
			e := startEngine(t, Config{Profile: loadProfile(t, "llama-8b-eagle3-h100"), Clock: clock})
			defer e.Close()
			a := submit(t, e, Request{RID: "a", InputIDs: prompt(1, 3000), MaxNewTokens: 60})
			b := submit(t, e, Request{RID: "b", InputIDs: prompt(2, 2000), MaxNewTokens: 40})
			evs := readUntil(t, a, 10)
			clock.stall.Store(int64(stall)) // the host stalls while both decode
			evs = append(evs, drain(t, a)...)
			evb := drain(t, b)
			out = []*Truth{evs[len(evs)-1].Truth, evb[len(evb)-1].Truth}
		})
		return out
	}
	want, got := truths(0), truths(700*time.Millisecond)
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Fatalf("%s after a 700 ms host stall:\n got %+v\nwant %+v", want[i].RID, got[i], want[i])
		}
	}
	if len(want[0].Rounds) < 10 {
		t.Fatalf("a ran %d decode rounds: the stall did not fall while it decoded", len(want[0].Rounds))
	}
}

// A request that reaches a busy engine while the host runs late has an
// arrival ahead of the modelled clock: it is admitted at the first boundary
// at or after its arrival, here when the idle engine starts at it, never
// before it arrived.
func TestLateArrivalIsNotAdmittedBeforeItArrives(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := &stallClock{}
		e := startEngine(t, Config{Profile: loadProfile(t, "default"), Clock: clock})
		defer e.Close()
		a := submit(t, e, Request{RID: "a", InputIDs: prompt(1, 500), MaxNewTokens: 20})
		readUntil(t, a, 5)
		clock.stall.Store(int64(2 * time.Second))
		c := submit(t, e, Request{RID: "c", InputIDs: prompt(2, 500), MaxNewTokens: 1})
		eva, evc := drain(t, a), drain(t, c)
		ta, tc := eva[len(eva)-1].Truth, evc[len(evc)-1].Truth
		if ta.Finished >= tc.Arrival || tc.Admitted != tc.Arrival {
			t.Fatalf("c arrived at %v (a finished at %v): admitted at %v, want at its arrival", tc.Arrival, ta.Finished, tc.Admitted)
		}
	})
}

// SGLang folds the speculative totals in only at a decode log, every 40
// decode batches: /server_info has no average before the 40th.
func TestSpecAverageFoldsInAtDecodeLogs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := startEngine(t, Config{Profile: loadProfile(t, "llama-8b-eagle3-h100")})
		defer e.Close()
		s := submit(t, e, Request{RID: "a", InputIDs: prompt(1, 100), MaxNewTokens: 1000})
		var evs []Event
		read := func(n int) {
			for len(evs) < n {
				ev, err := s.Next(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				evs = append(evs, ev)
			}
		}
		read(40) // the prefill event and 39 decode rounds
		if st := e.Stats(); st.SpecRounds != 0 || st.AvgSpecAcceptLength != 0 {
			t.Fatalf("after 39 decode batches: %d rounds folded, average %v; want none", st.SpecRounds, st.AvgSpecAcceptLength)
		}
		read(41)
		tokens := 0
		for _, ev := range evs[1:] {
			tokens += len(ev.Tokens)
		}
		if st := e.Stats(); st.SpecRounds != 40 || st.AvgSpecAcceptLength != float64(tokens)/40 || st.SpecAcceptLength != float64(tokens)/40 {
			t.Fatalf("after 40 decode batches: %d rounds, average %v, interval %v; want 40 and %v", st.SpecRounds, st.AvgSpecAcceptLength, st.SpecAcceptLength, float64(tokens)/40)
		}
		s.Abort()
		drain(t, s)
	})
}

// With a zero-cost profile every iteration ends where it starts, so the
// engine always runs behind the wall clock; it must still serve its inbox
// between iterations: stats, a new request and an abort of a request that
// would otherwise decode for millions of rounds all take effect while it
// runs.
func TestZeroCostEngineServesItsInbox(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := loadProfile(t, "default")
		p.Prefill, p.Decode = profile.PrefillCost{}, profile.DecodeCost{}
		p.ContextLength, p.MaxTotalTokens = 1<<24, 1<<24
		p.MaxOutputTokens = 0
		e := startEngine(t, Config{Profile: p})
		defer e.Close()
		endless := submit(t, e, Request{RID: "endless", InputIDs: prompt(1, 10), MaxNewTokens: 1<<24 - 100})
		if _, err := endless.Next(context.Background()); err != nil { // it runs
			t.Fatal(err)
		}
		if st := e.Stats(); st.Running != 1 {
			t.Fatalf("stats while it runs: %d running, want 1", st.Running)
		}
		short, _ := run(t, e, Request{RID: "short", InputIDs: prompt(2, 10), MaxNewTokens: 5})
		if short.Finish.Reason != FinishLength || short.CompletionTokens != 5 {
			t.Fatalf("a request sent while the endless one runs: %+v, want 5 tokens", short.Finish)
		}
		if !e.Abort("endless") {
			t.Fatal("Abort: the endless request is not active")
		}
		evs := drain(t, endless)
		last := evs[len(evs)-1]
		if last.Finish.Reason != FinishAbort || last.CompletionTokens >= 1<<24-100 {
			t.Fatalf("endless request after its abort: %+v after %d tokens, want an abort before its length", *last.Finish, last.CompletionTokens)
		}
		checkDrained(t, e)
	})
}

// The loop polls for a wait only while its polling stays within
// maxSpinShare of the wall time (plus a credit of ten windows): at a
// speedup where every wait is within the window, it polls for a quarter
// of them and sleeps through the rest.
func TestPollingIsBounded(t *testing.T) {
	start := time.Unix(1000, 0)
	e := &Engine{spin: time.Millisecond, spinShare: maxSpinShare, spinEarned: start}
	if e.mayPoll(start, time.Microsecond) {
		t.Fatal("polled with no credit earned")
	}
	if !e.mayPoll(start.Add(4*time.Millisecond), time.Millisecond) || e.spinCredit != 0 {
		t.Fatalf("after 4 ms: got no poll or credit %v, want a 1 ms poll and no credit left", e.spinCredit)
	}
	if e.mayPoll(start.Add(5*time.Millisecond), 300*time.Microsecond) {
		t.Fatal("polled 300 µs on 250 µs of credit")
	}
	e.mayPoll(start.Add(time.Hour), time.Hour)
	if e.spinCredit != 10*time.Millisecond {
		t.Fatalf("credit after an hour: got %v, want the cap of ten windows", e.spinCredit)
	}
	// Waits of 40 µs back to back for a wall second: polled at most a
	// quarter of it, plus the cap.
	e = &Engine{spin: time.Millisecond, spinShare: maxSpinShare, spinEarned: start}
	var polled time.Duration
	for now := start; now.Before(start.Add(time.Second)); now = now.Add(40 * time.Microsecond) {
		if e.mayPoll(now, 40*time.Microsecond) {
			polled += 40 * time.Microsecond
		}
	}
	if limit := time.Second/4 + 10*time.Millisecond; polled > limit || polled < time.Second/4-time.Millisecond {
		t.Fatalf("polled %v of a wall second, want about a quarter (at most %v)", polled, limit)
	}
}

// The engine keeps its own copy of the profile: changing the caller's
// afterwards changes no modelled time.
func TestEngineCopiesItsProfile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := loadProfile(t, "default")
		e := startEngine(t, Config{Profile: p})
		defer e.Close()
		want := profile.Duration(p.PrefillChunkSeconds(0, 10))
		p.Prefill.OverheadS *= 100
		p.MaxRunningRequests = 0
		if e.Profile() == p {
			t.Fatal("the engine returns the caller's profile, want its own copy")
		}
		last, took := run(t, e, Request{InputIDs: prompt(2, 10), MaxNewTokens: 1})
		if took != want || last.Truth.TTFT() != want {
			t.Fatalf("TTFT after the caller changed its profile: got %v (%v), want the original %v", took, last.Truth.TTFT(), want)
		}
	})
}

// tickingClock moves its reading forward by step on every read: as if the
// host spent step of wall time between any two looks at the clock.
type tickingClock struct {
	base time.Time
	step time.Duration
	n    atomic.Int64
}

func (c *tickingClock) Now() time.Time { return c.base.Add(time.Duration(c.n.Add(1)) * c.step) }

// The time Submit spends on the caller's goroutine (tokenizing, validating)
// is the mock's own CPU, not the model's: an idle engine admits a request
// at its arrival however long that took on the wall.
func TestSubmitsOwnTimeIsNotQueueTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := &tickingClock{base: time.Now(), step: time.Millisecond}
		e := startEngine(t, Config{Profile: loadProfile(t, "default"), Clock: clock})
		defer e.Close()
		evs := drain(t, submit(t, e, Request{RID: "a", Text: strings.Repeat("Once upon a time ", 50), MaxNewTokens: 1}))
		tr := evs[len(evs)-1].Truth
		if tr.Admitted != tr.Arrival {
			t.Fatalf("arrived at %v, admitted at %v: want admitted at its arrival", tr.Arrival, tr.Admitted)
		}
	})
}

// SubmitAt counts a request from the arrival it is given (the HTTP layer's
// time its body had arrived), never from the future.
func TestSubmitAtCountsFromTheArrivalGiven(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := &tickingClock{base: time.Now(), step: time.Millisecond}
		e := startEngine(t, Config{Profile: loadProfile(t, "default"), Clock: clock})
		defer e.Close()
		truth := func(rid string, arrival time.Duration) *Truth {
			s, err := e.SubmitAt(Request{RID: rid, InputIDs: prompt(int32(len(rid)), 100), MaxNewTokens: 1}, arrival)
			if err != nil {
				t.Fatal(err)
			}
			evs := drain(t, s)
			return evs[len(evs)-1].Truth
		}
		early := e.Now() // every later read of the clock is 1 ms on
		if tr := truth("early", early); tr.Arrival != early || tr.Admitted != early {
			t.Errorf("arrived at %v, admitted at %v: want both at %v", tr.Arrival, tr.Admitted, early)
		}
		before := e.Now()
		if tr := truth("future", time.Hour); tr.Arrival <= before || tr.Arrival >= time.Hour {
			t.Errorf("an arrival in the future: arrived at %v, want the moment of the call, just after %v", tr.Arrival, before)
		}
	})
}

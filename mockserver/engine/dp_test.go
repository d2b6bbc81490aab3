package engine

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglmock/sglmock/mockserver/profile"
)

// dpProfile is the default profile on dp ranks; with attention, under DP
// attention on tp = dp GPUs.
func dpProfile(t *testing.T, dp int, attention bool) *profile.Profile {
	t.Helper()
	p := loadProfile(t, "default")
	p.DPSize, p.EnableDPAttention = dp, attention
	if attention {
		p.TPSize = dp
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	return p
}

func rank(r int) *int { return &r }

// TestRoundRobinPlacesRepeatsOnOtherRanks: SGLang's round_robin_scheduler
// gives each request the next rank, so the same prompt sent twice in a row
// on two ranks is cold the second time, and warm the third.
func TestRoundRobinPlacesRepeatsOnOtherRanks(t *testing.T) {
	for _, attention := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			e := startEngine(t, Config{Profile: dpProfile(t, 2, attention)})
			defer e.Close()
			ids := prompt(1, 100)
			for i, want := range []struct{ rank, cached int }{{0, 0}, {1, 0}, {0, 99}, {1, 99}} {
				last, _ := run(t, e, Request{InputIDs: ids, MaxNewTokens: 2})
				if last.Truth.DPRank != want.rank || last.CachedTokens != want.cached {
					t.Fatalf("attention %v, request %d: got rank %d, %d cached, want rank %d, %d cached",
						attention, i+1, last.Truth.DPRank, last.CachedTokens, want.rank, want.cached)
				}
			}
			checkDrained(t, e)
		})
	}
}

// TestRoutedDPRankPins: a routed request goes to its rank, and the round
// robin counter does not move for it (maybe_external_dp_rank_routing
// returns before round_robin_scheduler counts).
func TestRoutedDPRankPins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := startEngine(t, Config{Profile: dpProfile(t, 3, true)})
		defer e.Close()
		for i, tc := range []struct {
			routed *int
			want   int
		}{{rank(2), 2}, {nil, 0}, {rank(0), 0}, {nil, 1}, {nil, 2}, {nil, 0}} {
			last, _ := run(t, e, Request{InputIDs: prompt(int32(i), 20), MaxNewTokens: 1, RoutedDPRank: tc.routed})
			if last.Truth.DPRank != tc.want {
				t.Fatalf("request %d: got rank %d, want %d", i+1, last.Truth.DPRank, tc.want)
			}
		}
	})
}

// TestRoutedDPRankIsChecked: the tokenizer manager's check, with its
// message; 0 on one rank is ignored.
func TestRoutedDPRankIsChecked(t *testing.T) {
	for _, tc := range []struct {
		dp     int
		routed int
		err    string
	}{
		{1, 0, ""},
		{1, 1, "routed_dp_rank=1 out of range [0, 1)"},
		{1, -1, "routed_dp_rank=-1 out of range [0, 1)"},
		{2, 1, ""},
		{2, 2, "routed_dp_rank=2 out of range [0, 2)"},
		{2, -1, "routed_dp_rank=-1 out of range [0, 2)"},
	} {
		synctest.Test(t, func(t *testing.T) {
			e := startEngine(t, Config{Profile: dpProfile(t, tc.dp, tc.dp > 1)})
			defer e.Close()
			st, err := e.Submit(Request{InputIDs: prompt(1, 10), MaxNewTokens: 1, RoutedDPRank: rank(tc.routed)})
			var ire *InvalidRequestError
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("dp %d, routed %d: got %v, want it accepted", tc.dp, tc.routed, err)
			case tc.err == "":
				drain(t, st)
			case !errors.As(err, &ire) || ire.Message != tc.err:
				t.Fatalf("dp %d, routed %d: got %v, want %q", tc.dp, tc.routed, err, tc.err)
			}
			checkDrained(t, e)
		})
	}
}

// TestLoadBalancedDispatch: total_requests and total_tokens send a request
// to the rank with the least load in the controller's budget, which counts
// one request (and its prompt) for each request sent there and takes each
// rank's own report after every batch it runs (DPBudget.dispatch and
// update_budget); round_robin takes turns whatever the load.
func TestLoadBalancedDispatch(t *testing.T) {
	for _, tc := range []struct {
		method string
		want   []int
	}{
		// Three requests go to ranks 0, 1 and 2, the first soon done. At
		// 1 s rank 0 has reported nothing running, the others one request
		// each: the fourth goes to rank 0, and so does the fifth (a tie
		// with ranks 1 and 2 goes to the lowest).
		{profile.TotalRequests, []int{0, 1, 2, 0, 0}},
		// By tokens: the fourth's 500-token prompt puts rank 0 above rank
		// 2, which holds a 100-token prompt and some 245 outputs.
		{profile.TotalTokens, []int{0, 1, 2, 0, 2}},
		{profile.RoundRobin, []int{0, 1, 2, 0, 1}},
	} {
		synctest.Test(t, func(t *testing.T) {
			p := dpProfile(t, 3, false)
			p.LoadBalanceMethod = tc.method
			e := startEngine(t, Config{Profile: p})
			defer e.Close()
			var streams []*Stream
			for i, r := range []struct{ prompt, out int }{{300, 5}, {200, 500}, {100, 500}} {
				streams = append(streams, submit(t, e, Request{InputIDs: prompt(int32(i), r.prompt), MaxNewTokens: r.out}))
			}
			time.Sleep(time.Second)
			for i, n := range []int{500, 50} {
				streams = append(streams, submit(t, e, Request{InputIDs: prompt(int32(10+i), n), MaxNewTokens: 1}))
			}
			for i, st := range streams {
				evs := drain(t, st)
				if got := evs[len(evs)-1].Truth.DPRank; got != tc.want[i] {
					t.Fatalf("%s: request %d: got rank %d, want %d", tc.method, i+1, got, tc.want[i])
				}
			}
			checkDrained(t, e)
		})
	}
}

// TestDPAttentionRunsRanksInLockstep: under DP attention an iteration lasts
// as long as the slowest rank's batch, and a request that reaches an idle
// rank while another runs waits for the iteration's end; plain DP ranks run
// on their own timelines. Under DP attention each rank prefills
// chunked_prefill_size / dp_size tokens a batch (8192 / 2).
func TestDPAttentionRunsRanksInLockstep(t *testing.T) {
	for _, attention := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			p := dpProfile(t, 2, attention)
			e := startEngine(t, Config{Profile: p})
			defer e.Close()
			long := submit(t, e, Request{InputIDs: prompt(1, 6000), MaxNewTokens: 1})
			const late = time.Millisecond
			time.Sleep(late)
			short := submit(t, e, Request{InputIDs: prompt(2, 100), MaxNewTokens: 1})
			lastLong, lastShort := drain(t, long), drain(t, short)
			ttftLong, ttftShort := lastLong[0].Truth.TTFT(), lastShort[0].Truth.TTFT()
			shortCost := profile.Duration(p.PrefillChunkSeconds(0, 100))
			var wantLong, wantShort time.Duration
			if attention {
				// 6000 tokens in chunks of 4096 and 1904; the short prompt
				// joins the second, which lasts as long as the longer.
				first, second := profile.Duration(p.PrefillChunkSeconds(0, 4096)), profile.Duration(p.PrefillChunkSeconds(4096, 1904))
				wantLong, wantShort = first+second, first-late+max(second, shortCost)
			} else {
				wantLong, wantShort = profile.Duration(p.PrefillChunkSeconds(0, 6000)), shortCost
			}
			if ttftLong != wantLong || ttftShort != wantShort {
				t.Fatalf("attention %v: TTFTs got %v and %v, want %v and %v", attention, ttftLong, ttftShort, wantLong, wantShort)
			}
			if c := lastShort[0].Truth.Prefill[0].Cost; c != shortCost {
				t.Fatalf("attention %v: the short chunk's own cost: got %v, want %v", attention, c, shortCost)
			}
		})
	}
}

// TestPlainDPRankStartsWhileAnotherRuns: without DP attention a request
// for an idle rank starts when it arrives, while another rank is in the
// middle of an iteration.
func TestPlainDPRankStartsWhileAnotherRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := dpProfile(t, 2, false)
		e := startEngine(t, Config{Profile: p})
		defer e.Close()
		long := submit(t, e, Request{InputIDs: prompt(1, 8000), MaxNewTokens: 1})
		time.Sleep(50 * time.Millisecond)
		last, took := run(t, e, Request{InputIDs: prompt(2, 100), MaxNewTokens: 1})
		if want := profile.Duration(p.PrefillChunkSeconds(0, 100)); took != want || last.Truth.DPRank != 1 {
			t.Fatalf("got rank %d, %v, want rank 1, %v", last.Truth.DPRank, took, want)
		}
		drain(t, long)
	})
}

// TestSpeculativeDPAttentionDoesNotMixPrefillAndDecode: with speculative
// decoding under DP attention a prefill on one rank makes the others run an
// idle batch instead of decoding (get_next_batch_to_run); without
// speculative decoding a decoding rank decodes through the other's prefill.
func TestSpeculativeDPAttentionDoesNotMixPrefillAndDecode(t *testing.T) {
	for _, spec := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			p := dpProfile(t, 2, true)
			if spec {
				p.Speculative = &profile.Speculative{Algorithm: "NGRAM", NumSteps: 1, EagleTopK: 1, NumDraftTokens: 2,
					AcceptProbs: []float64{0}, RoundCostFactor: 1}
			}
			e := startEngine(t, Config{Profile: p})
			defer e.Close()
			dec := submit(t, e, Request{InputIDs: prompt(1, 10), MaxNewTokens: 200})
			time.Sleep(100 * time.Millisecond)
			pre := submit(t, e, Request{InputIDs: prompt(2, 4000), MaxNewTokens: 1})
			lastPre := drain(t, pre)[0].Truth
			var lastDec *Truth
			for _, ev := range drain(t, dec) {
				lastDec = ev.Truth
			}
			chunk := lastPre.Prefill[0]
			decoded := false
			for _, r := range lastDec.Rounds {
				if r.Start == chunk.Start {
					decoded = true
					if r.Duration != chunk.Duration {
						t.Fatalf("spec %v: the round beside the prefill lasts %v, want the batch's %v", spec, r.Duration, chunk.Duration)
					}
				}
			}
			if decoded == spec {
				t.Fatalf("spec %v: the decoding rank decoded during the other's prefill: %v, want %v", spec, decoded, !spec)
			}
		})
	}
}

// TestDPAttentionDividesRunningRequests: each rank runs
// max_running_requests // dp_size requests (4 / 2 here), so a third
// request on a rank waits.
func TestDPAttentionDividesRunningRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := dpProfile(t, 2, true)
		p.MaxRunningRequests = 4
		e := startEngine(t, Config{Profile: p})
		defer e.Close()
		var streams []*Stream
		for i := range 3 {
			streams = append(streams, submit(t, e, Request{InputIDs: prompt(int32(i), 10), MaxNewTokens: 1000, RoutedDPRank: rank(0)}))
		}
		time.Sleep(time.Second)
		st := e.RankStats()
		if st[0].Running != 2 || st[0].Queued != 1 || st[1].Running != 0 {
			t.Fatalf("rank 0 runs %d with %d queued, rank 1 runs %d; want 2, 1 and 0", st[0].Running, st[0].Queued, st[1].Running)
		}
		for _, s := range streams {
			drain(t, s)
		}
	})
}

// busyRank starts a request on rank r that decodes for a while, and waits
// until it runs.
func busyRank(t *testing.T, e *Engine, r int) *Stream {
	t.Helper()
	s := submit(t, e, Request{InputIDs: prompt(99, 10), MaxNewTokens: 1000, RoutedDPRank: rank(r)})
	time.Sleep(100 * time.Millisecond)
	return s
}

// TestFlushAnswerIsTheFirstRank's: SGLang's tokenizer manager waits for
// every rank's answer and returns the first; ranks answering at once come
// in rank order. A busy rank 1 refuses while rank 0 flushes, and the flush
// is answered 200 with rank 1's cache intact; a busy rank 0 refuses first.
func TestFlushAnswerIsTheFirstRanks(t *testing.T) {
	for _, tc := range []struct {
		busy int
		want error
	}{{1, nil}, {0, ErrFlushBusy}} {
		synctest.Test(t, func(t *testing.T) {
			e := startEngine(t, Config{Profile: dpProfile(t, 2, false)})
			defer e.Close()
			ids := prompt(1, 100)
			run(t, e, Request{InputIDs: ids, MaxNewTokens: 1, RoutedDPRank: rank(0)})
			run(t, e, Request{InputIDs: ids, MaxNewTokens: 1, RoutedDPRank: rank(1)})
			time.Sleep(time.Second) // settled
			load := busyRank(t, e, tc.busy)
			err := e.Flush(context.Background(), 0, "test")
			if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("busy rank %d: got %v, want %v", tc.busy, err, tc.want)
			}
			hist := e.FlushHistory()
			rec := hist[len(hist)-1]
			if len(rec.Ranks) != 2 || !errors.Is(rec.Ranks[tc.busy].Err, ErrFlushBusy) || rec.Ranks[1-tc.busy].Err != nil ||
				rec.Ranks[tc.busy].Running != 1 || rec.Running != 1 {
				t.Fatalf("busy rank %d: ranks' answers %+v", tc.busy, rec.Ranks)
			}
			load.Abort()
			drain(t, load)
			// The busy rank's cache survived: the prompt hits there, not
			// on the flushed rank.
			for r, want := range []int{0, 99} {
				if tc.busy == 0 {
					want = 99 - want
				}
				last, _ := run(t, e, Request{InputIDs: ids, MaxNewTokens: 1, RoutedDPRank: rank(r)})
				if last.CachedTokens != want {
					t.Fatalf("busy rank %d: rank %d cached %d, want %d", tc.busy, r, last.CachedTokens, want)
				}
			}
		})
	}
}

// TestFlushUnderDPAttentionWaitsForEveryRank: with the overlap scheduler,
// a DP-attention rank with nothing of its own is busy for a flush while
// another runs (its idle batch sits in its result queue), so both refuse;
// a flush with a timeout runs on every rank once all are idle and settled.
// Without the overlap scheduler the idle rank flushes.
func TestFlushUnderDPAttentionWaitsForEveryRank(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := dpProfile(t, 2, true)
		e := startEngine(t, Config{Profile: p})
		defer e.Close()
		load := submit(t, e, Request{InputIDs: prompt(99, 10), MaxNewTokens: 50, RoutedDPRank: rank(1)})
		time.Sleep(10 * time.Millisecond)
		if err := e.Flush(context.Background(), 0, "test"); !errors.Is(err, ErrFlushLockstep) {
			t.Fatalf("got %v, want rank 0's %v", err, ErrFlushLockstep)
		}
		start := time.Now()
		if err := e.Flush(context.Background(), 10*time.Second, "test"); err != nil {
			t.Fatalf("with a timeout: got %v", err)
		}
		end := drain(t, load)
		finished := end[len(end)-1].Truth.Finished
		hist := e.FlushHistory()
		rec := hist[len(hist)-1]
		want := finished + p.FlushBusyAfterFinish()
		if rec.Ranks[0].Answered != want || rec.Ranks[1].Answered != want || rec.Answered != want {
			t.Fatalf("flushed at %v and %v (answered %v), want both at %v", rec.Ranks[0].Answered, rec.Ranks[1].Answered, rec.Answered, want)
		}
		if waited := time.Since(start); waited != want-rec.At {
			t.Fatalf("the caller waited %v, want %v", waited, want-rec.At)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		p := dpProfile(t, 2, true)
		p.FlushBusyAfterFinishS = 0
		e := startEngine(t, Config{Profile: p})
		defer e.Close()
		load := busyRank(t, e, 1)
		if err := e.Flush(context.Background(), 0, "test"); err != nil {
			t.Fatalf("without the overlap scheduler: got %v, want rank 0's success", err)
		}
		load.Abort()
		drain(t, load)
	})
}

// TestStatsAddUpTheRanks: the deployment's counts and pools are the sums
// of its ranks'.
func TestStatsAddUpTheRanks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := dpProfile(t, 2, true)
		e := startEngine(t, Config{Profile: p})
		defer e.Close()
		run(t, e, Request{InputIDs: prompt(1, 100), MaxNewTokens: 3})
		run(t, e, Request{InputIDs: prompt(2, 50), MaxNewTokens: 2})
		ranks, all := e.RankStats(), e.Stats()
		if len(ranks) != 2 || ranks[0].Requests != 1 || ranks[1].Requests != 1 || ranks[0].CacheTokens != 102 || ranks[1].CacheTokens != 51 {
			t.Fatalf("ranks: %+v", ranks)
		}
		if all.Requests != 2 || all.PromptTokens != 150 || all.CacheTokens != 153 || all.KVCapacity != 2*p.MaxTotalTokens || !all.Idle {
			t.Fatalf("deployment: %+v", all)
		}
		checkDrained(t, e)
	})
}

// TestRankCacheEventsCount: Config.RankCacheEvents has one sink a rank, or
// none (an empty list is no list).
func TestRankCacheEventsCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := dpProfile(t, 2, true)
		if _, err := New(Config{Profile: p, RankCacheEvents: make([]CacheEvents, 1)}); err == nil ||
			err.Error() != "engine: 1 KV event sinks for 2 DP ranks" {
			t.Fatalf("one sink for two ranks: got %v", err)
		}
		e := startEngine(t, Config{Profile: p, RankCacheEvents: []CacheEvents{}})
		defer e.Close()
		for r := range 2 {
			run(t, e, Request{InputIDs: prompt(int32(r), 10), MaxNewTokens: 1, RoutedDPRank: rank(r)})
		}
		checkDrained(t, e)
	})
}

// TestParkedFlushWakesAtSettleOnlyWhenIdle: a rank with nothing to run
// but something queued wakes for its parked flush at the flush's
// deadline, not when the last batch settled: the flush cannot run before
// the queue empties, and a wake-up in the past would spin the loop.
func TestParkedFlushWakesAtSettleOnlyWhenIdle(t *testing.T) {
	for _, attention := range []bool{false, true} {
		p := dpProfile(t, 2, attention)
		e := &Engine{prof: p}
		ranks := []*scheduler{
			newScheduler(p, builtinTok, false, slog.New(slog.DiscardHandler), 40, 0),
			newScheduler(p, builtinTok, false, slog.New(slog.DiscardHandler), 40, 1),
		}
		groupRanks(p, ranks)
		s := ranks[0]
		s.now, s.settledAt = 2*time.Second, time.Second
		s.flush = &pendingFlush{deadline: 10 * time.Second, call: e.flushes.start(0, 10*time.Second, "test", 2)}
		if at, due := s.wake(); !due || at != time.Second {
			t.Fatalf("attention %v, idle: wakes at %v (%v), want the settle time 1s", attention, at, due)
		}
		s.waiting = append(s.waiting, &req{rid: "queued", tokens: prompt(1, 10), maxNew: 1})
		if at, due := s.wake(); !due || at != 10*time.Second {
			t.Fatalf("attention %v, a request queued: wakes at %v (%v), want the deadline 10s", attention, at, due)
		}
	}
}

// TestSumStatsCombinesEveryField: every field of Stats is combined as
// sumStats says, ranks 1 and 2 in every figure: counts add up, the clock
// is the latest, the rates are the mean, the average accept length is over
// both ranks' rounds; Logged stays each rank's. A field added to Stats or
// Counters fails here until it has a rule.
func TestSumStatsCombinesEveryField(t *testing.T) {
	rankOf := func(v float64) Stats {
		var st Stats
		fill := func(s reflect.Value) {
			for i := range s.NumField() {
				switch f := s.Field(i); f.Kind() {
				case reflect.Int, reflect.Int64:
					f.SetInt(int64(v))
				case reflect.Float64:
					f.SetFloat(v)
				case reflect.Bool:
					f.SetBool(true)
				}
			}
		}
		fill(reflect.ValueOf(&st.Counters).Elem())
		fill(reflect.ValueOf(&st).Elem())
		st.Logged = SchedulerStats{Logged: true, Running: int(v)}
		return st
	}
	sum := sumStats([]Stats{rankOf(1), rankOf(2)})
	want := map[string]float64{"Now": 2, "LastCacheHitRate": 1.5, "SpecAcceptLength": 1.5, "SpecAcceptRate": 1.5,
		"AvgSpecAcceptLength": (1*1 + 2*2) / 3.0, "Idle": 1}
	check := func(s reflect.Value) {
		for i := range s.NumField() {
			name, f := s.Type().Field(i).Name, s.Field(i)
			var got float64
			switch f.Kind() {
			case reflect.Int, reflect.Int64:
				got = float64(f.Int())
			case reflect.Float64:
				got = f.Float()
			case reflect.Bool:
				if f.Bool() {
					got = 1
				}
			default:
				continue
			}
			w, ok := want[name]
			if !ok {
				w = 3
			}
			if got != w {
				t.Errorf("%s: got %v, want %v", name, got, w)
			}
		}
	}
	check(reflect.ValueOf(sum.Counters))
	check(reflect.ValueOf(sum))
	if sum.Logged != (SchedulerStats{}) {
		t.Errorf("Logged: got %+v, want each rank's only", sum.Logged)
	}
}

// TestDPAttentionFlushFollowsTheReleasesOverlapRule: an idle DP-attention
// rank is busy for a flush while another runs only when the overlap
// scheduler is on. SGLang 0.5.12 runs NGRAM without it, so there rank 0
// flushes at once; 0.5.18 keeps it on, and rank 0 refuses.
func TestDPAttentionFlushFollowsTheReleasesOverlapRule(t *testing.T) {
	for _, tc := range []struct {
		release string
		want    error
	}{{"0.5.12", nil}, {"0.5.18", ErrFlushLockstep}} {
		synctest.Test(t, func(t *testing.T) {
			p := loadProfile(t, "llama-8b-eagle3-h100")
			p.DPSize, p.TPSize, p.EnableDPAttention = 2, 2, true
			p.SGLangVersion, p.Speculative.Algorithm = tc.release, "NGRAM"
			if err := p.Validate(); err != nil {
				t.Fatal(err)
			}
			e := startEngine(t, Config{Profile: p})
			defer e.Close()
			load := busyRank(t, e, 1)
			if err := e.Flush(context.Background(), 0, "test"); !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Errorf("SGLang %s: got %v, want %v", tc.release, err, tc.want)
			}
			load.Abort()
			drain(t, load)
		})
	}
}

// TestDispatcherReadsLoads: only a load-based method choosing among several
// ranks reads the ranks' load reports; the engine skips them otherwise.
func TestDispatcherReadsLoads(t *testing.T) {
	for _, tc := range []struct {
		method string
		ranks  int
		want   bool
	}{
		{profile.TotalRequests, 2, true},
		{profile.TotalTokens, 3, true},
		{profile.RoundRobin, 4, false},
		{profile.TotalRequests, 1, false},
		{profile.TotalTokens, 1, false},
	} {
		p := dpProfile(t, tc.ranks, false)
		p.LoadBalanceMethod = tc.method
		if got := newDispatcher(p).readsLoads(); got != tc.want {
			t.Errorf("%s on %d ranks: got readsLoads %v, want %v", tc.method, tc.ranks, got, tc.want)
		}
	}
}

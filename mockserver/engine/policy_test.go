package engine

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglmock/sglmock/mockserver/profile"
)

// policyProfile is the default profile with a schedule policy and the
// changes set makes, validated.
func policyProfile(t *testing.T, policy string, set func(p *profile.Profile)) *profile.Profile {
	t.Helper()
	p := loadProfile(t, "default")
	p.SchedulePolicy = policy
	if set != nil {
		set(p)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	return p
}

// oneAtATime makes every prefill batch take one request of the sizes the
// tests queue: without chunking a batch takes a second request only if
// its extend is below what the first left of max_prefill_tokens.
func oneAtATime(limit int) func(p *profile.Profile) {
	return func(p *profile.Profile) { p.ChunkedPrefillSize, p.MaxPrefillTokens = -1, limit }
}

// joinIDs concatenates token id lists.
func joinIDs(parts ...[]int32) []int32 {
	var out []int32
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// queueBehind runs a blocker and, while its prefill is in flight, queues
// reqs behind it in order, so the scheduler orders them all at once; it
// returns every request's last event by rid.
func queueBehind(t *testing.T, e *Engine, blocker Request, reqs ...Request) map[string]Event {
	t.Helper()
	streams := []*Stream{submit(t, e, blocker)}
	synctest.Wait() // the blocker's prefill is in flight
	for _, r := range reqs {
		streams = append(streams, submit(t, e, r))
	}
	last := map[string]Event{}
	for _, st := range streams {
		evs := drain(t, st)
		last[st.RID()] = evs[len(evs)-1]
	}
	return last
}

// batches groups the rids by the prefill batch that first admitted them,
// in time order, each batch's rids sorted.
func batches(evs map[string]Event, rids ...string) string {
	byTime := map[time.Duration][]string{}
	for _, rid := range rids {
		at := evs[rid].Truth.Admitted
		byTime[at] = append(byTime[at], rid)
	}
	times := make([]time.Duration, 0, len(byTime))
	for at := range byTime {
		times = append(times, at)
	}
	slices.Sort(times)
	var parts []string
	for _, at := range times {
		group := byTime[at]
		slices.Sort(group)
		parts = append(parts, "["+strings.Join(group, " ")+"]")
	}
	return strings.Join(parts, " ")
}

// cachedOf lists the rids' cached tokens, "rid:n" each.
func cachedOf(evs map[string]Event, rids ...string) string {
	parts := make([]string, len(rids))
	for i, rid := range rids {
		parts[i] = fmt.Sprintf("%s:%d", rid, evs[rid].CachedTokens)
	}
	return strings.Join(parts, " ")
}

// sharedPrefixQueue is three prompts sharing a 600-token prefix and three
// of their own, 1024 tokens each, queued in that order behind a blocker.
func sharedPrefixQueue() (Request, []Request) {
	shared := prompt(500, 600)
	blocker := Request{RID: "B", InputIDs: prompt(400, 1024), MaxNewTokens: 1}
	var reqs []Request
	for i := range 3 {
		reqs = append(reqs, Request{RID: fmt.Sprintf("S%d", i+1), InputIDs: joinIDs(shared, prompt(int32(510+i), 424)), MaxNewTokens: 1})
	}
	for i := range 3 {
		reqs = append(reqs, Request{RID: fmt.Sprintf("U%d", i+1), InputIDs: prompt(int32(520+i), 1024), MaxNewTokens: 1})
	}
	return blocker, reqs
}

// TestInBatchPrefixCaching: a prefill batch of 2048 tokens takes two of
// the 1024-token prompts. Under fcfs S1 and S2 share a batch and both
// compute the 600-token prefix; S3 finds it cached. Under lpm nothing is
// cached yet, so every prompt is checked against those ahead of it
// (_compute_prefix_matches): S2 and S3 share 600 >= 32 tokens with S1 and
// go to the back; the first batch takes S1 and U1. For the second, S2 and
// S3 match 600 tokens in the cache, above the check threshold, and lead:
// both reuse the prefix. With the check threshold at -1 (in-batch prefix
// caching off) or a deprioritize threshold above 600, lpm has nothing to
// sort by and keeps fcfs's order; a check threshold of 0 still checks the
// cold prompts.
func TestInBatchPrefixCaching(t *testing.T) {
	// Each batch takes 2048 tokens; a prompt that does not fit the rest
	// is cut into a chunk there and finished in the next batch, with room
	// for more. fcfs: S3's 424 new tokens and U1 leave 600 for a chunk of
	// U2. lpm: S2 and S3 (424 each) and U2 leave 176 for a chunk of U3.
	const fcfsBatches, lpmBatches = "[S1 S2] [S3 U1 U2] [U3]", "[S1 U1] [S2 S3 U2 U3]"
	intp := func(v int) *int { return &v }
	for _, tc := range []struct {
		name, policy            string
		check, deprioritize     *int
		wantBatches, wantCached string
	}{
		{"fcfs", profile.FCFS, nil, nil, fcfsBatches, "S1:0 S2:0 S3:600"},
		{"lpm", profile.LPM, nil, nil, lpmBatches, "S1:0 S2:600 S3:600"},
		{"lpm, check threshold 0", profile.LPM, intp(0), nil, lpmBatches, "S1:0 S2:600 S3:600"},
		{"lpm, in-batch off", profile.LPM, intp(-1), nil, fcfsBatches, "S1:0 S2:0 S3:600"},
		{"lpm, deprioritize above the prefix", profile.LPM, nil, intp(601), fcfsBatches, "S1:0 S2:0 S3:600"},
		{"lpm, deprioritize at the prefix", profile.LPM, nil, intp(600), lpmBatches, "S1:0 S2:600 S3:600"},
		// dfs-weight computes the same verdicts and ignores them: with
		// nothing cached every prompt ends at the root, in queue order.
		{"dfs-weight", profile.DFSWeight, nil, nil, fcfsBatches, "S1:0 S2:0 S3:600"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := policyProfile(t, tc.policy, func(p *profile.Profile) {
					p.ChunkedPrefillSize, p.MaxPrefillTokens = 2048, 2048
					p.InBatchPrefixCachingCheckThreshold, p.InBatchPrefixCachingDeprioritizeThreshold = tc.check, tc.deprioritize
				})
				e := startEngine(t, Config{Profile: p})
				defer e.Close()
				blocker, reqs := sharedPrefixQueue()
				evs := queueBehind(t, e, blocker, reqs...)
				rids := []string{"S1", "S2", "S3", "U1", "U2", "U3"}
				if got := batches(evs, rids...); got != tc.wantBatches {
					t.Errorf("batches: got %s, want %s", got, tc.wantBatches)
				}
				if got := cachedOf(evs, "S1", "S2", "S3"); got != tc.wantCached {
					t.Errorf("cached: got %s, want %s", got, tc.wantCached)
				}
				checkDrained(t, e)
			})
		})
	}
}

// TestInBatchPrefixCachingKeepsNamespaces: prompts that share tokens in
// different cache namespaces share nothing, in the cache or in the
// in-batch check (the key carries extra_key and cache_salt).
func TestInBatchPrefixCachingKeepsNamespaces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := policyProfile(t, profile.LPM, func(p *profile.Profile) { p.ChunkedPrefillSize, p.MaxPrefillTokens = 2048, 2048 })
		e := startEngine(t, Config{Profile: p})
		defer e.Close()
		blocker, reqs := sharedPrefixQueue()
		reqs[1].Namespace = "tenant-2" // S2
		evs := queueBehind(t, e, blocker, reqs...)
		// S2 is checked in its own namespace and leads with S1; S3 is held.
		if got, want := batches(evs, "S1", "S2", "S3", "U1", "U2", "U3"), "[S1 S2] [S3 U1 U2] [U3]"; got != want {
			t.Errorf("batches: got %s, want %s", got, want)
		}
		if got, want := cachedOf(evs, "S1", "S2", "S3"), "S1:0 S2:0 S3:600"; got != want {
			t.Errorf("cached: got %s, want %s", got, want)
		}
	})
}

// warm runs requests one after the other, each to its end, so that their
// prompts are in the cache.
func warm(t *testing.T, e *Engine, prompts ...[]int32) {
	t.Helper()
	for _, ids := range prompts {
		run(t, e, Request{InputIDs: ids, MaxNewTokens: 1})
	}
}

// TestLPMOrdersByCachedPrefix: lpm takes the longest cached prefix first
// (_sort_by_longest_prefix); fcfs keeps arrival order. One request a batch.
func TestLPMOrdersByCachedPrefix(t *testing.T) {
	long, short := prompt(600, 1500), prompt(601, 800)
	for _, tc := range []struct{ policy, want string }{
		{profile.FCFS, "[U] [AS] [AL]"},
		{profile.LPM, "[AL] [AS] [U]"},
	} {
		synctest.Test(t, func(t *testing.T) {
			e := startEngine(t, Config{Profile: policyProfile(t, tc.policy, oneAtATime(1024))})
			defer e.Close()
			warm(t, e, long, short)
			evs := queueBehind(t, e, Request{RID: "B", InputIDs: prompt(602, 2000), MaxNewTokens: 1},
				Request{RID: "U", InputIDs: prompt(603, 2000), MaxNewTokens: 1},
				Request{RID: "AS", InputIDs: joinIDs(short, prompt(604, 1200)), MaxNewTokens: 1},
				Request{RID: "AL", InputIDs: joinIDs(long, prompt(605, 500)), MaxNewTokens: 1})
			if got := batches(evs, "U", "AS", "AL"); got != tc.want {
				t.Errorf("%s: got %s, want %s", tc.policy, got, tc.want)
			}
			if got, want := cachedOf(evs, "U", "AS", "AL"), "U:0 AS:800 AL:1500"; got != want {
				t.Errorf("%s: cached: got %s, want %s", tc.policy, got, want)
			}
		})
	}
}

// TestLPMFallsBackToFCFSAboveTheQueueLimit: above 128 waiting requests
// lpm does not match or sort (_determine_active_policy): the request with
// a cached prefix, queued last, waits its turn until the queue is down to
// 128, then leads. One request a batch.
func TestLPMFallsBackToFCFSAboveTheQueueLimit(t *testing.T) {
	warmIDs := prompt(700, 40)
	for _, tc := range []struct {
		cold     int // cold requests queued before the warm one
		position int // the batch that admits the warm one, after the blocker's
	}{
		{127, 1}, // 128 waiting: sorted at once
		{128, 2}, // 129: the first batch takes the first cold one, then sorted
		{130, 4},
	} {
		synctest.Test(t, func(t *testing.T) {
			e := startEngine(t, Config{Profile: policyProfile(t, profile.LPM, oneAtATime(64))})
			defer e.Close()
			warm(t, e, warmIDs)
			var reqs []Request
			for i := range tc.cold {
				reqs = append(reqs, Request{RID: fmt.Sprintf("c%03d", i), InputIDs: prompt(int32(1000+i), 40), MaxNewTokens: 1})
			}
			reqs = append(reqs, Request{RID: "warm", InputIDs: joinIDs(warmIDs[:39], prompt(701, 1)), MaxNewTokens: 1})
			evs := queueBehind(t, e, Request{RID: "B", InputIDs: prompt(702, 40), MaxNewTokens: 1}, reqs...)
			admitted := evs["warm"].Truth.Admitted
			earlier := 0
			for _, r := range reqs {
				if evs[r.RID].Truth.Admitted < admitted {
					earlier++
				}
			}
			if earlier+1 != tc.position || evs["warm"].CachedTokens != 39 {
				t.Errorf("%d cold ahead: warm one admitted in batch %d with %d cached, want batch %d with 39",
					tc.cold, earlier+1, evs["warm"].CachedTokens, tc.position)
			}
		})
	}
}

// TestDFSWeightOrder: dfs-weight walks the cache from the root, heavier
// subtrees first, ties in the order their first tokens entered the tree,
// and a node's own requests after its children's; requests with nothing
// cached come last. The cache holds A+x, A+y (A split out of A+x, in its
// place) and C. One request a batch, each order computed again: after r3
// the tie between x and y under A goes to x, the older.
func TestDFSWeightOrder(t *testing.T) {
	a, x, y, c := prompt(800, 100), prompt(801, 100), prompt(802, 100), prompt(803, 100)
	for _, tc := range []struct{ policy, want string }{
		{profile.FCFS, "[r1] [r2] [r3] [r4] [r5]"},
		{profile.DFSWeight, "[r3] [r2] [r4] [r1] [r5]"},
	} {
		synctest.Test(t, func(t *testing.T) {
			e := startEngine(t, Config{Profile: policyProfile(t, tc.policy, oneAtATime(256))})
			defer e.Close()
			warm(t, e, joinIDs(a, x), joinIDs(a, y), c)
			evs := queueBehind(t, e, Request{RID: "B", InputIDs: prompt(804, 400), MaxNewTokens: 1},
				Request{RID: "r1", InputIDs: joinIDs(c, prompt(810, 300)), MaxNewTokens: 1},
				Request{RID: "r2", InputIDs: joinIDs(a, x, prompt(811, 200)), MaxNewTokens: 1},
				Request{RID: "r3", InputIDs: joinIDs(a, y, prompt(812, 200)), MaxNewTokens: 1},
				Request{RID: "r4", InputIDs: joinIDs(a, y, prompt(813, 200)), MaxNewTokens: 1},
				Request{RID: "r5", InputIDs: prompt(814, 400), MaxNewTokens: 1})
			if got := batches(evs, "r1", "r2", "r3", "r4", "r5"); got != tc.want {
				t.Errorf("%s: got %s, want %s", tc.policy, got, tc.want)
			}
			if got, want := cachedOf(evs, "r1", "r2", "r3", "r4", "r5"), "r1:100 r2:200 r3:200 r4:200 r5:0"; got != want {
				t.Errorf("%s: cached: got %s, want %s", tc.policy, got, want)
			}
		})
	}
}

// TestLOFAndPriority: lof takes the longest max_new_tokens first; with
// priority scheduling, the priority first (higher values first, or lower
// with schedule_low_priority_values_first), and fcfs takes priority then
// the order of entry. A request without a priority is the least
// preferred, unless default_priority_value gives one. One request a
// batch (each prompt 300 tokens, batches of 512).
func TestLOFAndPriority(t *testing.T) {
	p := func(v int) *int { return &v }
	reqs := []struct {
		rid      string
		maxNew   int
		priority *int
	}{
		{"a", 10, p(1)}, {"b", 50, nil}, {"c", 30, p(5)}, {"d", 20, p(5)}, {"e", 40, p(-3)},
	}
	for _, tc := range []struct {
		name     string
		policy   string
		priority bool
		lowFirst bool
		def      *int
		want     string
	}{
		{"fcfs", profile.FCFS, false, false, nil, "[a] [b] [c] [d] [e]"},
		{"lof", profile.LOF, false, false, nil, "[b] [e] [c] [d] [a]"},
		{"fcfs, priority", profile.FCFS, true, false, nil, "[c] [d] [a] [e] [b]"},
		{"fcfs, low values first", profile.FCFS, true, true, nil, "[e] [a] [c] [d] [b]"},
		{"fcfs, priority, default 2", profile.FCFS, true, false, p(2), "[c] [d] [b] [a] [e]"},
		{"lof, priority", profile.LOF, true, false, nil, "[c] [d] [a] [e] [b]"},
		{"lof, low values first", profile.LOF, true, true, nil, "[e] [a] [c] [d] [b]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prof := policyProfile(t, tc.policy, func(pr *profile.Profile) {
					oneAtATime(512)(pr)
					pr.EnablePriorityScheduling, pr.ScheduleLowPriorityValuesFirst, pr.DefaultPriorityValue = tc.priority, tc.lowFirst, tc.def
				})
				e := startEngine(t, Config{Profile: prof})
				defer e.Close()
				var queued []Request
				for i, r := range reqs {
					queued = append(queued, Request{RID: r.rid, InputIDs: prompt(int32(900+i), 300), MaxNewTokens: r.maxNew, Priority: r.priority})
				}
				evs := queueBehind(t, e, Request{RID: "B", InputIDs: prompt(899, 300), MaxNewTokens: 1, Priority: p(100)}, queued...)
				// The decode rounds of those admitted run between the
				// prefills; none of them changes the order.
				if got := batches(evs, "a", "b", "c", "d", "e"); got != tc.want {
					t.Errorf("got %s, want %s", got, tc.want)
				}
				checkDrained(t, e)
			})
		})
	}
}

// TestRandomPolicyIsSeeded: random shuffles the queue before each batch
// with the profile's seed: the same seed admits in the same order, run
// after run; another seed in another. One request a batch.
func TestRandomPolicyIsSeeded(t *testing.T) {
	order := func(seed uint64) string {
		var got string
		synctest.Test(t, func(t *testing.T) {
			prof := policyProfile(t, profile.Random, func(p *profile.Profile) { oneAtATime(512)(p); p.Seed = seed })
			e := startEngine(t, Config{Profile: prof})
			defer e.Close()
			var reqs []Request
			rids := []string{"a", "b", "c", "d", "e", "f"}
			for i, rid := range rids {
				reqs = append(reqs, Request{RID: rid, InputIDs: prompt(int32(950+i), 300), MaxNewTokens: 1})
			}
			got = batches(queueBehind(t, e, Request{RID: "B", InputIDs: prompt(949, 300), MaxNewTokens: 1}, reqs...), rids...)
		})
		return got
	}
	// The orders the two seeds give, as the mock's PCG streams draw them.
	for _, tc := range []struct {
		seed uint64
		want string
	}{
		{1, "[b] [d] [c] [a] [f] [e]"},
		{2, "[b] [a] [d] [e] [f] [c]"},
	} {
		for run := range 2 {
			if got := order(tc.seed); got != tc.want {
				t.Errorf("seed %d, run %d: got %s, want %s", tc.seed, run+1, got, tc.want)
			}
		}
	}
}

// TestRoutingKeyPolicy: routing-key takes first the waiting requests whose
// key the running batch holds most, then by key; the others by key, no
// key first. Two requests decode with key "x", one with "y" when the
// queue is sorted.
func TestRoutingKeyPolicy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := startEngine(t, Config{Profile: policyProfile(t, profile.RoutingKey, oneAtATime(512))})
		defer e.Close()
		var running []*Stream
		for i, key := range []string{"x", "x", "y"} {
			running = append(running, submit(t, e, Request{RID: fmt.Sprintf("run%d", i), InputIDs: prompt(int32(970+i), 300), MaxNewTokens: 200, RoutingKey: key}))
			time.Sleep(20 * time.Millisecond) // prefilled: it decodes
		}
		var reqs []Request
		for i, key := range []string{"z", "y", "", "x", "b", "y"} {
			reqs = append(reqs, Request{RID: fmt.Sprintf("q%d", i), InputIDs: prompt(int32(980+i), 300), MaxNewTokens: 1, RoutingKey: key})
		}
		evs := queueBehind(t, e, Request{RID: "B", InputIDs: prompt(979, 300), MaxNewTokens: 1, RoutingKey: "x"}, reqs...)
		for _, st := range running {
			drain(t, st)
		}
		// x (2 running), then y (1) twice in queue order, then the others
		// by key: "", b, z. The blocker (x) finishes in its prefill.
		if got, want := batches(evs, "q0", "q1", "q2", "q3", "q4", "q5"), "[q3] [q1] [q5] [q2] [q4] [q0]"; got != want {
			t.Errorf("got %s, want %s", got, want)
		}
		checkDrained(t, e)
	})
}

// TestPriorityPreemption: with priority scheduling and max_running_requests
// 2, a request whose priority is more than the threshold (10) above a
// running one's takes its place when the batch is full
// (preempt_to_schedule): the lowest-priority running request, the last
// into the queue on a tie, is released as a retraction releases it and
// queued again, to be prefilled again, prompt and output, later. A gap of
// 10, or preemption disabled, waits for a slot instead.
func TestPriorityPreemption(t *testing.T) {
	p := func(v int) *int { return &v }
	for _, tc := range []struct {
		name       string
		incoming   int
		disable    bool
		preempted  string // the rid preempted, "" for none
		admittedAt string // when the incoming request is admitted: "at once" or "after a slot frees"
	}{
		{"gap 20", 20, false, "low2", "at once"},
		{"gap 11", 11, false, "low2", "at once"},
		{"gap 10", 10, false, "", "after a slot frees"},
		{"disabled", 20, true, "", "after a slot frees"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prof := policyProfile(t, profile.FCFS, func(pr *profile.Profile) {
					pr.MaxRunningRequests = 2
					pr.EnablePriorityScheduling, pr.DisablePriorityPreemption = true, tc.disable
				})
				e := startEngine(t, Config{Profile: prof})
				defer e.Close()
				low1 := submit(t, e, Request{RID: "low1", InputIDs: prompt(1100, 200), MaxNewTokens: 100, Priority: p(0)})
				synctest.Wait()
				low2 := submit(t, e, Request{RID: "low2", InputIDs: prompt(1101, 200), MaxNewTokens: 50, Priority: p(0)})
				time.Sleep(100 * time.Millisecond) // both decode
				high := submit(t, e, Request{RID: "high", InputIDs: prompt(1102, 200), MaxNewTokens: 10, Priority: p(tc.incoming)})
				ev1, ev2, evh := drain(t, low1), drain(t, low2), drain(t, high)
				l1, l2, h := ev1[len(ev1)-1], ev2[len(ev2)-1], evh[len(evh)-1]
				preempted := ""
				for _, ev := range []Event{l1, l2} {
					if ev.Retractions > 0 {
						preempted += ev.Truth.RID
					}
				}
				if preempted != tc.preempted {
					t.Fatalf("preempted %q, want %q", preempted, tc.preempted)
				}
				wait := h.Truth.QueueTime()
				switch {
				case tc.admittedAt == "at once" && wait >= 10*time.Millisecond:
					t.Errorf("high waited %v, want it admitted at the next boundary", wait)
				case tc.admittedAt != "at once" && h.Truth.Admitted != l2.Truth.Finished:
					t.Errorf("high admitted at %v, want when low2 finished (%v)", h.Truth.Admitted, l2.Truth.Finished)
				}
				if tc.preempted != "" {
					// low2 is prefilled again after high: its prompt and the
					// outputs it had, none of it counted as cached.
					rounds := len(l2.Truth.Prefill)
					if rounds != 2 || l2.CachedTokens != 0 || l2.Truth.Prefill[1].Start < h.Truth.Admitted || l2.CompletionTokens != 50 {
						t.Errorf("low2: %d prefills (second at %v, high admitted at %v), %d cached, %d tokens; want 2, after high, 0, 50",
							rounds, l2.Truth.Prefill[rounds-1].Start, h.Truth.Admitted, l2.CachedTokens, l2.CompletionTokens)
					}
				}
				checkDrained(t, e)
			})
		})
	}
}

// TestPriorityPreemptionFreesEnough: preemption takes running requests,
// least preferred first, until their expected output covers what the
// incoming request needs beyond the free KV (min_tokens_to_remove), and
// takes none when all of them would not: in a pool of 4096 tokens where
// two running requests expect about 666 more tokens each, 2323 remain. A
// request of 200 + 2500 tokens needs one (low2, the later); 200 + 3000
// both; 200 + 3800 more than both free, so it waits.
func TestPriorityPreemptionFreesEnough(t *testing.T) {
	p := func(v int) *int { return &v }
	for _, tc := range []struct {
		maxNew    int
		preempted string
	}{
		{2500, "low2"},
		{3000, "low1low2"},
		{3800, ""},
	} {
		synctest.Test(t, func(t *testing.T) {
			prof := policyProfile(t, profile.FCFS, func(pr *profile.Profile) {
				pr.ContextLength, pr.MaxTotalTokens, pr.MaxRunningRequests = 4096, 4096, 2
				pr.EnablePriorityScheduling = true
			})
			e := startEngine(t, Config{Profile: prof})
			defer e.Close()
			low1 := submit(t, e, Request{RID: "low1", InputIDs: prompt(1150, 200), MaxNewTokens: 1000, Priority: p(0)})
			synctest.Wait()
			low2 := submit(t, e, Request{RID: "low2", InputIDs: prompt(1151, 200), MaxNewTokens: 1000, Priority: p(0)})
			time.Sleep(100 * time.Millisecond) // both decode
			high := submit(t, e, Request{RID: "high", InputIDs: prompt(1152, 200), MaxNewTokens: tc.maxNew, Priority: p(20)})
			ev1, ev2, evh := drain(t, low1), drain(t, low2), drain(t, high)
			l1, l2, h := ev1[len(ev1)-1], ev2[len(ev2)-1], evh[len(evh)-1]
			preempted := ""
			for _, ev := range []Event{l1, l2} {
				if ev.Retractions > 0 {
					preempted += ev.Truth.RID
				}
			}
			if preempted != tc.preempted {
				t.Errorf("max_new_tokens %d: preempted %q, want %q", tc.maxNew, preempted, tc.preempted)
			}
			if wait := h.Truth.QueueTime(); (tc.preempted != "") != (wait < 10*time.Millisecond) {
				t.Errorf("max_new_tokens %d: high waited %v", tc.maxNew, wait)
			}
			checkDrained(t, e)
		})
	}
}

// TestPriorityWhenDisabled: without priority scheduling a request's
// priority is ignored, or, with abort_on_priority_when_disabled, the
// request is aborted with 503 and SGLang's message.
func TestPriorityWhenDisabled(t *testing.T) {
	p := func(v int) *int { return &v }
	for _, abort := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			prof := policyProfile(t, profile.FCFS, func(pr *profile.Profile) { pr.AbortOnPriorityWhenDisabled = abort })
			e := startEngine(t, Config{Profile: prof})
			defer e.Close()
			last, _ := run(t, e, Request{InputIDs: prompt(1200, 50), MaxNewTokens: 3, Priority: p(7)})
			plain, _ := run(t, e, Request{InputIDs: prompt(1201, 50), MaxNewTokens: 3})
			if plain.Finish.Reason != FinishLength {
				t.Fatalf("abort %v: a request without priority finished with %+v", abort, plain.Finish)
			}
			f := last.Finish
			switch {
			case !abort && f.Reason != FinishLength:
				t.Errorf("ignored priority: got finish %+v, want length", f)
			case abort && (f.Reason != FinishAbort || f.StatusCode != 503 || f.Message != PriorityDisabledMessage || last.Truth.Prefilled):
				t.Errorf("abort: got finish %+v (prefilled %v), want a 503 abort with %q before any prefill", f, last.Truth.Prefilled, PriorityDisabledMessage)
			}
			checkDrained(t, e)
		})
	}
}

// TestPolicyWithoutRadixCache: lpm and dfs-weight run as fcfs when the
// radix cache is off (_validate_and_adjust_policy).
func TestPolicyWithoutRadixCache(t *testing.T) {
	for _, policy := range []string{profile.LPM, profile.DFSWeight} {
		synctest.Test(t, func(t *testing.T) {
			p := policyProfile(t, policy, func(p *profile.Profile) { p.ChunkedPrefillSize, p.MaxPrefillTokens = 2048, 2048 })
			e := startEngine(t, Config{Profile: p, DisableRadixCache: true})
			defer e.Close()
			blocker, reqs := sharedPrefixQueue()
			evs := queueBehind(t, e, blocker, reqs...)
			// Nothing is cached: every batch takes two whole prompts.
			if got, want := batches(evs, "S1", "S2", "S3", "U1", "U2", "U3"), "[S1 S2] [S3 U1] [U2 U3]"; got != want {
				t.Errorf("%s: got %s, want %s", policy, got, want)
			}
		})
	}
}

// TestPolicyPerDPRank: each DP rank orders its own queue against its own
// cache. Round robin puts the blockers on ranks 0 and 1, then the queued
// requests alternately; on each rank lpm holds back the second prompt
// that shares a prefix with one ahead of it on that rank.
func TestPolicyPerDPRank(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := dpProfile(t, 2, false)
		p.SchedulePolicy, p.ChunkedPrefillSize, p.MaxPrefillTokens = profile.LPM, 2048, 2048
		e := startEngine(t, Config{Profile: p})
		defer e.Close()
		shared := prompt(1300, 600)
		b0 := submit(t, e, Request{RID: "B0", InputIDs: prompt(1301, 1024), MaxNewTokens: 1})
		b1 := submit(t, e, Request{RID: "B1", InputIDs: prompt(1302, 1024), MaxNewTokens: 1})
		synctest.Wait()
		rids := []string{"S1", "T1", "S2", "T2", "U1", "V1"}
		var streams []*Stream
		for i, rid := range rids {
			ids := prompt(int32(1310+i), 1024)
			if rid[0] == 'S' || rid[0] == 'T' {
				ids = joinIDs(shared, prompt(int32(1320+i), 424))
			}
			streams = append(streams, submit(t, e, Request{RID: rid, InputIDs: ids, MaxNewTokens: 1}))
		}
		drain(t, b0)
		drain(t, b1)
		evs := map[string]Event{}
		for _, st := range streams {
			d := drain(t, st)
			evs[st.RID()] = d[len(d)-1]
		}
		// Rank 0: S1, S2, U1 (S2 held); rank 1: T1, T2, V1 (T2 held).
		for _, tc := range []struct{ rids, want string }{
			{"S1 S2 U1", "[S1 U1] [S2]"},
			{"T1 T2 V1", "[T1 V1] [T2]"},
		} {
			if got := batches(evs, strings.Fields(tc.rids)...); got != tc.want {
				t.Errorf("%s: got %s, want %s", tc.rids, got, tc.want)
			}
		}
		if got, want := cachedOf(evs, rids...), "S1:0 T1:0 S2:600 T2:600 U1:0 V1:0"; got != want {
			t.Errorf("cached: got %s, want %s", got, want)
		}
		for i, rid := range rids {
			if got := evs[rid].Truth.DPRank; got != i%2 {
				t.Errorf("%s ran on rank %d, want %d", rid, got, i%2)
			}
		}
	})
}

// TestDefaultPriorityIsTheLeastPreferred: SGLang's default under priority
// scheduling is sys.maxsize with low values first, -sys.maxsize-1
// otherwise.
func TestDefaultPriorityIsTheLeastPreferred(t *testing.T) {
	if defaultPriority(true) != math.MaxInt64 || defaultPriority(false) != math.MinInt64 {
		t.Fatalf("got %d and %d", defaultPriority(true), defaultPriority(false))
	}
	pol := &schedPolicy{sign: -1, threshold: 10}
	// Python's ints: maxsize - (-maxsize-1) does not wrap around.
	if !pol.outranks(math.MaxInt64, math.MinInt64) || pol.outranks(math.MinInt64, math.MaxInt64) {
		t.Fatal("outranks wraps around at the int64 limits")
	}
}

// TestLPMCountsHostHits: under HiCache lpm's key is the prefix matched on
// the device and the host together (num_matched_prefix_tokens, which
// match_prefix_for_req sets from device_indices and host_hit_length),
// capped at what the request may reuse, and the match for the sort loads
// nothing back. A prompt whose 1000 cached tokens are only on the host
// goes before one that extends 300 tokens on the device, and each is
// admitted with its own hit: 1000 loaded back from the host, 300 on the
// device. One request a batch.
func TestLPMCountsHostHits(t *testing.T) {
	for _, tc := range []struct{ policy, want string }{
		{profile.FCFS, "[DD] [HH]"},
		{profile.LPM, "[HH] [DD]"},
	} {
		synctest.Test(t, func(t *testing.T) {
			p := hiProfile(t, "write_through", "")
			p.SchedulePolicy = tc.policy
			oneAtATime(256)(p)
			if err := p.Validate(); err != nil {
				t.Fatal(err)
			}
			e := startEngine(t, Config{Profile: p})
			defer e.Close()
			host, dev := hostAndDevicePrefixes(t, e)
			evs := queueBehind(t, e, Request{RID: "B", InputIDs: prompt(4, 500), MaxNewTokens: 1},
				Request{RID: "DD", InputIDs: joinIDs(dev, prompt(5, 200)), MaxNewTokens: 1},
				Request{RID: "HH", InputIDs: joinIDs(host, prompt(6, 200)), MaxNewTokens: 1})
			if got := batches(evs, "DD", "HH"); got != tc.want {
				t.Errorf("%s: got %s, want %s", tc.policy, got, tc.want)
			}
			if dd, hh := tiersOf(evs["DD"]), tiersOf(evs["HH"]); dd != (CacheTiers{Device: 300}) || hh != (CacheTiers{Host: 1000}) {
				t.Errorf("%s: tiers DD %+v, HH %+v, want 300 from the device and 1000 from the host", tc.policy, dd, hh)
			}
		})
	}
}

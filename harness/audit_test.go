package harness_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglmock/sglmock/harness"
	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
	"github.com/sglmock/sglmock/mockserver/profile"
	"github.com/sglmock/sglmock/sim"
)

// vocabulary for the load's random prompts.
var vocabulary = strings.Fields(`time person year way day thing man world life hand part child eye woman place work week case
point government company number group problem fact river stone cloud garden window letter engine market bridge
silver thunder orange marble candle forest harbor ladder pepper saddle tunnel velvet walnut yellow zipper anchor`)

// heads are the first words of the random prompts: four, so that prompts
// often start alike by chance, as bench_serving's random prompts do.
var heads = []string{"Alpha", "Bravo", "Charlie", "Delta"}

// randomPrompts are n prompts of a few hundred words, each with its own
// filler, the first word drawn from heads.
func randomPrompts(n int, seed uint64) []string { return prompts(n, seed, 200, 500) }

// prompts are n prompts of lo to hi words.
func prompts(n int, seed uint64, lo, hi int) []string {
	x := seed
	next := func() uint64 { x = x*6364136223846793005 + 1442695040888963407; return x >> 33 }
	out := make([]string, n)
	for i := range out {
		words := []string{heads[next()%uint64(len(heads))]}
		for range uint64(lo) + next()%uint64(hi-lo+1) {
			words = append(words, vocabulary[next()%uint64(len(vocabulary))])
		}
		out[i] = strings.Join(words, " ")
	}
	return out
}

// sharedPrefixPrompts are bench_serving's generated-shared-prefix dataset:
// groups of prompts that start with their group's system prompt, the
// groups interleaved.
func sharedPrefixPrompts(groups, perGroup int) []string {
	system := prompts(groups, 7, 400, 400)
	questions := prompts(groups*perGroup, 11, 100, 100)
	var out []string
	for q := range perGroup {
		for g := range groups {
			out = append(out, system[g]+"\n\n"+questions[g*perGroup+q])
		}
	}
	return out
}

// load sends prompts one at a time the way the load tools do: first, as
// their warm-up, the first prompt again (bench_serving: at most 32 output
// tokens; vLLM's test prompt: all of them).
type load struct {
	route   string // "/generate", "/v1/completions" or "/v1/chat/completions"
	warmup  bool
	prompts []string
	output  int
	// stream asks for streams (with usage, as vLLM's benchmark does).
	stream bool
}

func (l load) body(prompt, rid string, output int) string {
	stream := fmt.Sprintf(`"stream": %v`, l.stream)
	if l.stream && l.route != "/generate" {
		stream += `, "stream_options": {"include_usage": true}`
	}
	switch l.route {
	case "/generate":
		return fmt.Sprintf(`{"rid": %q, "text": %s, "sampling_params": {"max_new_tokens": %d, "ignore_eos": true}, %s}`, rid, quote(prompt), output, stream)
	case "/v1/completions":
		return fmt.Sprintf(`{"rid": %q, "model": "m", "prompt": %s, "max_tokens": %d, %s}`, rid, quote(prompt), output, stream)
	}
	return fmt.Sprintf(`{"rid": %q, "model": "m", "messages": [{"role": "user", "content": %s}], "max_tokens": %d, %s}`, rid, quote(prompt), output, stream)
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// server is where a load sends: a mock, or the recording proxy in front
// of one.
type server interface {
	Do(t testing.TB, method, path, body string, header ...string) (int, string, *http.Response)
}

func (l load) run(t *testing.T, m server) {
	t.Helper()
	send := func(prompt, rid string, output int) {
		if code, body, _ := m.Do(t, "POST", l.route, l.body(prompt, rid, output)); code != 200 {
			t.Fatalf("%s %s: %d %s", l.route, rid, code, body)
		}
	}
	if l.warmup {
		send(l.prompts[0], "warmup", min(l.output, 32))
	}
	for i, p := range l.prompts {
		send(p, fmt.Sprintf("req-%02d", i), l.output)
	}
}

// audited runs the load on a fresh mock of the profile and audits it.
func audited(t *testing.T, name string, l load) (*profile.Profile, *harness.AuditReport) {
	t.Helper()
	p := mocktest.Profile(t, name)
	m := mocktest.Start(t, api.Config{Profile: p})
	l.run(t, m)
	return p, audit(t, m, harness.AuditOptions{})
}

func audit(t *testing.T, m *mocktest.Mock, opt harness.AuditOptions) *harness.AuditReport {
	t.Helper()
	if opt.NewID == nil {
		opt.NewID = counter()
	}
	rep, err := harness.Audit(context.Background(), client(m), opt)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// wantPoisoned fails the test unless exactly the requests rids are
// POISONED.
func wantPoisoned(t *testing.T, rep *harness.AuditReport, rids ...string) {
	t.Helper()
	if got := poisoned(rep); !slices.Equal(got, rids) {
		t.Fatalf("POISONED %v, want %v\n%s", got, rids, text(t, rep))
	}
}

// poisoned lists the rids of the POISONED requests.
func poisoned(rep *harness.AuditReport) []string {
	var out []string
	for _, r := range rep.Requests {
		if r.Verdict.Level() == harness.Poisoned {
			out = append(out, r.RID)
		}
	}
	return out
}

// prefillCost is what the profile charges to prefill prompt tokens after
// cached ones, chunk by chunk, rounded as the engine rounds.
func prefillCost(p *profile.Profile, prompt, cached int) float64 {
	return p.Expect(prompt, cached, 1).TTFT.Seconds()
}

func request(t *testing.T, rep *harness.AuditReport, rid string) harness.AuditRequest {
	t.Helper()
	for _, r := range rep.Requests {
		if r.RID == rid {
			return r
		}
	}
	t.Fatalf("no request %s in the report", rid)
	return harness.AuditRequest{}
}

// A bench_serving-like run whose warm-up is its first prompt: exactly that
// prompt's measured copy is POISONED, as a repeat of the warm-up, with the
// TTFT cut the model gives; the chance overlaps of the prompts' first
// words are counted and dismissed; and the report says what the cache did
// to the run's TTFT.
func TestAuditWarmupRepeatOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, rep := audited(t, "default", load{route: "/generate", warmup: true, prompts: randomPrompts(20, 1), output: 64})
		wantPoisoned(t, rep, "req-00")
		r := request(t, rep, "req-00")
		// Alone on an idle server the request's TTFT is its own prefill:
		// its last token; with nothing cached it would be the whole prompt.
		cold, own := prefillCost(p, r.PromptTokens, 0), prefillCost(p, r.PromptTokens, r.PromptTokens-1)
		wantImpact := 100 * (cold - own) / cold
		if r.Pattern != harness.Repeat || r.Source != "warmup" || r.CachedTokens != r.PromptTokens-1 || *r.TTFT != own ||
			r.Saved != cold-own || math.Abs(r.Impact-wantImpact) > 1e-9 {
			t.Fatalf("req-00: pattern %s from %q, cached %d of %d, ttft %v, saved %v, impact %v; want a repeat of warmup, %d cached, ttft %v, saved %v, impact %v",
				r.Pattern, r.Source, r.CachedTokens, r.PromptTokens, *r.TTFT, r.Saved, r.Impact, r.PromptTokens-1, own, cold-own, wantImpact)
		}
		if rep.Floors[0] != (harness.RouteFloor{Route: sim.RouteGenerate, Requests: 21, Floor: 0}) {
			t.Errorf("floors %+v, want /generate with 21 requests and floor 0", rep.Floors)
		}
		if rep.Chance.Requests != 16 || rep.Chance.MinTokens != 1 || rep.Chance.MaxImpact >= 1 {
			t.Errorf("chance reuse %+v, want 16 requests from 1 token, each under 1 %%", rep.Chance)
		}
		out := text(t, rep)
		for _, want := range []string{
			"      repeats warmup (at 0.000 s), the run's first prompt: reused 529 of 530\n      tokens, TTFT 67.9 % shorter; no flush between\n",
			fmt.Sprintf("16 requests shared %d-%d head tokens beyond the floor with earlier prompts: no measurable effect", rep.Chance.MinTokens, rep.Chance.MaxTokens),
			"the prefix cache made this run's mean TTFT ",
			"verdict: POISONED: 1 of 21 requests reused another request's prompt enough to cut their TTFT by 1 % or more (1 repeat); " +
				"fix: a warm-up or a second leg repeating the first prompt: flush after it (POST /flush_cache), or put a fresh nonce first in each prompt",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("the report lacks %q:\n%s", want, out)
			}
		}
		// The run's effect: each request's TTFT as run against its TTFT
		// with its cold prefill, over all 21.
		var run, without float64
		for _, r := range rep.Requests {
			run += *r.TTFT
			without += *r.TTFT + r.ColdPrefillCost - r.PrefillCost
		}
		e := rep.CacheEffect
		if want := 100 * (without - run) / without; e.TTFT.Requests != 21 || math.Abs(e.TTFT.LowerPct.Mean-want) > 1e-9 || e.TTFT.LowerPct.Mean <= 0 {
			t.Errorf("cache effect on the mean TTFT %v %% over %d, want %v %% over 21", e.TTFT.LowerPct.Mean, e.TTFT.Requests, want)
		}
		if e.TTFT.AsRunWall != e.TTFT.AsRun {
			t.Errorf("at speedup 1 the wall figures %+v must be the simulated ones %+v", e.TTFT.AsRunWall, e.TTFT.AsRun)
		}
	})
}

// Several warm-ups (bench_serving --warmup-requests 3, vLLM's test prompt
// and --num-warmups): the measured copy repeats the last of them, not the
// run's first request, and its cause still says how to keep a warm-up out.
func TestAuditSeveralWarmups(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{})
		prompts := randomPrompts(3, 1)
		l := load{route: "/generate", output: 8}
		for _, rid := range []string{"warmup-1", "warmup-2", "warmup-3"} {
			m.Do(t, "POST", l.route, l.body(prompts[0], rid, 8))
		}
		for i, p := range prompts {
			m.Do(t, "POST", l.route, l.body(p, fmt.Sprintf("req-%02d", i), 8))
		}
		rep := audit(t, m, harness.AuditOptions{})
		wantPoisoned(t, rep, "warmup-2", "warmup-3", "req-00")
		if r := request(t, rep, "req-00"); r.Source != "warmup-3" || !strings.Contains(r.Verdict.String(), "(at 0.077 s), the run's first prompt: reused") {
			t.Errorf("req-00: a repeat of %s, %q: want of warmup-3, the run's first prompt", r.Source, r.Verdict)
		}
		if fix := "; fix: a warm-up or a second leg repeating the first prompt: flush after it"; !strings.Contains(rep.Verdict.String(), fix) {
			t.Errorf("verdict %q: want how to keep a warm-up out, %q", rep.Verdict, fix)
		}
	})
}

// A --min-impact above the default excuses reuse that measurably cut a
// TTFT: the summary line says it is below the bound, never that it had
// no measurable effect.
func TestAuditHighMinImpact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{})
		load{route: "/generate", warmup: true, prompts: randomPrompts(1, 1), output: 8}.run(t, m)
		rep := audit(t, m, harness.AuditOptions{MinImpact: 90})
		r := request(t, rep, "req-00")
		want := fmt.Sprintf("1 request shared %d head tokens beyond the floor with earlier prompts: below --min-impact 90 %% (each cut its TTFT by at most %.2f %%)", r.CachedTokens, r.Impact)
		if out := text(t, rep); r.Material || r.Impact < 1 || !strings.Contains(out, want) {
			t.Fatalf("req-00: material %v, impact %v; want an excused repeat of 1 %% or more, and %q in\n%s", r.Material, r.Impact, want, out)
		}
	})
}

func text(t *testing.T, rep *harness.AuditReport) string {
	t.Helper()
	var b bytes.Buffer
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// The same run with its warm-up off is clean: chance overlaps are no
// verdict.
func TestAuditNoWarmupIsClean(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{})
		load{route: "/generate", prompts: randomPrompts(20, 1), output: 64}.run(t, m)
		rep := audit(t, m, harness.AuditOptions{})
		if rep.Verdict.Level() != harness.OK || !rep.Checked || rep.Chance.Requests != 16 {
			t.Fatalf("verdict %s, checked %v, chance %d; want ok, checked, 16\n%s", rep.Verdict, rep.Checked, rep.Chance.Requests, text(t, rep))
		}
	})
}

// A vLLM-bench-like run (its test prompt is its first prompt, with the
// whole output) on the completions route of a Llama profile, whose text
// prompts all start with BOS and whose EAGLE3 cache is keyed by bigrams:
// the repeat reuses all but 2 tokens.
func TestAuditVLLMTestPrompt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, rep := audited(t, "llama-8b-eagle3-h100", load{route: "/v1/completions", warmup: true, prompts: randomPrompts(20, 2), output: 32})
		wantPoisoned(t, rep, "req-00")
		r := request(t, rep, "req-00")
		// Every text prompt starts with BOS, but bigram keys share nothing
		// of two prompts that share only BOS: the floor is 0.
		base, own := prefillCost(p, r.PromptTokens, 0), prefillCost(p, r.PromptTokens, r.PromptTokens-2)
		if r.Floor != 0 || r.CachedTokens != r.PromptTokens-2 || r.Route != sim.RouteCompletions || r.Saved != base-own {
			t.Fatalf("req-00: floor %d, cached %d of %d, route %s, saved %v; want 0, %d, %s, %v",
				r.Floor, r.CachedTokens, r.PromptTokens, r.Route, r.Saved, r.PromptTokens-2, sim.RouteCompletions, base-own)
		}
		if rep.Chance.Requests == 0 {
			t.Errorf("chance %+v: want overlaps of BOS and the first word", rep.Chance)
		}
	})
}

// A shared-system-prompt dataset (2 groups of 4) with a warm-up: under
// --allow-shared-prefix auto only the repeat poisons, and the groups are
// reported as the workload's; with a number the shared prefixes poison
// too.
func TestAuditSharedPrefixAuto(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{})
		load{route: "/generate", warmup: true, prompts: sharedPrefixPrompts(2, 4), output: 16}.run(t, m)
		rep := audit(t, m, harness.AuditOptions{AllowSharedPrefix: harness.SharedPrefixAllowance{Auto: true}})
		wantPoisoned(t, rep, "req-00")
		if len(rep.SharedPrefixes) != 2 || rep.SharedPrefixes[0].Requests != 4 || rep.SharedPrefixes[1].Requests != 4 || !rep.SharedPrefixes[0].Workload {
			t.Fatalf("shared prefixes %+v, want 2 groups of 4, the workload's", rep.SharedPrefixes)
		}
		g := rep.SharedPrefixes[0]
		want := fmt.Sprintf("2 shared prefixes of about %d tokens, 4 requests each; ", g.Tokens)
		if out := text(t, rep); !strings.Contains(out, want) || !strings.Contains(out, "came from the cache (the workload's own: --allow-shared-prefix auto)") {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
		// A second audit's floor probes must not repeat the first's.
		next := counter()
		fixed := audit(t, m, harness.AuditOptions{NewID: func() string { return "again-" + next() }})
		// The repeat, and the 6 requests after each group's first; the
		// report says, once, how to take the groups for the workload's.
		wantPoisoned(t, fixed, "req-00", "req-02", "req-03", "req-04", "req-05", "req-06", "req-07")
		if out := text(t, fixed); !strings.Contains(out, "came from the cache (a system prompt by design? --allow-shared-prefix auto takes a prefix 3 or more requests share for the workload's own)") {
			t.Errorf("the report does not say how to allow the groups:\n%s", out)
		}
	})
}

// A correct chat benchmark, a fresh UUID first in each user message and no
// flush, is clean: the chat template's head is the chat route's floor.
func TestAuditChatWithNonceFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{})
		prompts := randomPrompts(12, 3)
		for i := range prompts {
			prompts[i] = fmt.Sprintf("%08x-1f2e-4d3c-8b7a-%012x %s", 0x9e3779b9*uint32(i+1), i*7919, prompts[i])
		}
		load{route: "/v1/chat/completions", prompts: prompts, output: 16}.run(t, m)
		rep := audit(t, m, harness.AuditOptions{})
		if rep.Verdict.Level() != harness.OK || rep.Floors[0].Route != sim.RouteChat || rep.Floors[0].Floor == 0 {
			t.Fatalf("verdict %s, floors %+v: want ok and a chat floor (the template's head)\n%s", rep.Verdict, rep.Floors, text(t, rep))
		}
		for _, r := range rep.Requests[1:] {
			if r.CachedTokens < r.Floor {
				t.Errorf("%s: cached %d under the floor %d", r.RID, r.CachedTokens, r.Floor)
			}
		}
	})
}

// A two-point run with its nonce at the end of the prompt: the second leg
// is a near-repeat, which --allow-shared-prefix auto does not excuse.
func TestAuditSuffixNonceIsNearRepeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{})
		body := randomPrompts(1, 5)[0]
		var prompts []string
		for _, nonce := range []string{"Qwxzy Vbnmk", "Plokij Uhygt"} {
			prompts = append(prompts, body+" "+nonce)
		}
		load{route: "/generate", prompts: prompts, output: 16}.run(t, m)
		rep := audit(t, m, harness.AuditOptions{AllowSharedPrefix: harness.SharedPrefixAllowance{Auto: true}})
		r := request(t, rep, "req-01")
		tail := r.PromptTokens - r.CachedTokens
		want := fmt.Sprintf("POISONED: shares all but its last %d tokens with req-00 (at 0.000 s): reused %d of %d tokens", tail, r.CachedTokens, r.PromptTokens)
		if r.Pattern != harness.NearRepeat || !strings.HasPrefix(r.Verdict.String(), want) {
			t.Fatalf("req-01: pattern %s, verdict %q; want a near-repeat: %q", r.Pattern, r.Verdict, want)
		}
		if fix := "fix: a nonce at the end of a prompt keeps nothing cold: put it first"; !strings.HasSuffix(rep.Verdict.String(), fix) {
			t.Errorf("verdict %q: want %q", rep.Verdict, fix)
		}
	})
}

// A server that kept only part of its history says so: the audit cannot
// vouch for requests whose records are gone.
func TestAuditSaysWhenRecordsWereLetGo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{SimTruthBytes: 4 << 10})
		for i := range 40 {
			// Distinct first tokens: no request shares a prefix with another.
			body := fmt.Sprintf(`{"input_ids": [%d, 5, 6, 7], "sampling_params": {"max_new_tokens": 2}}`, 1000+i)
			if code, resp, _ := m.Do(t, "POST", "/generate", body); code != 200 {
				t.Fatalf("got %d %s", code, resp)
			}
		}
		rep := audit(t, m, harness.AuditOptions{})
		kept := len(rep.Requests)
		want := fmt.Sprintf("the server kept the records of only the last %d of 40 requests", kept)
		if kept >= 40 || rep.Checked || rep.Verdict.Level() != harness.Suspect || !strings.HasPrefix(rep.Verdict.String(), "SUSPECT: "+want) {
			t.Fatalf("got %d records, checked %v and verdict %q, want fewer than 40, unchecked and %q", kept, rep.Checked, rep.Verdict, want)
		}
	})
}

// A run in which nothing reached the server is not ok.
func TestAuditNothingReachedTheServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{})
		rep := audit(t, m, harness.AuditOptions{})
		if rep.Checked || !strings.HasPrefix(rep.Verdict.String(), "SUSPECT: no request reached the server: nothing was checked") {
			t.Fatalf("checked %v, verdict %q: want unchecked, no request", rep.Checked, rep.Verdict)
		}
		if out := text(t, rep); !strings.Contains(out, "no request reached the server\n") {
			t.Errorf("report:\n%s", out)
		}
	})
}

// Parallel sampling (n > 1) makes SGLang prefill each prompt first and run
// the n copies on it: the copies reuse the server's own prefill, which is
// its design and no benchmark's reuse. They are named, and never poison.
func TestAuditParallelSamplesAreNotPoisoned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{})
		for i, p := range randomPrompts(3, 7) {
			body := fmt.Sprintf(`{"text": %s, "sampling_params": {"max_new_tokens": 8, "n": 4}, "rid": "p%d"}`, quote(p), i)
			if code, resp, _ := m.Do(t, "POST", "/generate", body); code != 200 {
				t.Fatalf("%d %s", code, resp)
			}
		}
		rep := audit(t, m, harness.AuditOptions{})
		samples := 0
		for _, r := range rep.Requests {
			if r.Pattern == harness.ParallelSample {
				samples++
				if r.Verdict.Level() != harness.OK || r.Material {
					t.Errorf("%s: verdict %s, material %v; want ok, not material", r.RID, r.Verdict, r.Material)
				}
			}
		}
		if samples != 12 || rep.Verdict.Level() != harness.OK || !rep.Checked {
			t.Fatalf("%d parallel samples, verdict %s, checked %v: want 12, ok, checked\n%s", samples, rep.Verdict, rep.Checked, text(t, rep))
		}
	})
}

// bench_serving's warm-up as it sends it with --warmup-requests 2: two
// copies of its first prompt at once, then (with --flush-cache) a flush,
// then its measured run from that prompt. The copies are its warm-up,
// which its figures leave out: one of them served from the other is a
// finding, never a near-repeat, and never fails a run whose measured
// requests were cold; without the flush the measured copy is the one
// POISONED.
func TestAuditConcurrentWarmups(t *testing.T) {
	for _, flush := range []bool{true, false} {
		for _, measured := range []int{0, 6} { // by the tool's shape, and as its result file says
			t.Run(fmt.Sprintf("flush %v measured %d", flush, measured), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					m := mocktest.Start(t, api.Config{})
					prompts := randomPrompts(6, 3)
					l := load{route: "/generate", output: 8}
					var wg sync.WaitGroup
					for _, rid := range []string{"warmup-1", "warmup-2"} {
						wg.Go(func() { m.Do(t, "POST", l.route, l.body(prompts[0], rid, 8)) })
					}
					wg.Wait()
					if flush {
						if code, body, _ := m.Do(t, "POST", "/flush_cache", ""); code != 200 {
							t.Fatalf("flush: %d %s", code, body)
						}
					}
					time.Sleep(time.Second)
					for i, p := range prompts {
						m.Do(t, "POST", l.route, l.body(p, fmt.Sprintf("req-%02d", i), 8))
					}
					rep := audit(t, m, harness.AuditOptions{Measured: measured})
					var copies []harness.AuditRequest
					for _, r := range rep.Requests {
						if r.Pattern == harness.Copies {
							copies = append(copies, r)
						}
						if r.Pattern == harness.NearRepeat || strings.HasPrefix(r.RID, "warmup") != r.WarmUp {
							t.Errorf("%s: pattern %s, warm-up %v", r.RID, r.Pattern, r.WarmUp)
						}
					}
					if len(copies) != 1 || copies[0].Group != 2 || copies[0].Verdict.Level() != harness.OK ||
						!strings.HasPrefix(copies[0].Verdict.String(), "ok (one of 2 identical prompts in flight together, served from warmup-") ||
						!strings.HasSuffix(copies[0].Verdict.String(), "; a warm-up, which the tool's figures leave out)") {
						t.Fatalf("copies %+v: want one warm-up copy, ok", copies)
					}
					if flush {
						wantPoisoned(t, rep)
						if rep.Verdict.Level() != harness.OK || !strings.Contains(rep.Verdict.String(), "1 request of the tool's warm-up reused a prompt: its figures leave it out") {
							t.Errorf("verdict %q: want ok, naming the warm-up", rep.Verdict)
						}
						return
					}
					wantPoisoned(t, rep, "req-00")
					if r := request(t, rep, "req-00"); r.Pattern != harness.Repeat || rep.Verdict.Level() != harness.Poisoned {
						t.Errorf("req-00: %s; verdict %q", r.Pattern, rep.Verdict)
					}
				})
			})
		}
	}
}

// A warm-up repeat at bench_serving's default size (1000 prompts; here
// 200 already dilute it) moves none of the figures the run reports by 1 %:
// the request is POISONED, the run is ok with the finding and its fix,
// and --strict fails it as before. The run's impact is each figure over
// the measured requests as run against the same with the poisoned
// request's saved time added back.
func TestAuditRunImpact(t *testing.T) {
	run := func(t *testing.T, opt harness.AuditOptions) *harness.AuditReport {
		m := mocktest.Start(t, api.Config{})
		load{route: "/generate", warmup: true, prompts: randomPrompts(200, 1), output: 8}.run(t, m)
		return audit(t, m, opt)
	}
	synctest.Test(t, func(t *testing.T) {
		rep := run(t, harness.AuditOptions{Tool: harness.ToolSGLang})
		wantPoisoned(t, rep, "req-00")
		r := request(t, rep, "req-00")
		var sum float64
		for _, x := range rep.Requests[1:] {
			sum += *x.TTFT
		}
		ri := rep.RunImpact
		if want := 100 * r.Saved / (sum + r.Saved); ri == nil || ri.Requests != 200 || ri.Poisoned != 1 || math.Abs(ri.TTFT.Mean-want) > 1e-9 || ri.Max >= 1 {
			t.Fatalf("run impact %+v: want 200 measured, 1 poisoned, mean TTFT %v %% lower, all under 1 %%", ri, want)
		}
		want := fmt.Sprintf("ok (1 of 201 requests reused another request's prompt enough to cut their TTFT by 1 %% or more (1 repeat), "+
			"which moved none of the figures the run reports by 1 %% (--min-run-impact; at most %.1f %%: %s); "+
			"fix: bench_serving's warm-up repeats its first prompt: --warmup-requests 0, or --flush-cache to flush after it)", ri.Max, ri.Largest)
		if got := rep.Verdict.String(); got != want {
			t.Errorf("verdict\n%q, want\n%q", got, want)
		}
		if out := text(t, rep); !strings.Contains(out, "the reuse that poisoned 1 request made the measured run's mean TTFT ") || !strings.Contains(out, ": below --min-run-impact 1 %") {
			t.Errorf("the report does not say what the reuse did to the run:\n%s", out)
		}
		for _, opt := range []harness.AuditOptions{{Strict: true}, {MinRunImpact: ri.Max / 2}} {
			if rep := run(t, opt); rep.Verdict.Level() != harness.Poisoned {
				t.Errorf("%+v: verdict %q, want POISONED", opt, rep.Verdict)
			}
		}
	})
}

// The fix a verdict names is the tool's that ran, told by its command.
func TestDetectTool(t *testing.T) {
	for _, tt := range []struct {
		command string
		want    string
	}{
		{"python3 -m sglang.bench_serving --backend sglang", harness.ToolSGLang},
		{"python3 /src/sglang/python/sglang/bench_serving.py --num-prompts 20", harness.ToolSGLang},
		{"vllm bench serve --save-result", harness.ToolVLLM},
		{"python3 benchmarks/benchmark_serving.py --backend openai", harness.ToolVLLMScript},
		{"python3 cmd/sglmock/testdata/loadgen.py", ""},
		{"./twopoint.sh vllm", ""},
	} {
		if got := harness.DetectTool(strings.Fields(tt.command)); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.command, got, tt.want)
		}
	}
}

// Under concurrency the poisoned request's longer prefill would have held
// up the requests in its prefill batch or waiting behind it: each whose
// first token came with or after its own, having arrived before, would
// have had its TTFT longer by the same saved time, and the run's impact
// counts them.
func TestAuditRunImpactHoldsUpTheQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{Profile: mocktest.Profile(t, "kimi-k2.6-rtx6000")})
		concurrentLoad(t, m, load{route: "/generate", prompts: randomPrompts(20, 1), output: 32}, 4)
		rep := audit(t, m, harness.AuditOptions{})
		r := request(t, rep, "req-00")
		t0 := r.Arrival + *r.TTFT
		held, sum := 0, 0.0
		for _, q := range rep.Requests[1:] {
			sum += *q.TTFT
			if q.RID == r.RID || q.Arrival < t0 && q.Arrival+*q.TTFT >= t0 {
				held++
			}
		}
		ri := rep.RunImpact
		want := 100 * float64(held) * r.Saved / (sum + float64(held)*r.Saved)
		if ri == nil || held < 2 || math.Abs(ri.TTFT.Mean-want) > 1e-9 {
			t.Fatalf("run impact %+v: want the mean TTFT %v %% lower (req-00 and %d held up behind it)", ri, want, held-1)
		}
	})
}

package profile

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/sglmock/sglmock/compat"
)

// Modelling defaults for speculative decoding switched on by a flag on a
// profile that has none: each draft is accepted with this probability
// (given the ones before it were), and a draft+verify round costs this many
// plain decode rounds.
const (
	DefaultAcceptProb      = 0.7
	DefaultRoundCostFactor = 1.3
	defaultSpecSteps       = 3
)

// Flags are the launch flags that describe the deployment, spelled as
// SGLang's launch_server spells them. A flag that is set overrides the
// profile's value; one that is not leaves it alone. The commands that take
// a deployment from the command line register them: serve, fleet, audit,
// calibrate, and bench twopoint for --dry-run. (demo runs its own profile;
// a scenario names its profile in its file.)
type Flags struct {
	fs                                                       *flag.FlagSet
	contextLength, pageSize, chunked, maxPrefill, maxRunning int
	maxTotal, specSteps, specTopK, specDraft                 int
	specAlgorithm, sglangVersion                             string
	seed                                                     uint64
	disableOverlap                                           bool
	tpSize, dpSize                                           int
	dpAttention                                              bool
	loadBalance                                              string
	hicache                                                  *hicacheFlags
	schedulePolicy                                           string
	priority, lowPriorityFirst, noPreemption, abortPriority  bool
	preemptionThreshold, defaultPriority                     int
}

// RegisterFlags defines the profile flags on fs.
func RegisterFlags(fs *flag.FlagSet) *Flags {
	f := &Flags{fs: fs}
	fs.IntVar(&f.contextLength, "context-length", 0, "override the profile's context length")
	fs.IntVar(&f.pageSize, "page-size", 0, "override the profile's page size (radix cache granularity)")
	fs.IntVar(&f.chunked, "chunked-prefill-size", 0, "override the chunked prefill size (-1 disables chunking)")
	fs.IntVar(&f.maxPrefill, "max-prefill-tokens", 0, "override the tokens per prefill batch")
	fs.IntVar(&f.maxRunning, "max-running-requests", 0, "override the running batch bound")
	fs.IntVar(&f.maxTotal, "max-total-tokens", 0, "override the KV pool size in tokens")
	fs.StringVar(&f.specAlgorithm, "speculative-algorithm", "", "speculative decoding: "+strings.Join(Algorithms, ", ")+
		fmt.Sprintf(" (a profile without a speculative section gets accept probability %g per draft and round cost factor %g)",
			DefaultAcceptProb, DefaultRoundCostFactor))
	fs.IntVar(&f.specSteps, "speculative-num-steps", 0, "override the draft depth")
	fs.IntVar(&f.specTopK, "speculative-eagle-topk", 0, "override the draft branching")
	fs.IntVar(&f.specDraft, "speculative-num-draft-tokens", 0, "override the tokens verified per round")
	fs.BoolVar(&f.disableOverlap, "disable-overlap-schedule", false, "disable SGLang's overlap scheduler, which keeps the last batch "+
		"busy for /flush_cache about one decode step after a response: sets flush_busy_after_finish_s to 0")
	fs.IntVar(&f.tpSize, "tp-size", 0, "override the GPUs of one tensor-parallel group; with --enable-dp-attention a multiple of --dp-size")
	fs.IntVar(&f.dpSize, "dp-size", 0, "override the DP ranks: schedulers with a KV pool and radix cache each, behind SGLang's data-parallel controller")
	fs.BoolVar(&f.dpAttention, "enable-dp-attention", false, "DP attention: the DP ranks run every iteration together, each with chunked prefill and "+
		"running requests divided by --dp-size (SGLang's rule; needs --tp-size a multiple of --dp-size)")
	fs.StringVar(&f.loadBalance, "load-balance-method", "", "how the controller picks a DP rank: auto (round_robin), round_robin, "+
		"total_requests or total_tokens (default: the profile's, else auto; SGLang's follow_bootstrap_room needs PD disaggregation, which is not modelled)")
	fs.StringVar(&f.sglangVersion, "sglang-version", "", "the SGLang `release` whose rules to follow, one of "+
		strings.Join(compat.Known(), ", ")+" (default: the profile's sglang_version, else "+compat.Default+
		"); /server_info and /v1/loads report it, and 'sglmock version' lists the rules that differ")
	fs.StringVar(&f.schedulePolicy, "schedule-policy", "", "the order each DP rank admits its waiting queue in: fcfs, lpm (longest cached prefix first), "+
		"dfs-weight, lof (longest output first), random (shuffled with --random-seed) or routing-key (default: the profile's, else fcfs)")
	fs.BoolVar(&f.priority, "enable-priority-scheduling", false, "order fcfs and lof by each request's priority (higher values first), "+
		"and let a waiting request preempt running ones of lower priority when the running batch is full")
	fs.BoolVar(&f.lowPriorityFirst, "schedule-low-priority-values-first", false, "with --enable-priority-scheduling, lower priority values go first")
	fs.BoolVar(&f.noPreemption, "disable-priority-preemption", false, "with --enable-priority-scheduling, never preempt a running request")
	fs.IntVar(&f.preemptionThreshold, "priority-scheduling-preemption-threshold", DefaultPriorityPreemptionThreshold,
		"the priority difference above which a waiting request preempts a running one")
	fs.IntVar(&f.defaultPriority, "default-priority-value", 0, "with --enable-priority-scheduling, the priority of a request that gives none (default: the lowest)")
	fs.BoolVar(&f.abortPriority, "abort-on-priority-when-disabled", false, "without --enable-priority-scheduling, abort a request that gives a priority (503)")
	seedUsage := "override the profile's seed (acceptance draws, jitter, the random schedule policy)"
	fs.Uint64Var(&f.seed, "random-seed", 0, seedUsage)
	fs.Uint64Var(&f.seed, "seed", 0, seedUsage+"; the same as --random-seed")
	f.hicache = registerHiCacheFlags(fs)
	return f
}

// Launched are the deployment flags given at launch among the ServerArgs
// fields SGLang leaves None unless given: nil for a flag that was not set.
// /server_info reports them as given.
type Launched struct {
	ContextLength, MaxTotalTokens, MaxRunningRequests *int
}

// Launched returns the launch flags among context_length,
// max_total_tokens and max_running_requests that were set. Call it after
// the flag set is parsed.
func (f *Flags) Launched() Launched {
	var l Launched
	given := func(v int) *int { return &v }
	f.fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "context-length":
			l.ContextLength = given(f.contextLength)
		case "max-total-tokens":
			l.MaxTotalTokens = given(f.maxTotal)
		case "max-running-requests":
			l.MaxRunningRequests = given(f.maxRunning)
		}
	})
	return l
}

// Apply overrides p's fields with the flags that were set, then validates
// the result. Call it after the flag set is parsed.
func (f *Flags) Apply(p *Profile) error {
	set := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	ints := []struct {
		flag string
		dst  *int
		v    int
	}{
		{"context-length", &p.ContextLength, f.contextLength},
		{"page-size", &p.PageSize, f.pageSize},
		{"chunked-prefill-size", &p.ChunkedPrefillSize, f.chunked},
		{"max-prefill-tokens", &p.MaxPrefillTokens, f.maxPrefill},
		{"max-running-requests", &p.MaxRunningRequests, f.maxRunning},
		{"max-total-tokens", &p.MaxTotalTokens, f.maxTotal},
		{"tp-size", &p.TPSize, f.tpSize},
		{"dp-size", &p.DPSize, f.dpSize},
	}
	for _, x := range ints {
		if set[x.flag] {
			*x.dst = x.v
		}
	}
	if set["seed"] || set["random-seed"] {
		p.Seed = f.seed
	}
	if f.dpAttention {
		p.EnableDPAttention = true
	}
	if set["load-balance-method"] {
		p.LoadBalanceMethod = f.loadBalance
	}
	if set["sglang-version"] {
		release, err := compat.Canonical(f.sglangVersion)
		if err != nil {
			return fmt.Errorf("--sglang-version %w", err)
		}
		p.SGLangVersion = release
	}
	if set["schedule-policy"] {
		if !slices.Contains(SchedulePolicies, f.schedulePolicy) {
			return fmt.Errorf("argument --schedule-policy: %s", InvalidPolicyChoice(f.schedulePolicy))
		}
		p.SchedulePolicy = f.schedulePolicy
	}
	for _, b := range []struct {
		flag string
		dst  *bool
		v    bool
	}{
		{"enable-priority-scheduling", &p.EnablePriorityScheduling, f.priority},
		{"schedule-low-priority-values-first", &p.ScheduleLowPriorityValuesFirst, f.lowPriorityFirst},
		{"disable-priority-preemption", &p.DisablePriorityPreemption, f.noPreemption},
		{"abort-on-priority-when-disabled", &p.AbortOnPriorityWhenDisabled, f.abortPriority},
	} {
		if set[b.flag] {
			*b.dst = b.v
		}
	}
	if set["priority-scheduling-preemption-threshold"] {
		v := f.preemptionThreshold
		p.PriorityPreemptionThreshold = &v
	}
	if set["default-priority-value"] {
		v := f.defaultPriority
		p.DefaultPriorityValue = &v
	}
	if f.disableOverlap {
		p.FlushBusyAfterFinishS = 0
	}
	if set["speculative-algorithm"] || set["speculative-num-steps"] || set["speculative-eagle-topk"] || set["speculative-num-draft-tokens"] {
		if p.Speculative == nil {
			if !set["speculative-algorithm"] {
				return errors.New("--speculative-num-steps/-eagle-topk/-num-draft-tokens need --speculative-algorithm (the profile has no speculative decoding)")
			}
			p.Speculative = &Speculative{NumSteps: defaultSpecSteps, EagleTopK: 1, RoundCostFactor: DefaultRoundCostFactor}
			// The profile's bound is the one SGLang derives without
			// speculative decoding; with it SGLang uses 48 unless the
			// launch gives one.
			if !set["max-running-requests"] {
				p.MaxRunningRequests = SpeculativeMaxRunningRequests
			}
		} else {
			p.Speculative = p.Clone().Speculative // the caller's profile may share the original
		}
		sp := p.Speculative
		if set["speculative-algorithm"] {
			sp.Algorithm = strings.ToUpper(f.specAlgorithm)
		}
		if set["speculative-num-steps"] {
			sp.NumSteps = f.specSteps
		}
		if set["speculative-eagle-topk"] {
			sp.EagleTopK = f.specTopK
		}
		// The tokens verified per round follow the depth when the depth is
		// new or changed (SGLang's num_steps+1 with one branch); a profile's
		// own value otherwise stays.
		switch {
		case set["speculative-num-draft-tokens"]:
			sp.NumDraftTokens = f.specDraft
		case sp.NumDraftTokens == 0 || set["speculative-num-steps"]:
			sp.NumDraftTokens = sp.NumSteps + 1
		}
		// The acceptance model follows the depth: extra steps repeat the last
		// probability (the default when there is none), fewer steps drop the
		// tail. Past 64 steps nothing is filled in: validation refuses it.
		for len(sp.AcceptProbs) < sp.NumSteps && sp.NumSteps <= 64 {
			last := DefaultAcceptProb
			if n := len(sp.AcceptProbs); n > 0 {
				last = sp.AcceptProbs[n-1]
			}
			sp.AcceptProbs = append(sp.AcceptProbs, last)
		}
		if sp.NumSteps >= 0 && len(sp.AcceptProbs) > sp.NumSteps {
			sp.AcceptProbs = sp.AcceptProbs[:sp.NumSteps]
		}
	}
	if err := f.hicache.apply(p, set); err != nil {
		return err
	}
	if err := p.Validate(); err != nil {
		return fmt.Errorf("the profile with these flags is invalid: %w", err)
	}
	return nil
}

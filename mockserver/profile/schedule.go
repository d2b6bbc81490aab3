package profile

import (
	"fmt"
	"slices"
	"strings"
)

// Scheduling policy, as SGLang's launch flags set it (server_args.py and
// managers/schedule_policy.py): the order in which each DP rank's
// scheduler takes its waiting queue into a prefill batch, and priority
// scheduling.
//
// schedule_policy is one of SchedulePolicies. fcfs (the default) keeps
// arrival order; lpm and dfs-weight order by the prefix each request
// finds in the radix cache, and hold back a request whose prefix another
// waiting request is about to compute (in-batch prefix caching, with the
// two thresholds below); lof takes the longest max_new_tokens first;
// random shuffles the queue with the profile's seed; routing-key takes
// first the requests whose routing key the running batch holds most.
// "priority" is among SGLang's choices but its scheduler refuses it.
//
// enable_priority_scheduling orders fcfs and lof by each request's
// priority first (higher values first, or lower with
// schedule_low_priority_values_first), and lets a request preempt running
// ones whose priority is more than priority_scheduling_preemption_threshold
// below it when the running batch is full, unless
// disable_priority_preemption.

// SchedulePolicies are SGLang's --schedule-policy choices, in its order
// (args/memory_args.py).
var SchedulePolicies = []string{"lpm", "random", "fcfs", "dfs-weight", "lof", "priority", "routing-key"}

// Schedule policies the scheduler runs.
const (
	FCFS       = "fcfs"
	LPM        = "lpm"
	DFSWeight  = "dfs-weight"
	LOF        = "lof"
	Random     = "random"
	RoutingKey = "routing-key"
)

// SGLang's defaults: --priority-scheduling-preemption-threshold, and the
// IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD and
// IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD environment variables.
const (
	DefaultPriorityPreemptionThreshold = 10
	DefaultInBatchCheckThreshold       = 32
	DefaultInBatchDeprioritizeLen      = 32
)

// Policy is the schedule policy the profile names: schedule_policy, fcfs
// when unset.
func (p *Profile) Policy() string {
	if p.SchedulePolicy == "" {
		return FCFS
	}
	return p.SchedulePolicy
}

// PreemptionThreshold is priority_scheduling_preemption_threshold, 10
// when unset.
func (p *Profile) PreemptionThreshold() int {
	return intOr(p.PriorityPreemptionThreshold, DefaultPriorityPreemptionThreshold)
}

// PriorityPreemption reports whether a request may preempt running ones:
// priority scheduling on, preemption not disabled (SGLang's
// enable_priority_preemption).
func (p *Profile) PriorityPreemption() bool {
	return p.EnablePriorityScheduling && !p.DisablePriorityPreemption
}

// InBatchCheckThreshold is IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD: a
// waiting request whose cached prefix is at most this long is checked
// against the other waiting requests; -1 turns in-batch prefix caching
// off.
func (p *Profile) InBatchCheckThreshold() int {
	return intOr(p.InBatchPrefixCachingCheckThreshold, DefaultInBatchCheckThreshold)
}

// InBatchDeprioritizeLen is IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD:
// a checked request that shares at least this many tokens with a waiting
// request ahead of it goes to the back.
func (p *Profile) InBatchDeprioritizeLen() int {
	return intOr(p.InBatchPrefixCachingDeprioritizeThreshold, DefaultInBatchDeprioritizeLen)
}

func intOr(v *int, def int) int {
	if v == nil {
		return def
	}
	return *v
}

// InvalidPolicyChoice is argparse's refusal of a --schedule-policy value
// outside SGLang's choices.
func InvalidPolicyChoice(policy string) string {
	quoted := make([]string, len(SchedulePolicies))
	for i, c := range SchedulePolicies {
		quoted[i] = "'" + c + "'"
	}
	return fmt.Sprintf("invalid choice: '%s' (choose from %s)", policy, strings.Join(quoted, ", "))
}

// maxThreshold bounds the in-batch thresholds and the preemption
// threshold: far above any prompt, and far from overflow.
const maxThreshold = 1 << 40

// validateSchedule checks the scheduling keys as SGLang's server args and
// SchedulePolicy do.
func (v *validator) validateSchedule(p *Profile) {
	policy := p.Policy()
	if !slices.Contains(SchedulePolicies, policy) {
		v.check(false, "schedule_policy", policy, InvalidPolicyChoice(policy))
		return
	}
	// argparse takes "priority", then SchedulePolicy's
	// _validate_and_adjust_policy refuses it when the scheduler starts.
	v.check(policy != "priority", "schedule_policy", policy,
		"Unknown schedule_policy: policy='priority' (SGLang's argparse lists it, but its scheduler refuses it; "+
			"enable_priority_scheduling orders fcfs and lof by priority)")
	if p.EnablePriorityScheduling {
		// server_args.py's check.
		v.check(policy == FCFS || policy == LOF, "schedule_policy", policy, fmt.Sprintf(
			"To use priority scheduling, schedule_policy must be 'fcfs' or 'lof'. '%s' is not supported.", policy))
	}
	for _, t := range []struct {
		field string
		v     *int
	}{
		{"priority_scheduling_preemption_threshold", p.PriorityPreemptionThreshold},
		{"in_batch_prefix_caching_check_threshold", p.InBatchPrefixCachingCheckThreshold},
		{"in_batch_prefix_caching_deprioritize_threshold", p.InBatchPrefixCachingDeprioritizeThreshold},
	} {
		if t.v != nil {
			v.check(*t.v >= -maxThreshold && *t.v <= maxThreshold, t.field, *t.v, fmt.Sprintf("must be within ±%d", int64(maxThreshold)))
		}
	}
}

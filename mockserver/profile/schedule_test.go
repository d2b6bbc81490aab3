package profile

import (
	"flag"
	"io"
	"strings"
	"testing"
)

// TestScheduleValidation: SGLang's refusals, with its messages: argparse's
// for a value outside the choices, SchedulePolicy's for "priority", the
// server args' check of priority scheduling.
func TestScheduleValidation(t *testing.T) {
	huge := 1 << 41
	for _, tc := range []struct {
		name string
		set  func(p *Profile)
		want string
	}{
		{"unknown policy", func(p *Profile) { p.SchedulePolicy = "sjf" },
			`schedule_policy = sjf: invalid choice: 'sjf' (choose from 'lpm', 'random', 'fcfs', 'dfs-weight', 'lof', 'priority', 'routing-key')`},
		{"priority is a choice the scheduler refuses", func(p *Profile) { p.SchedulePolicy = "priority" },
			"schedule_policy = priority: Unknown schedule_policy: policy='priority'"},
		{"priority scheduling with lpm", func(p *Profile) { p.SchedulePolicy, p.EnablePriorityScheduling = LPM, true },
			"schedule_policy = lpm: To use priority scheduling, schedule_policy must be 'fcfs' or 'lof'. 'lpm' is not supported."},
		{"priority scheduling with random", func(p *Profile) { p.SchedulePolicy, p.EnablePriorityScheduling = Random, true },
			"'random' is not supported."},
		{"absurd threshold", func(p *Profile) { p.InBatchPrefixCachingCheckThreshold = &huge },
			"in_batch_prefix_caching_check_threshold = 2199023255552: must be within ±1099511627776"},
	} {
		p := mustLoad(t, "default")
		tc.set(p)
		err := p.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
	for _, policy := range []string{"", FCFS, LPM, DFSWeight, LOF, Random, RoutingKey} {
		p := mustLoad(t, "default")
		p.SchedulePolicy = policy
		if err := p.Validate(); err != nil {
			t.Errorf("%q: %v", policy, err)
		}
	}
	for _, policy := range []string{FCFS, LOF} {
		p := mustLoad(t, "default")
		p.SchedulePolicy, p.EnablePriorityScheduling = policy, true
		if err := p.Validate(); err != nil {
			t.Errorf("priority with %q: %v", policy, err)
		}
	}
}

// TestScheduleDefaults: SGLang's defaults when nothing is set.
func TestScheduleDefaults(t *testing.T) {
	p := mustLoad(t, "default")
	if p.Policy() != FCFS || p.PreemptionThreshold() != 10 || p.InBatchCheckThreshold() != 32 || p.InBatchDeprioritizeLen() != 32 || p.PriorityPreemption() {
		t.Fatalf("got policy %q, threshold %d, in-batch %d/%d, preemption %v",
			p.Policy(), p.PreemptionThreshold(), p.InBatchCheckThreshold(), p.InBatchDeprioritizeLen(), p.PriorityPreemption())
	}
	p.EnablePriorityScheduling = true
	if !p.PriorityPreemption() {
		t.Fatal("priority scheduling without preemption by default")
	}
	p.DisablePriorityPreemption = true
	if p.PriorityPreemption() {
		t.Fatal("--disable-priority-preemption kept preemption")
	}
}

// TestScheduleFlags: serve's flags set the keys; a value outside SGLang's
// choices is refused as argparse refuses it.
func TestScheduleFlags(t *testing.T) {
	apply := func(args ...string) (*Profile, error) {
		p := mustLoad(t, "default")
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f := RegisterFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return p, f.Apply(p)
	}
	p, err := apply("--schedule-policy", "lof", "--enable-priority-scheduling", "--schedule-low-priority-values-first",
		"--disable-priority-preemption", "--priority-scheduling-preemption-threshold", "3", "--default-priority-value", "-2")
	if err != nil {
		t.Fatal(err)
	}
	if p.SchedulePolicy != LOF || !p.EnablePriorityScheduling || !p.ScheduleLowPriorityValuesFirst || !p.DisablePriorityPreemption ||
		p.PreemptionThreshold() != 3 || p.DefaultPriorityValue == nil || *p.DefaultPriorityValue != -2 {
		t.Fatalf("flags not applied: %+v", p)
	}
	if p, err = apply("--abort-on-priority-when-disabled"); err != nil || !p.AbortOnPriorityWhenDisabled || p.SchedulePolicy != "" {
		t.Fatalf("got %v, %+v", err, p)
	}
	_, err = apply("--schedule-policy", "shortest-job")
	want := "argument --schedule-policy: invalid choice: 'shortest-job' (choose from 'lpm', 'random', 'fcfs', 'dfs-weight', 'lof', 'priority', 'routing-key')"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %q", err, want)
	}
	if _, err = apply("--schedule-policy", "lpm", "--enable-priority-scheduling"); err == nil ||
		!strings.Contains(err.Error(), "To use priority scheduling, schedule_policy must be 'fcfs' or 'lof'. 'lpm' is not supported.") {
		t.Fatalf("got %v", err)
	}
}

package profile

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

// applyFlags loads a built-in profile and applies args to it.
func applyFlags(t *testing.T, name string, args ...string) (*Profile, error) {
	t.Helper()
	p, err := Load(name)
	if err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return p, f.Apply(p)
}

// Under speculative decoding SGLang runs 48 requests at once unless the
// launch gives a bound (speculative_hook.py); a profile that models a
// launch with one says so.
func TestSpeculativeRunningBound(t *testing.T) {
	for _, tc := range []struct {
		profile string
		args    []string
		want    int
	}{
		{"default", nil, 256}, // no speculative decoding: the profile's own
		{"default", []string{"--speculative-algorithm", "EAGLE"}, 48},
		{"default", []string{"--speculative-algorithm", "NGRAM", "--max-running-requests", "100"}, 100},
		{"default", []string{"--max-running-requests", "100", "--speculative-algorithm", "DFLASH"}, 100},
		{"llama-8b-eagle3-h100", nil, 48},
		{"llama-8b-eagle3-h100", []string{"--max-running-requests", "256"}, 256},
		{"kimi-k2.6-rtx6000", nil, 32}, // given explicitly
		{"kimi-k2.6-rtx6000", []string{"--speculative-algorithm", "EAGLE"}, 32},
	} {
		p, err := applyFlags(t, tc.profile, tc.args...)
		if err != nil {
			t.Fatalf("%s %v: %v", tc.profile, tc.args, err)
		}
		if p.MaxRunningRequests != tc.want {
			t.Errorf("%s %v: max_running_requests %d, want %d", tc.profile, tc.args, p.MaxRunningRequests, tc.want)
		}
	}
	// Without speculative decoding the bound is the deployment's, which
	// the profile must give.
	text := strings.Replace(mustBuiltin(t, "default"), "max_running_requests: 256\n", "", 1)
	if _, err := Parse(strings.NewReader(text), "x"); err == nil || !strings.Contains(err.Error(), "max_running_requests = 0: must be >= 1") {
		t.Errorf("a plain profile without max_running_requests: got %v", err)
	}
}

func mustBuiltin(t *testing.T, name string) string {
	t.Helper()
	b, err := BuiltinYAML(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The flush window after a response is the overlap scheduler's: releases
// before the speculative-overlap rule run DFLASH, NGRAM, FROZEN_KV_MTP and
// the EAGLE family with eagle_topk > 1 without it.
func TestOverlapSchedulerBySpeculativeAlgorithm(t *testing.T) {
	window := 4 * time.Millisecond // the default profile's
	for _, tc := range []struct {
		args []string
		want time.Duration
		why  string
	}{
		{nil, window, ""},
		{[]string{"--speculative-algorithm", "DFLASH"}, window, ""},
		{[]string{"--speculative-algorithm", "EAGLE", "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8"}, window, ""},
		{[]string{"--sglang-version", "0.5.12", "--speculative-algorithm", "DFLASH"}, 0, "SGLang 0.5.12 runs DFLASH without the overlap scheduler"},
		{[]string{"--sglang-version", "0.5.12", "--speculative-algorithm", "NGRAM"}, 0, "SGLang 0.5.12 runs NGRAM without the overlap scheduler"},
		{[]string{"--sglang-version", "0.5.12", "--speculative-algorithm", "FROZEN_KV_MTP"}, 0, "SGLang 0.5.12 runs FROZEN_KV_MTP without the overlap scheduler"},
		{[]string{"--sglang-version", "v0.5.11", "--speculative-algorithm", "NEXTN", "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8"}, 0,
			"SGLang 0.5.11 runs NEXTN with --speculative-eagle-topk 4 without the overlap scheduler"},
		{[]string{"--sglang-version", "0.5.12", "--speculative-algorithm", "EAGLE3"}, window, ""}, // eagle_topk 1
		{[]string{"--sglang-version", "0.5.12", "--speculative-algorithm", "DDTREE"}, window, ""},
		{[]string{"--sglang-version", "0.5.12"}, window, ""},
		{[]string{"--disable-overlap-schedule"}, 0, "flush_busy_after_finish_s is 0 (--disable-overlap-schedule)"},
	} {
		p, err := applyFlags(t, "default", tc.args...)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if got := p.FlushBusyAfterFinish(); got != tc.want {
			t.Errorf("%v: flush window %v, want %v", tc.args, got, tc.want)
		}
		if got := p.OverlapOff(); got != tc.why {
			t.Errorf("%v: overlap off %q, want %q", tc.args, got, tc.why)
		}
	}
}

func TestSGLangVersionFlag(t *testing.T) {
	p, err := applyFlags(t, "default")
	if err != nil {
		t.Fatal(err)
	}
	if p.Release() != "0.5.18" || p.SGLangVersion != "" || !p.Rules().CoalesceKVEvents {
		t.Errorf("default: release %s (%q), rules %+v", p.Release(), p.SGLangVersion, p.Rules())
	}
	p, err = applyFlags(t, "default", "--sglang-version", "v0.5.17")
	if err != nil {
		t.Fatal(err)
	}
	if p.Release() != "0.5.17" || p.SGLangVersion != "0.5.17" || p.Rules().CoalesceKVEvents || !p.Rules().EvictShortfall {
		t.Errorf("0.5.17: release %s (%q), rules %+v", p.Release(), p.SGLangVersion, p.Rules())
	}
	_, err = applyFlags(t, "default", "--sglang-version", "0.5.23")
	if err == nil || !strings.HasPrefix(err.Error(), `--sglang-version "0.5.23": not a release sglmock follows: it follows SGLang 0.5.10, 0.5.10.post1, 0.5.11, 0.5.12, 0.5.17, 0.5.18, 0.5.19 (default 0.5.18)`) {
		t.Errorf("unknown release: got %v", err)
	}
	// The key in a file, written back by YAML.
	text := mustBuiltin(t, "default") + "sglang_version: 0.5.12\n"
	q, err := Parse(strings.NewReader(text), "x")
	if err != nil {
		t.Fatal(err)
	}
	if q.Release() != "0.5.12" || q.Rules().GenerateCacheSalt || !strings.Contains(string(q.YAML()), "sglang_version: 0.5.12\n") {
		t.Errorf("sglang_version 0.5.12: release %s, rules %+v", q.Release(), q.Rules())
	}
}

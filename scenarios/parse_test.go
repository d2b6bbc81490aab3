package scenarios_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglmock/sglmock/scenarios"
)

// good is a valid scenario; each broken file changes one thing in it.
const good = `name: sample
description: a sample
profile: default
speedup: 2
steps:
  - name: naive
    twopoint:
      method: naive
      ctx: [1024, 8192:9000]
    expect:
      - verdict: POISONED
        cause: leg b reused
      - figure: decode_err
        min: -0.01
        max: 0.01
  - name: lone
    flush: {timeout_s: 1}
    expect:
      - status: 200
`

// A broken file gets an error naming the file, the line and the field.
func TestParseErrors(t *testing.T) {
	if _, err := scenarios.Parse([]byte(good), "sample.yaml"); err != nil {
		t.Fatalf("the good file: %v", err)
	}
	tests := []struct {
		name, from, to, want string
	}{
		{"unknown top key", "speedup: 2", "speedup: 2\nturbo: true", "sample.yaml:5: turbo: unknown key (want one of name, description, profile, speedup, steps)"},
		{"missing description", "description: a sample\n", "", "sample.yaml:1: description: missing"},
		{"speedup not a number", "speedup: 2", "speedup: fast", `sample.yaml:4: speedup: want a finite number, got "fast"`},
		{"speedup zero", "speedup: 2", "speedup: 0", "sample.yaml:4: speedup: 0 is out of range"},
		{"bad name", "name: sample", "name: Sample One", `sample.yaml:1: name: "Sample One": want lower-case letters`},
		{"unknown profile", "profile: default", "profile: gpt-9", `sample.yaml:3: profile: "gpt-9" is not a built-in profile`},
		{"profile path", "profile: default", "profile: ./p.yaml", `sample.yaml:3: profile: "./p.yaml" is not a built-in profile`},
		{"inline unknown key", "profile: default", "profile:\n  base: default\n  turbo: 2", "sample.yaml:5: profile.turbo: unknown profile key (want one of name, description, served_model_name, context_length, "},
		{"inline nested unknown key", "profile: default", "profile:\n  decode:\n    warp: 2", "sample.yaml:5: profile.decode.warp: unknown profile key (want one of step_overhead_s, per_seq_s, per_ctx_token_s, ctx_table)"},
		{"inline wrong type", "profile: default", "profile:\n  max_total_tokens: lots", `sample.yaml:4: profile.max_total_tokens: want integer, got "lots"`},
		{"inline bad value", "profile: default", "profile:\n  base: default\n  page_size: 0", "sample.yaml:5: profile.page_size: 0: must be >= 1 (with the base default)"},
		{"inline bad list value", "profile: default", "profile:\n  base: llama-8b-eagle3-h100\n  speculative:\n    accept_probs: [0.5, 2, 0.5]", "sample.yaml:6: profile.speculative.accept_probs[1]: 2: must be in [0, 1]"},
		{"inline bad base", "profile: default", "profile:\n  base: nothing", `sample.yaml:4: profile.base: "nothing" is not a built-in profile`},
		{"steps not a list", "steps:\n", "steps: 3\nx:\n", "sample.yaml:6: x: unknown key"},
		{"step without a kind", "    twopoint:\n      method: naive\n      ctx: [1024, 8192:9000]\n", "", "sample.yaml:6: steps[0]: say what the step does"},
		{"step with two kinds", "    flush: {timeout_s: 1}", "    flush: {timeout_s: 1}\n    wait: {seconds: 1}", "sample.yaml:18: steps[1].wait: a step does one thing: it already has flush"},
		{"unknown step key", "  - name: lone", "  - name: lone\n    colour: red", "sample.yaml:17: steps[1].colour: unknown key"},
		{"duplicate step name", "  - name: lone", "  - name: naive", `sample.yaml:16: steps[1].name: "naive": another step has this name`},
		{"unknown method", "method: naive", "method: lucky", `sample.yaml:8: steps[0].twopoint.method: "lucky": want one of naive, flush, nonce, flush+nonce`},
		{"bad ctx", "ctx: [1024, 8192:9000]", "ctx: [1024, big]", `sample.yaml:9: steps[0].twopoint.ctx[1]: "big": want TOKENS or REQ:TOKENS`},
		{"tiny ctx", "ctx: [1024, 8192:9000]", "ctx: [8]", `sample.yaml:9: steps[0].twopoint.ctx[0]: "8": want TOKENS or REQ:TOKENS, tokens in 16..`},
		{"b not above a", "method: naive", "method: naive\n      a: 5\n      b: 5", "sample.yaml:10: steps[0].twopoint.b: 5: must be more than a (5)"},
		{"repeat out of range", "method: naive", "method: naive\n      repeat: 0", "sample.yaml:9: steps[0].twopoint.repeat: 0 is out of range: want 1..1000"},
		{"between legs without flush", "method: naive", "method: naive\n      flush_only_between_legs: true", "sample.yaml:9: steps[0].twopoint.flush_only_between_legs: method naive sends no flush"},
		{"flush policy key", "method: naive", "method: naive\n      flush: {retrys: 2}", "sample.yaml:9: steps[0].twopoint.flush.retrys: unknown key"},
		{"unknown level", "verdict: POISONED", "verdict: BAD", `sample.yaml:11: steps[0].expect[0].verdict: "BAD": want one of ok, SUSPECT, POISONED`},
		{"unknown figure", "figure: decode_err", "figure: decode_error", `sample.yaml:13: steps[0].expect[1].figure: "decode_error": a twopoint step has the figures`},
		{"unknown ratio figure", "figure: decode_err", "figure: decode_err / speed", `sample.yaml:13: steps[0].expect[1].figure: "speed"`},
		{"figure without bound", "        min: -0.01\n        max: 0.01\n", "", "sample.yaml:13: steps[0].expect[1]: say what the figure must be"},
		{"min above max", "min: -0.01", "min: 1", "sample.yaml:14: steps[0].expect[1].min: 1 is above max 0.01"},
		{"equals and bounds", "min: -0.01", "min: -0.01\n        equals: 0", "sample.yaml:15: steps[0].expect[1].equals: give equals, or min and max, not both"},
		{"bound not a number", "max: 0.01", "max: small", `sample.yaml:15: steps[0].expect[1].max: want a finite number, got "small"`},
		{"key of another kind", "cause: leg b reused", "cause: leg b reused\n        min: 2", "sample.yaml:13: steps[0].expect[0].min: not a key of a verdict expectation"},
		{"two kinds in one", "cause: leg b reused", "cause: leg b reused\n        figure: t_a", "sample.yaml:13: steps[0].expect[0].figure: an expectation checks one thing: it already checks verdict"},
		{"expectation a step cannot meet", "      - status: 200", "      - verdict: ok", "sample.yaml:19: steps[1].expect[0].verdict: a flush step has no verdict to check (it checks status, body, figure)"},
		{"ctx not in the step", "cause: leg b reused", "cause: leg b reused\n        ctx: 2048", "sample.yaml:13: steps[0].expect[0].ctx[0]: \"2048\": want one of the step's contexts [1024 8192]"},
		{"flush of an unknown leg", "      - verdict: POISONED\n        cause: leg b reused", "      - flush: c\n        status: 400", `sample.yaml:11: steps[0].expect[0].flush: "c": want one of a, b`},
		{"stop an unknown load", "    flush: {timeout_s: 1}\n    expect:\n      - status: 200", "    stop_load: {name: bg}", `sample.yaml:17: steps[1].stop_load.name: no load "bg" was started before this step`},
		{"raw path", "    flush: {timeout_s: 1}\n    expect:\n      - status: 200", "    raw: {path: generate}", `sample.yaml:17: steps[1].raw.path: "generate": want a path on the server`},
		{"raw body not a mapping", "    flush: {timeout_s: 1}\n    expect:\n      - status: 200", "    raw: {path: /generate, body: [1]}", "sample.yaml:17: steps[1].raw.body: want a mapping"},
		{"prompts and prompt_tokens", "    flush: {timeout_s: 1}\n    expect:\n      - status: 200", "    raw: {path: /generate, prompt_tokens: 9, prompts: [{tokens: 9}]}",
			"sample.yaml:17: steps[1].raw.prompts: give prompt_tokens or prompts, not both"},
		{"prompts elsewhere", "    flush: {timeout_s: 1}\n    expect:\n      - status: 200", "    raw: {path: /v1/completions, prompts: [{tokens: 9}]}",
			"sample.yaml:17: steps[1].raw.prompts: a batch of prompts goes to POST /generate, not POST /v1/completions"},
		{"shared beyond the prompt", "    flush: {timeout_s: 1}\n    expect:\n      - status: 200", "    raw: {path: /generate, prompts: [{tokens: 9, shared: 10}]}",
			"sample.yaml:17: steps[1].raw.prompts[0].shared: 10: more than the prompt's 9 tokens"},
		{"prompt without tokens", "    flush: {timeout_s: 1}\n    expect:\n      - status: 200", "    raw: {path: /generate, prompts: [{shared: 1}]}",
			"sample.yaml:17: steps[1].raw.prompts[0].tokens: missing"},
		{"prompts beside input_ids", "    flush: {timeout_s: 1}\n    expect:\n      - status: 200", "    raw: {path: /generate, body: {text: hi}, prompts: [{tokens: 9}]}",
			"sample.yaml:17: steps[1].raw.prompts: the body already has text"},
		{"prompt selector out of range", "    flush: {timeout_s: 1}\n    expect:\n      - status: 200",
			"    raw: {path: /generate, prompts: [{tokens: 9}, {tokens: 9}]}\n    expect:\n      - figure: cached_tokens\n        prompt: [3]\n        equals: 0",
			"sample.yaml:20: steps[1].expect[0].prompt[0]: \"3\": want a prompt's number, 1 to 2"},
		{"prompt selector without prompts", "    flush: {timeout_s: 1}\n    expect:\n      - status: 200",
			"    raw: {path: /generate, prompt_tokens: 9}\n    expect:\n      - figure: cached_tokens\n        prompt: [1]\n        equals: 0",
			"sample.yaml:20: steps[1].expect[0].prompt: only a raw step with prompts has prompts to select"},
		{"ttft without prompts", "    flush: {timeout_s: 1}\n    expect:\n      - status: 200",
			"    raw: {path: /generate, prompt_tokens: 9}\n    expect:\n      - figure: ttft_s\n        max: 1",
			"sample.yaml:19: steps[1].expect[0].figure: \"ttft_s\": a raw step has the figures"},
		{"expectation on a wait", "    flush: {timeout_s: 1}", "    wait: {seconds: 1}", "sample.yaml:19: steps[1].expect[0]: a wait step has nothing to check"},
		{"load delay", "    flush: {timeout_s: 1}\n    expect:\n      - status: 200", "    start_load: {name: bg, streams: 1, prompt_tokens: 9, max_new_tokens: 9, delay_s: -1}", "sample.yaml:17: steps[1].start_load.delay_s: -1 is out of range"},
		{"not yaml", "speedup: 2", "speedup: 2\n  x: [", "sample.yaml:5: mapping values are not allowed in this context"},
		{"two documents", "speedup: 2", "speedup: 2\n---\nname: other", "sample.yaml:5: one scenario a file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			text := strings.Replace(good, tt.from, tt.to, 1)
			if text == good {
				t.Fatalf("%q not found in the good file", tt.from)
			}
			_, err := scenarios.Parse([]byte(text), "sample.yaml")
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("got error %v,\nwant one starting %q", err, tt.want)
			}
			var fe *scenarios.FileError
			if err != nil && !errors.As(err, &fe) {
				t.Errorf("got a %T, want a *FileError", err)
			}
		})
	}
	if _, err := scenarios.Parse(nil, "empty.yaml"); err == nil || err.Error() != "empty.yaml:1: empty file" {
		t.Errorf("an empty file: got %v", err)
	}
}

// Load takes a built-in's name or a file path; an unknown name lists the
// built-ins.
func TestLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mine.yaml")
	if err := os.WriteFile(path, []byte(strings.Replace(good, "name: sample\n", "", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	sc, err := scenarios.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if sc.Name != "mine" || sc.File != path || len(sc.Steps) != 2 || sc.Speedup != 2 || sc.Profile.Name != "default" {
		t.Errorf("got name %q, file %q, %d steps, speedup %g, profile %q", sc.Name, sc.File, len(sc.Steps), sc.Speedup, sc.Profile.Name)
	}
	if _, err := scenarios.Load("cache-poisoning"); err != nil {
		t.Errorf("built-in: %v", err)
	}
	if _, err := scenarios.Load("no-such"); err == nil || !strings.Contains(err.Error(), "built-ins: cache-poisoning") {
		t.Errorf("unknown name: got %v", err)
	}
	if _, err := scenarios.Load(filepath.Join(t.TempDir(), "absent.yaml")); err == nil {
		t.Error("a missing file: no error")
	}
}

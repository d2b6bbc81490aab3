package profile

import (
	"flag"
	"io"
	"strings"
	"testing"
)

func TestFlagsApply(t *testing.T) {
	tests := []struct {
		name, base string
		args       []string
		wantErr    string
		check      func(*Profile) string
	}{
		{"nothing set keeps the profile", "kimi-k2.6-rtx6000", nil, "", func(p *Profile) string {
			if p.PageSize != 1 || p.ChunkedPrefillSize != 16384 || p.Speculative.NumSteps != 5 {
				return "changed"
			}
			return ""
		}},
		{"set flags override", "kimi-k2.6-rtx6000", []string{"--page-size", "16", "--chunked-prefill-size", "4096", "--max-total-tokens", "500000"}, "",
			func(p *Profile) string {
				if p.PageSize != 16 || p.ChunkedPrefillSize != 4096 || p.MaxTotalTokens != 500000 || p.ContextLength != 200000 {
					return "not applied"
				}
				return ""
			}},
		{"speculative on a plain profile gets the defaults", "default", []string{"--speculative-algorithm", "eagle3", "--speculative-num-steps", "4"}, "",
			func(p *Profile) string {
				s := p.Speculative
				if s.Algorithm != "EAGLE3" || s.NumSteps != 4 || s.NumDraftTokens != 5 || len(s.AcceptProbs) != 4 ||
					s.AcceptProbs[3] != DefaultAcceptProb || s.RoundCostFactor != DefaultRoundCostFactor {
					return "defaults not applied"
				}
				return ""
			}},
		{"fewer steps drop the tail", "kimi-k2.6-rtx6000", []string{"--speculative-num-steps", "2"}, "", func(p *Profile) string {
			s := p.Speculative
			if s.NumSteps != 2 || len(s.AcceptProbs) != 2 || s.AcceptProbs[1] != 0.9 || s.Algorithm != "DDTREE" || s.NumDraftTokens != 3 {
				return "tail not dropped"
			}
			return ""
		}},
		{"more steps repeat the last probability", "kimi-k2.6-rtx6000", []string{"--speculative-num-steps", "7"}, "", func(p *Profile) string {
			if a := p.Speculative.AcceptProbs; len(a) != 7 || a[6] != 0.6 {
				return "not extended"
			}
			return ""
		}},
		{"every built-in profile has SGLang's overlap flush window", "default", nil, "", func(p *Profile) string {
			if p.FlushBusyAfterFinishS != 0.004 {
				return "no window"
			}
			return ""
		}},
		{"--disable-overlap-schedule removes the flush window", "kimi-k2.6-rtx6000", []string{"--disable-overlap-schedule"}, "", func(p *Profile) string {
			if p.FlushBusyAfterFinishS != 0 {
				return "window kept"
			}
			return ""
		}},
		{"--seed", "default", []string{"--seed", "7"}, "", func(p *Profile) string {
			if p.Seed != 7 {
				return "seed not set"
			}
			return ""
		}},
		{"--random-seed is SGLang's name", "default", []string{"--random-seed", "9"}, "", func(p *Profile) string {
			if p.Seed != 9 {
				return "seed not set"
			}
			return ""
		}},
		{"impossible override", "default", []string{"--page-size", "0"}, "page_size = 0", nil},
		{"pool below context", "default", []string{"--max-total-tokens", "100"}, "max_total_tokens = 100", nil},
		{"steps without algorithm", "default", []string{"--speculative-num-steps", "3"}, "need --speculative-algorithm", nil},
		{"unknown algorithm", "default", []string{"--speculative-algorithm", "MEDUSA"}, "speculative.algorithm = MEDUSA", nil},
		{"absurd depth", "kimi-k2.6-rtx6000", []string{"--speculative-num-steps", "1000000"}, "speculative.num_steps = 1000000", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Load(tt.base)
			if err != nil {
				t.Fatal(err)
			}
			builtinSpec := p.Speculative
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			f := RegisterFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			err = f.Apply(p)
			switch {
			case tt.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got error %v, want one containing %q", err, tt.wantErr)
				}
			case err != nil:
				t.Fatalf("got error %v, want none", err)
			default:
				if why := tt.check(p); why != "" {
					t.Fatalf("%s: got %+v (speculative %+v)", why, p, p.Speculative)
				}
				if tt.base == "kimi-k2.6-rtx6000" && len(builtinSpec.AcceptProbs) != 5 {
					t.Fatalf("the original speculative section was modified: %+v", builtinSpec)
				}
			}
		})
	}
}

// A profile's own draft tokens (a tree: top-k > 1) stay when a flag leaves
// the depth alone, and follow a new depth.
func TestFlagsKeepAProfilesDraftTokens(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want int
	}{
		{[]string{"--speculative-algorithm", "EAGLE"}, 10},
		{[]string{"--speculative-eagle-topk", "2"}, 10},
		{[]string{"--speculative-num-steps", "4"}, 5},
		{[]string{"--speculative-num-draft-tokens", "8"}, 8},
	} {
		p, err := Load("kimi-k2.6-rtx6000")
		if err != nil {
			t.Fatal(err)
		}
		p.Speculative.EagleTopK, p.Speculative.NumDraftTokens = 4, 10
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		f := RegisterFlags(fs)
		if err := fs.Parse(tt.args); err != nil {
			t.Fatal(err)
		}
		if err := f.Apply(p); err != nil {
			t.Fatalf("%v: %v", tt.args, err)
		}
		if got := p.Speculative.NumDraftTokens; got != tt.want {
			t.Errorf("%v: got num_draft_tokens %d, want %d", tt.args, got, tt.want)
		}
	}
}

// A repeated prompt reuses all but its last token, page-floored, and one
// token less under EAGLE-family bigram keys.
func TestReusablePrefixLen(t *testing.T) {
	for _, tt := range []struct {
		name    string
		page, n int
		want    int
	}{
		{"default", 1, 1407, 1406},
		{"default", 16, 1407, 1392},
		{"llama-8b-eagle3-h100", 1, 1407, 1405}, // EAGLE3: bigram keys
		{"kimi-k2.6-rtx6000", 1, 1407, 1406},    // DDTREE: token keys
	} {
		p, err := Load(tt.name)
		if err != nil {
			t.Fatal(err)
		}
		p.PageSize = tt.page
		if got := p.ReusablePrefixLen(tt.n); got != tt.want {
			t.Errorf("%s, page %d: got %d of %d, want %d", tt.name, tt.page, got, tt.n, tt.want)
		}
	}
}

package profile

import (
	"math"
	"strings"
	"testing"
	"time"
)

// defaultWith is the default profile's YAML with one line replaced.
func defaultWith(t *testing.T, old, new string) string {
	t.Helper()
	b, err := BuiltinYAML("default")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), old) {
		t.Fatalf("default.yaml has no %q", old)
	}
	return strings.Replace(string(b), old, new, 1)
}

// An integer field given a fraction is refused with the field and the
// literal, not truncated; a float literal that is a whole number is taken.
func TestIntegerFieldsRefuseFractions(t *testing.T) {
	tests := []struct {
		old, new string
		want     string // "" means it loads
	}{
		{"context_length: 32768", "context_length: 32768.5", `context_length = 32768.5: must be a whole number`},
		{"page_size: 1", "page_size: 1.25", `page_size = 1.25: must be a whole number`},
		{"max_running_requests: 256", "max_running_requests: 2.56e2", ""},
		{"seed: 1", "seed: 0.5", `seed = 0.5: must be a whole number`},
		{"max_total_tokens: 262144", "max_total_tokens: 1e300", `max_total_tokens: want integer, got "1e300"`},
		{"context_length: 32768", "context_length: 32768.0", ""},
	}
	for _, tt := range tests {
		p, err := Parse(strings.NewReader(defaultWith(t, tt.old, tt.new)), "x")
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: got %v, want it to load", tt.new, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: got %v (profile %+v), want an error containing %q", tt.new, err, p, tt.want)
		}
	}
}

// Costs whose largest iteration would not fit in a Duration (or would take
// days) are refused at load, naming the limits; Duration itself saturates
// instead of wrapping to a negative time.
func TestCostsPastADurationAreRefused(t *testing.T) {
	tests := []struct{ old, new, want string }{
		{"per_seq_s: 2.0e-5", "per_seq_s: 1.0e+300", "decode = 2.56e+302 s: the largest decode round (max_running_requests 256 over max_total_tokens 262144)"},
		{"attention_s: 2.0e-10", "attention_s: 1.0", "prefill = 2.684e+08 s: the largest prefill batch (context_length 32768, chunked_prefill_size 8192)"},
		{"step_overhead_s: 0.004", "step_overhead_s: 86401", "one iteration may cost at most 86400 s"},
	}
	for _, tt := range tests {
		_, err := Parse(strings.NewReader(defaultWith(t, tt.old, tt.new)), "x")
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, want an error containing %q", tt.new, err, tt.want)
		}
	}
	for _, tt := range []struct {
		secs float64
		want time.Duration
	}{
		{1e300, math.MaxInt64}, {9.3e9, math.MaxInt64}, {-1e300, math.MinInt64}, {math.NaN(), 0}, {1.5, 1500 * time.Millisecond},
	} {
		if got := Duration(tt.secs); got != tt.want {
			t.Errorf("Duration(%g): got %v, want %v", tt.secs, got, tt.want)
		}
	}
}

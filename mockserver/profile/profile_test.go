package profile

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func mustLoad(t *testing.T, name string) *Profile {
	t.Helper()
	p, err := Load(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func within(got, want, rel float64) bool { return math.Abs(got-want) <= rel*want }

func TestBuiltins(t *testing.T) {
	var names []string
	for _, b := range Builtins() {
		names = append(names, b.Name)
		if b.Description == "" {
			t.Errorf("built-in %s has no description", b.Name)
		}
		p := mustLoad(t, b.Name)
		// Printing and re-reading a profile gives the same profile.
		again, err := Parse(strings.NewReader(string(p.YAML())), "x")
		if err != nil {
			t.Fatalf("%s: re-parse of its YAML: %v", b.Name, err)
		}
		if string(again.YAML()) != string(p.YAML()) {
			t.Errorf("%s: YAML round trip changed the profile", b.Name)
		}
	}
	if got, want := strings.Join(names, " "), "deepseek-v3-h200x8-dp8 default kimi-k2.6-rtx6000 kimi-k2.6-rtx6000-hicache llama-8b-eagle3-h100"; got != want {
		t.Fatalf("built-ins: got %q, want %q", got, want)
	}
	if _, err := Load("nosuch"); err == nil || !strings.Contains(err.Error(), "built-ins: deepseek-v3-h200x8-dp8, default,") {
		t.Fatalf("unknown built-in: got %v, want an error listing the built-ins", err)
	}
}

// The original benchmark's measurements, which kimi-k2.6-rtx6000 reproduces within 10 %.
var originalRows = []struct {
	prompt int
	ta, tb float64
}{
	{1407, 0.46, 0.20},
	{11382, 3.86, 1.57},
	{45507, 23.72, 4.26},
}

func TestKimiCalibratedToTheOriginal(t *testing.T) {
	p := mustLoad(t, "kimi-k2.6-rtx6000")
	for _, row := range originalRows {
		cold := p.Expect(row.prompt, 0, 1)
		ta := cold.TTFT.Seconds() + cold.DecodeSeconds
		if !within(ta, row.ta, 0.10) {
			t.Errorf("prompt %d: t_a got %.3f s, want %.2f ± 10%%", row.prompt, ta, row.ta)
		}
		// The rerun finds all but the last prompt token cached.
		warm := p.Expect(row.prompt, row.prompt-1, 17)
		tb := warm.TTFT.Seconds() + warm.DecodeSeconds
		if !within(tb, row.tb, 0.10) {
			t.Errorf("prompt %d: t_b got %.3f s, want %.2f ± 10%%", row.prompt, tb, row.tb)
		}
	}
	// A 192k prompt takes minutes to prefill, as it did there.
	if ttft := p.Expect(192_000, 0, 1).TTFT; ttft < 3*time.Minute || ttft > 6*time.Minute {
		t.Errorf("192k prefill: got %v, want minutes (3-6)", ttft)
	}
}

func TestExpectedAcceptLengths(t *testing.T) {
	tests := []struct {
		name string
		want float64
	}{
		{"default", 1},
		{"kimi-k2.6-rtx6000", 4.40385},
		{"llama-8b-eagle3-h100", 2.969},
	}
	for _, tt := range tests {
		p := mustLoad(t, tt.name)
		if got := p.ExpectedAccept(); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("%s: E[accept] got %.6f, want %.6f", tt.name, got, tt.want)
		}
		sum := 0.0
		for _, pk := range p.AcceptDist() {
			sum += pk
		}
		if math.Abs(sum-1) > 1e-12 {
			t.Errorf("%s: acceptance distribution sums to %v", tt.name, sum)
		}
	}
}

func TestCostFormulas(t *testing.T) {
	p := &Profile{
		Prefill: PrefillCost{OverheadS: 0.1, PerTokenS: 0.01, AttentionS: 0.001},
		Decode:  DecodeCost{StepOverheadS: 0.5, PerSeqS: 0.1, PerCtxTokenS: 0.001},
	}
	tests := []struct {
		name      string
		got, want float64
	}{
		{"prefill 10 at 0", p.PrefillChunkSeconds(0, 10), 0.1 + 0.1 + 0.001*10*5},
		{"prefill 10 at 100", p.PrefillChunkSeconds(100, 10), 0.1 + 0.1 + 0.001*10*105},
		{"prefill 0", p.PrefillChunkSeconds(100, 0), 0},
		{"decode 4 seqs, 1000 ctx", p.DecodeRoundSeconds(4, 1000), 0.5 + 0.4 + 1},
		{"decode empty", p.DecodeRoundSeconds(0, 0), 0},
	}
	p2 := *p
	p2.Speculative = &Speculative{RoundCostFactor: 1.5}
	tests = append(tests, struct {
		name      string
		got, want float64
	}{"spec decode", p2.DecodeRoundSeconds(4, 1000), 1.5 * 1.9})
	for _, tt := range tests {
		if math.Abs(tt.got-tt.want) > 1e-12 {
			t.Errorf("%s: got %v, want %v", tt.name, tt.got, tt.want)
		}
	}
	// Chunking never changes the attention total, only the overheads.
	whole := p.PrefillChunkSeconds(0, 300)
	split := p.PrefillChunkSeconds(0, 100) + p.PrefillChunkSeconds(100, 100) + p.PrefillChunkSeconds(200, 100)
	if math.Abs(split-whole-0.2) > 1e-9 {
		t.Errorf("3 chunks cost %v, whole %v: want exactly two more overheads", split, whole)
	}
}

func TestTable(t *testing.T) {
	tab := Table{{100, 1}, {200, 3}}
	tests := []struct{ x, want float64 }{
		{-5, 0}, {0, 0}, {50, 0.5}, {100, 1}, {150, 2}, {200, 3}, {300, 5},
	}
	for _, tt := range tests {
		if got := tab.At(tt.x); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("At(%v): got %v, want %v", tt.x, got, tt.want)
		}
	}
	if got := (Table{{10, 2}}).At(20); got != 4 {
		t.Errorf("one-point table at 20: got %v, want 4", got)
	}
	p := &Profile{Prefill: PrefillCost{OverheadS: 1, Table: tab}}
	if got := p.PrefillChunkSeconds(100, 100); got != 1+3-1 {
		t.Errorf("table prefill chunk: got %v, want 3", got)
	}
}

func TestChunks(t *testing.T) {
	p := &Profile{ChunkedPrefillSize: 100, MaxPrefillTokens: 1000, PageSize: 1}
	tests := []struct {
		chunk, maxPrefill, extend int
		want                      []int
	}{
		{100, 1000, 250, []int{100, 100, 50}},
		{100, 1000, 100, []int{100}},
		{100, 60, 130, []int{60, 60, 10}}, // max_prefill_tokens bounds a chunk too
		{-1, 60, 130, []int{130}},         // chunking off: the whole prompt at once
		{100, 1000, 0, nil},
	}
	// A profile that fails validation (budget below a page) still ends.
	bad := &Profile{ChunkedPrefillSize: 16, MaxPrefillTokens: 8, PageSize: 16}
	if got := bad.Chunks(40); !slices.Equal(got, []int{16, 16, 8}) {
		t.Errorf("Chunks(40) with a budget of 8 and page 16: got %v, want one page a chunk", got)
	}
	for _, tt := range tests {
		p.ChunkedPrefillSize, p.MaxPrefillTokens = tt.chunk, tt.maxPrefill
		got := p.Chunks(tt.extend)
		if !slices.Equal(got, tt.want) {
			t.Errorf("Chunks(%d) with chunk %d, max %d: got %v, want %v", tt.extend, tt.chunk, tt.maxPrefill, got, tt.want)
		}
	}
}

func TestExpectWithoutSpeculation(t *testing.T) {
	p := &Profile{
		PageSize: 1, ChunkedPrefillSize: -1, MaxPrefillTokens: 1 << 20,
		Prefill: PrefillCost{OverheadS: 0.1, PerTokenS: 0.001},
		Decode:  DecodeCost{StepOverheadS: 0.01, PerCtxTokenS: 0.0001},
	}
	e := p.Expect(100, 0, 4)
	if e.TTFT != Duration(0.1+0.1) {
		t.Errorf("TTFT: got %v, want 200ms", e.TTFT)
	}
	// Three rounds at contexts 101, 102, 103.
	want := 3*0.01 + 0.0001*(101+102+103)
	if math.Abs(e.DecodeSeconds-want) > 1e-12 || e.DecodeRounds != 3 {
		t.Errorf("decode: got %v s in %v rounds, want %v s in 3", e.DecodeSeconds, e.DecodeRounds, want)
	}
	if got, want := e.DecodeTokensPerSecond, 1/(0.01+0.0001*101); math.Abs(got-want) > 1e-9 {
		t.Errorf("rate: got %v, want %v", got, want)
	}
}

func TestValidationNamesFieldAndValue(t *testing.T) {
	good, err := BuiltinYAML("llama-8b-eagle3-h100")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, from, to, want string
	}{
		{"negative cost", "per_token_s: 5.0e-5", "per_token_s: -1", "prefill.per_token_s = -1"},
		{"page size 0", "page_size: 1", "page_size: 0", "page_size = 0"},
		{"acceptance above 1", "[0.88, 0.75, 0.65]", "[0.88, 1.5, 0.65]", "speculative.accept_probs[1] = 1.5"},
		{"acceptance count", "[0.88, 0.75, 0.65]", "[0.88, 0.75]", "speculative.accept_probs = 2"},
		{"chunk not a page multiple", "page_size: 1", "page_size: 3", "chunked_prefill_size = 8192: must be a multiple of page_size (3)"},
		{"pool below context", "max_total_tokens: 600000", "max_total_tokens: 1000", "max_total_tokens = 1000"},
		{"unknown algorithm", "algorithm: EAGLE3", "algorithm: MEDUSA", "speculative.algorithm = MEDUSA"},
		{"draft tokens with topk 1", "num_draft_tokens: 4", "num_draft_tokens: 8", "speculative.num_draft_tokens = 8"},
		{"unknown key", "jitter: 0", "jitter: 0\nturbo: true", "turbo: unknown profile key (want one of name, description, served_model_name, "},
		{"unknown nested key", "per_seq_s: ", "warp: 1\n  per_seq_s: ", "decode.warp: unknown profile key (want one of step_overhead_s, per_seq_s, per_ctx_token_s, ctx_table)"},
		{"a value of the wrong kind", "page_size: 1", "page_size: [1]", "page_size: want integer, got a list"},
		{"a mapping of the wrong kind", "decode:", "decode: 3\nx:", "decode: want a mapping, got \"3\""},
		{"jitter out of range", "jitter: 0", "jitter: 1.5", "jitter = 1.5"},
		{"negative flush window", "flush_busy_after_finish_s: 0.0075", "flush_busy_after_finish_s: -0.1", "flush_busy_after_finish_s = -0.1"},
		{"huge flush window", "flush_busy_after_finish_s: 0.0075", "flush_busy_after_finish_s: 1e9", "flush_busy_after_finish_s = 1e+09"},
		{"zero round factor", "round_cost_factor: 1.25", "round_cost_factor: 0", "speculative.round_cost_factor = 0"},
		{"running requests", "max_prefill_tokens: 16384\n", "max_prefill_tokens: 16384\nmax_running_requests: -1\n", "max_running_requests = -1"},
		{"unknown release", "seed: 1", "seed: 1\nsglang_version: 0.5.15", "sglang_version = 0.5.15: \"0.5.15\": not a release sglmock follows: it follows SGLang 0.5.10, "},
		{"prefill budget below a page", "page_size: 1\nchunked_prefill_size: 8192\nmax_prefill_tokens: 16384",
			"page_size: 16\nchunked_prefill_size: 8192\nmax_prefill_tokens: 8", "max_prefill_tokens = 8: must be >= page_size (16)"},
		{"negative output cap", "max_prefill_tokens: 16384\n", "max_prefill_tokens: 16384\nmax_output_tokens: -1\n", "max_output_tokens = -1"},
		{"table with coefficient", "per_ctx_token_s: 4.0e-9", "per_ctx_token_s: 4.0e-9\n  ctx_table: [[10, 1]]", "decode.ctx_table"},
		{"decreasing table", "per_ctx_token_s: 4.0e-9", "ctx_table: [[10, 1], [5, 2]]", "decode.ctx_table[1] = [5 2]"},
		{"not yaml", "name: llama", "name: [llama", "yaml"},
		{"calibration without its prompts", "jitter: 0", "jitter: 0\ncalibration:\n  max_prompt_tokens: 10", "calibration.min_prompt_tokens = 0: must be >= 1"},
		{"calibration range reversed", "jitter: 0", "jitter: 0\ncalibration:\n  min_prompt_tokens: 100\n  max_prompt_tokens: 10",
			"calibration.max_prompt_tokens = 10: must be >= min_prompt_tokens (100)"},
		{"negative accuracy", "jitter: 0", "jitter: 0\ncalibration: {min_prompt_tokens: 1, max_prompt_tokens: 2, accuracy: -0.1}", "calibration.accuracy = -0.1"},
	}
	for _, tt := range tests {
		text := strings.Replace(string(good), tt.from, tt.to, 1)
		if text == string(good) {
			t.Fatalf("%s: %q not found in the profile", tt.name, tt.from)
		}
		_, err := Parse(strings.NewReader(text), "x")
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got error %v, want one containing %q", tt.name, err, tt.want)
		}
		// A value error is a *FieldError whose Field is the YAML path the
		// message starts with.
		var fe *FieldError
		if errors.As(err, &fe) && !strings.HasPrefix(tt.want, fe.Field) {
			t.Errorf("%s: FieldError.Field %q, want the start of %q", tt.name, fe.Field, tt.want)
		}
	}
}

func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	b, err := BuiltinYAML("default")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(b), "name: default\n", "", 1)
	path := filepath.Join(dir, "mine.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "mine" {
		t.Errorf("a file without a name: got name %q, want the file's base name %q", p.Name, "mine")
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("missing file: got nil error")
	}
	empty := filepath.Join(dir, "empty.yaml")
	os.WriteFile(empty, nil, 0o644)
	if _, err := Load(empty); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("empty file: got %v, want an 'empty document' error", err)
	}
}

// A chat completion without max_tokens stops at the profile's output cap,
// the default one when the profile sets none.
func TestOutputCap(t *testing.T) {
	p := &Profile{}
	if got := p.OutputCap(); got != DefaultMaxOutputTokens {
		t.Fatalf("unset: got %d, want %d", got, DefaultMaxOutputTokens)
	}
	p.MaxOutputTokens = 300
	if got := p.OutputCap(); got != 300 {
		t.Fatalf("set: got %d, want 300", got)
	}
}

// SGLang's overlap scheduler is on in every default deployment, so every
// built-in profile has a flush window of about one decode round of a lone
// short request (see flush_busy_after_finish_s).
func TestBuiltinsHaveTheOverlapFlushWindow(t *testing.T) {
	for _, b := range Builtins() {
		p, err := Load(b.Name)
		if err != nil {
			t.Fatal(err)
		}
		round := p.DecodeRoundSeconds(1, 1407) // a draft+verify round under speculative decoding
		if w := p.FlushBusyAfterFinishS; w <= 0 || math.Abs(w-round) > 0.0005 {
			t.Errorf("%s: flush_busy_after_finish_s %v, want one decode round of a short request, %.4f s", b.Name, w, round)
		}
	}
}

// Every field of a profile file is documented, and every documented field
// is one: Fields walks the type, fieldDocs says what each means.
func TestEveryFieldDocumented(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range Fields() {
		seen[f.Path] = true
		if f.Doc == "" {
			t.Errorf("%s (%s) has no text in fieldDocs", f.Path, f.Type)
		}
	}
	for path := range fieldDocs {
		if !seen[path] {
			t.Errorf("fieldDocs documents %s, which a profile file does not have", path)
		}
	}
	if len(seen) < 30 {
		t.Errorf("%d fields: the walk missed some", len(seen))
	}
	want := map[string]string{"context_length": "integer", "decode.ctx_table": "list of [tokens, seconds]", "speculative": "mapping, optional",
		"speculative.accept_probs": "list of numbers", "jitter": "number", "prefill.overhead_s": "seconds", "add_bos_token": "true or false",
		"seed": "integer", "name": "text"}
	for _, f := range Fields() {
		if w, ok := want[f.Path]; ok && f.Type != w {
			t.Errorf("%s: type %q, want %q", f.Path, f.Type, w)
		}
	}
}

// A calibrated profile says how far past its measured prompts a prompt
// lies; its calibration survives a clone and a round trip through YAML.
func TestCalibrationBeyond(t *testing.T) {
	p, err := Load("default")
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Beyond(1 << 20); got != 0 {
		t.Errorf("an uncalibrated profile: Beyond = %g, want 0", got)
	}
	p.Calibration = &Calibration{MinPromptTokens: 1024, MaxPromptTokens: 8192, Accuracy: 0.05}
	for _, tt := range []struct {
		n    int
		want float64
	}{{512, 0}, {8192, 0}, {12288, 1.5}, {16384, 2}} {
		if got := p.Beyond(tt.n); got != tt.want {
			t.Errorf("Beyond(%d) = %g, want %g", tt.n, got, tt.want)
		}
	}
	c := p.Clone()
	c.Calibration.MaxPromptTokens = 1
	if p.Calibration.MaxPromptTokens != 8192 {
		t.Errorf("changing a clone's calibration changed the original's: %+v", p.Calibration)
	}
	again, err := Parse(strings.NewReader(string(p.YAML())), "x")
	if err != nil || *again.Calibration != *p.Calibration {
		t.Fatalf("got %+v, %v; want the calibration %+v back", again.Calibration, err, p.Calibration)
	}
}

package profile

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sglmock/sglmock/compat"
	"github.com/sglmock/sglmock/mockserver/tokenizer"
	"github.com/sglmock/sglmock/radixcache"
)

// Profile is a served model on given hardware: its limits, what each
// scheduler iteration costs, and how speculative decoding behaves.
type Profile struct {
	Name               string `yaml:"name" json:"name"`
	Description        string `yaml:"description" json:"description"`
	ServedModelName    string `yaml:"served_model_name" json:"served_model_name"`
	ContextLength      int    `yaml:"context_length" json:"context_length"`
	MaxTotalTokens     int    `yaml:"max_total_tokens" json:"max_total_tokens"`         // KV pool size
	PageSize           int    `yaml:"page_size" json:"page_size"`                       // radix cache granularity
	ChunkedPrefillSize int    `yaml:"chunked_prefill_size" json:"chunked_prefill_size"` // -1 disables chunking
	MaxPrefillTokens   int    `yaml:"max_prefill_tokens" json:"max_prefill_tokens"`     // tokens per prefill batch
	// MaxRunningRequests bounds the running batch. Without speculative
	// decoding it is what SGLang derives for the deployment; under it,
	// SGLang uses SpeculativeMaxRunningRequests unless the launch gives a
	// bound, so a speculative profile without the key gets 48, and one with
	// it models a deployment launched with that bound.
	MaxRunningRequests int `yaml:"max_running_requests,omitempty" json:"max_running_requests"`
	// MaxOutputTokens caps a chat completion that sets no max_tokens. SGLang
	// generates to the context budget then, until the model samples EOS;
	// the mock never samples EOS, so the cap stands in for where a real
	// model stops. 0 (absent) means DefaultMaxOutputTokens; see OutputCap.
	MaxOutputTokens int `yaml:"max_output_tokens,omitempty" json:"max_output_tokens,omitempty"`

	// Parallelism (dp.go): dp_size DP ranks, each a scheduler with its own
	// KV pool of max_total_tokens and radix cache; with
	// enable_dp_attention they share one tensor-parallel group of tp_size
	// GPUs and run every iteration together. load_balance_method is how
	// the controller picks a rank. Unset: one rank.
	TPSize            int    `yaml:"tp_size,omitempty" json:"tp_size,omitempty"`
	DPSize            int    `yaml:"dp_size,omitempty" json:"dp_size,omitempty"`
	EnableDPAttention bool   `yaml:"enable_dp_attention,omitempty" json:"enable_dp_attention,omitempty"`
	LoadBalanceMethod string `yaml:"load_balance_method,omitempty" json:"load_balance_method,omitempty"`

	// Scheduling (schedule.go): the order each rank's scheduler admits
	// its waiting queue in (SGLang's --schedule-policy, fcfs when unset),
	// priority scheduling and its flags, and the in-batch prefix caching
	// thresholds (SGLang's environment variables of those names).
	SchedulePolicy                            string `yaml:"schedule_policy,omitempty" json:"schedule_policy,omitempty"`
	EnablePriorityScheduling                  bool   `yaml:"enable_priority_scheduling,omitempty" json:"enable_priority_scheduling,omitempty"`
	ScheduleLowPriorityValuesFirst            bool   `yaml:"schedule_low_priority_values_first,omitempty" json:"schedule_low_priority_values_first,omitempty"`
	DisablePriorityPreemption                 bool   `yaml:"disable_priority_preemption,omitempty" json:"disable_priority_preemption,omitempty"`
	PriorityPreemptionThreshold               *int   `yaml:"priority_scheduling_preemption_threshold,omitempty" json:"priority_scheduling_preemption_threshold,omitempty"`
	DefaultPriorityValue                      *int   `yaml:"default_priority_value,omitempty" json:"default_priority_value,omitempty"`
	AbortOnPriorityWhenDisabled               bool   `yaml:"abort_on_priority_when_disabled,omitempty" json:"abort_on_priority_when_disabled,omitempty"`
	InBatchPrefixCachingCheckThreshold        *int   `yaml:"in_batch_prefix_caching_check_threshold,omitempty" json:"in_batch_prefix_caching_check_threshold,omitempty"`
	InBatchPrefixCachingDeprioritizeThreshold *int   `yaml:"in_batch_prefix_caching_deprioritize_threshold,omitempty" json:"in_batch_prefix_caching_deprioritize_threshold,omitempty"`

	// AddBOSToken makes the tokenizer begin every text prompt (/generate
	// text, completion prompt strings, chat) with a BOS token, as Llama's
	// does; prompts sent as input_ids are taken as they are.
	AddBOSToken bool `yaml:"add_bos_token,omitempty" json:"add_bos_token"`
	// ChatTemplate names the built-in chat template the built-in
	// tokenizer renders chats with (tokenizer.ChatTemplates: chatml,
	// llama-3.1, kimi-k2, kimi-k2.6); empty is ChatML. A loaded tokenizer uses its
	// own.
	ChatTemplate string `yaml:"chat_template,omitempty" json:"chat_template,omitempty"`
	// TokenizerPath is a Hugging Face model directory whose tokenizer and
	// chat template replace the built-in ones (sglmock serve's
	// --tokenizer-path overrides it). A relative path is taken from the
	// profile file's directory.
	TokenizerPath string `yaml:"tokenizer_path,omitempty" json:"tokenizer_path,omitempty"`

	Prefill     PrefillCost  `yaml:"prefill" json:"prefill"`
	Decode      DecodeCost   `yaml:"decode" json:"decode"`
	Speculative *Speculative `yaml:"speculative,omitempty" json:"speculative,omitempty"`
	// HiCache is SGLang's hierarchical cache and its costs; nil: none.
	HiCache *HiCache `yaml:"hicache,omitempty" json:"hicache,omitempty"`

	// FlushBusyAfterFinishS is how long, in simulated seconds, the server
	// stays busy for /flush_cache after an iteration that finished a
	// request: SGLang's overlap scheduler (on by default) launches one more
	// decode step with the finished request, and its idle check waits for
	// that step's result, so a flush sent right after a response is
	// refused. Each built-in profile sets about one decode step of its
	// model; 0 is SGLang with --disable-overlap-schedule.
	FlushBusyAfterFinishS float64 `yaml:"flush_busy_after_finish_s,omitempty" json:"flush_busy_after_finish_s"`

	// SGLangVersion is the SGLang release whose rules the deployment
	// follows (compat.Known); empty is compat.Default. /server_info and
	// /v1/loads report it.
	SGLangVersion string `yaml:"sglang_version,omitempty" json:"sglang_version,omitempty"`

	Seed   uint64  `yaml:"seed" json:"seed"`
	Jitter float64 `yaml:"jitter" json:"jitter"` // relative std-dev of seeded cost noise; 0 = exact

	// Calibration is what sglmock calibrate measured the costs on; nil
	// for a profile written by hand. The engine does not read it.
	Calibration *Calibration `yaml:"calibration,omitempty" json:"calibration,omitempty"`
}

// Calibration is the range of prompts a calibrated profile's costs were
// measured on, and how well it predicted the ones it was not fitted to:
// past MaxPromptTokens its costs are an extrapolation.
type Calibration struct {
	MinPromptTokens int `yaml:"min_prompt_tokens" json:"min_prompt_tokens"`
	MaxPromptTokens int `yaml:"max_prompt_tokens" json:"max_prompt_tokens"`
	// Accuracy is the largest relative error of a leave-one-out
	// prediction of a measured time; 0 when the rows were too few to
	// tell.
	Accuracy float64 `yaml:"accuracy,omitempty" json:"accuracy,omitempty"`
}

// Beyond is how far a prompt of n tokens lies past the prompts the
// profile was calibrated on: n over the largest when it is larger, else 0
// (and 0 for a profile that was not calibrated).
func (p *Profile) Beyond(n int) float64 {
	if c := p.Calibration; c != nil && n > c.MaxPromptTokens && c.MaxPromptTokens > 0 {
		return float64(n) / float64(c.MaxPromptTokens)
	}
	return 0
}

// MaxReqInputLen is the longest prompt SGLang's scheduler accepts, less
// one: tp_worker.py sets max_req_len = context_length - 1 and
// max_req_input_len = max_req_len - 5, and validate_input_length refuses a
// prompt of max_req_input_len tokens or more.
func (p *Profile) MaxReqInputLen() int { return p.ContextLength - 6 }

// DefaultMaxOutputTokens is the output cap of a profile that sets none: a
// long answer, of the order a chat model writes before it stops.
const DefaultMaxOutputTokens = 4096

// OutputCap is the most tokens a chat completion without max_tokens
// generates: MaxOutputTokens, or DefaultMaxOutputTokens when unset.
func (p *Profile) OutputCap() int {
	if p.MaxOutputTokens > 0 {
		return p.MaxOutputTokens
	}
	return DefaultMaxOutputTokens
}

// PrefillCost is the cost of one prefill chunk of m new tokens for a request
// whose KV already holds p tokens:
//
//	overhead + per_token*m + attention*m*(p + m/2)
//
// or, with a table T of cold-prefill compute time (overhead excluded):
//
//	overhead + T(p+m) - T(p)
type PrefillCost struct {
	OverheadS  float64 `yaml:"overhead_s" json:"overhead_s"`
	PerTokenS  float64 `yaml:"per_token_s" json:"per_token_s"`
	AttentionS float64 `yaml:"attention_s" json:"attention_s"`
	Table      Table   `yaml:"table,omitempty" json:"table,omitempty"`
}

// DecodeCost is the cost of one decode round over a running batch of B
// requests whose contexts sum to C tokens:
//
//	step_overhead + per_seq*B + per_ctx_token*C
//
// or, with a table T over C, step_overhead + per_seq*B + T(C). Under
// speculative decoding the round is one draft+verify pass and costs
// round_cost_factor times this.
type DecodeCost struct {
	StepOverheadS float64 `yaml:"step_overhead_s" json:"step_overhead_s"`
	PerSeqS       float64 `yaml:"per_seq_s" json:"per_seq_s"`
	PerCtxTokenS  float64 `yaml:"per_ctx_token_s" json:"per_ctx_token_s"`
	CtxTable      Table   `yaml:"ctx_table,omitempty" json:"ctx_table,omitempty"`
}

// Speculative configures speculative decoding as SGLang's flags do. In each
// round a request gains k tokens, 1 <= k <= num_steps+1: the draft at
// position i is accepted with probability accept_probs[i] given that every
// earlier one was, and the target model adds one bonus token.
type Speculative struct {
	Algorithm       string    `yaml:"algorithm" json:"algorithm"`
	NumSteps        int       `yaml:"num_steps" json:"num_steps"`
	EagleTopK       int       `yaml:"eagle_topk" json:"eagle_topk"`
	NumDraftTokens  int       `yaml:"num_draft_tokens" json:"num_draft_tokens"`
	AcceptProbs     []float64 `yaml:"accept_probs" json:"accept_probs"`
	RoundCostFactor float64   `yaml:"round_cost_factor" json:"round_cost_factor"`
}

// Algorithms are the speculative algorithm names, spelled as SGLang spells them.
var Algorithms = []string{"EAGLE", "EAGLE3", "NEXTN", "FROZEN_KV_MTP", "STANDALONE", "NGRAM", "DFLASH", "DDTREE"}

// BigramKeys reports whether SGLang keys the radix cache on bigrams under
// this profile: for the algorithms its SpeculativeAlgorithm.is_eagle()
// accepts (EAGLE, its alias NEXTN, EAGLE3 and FROZEN_KV_MTP), whose draft
// KV is one token behind the target's.
func (p *Profile) BigramKeys() bool {
	if p.Speculative == nil {
		return false
	}
	switch p.Speculative.Algorithm {
	case "EAGLE", "EAGLE3", "NEXTN", "FROZEN_KV_MTP":
		return true
	}
	return false
}

// ReusablePrefixLen is how many tokens of an n-token prompt a repeat of it
// reuses from the cache under this profile (the radix cache's rule:
// all but the last token, floored to whole pages; one token less under
// bigram keys, whose pages count bigrams).
func (p *Profile) ReusablePrefixLen(n int) int {
	if p.BigramKeys() {
		return radixcache.ReusablePrefixLen(n-1, p.PageSize)
	}
	return radixcache.ReusablePrefixLen(n, p.PageSize)
}

// Table is a monotone piecewise-linear function given by [tokens, seconds]
// points with strictly increasing tokens and non-decreasing seconds. It is 0
// at 0 tokens, linear between points and extends with its last slope.
type Table [][2]float64

// At evaluates the table at x tokens.
func (t Table) At(x float64) float64 {
	if len(t) == 0 || x <= 0 {
		return 0
	}
	x0, y0 := 0.0, 0.0
	for _, pt := range t {
		if x <= pt[0] {
			return y0 + (pt[1]-y0)*(x-x0)/(pt[0]-x0)
		}
		x0, y0 = pt[0], pt[1]
	}
	// Past the last point: extend the last segment's slope.
	px, py := 0.0, 0.0
	if len(t) > 1 {
		px, py = t[len(t)-2][0], t[len(t)-2][1]
	}
	return y0 + (y0-py)/(x0-px)*(x-x0)
}

//go:embed builtin/*.yaml
var builtinFS embed.FS

// Builtin is a built-in profile's name and one-line description.
type Builtin struct {
	Name, Description string
}

// Builtins lists the built-in profiles, sorted by name.
func Builtins() []Builtin {
	entries, err := builtinFS.ReadDir("builtin")
	if err != nil {
		panic(err) // the embedded directory is part of the binary
	}
	var out []Builtin
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".yaml")
		p, err := builtin(name)
		if err != nil {
			panic(fmt.Sprintf("built-in profile %s: %v", name, err))
		}
		out = append(out, Builtin{p.Name, p.Description})
	}
	// By name, not file name: "x-hicache.yaml" sorts before "x.yaml".
	slices.SortFunc(out, func(a, b Builtin) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// BuiltinYAML returns the YAML text of a built-in profile.
func BuiltinYAML(name string) ([]byte, error) {
	b, err := builtinFS.ReadFile("builtin/" + name + ".yaml")
	if err != nil {
		return nil, fmt.Errorf("no built-in profile %q (built-ins: %s)", name, builtinNames())
	}
	return b, nil
}

func builtinNames() string {
	var names []string
	for _, b := range Builtins() {
		names = append(names, b.Name)
	}
	return strings.Join(names, ", ")
}

func builtin(name string) (*Profile, error) {
	b, err := BuiltinYAML(name)
	if err != nil {
		return nil, err
	}
	return Parse(bytes.NewReader(b), name)
}

// Load returns a built-in profile by name, or reads a profile file when the
// argument is a path (it contains a path separator or ends in .yaml/.yml).
func Load(nameOrPath string) (*Profile, error) {
	if !strings.ContainsRune(nameOrPath, os.PathSeparator) && !strings.ContainsRune(nameOrPath, '/') &&
		!strings.HasSuffix(nameOrPath, ".yaml") && !strings.HasSuffix(nameOrPath, ".yml") {
		return builtin(nameOrPath)
	}
	f, err := os.Open(nameOrPath)
	if err != nil {
		return nil, fmt.Errorf("profile: %w", err)
	}
	defer f.Close()
	base := strings.TrimSuffix(filepath.Base(nameOrPath), filepath.Ext(nameOrPath))
	p, err := Parse(f, base)
	if err != nil {
		return nil, err
	}
	if p.TokenizerPath != "" && !filepath.IsAbs(p.TokenizerPath) {
		p.TokenizerPath = filepath.Join(filepath.Dir(nameOrPath), p.TokenizerPath)
	}
	return p, nil
}

// Parse reads a profile from YAML and validates it. An unknown key is an
// error that names its line and the keys it could have been (CheckKeys).
// defaultName names the profile when the YAML has no name.
func Parse(r io.Reader, defaultName string) (*Profile, error) {
	var doc yaml.Node
	if err := yaml.NewDecoder(r).Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("profile %q: empty document", defaultName)
		}
		return nil, fmt.Errorf("profile %q: %w", defaultName, err)
	}
	if err := CheckKeys(doc.Content[0]); err != nil {
		return nil, fmt.Errorf("profile %q: %w", defaultName, err)
	}
	var p Profile
	if err := doc.Decode(&p); err != nil {
		return nil, fmt.Errorf("profile %q: %w", defaultName, err)
	}
	if p.Name == "" {
		p.Name = defaultName
	}
	if p.Speculative != nil && p.MaxRunningRequests == 0 {
		p.MaxRunningRequests = SpeculativeMaxRunningRequests
	}
	if err := wholeNumbers(doc.Content[0], reflect.TypeFor[Profile](), "", p.Name); err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// Clone returns a deep copy: changing the copy never changes p.
func (p *Profile) Clone() *Profile {
	c := *p
	c.Prefill.Table = slices.Clone(p.Prefill.Table)
	c.Decode.CtxTable = slices.Clone(p.Decode.CtxTable)
	for _, v := range []**int{&c.PriorityPreemptionThreshold, &c.DefaultPriorityValue,
		&c.InBatchPrefixCachingCheckThreshold, &c.InBatchPrefixCachingDeprioritizeThreshold} {
		if *v != nil {
			x := **v
			*v = &x
		}
	}
	if p.Speculative != nil {
		spec := *p.Speculative
		spec.AcceptProbs = slices.Clone(spec.AcceptProbs)
		c.Speculative = &spec
	}
	if p.Calibration != nil {
		cal := *p.Calibration
		c.Calibration = &cal
	}
	if p.HiCache != nil {
		h := *p.HiCache
		c.HiCache = &h
	}
	return &c
}

// YAML renders the profile as YAML.
func (p *Profile) YAML() []byte {
	b, err := yaml.Marshal(p)
	if err != nil {
		panic(err) // a Profile always marshals
	}
	return b
}

// SpeculativeMaxRunningRequests is the running-batch bound SGLang sets
// under any speculative algorithm when the launch gives none
// (arg_groups/speculative_hook.py, every _handle_* of an algorithm).
const SpeculativeMaxRunningRequests = 48

// Release is the SGLang release the profile follows, as compat.Known
// spells it (compat.Default when sglang_version is absent).
func (p *Profile) Release() string {
	r, err := compat.Canonical(p.SGLangVersion)
	if err != nil {
		panic(err) // Validate refuses an unknown release
	}
	return r
}

// Rules are the rules of the profile's SGLang release.
func (p *Profile) Rules() compat.Rules {
	r, err := compat.For(p.SGLangVersion)
	if err != nil {
		panic(err) // Validate refuses an unknown release
	}
	return r
}

// OverlapOff says why SGLang runs this deployment without its overlap
// scheduler, "" when it runs with it: flush_busy_after_finish_s 0 (what
// --disable-overlap-schedule sets), or, in a release without the
// speculative-overlap rule, a speculative algorithm that SGLang's
// speculative_hook.py runs without it: DFLASH, NGRAM and FROZEN_KV_MTP
// always, the EAGLE family (EAGLE, its alias NEXTN, EAGLE3, STANDALONE)
// with eagle_topk > 1. DDTREE is in no SGLang release; the mock keeps the
// overlap scheduler on for it, as the merged algorithms have it.
func (p *Profile) OverlapOff() string {
	if p.FlushBusyAfterFinishS == 0 {
		return "flush_busy_after_finish_s is 0 (--disable-overlap-schedule)"
	}
	spec := p.Speculative
	if spec == nil || p.Rules().SpecOverlap {
		return ""
	}
	switch spec.Algorithm {
	case "DFLASH", "NGRAM", "FROZEN_KV_MTP":
		return fmt.Sprintf("SGLang %s runs %s without the overlap scheduler", p.Release(), spec.Algorithm)
	case "EAGLE", "NEXTN", "EAGLE3", "STANDALONE":
		if spec.EagleTopK > 1 {
			return fmt.Sprintf("SGLang %s runs %s with --speculative-eagle-topk %d without the overlap scheduler",
				p.Release(), spec.Algorithm, spec.EagleTopK)
		}
	}
	return ""
}

// FlushBusyAfterFinish is how long the server stays busy for /flush_cache
// after an iteration that finished a request: flush_busy_after_finish_s,
// or 0 when the overlap scheduler is off (OverlapOff).
func (p *Profile) FlushBusyAfterFinish() time.Duration {
	if p.OverlapOff() != "" {
		return 0
	}
	return Duration(p.FlushBusyAfterFinishS)
}

// maxFlushBusyS bounds flush_busy_after_finish_s: a real server settles in
// milliseconds, and a bound keeps the simulated deadline far from overflow.
const maxFlushBusyS = 60

// Validate checks every field and names the first one that is impossible.
func (p *Profile) Validate() error {
	v := validator{profile: p.Name}
	v.check(p.Name != "", "name", p.Name, "must not be empty")
	v.check(p.ServedModelName != "", "served_model_name", p.ServedModelName, "must not be empty")
	v.check(p.ContextLength >= 2, "context_length", p.ContextLength, "must be >= 2")
	v.check(p.PageSize >= 1, "page_size", p.PageSize, "must be >= 1")
	v.check(p.MaxTotalTokens >= p.ContextLength, "max_total_tokens", p.MaxTotalTokens,
		fmt.Sprintf("must be >= context_length (%d): the KV pool must hold one full-length request", p.ContextLength))
	if p.ChunkedPrefillSize != -1 {
		v.check(p.ChunkedPrefillSize >= 1, "chunked_prefill_size", p.ChunkedPrefillSize, "must be -1 (off) or >= 1")
		if p.PageSize >= 1 {
			v.check(p.ChunkedPrefillSize%p.PageSize == 0, "chunked_prefill_size", p.ChunkedPrefillSize,
				fmt.Sprintf("must be a multiple of page_size (%d)", p.PageSize))
		}
	}
	v.check(p.MaxPrefillTokens >= max(p.PageSize, 1), "max_prefill_tokens", p.MaxPrefillTokens,
		fmt.Sprintf("must be >= page_size (%d): a prefill batch takes whole pages", max(p.PageSize, 1)))
	v.check(p.MaxRunningRequests >= 1, "max_running_requests", p.MaxRunningRequests,
		"must be >= 1 (without speculative decoding the profile must give it: SGLang derives it from the deployment's memory)")
	if _, err := compat.For(p.SGLangVersion); err != nil {
		v.check(false, "sglang_version", p.SGLangVersion, err.Error())
	}
	v.validateDP(p)
	v.validateSchedule(p)
	v.check(p.MaxOutputTokens >= 0, "max_output_tokens", p.MaxOutputTokens, "must be >= 0 (0: the default)")
	v.check(p.ChatTemplate == "" || slices.Contains(tokenizer.ChatTemplates(), p.ChatTemplate), "chat_template", p.ChatTemplate,
		"must be one of "+strings.Join(tokenizer.ChatTemplates(), ", ")+" (a loaded tokenizer brings its own)")
	v.cost("prefill.overhead_s", p.Prefill.OverheadS)
	v.cost("prefill.per_token_s", p.Prefill.PerTokenS)
	v.cost("prefill.attention_s", p.Prefill.AttentionS)
	if len(p.Prefill.Table) > 0 {
		v.check(p.Prefill.PerTokenS == 0 && p.Prefill.AttentionS == 0, "prefill.table", "(set)",
			"replaces per_token_s and attention_s: set one or the other")
		v.table("prefill.table", p.Prefill.Table)
	}
	v.cost("decode.step_overhead_s", p.Decode.StepOverheadS)
	v.cost("decode.per_seq_s", p.Decode.PerSeqS)
	v.cost("decode.per_ctx_token_s", p.Decode.PerCtxTokenS)
	if len(p.Decode.CtxTable) > 0 {
		v.check(p.Decode.PerCtxTokenS == 0, "decode.ctx_table", "(set)",
			"replaces per_ctx_token_s: set one or the other")
		v.table("decode.ctx_table", p.Decode.CtxTable)
	}
	if v.err == nil {
		// Costs the engine charges as Durations: the largest iteration the
		// limits allow must stay within MaxIterationSeconds.
		if secs := p.worstPrefillSeconds(); !(secs <= MaxIterationSeconds) {
			v.check(false, "prefill", fmt.Sprintf("%.4g s", secs), fmt.Sprintf(
				"the largest prefill batch (context_length %d, chunked_prefill_size %d) would cost this; one iteration may cost at most %d s",
				p.ContextLength, p.ChunkedPrefillSize, MaxIterationSeconds))
		}
		if secs := p.worstDecodeSeconds(); !(secs <= MaxIterationSeconds) {
			v.check(false, "decode", fmt.Sprintf("%.4g s", secs), fmt.Sprintf(
				"the largest decode round (max_running_requests %d over max_total_tokens %d) would cost this; one iteration may cost at most %d s",
				p.MaxRunningRequests, p.MaxTotalTokens, MaxIterationSeconds))
		}
	}
	v.hicache(p)
	v.check(p.Jitter >= 0 && p.Jitter < 1, "jitter", p.Jitter, "must be in [0, 1)")
	v.check(p.FlushBusyAfterFinishS >= 0 && p.FlushBusyAfterFinishS <= maxFlushBusyS, "flush_busy_after_finish_s",
		p.FlushBusyAfterFinishS, fmt.Sprintf("must be in [0, %g] seconds", float64(maxFlushBusyS)))
	if s := p.Speculative; s != nil {
		v.check(slices.Contains(Algorithms, s.Algorithm), "speculative.algorithm", s.Algorithm,
			"must be one of "+strings.Join(Algorithms, ", "))
		v.check(s.NumSteps >= 1 && s.NumSteps <= 64, "speculative.num_steps", s.NumSteps, "must be in 1..64")
		v.check(s.EagleTopK >= 1, "speculative.eagle_topk", s.EagleTopK, "must be >= 1")
		if s.EagleTopK == 1 {
			v.check(s.NumDraftTokens == s.NumSteps+1, "speculative.num_draft_tokens", s.NumDraftTokens,
				fmt.Sprintf("must be num_steps+1 (%d) when eagle_topk is 1", s.NumSteps+1))
		} else {
			v.check(s.NumDraftTokens >= 2, "speculative.num_draft_tokens", s.NumDraftTokens, "must be >= 2")
		}
		v.check(len(s.AcceptProbs) == s.NumSteps, "speculative.accept_probs", len(s.AcceptProbs),
			fmt.Sprintf("must have num_steps (%d) entries", s.NumSteps))
		for i, a := range s.AcceptProbs {
			v.check(a >= 0 && a <= 1, fmt.Sprintf("speculative.accept_probs[%d]", i), a, "must be in [0, 1]")
		}
		v.check(s.RoundCostFactor > 0 && !math.IsInf(s.RoundCostFactor, 0), "speculative.round_cost_factor",
			s.RoundCostFactor, "must be > 0")
	}
	if c := p.Calibration; c != nil {
		v.check(c.MinPromptTokens >= 1, "calibration.min_prompt_tokens", c.MinPromptTokens, "must be >= 1")
		v.check(c.MaxPromptTokens >= c.MinPromptTokens, "calibration.max_prompt_tokens", c.MaxPromptTokens,
			fmt.Sprintf("must be >= min_prompt_tokens (%d)", c.MinPromptTokens))
		v.check(c.Accuracy >= 0 && !math.IsInf(c.Accuracy, 0), "calibration.accuracy", c.Accuracy, "must be a finite number >= 0")
	}
	return v.err
}

// FieldError is a profile field with an impossible value. Field is the
// YAML path, "speculative.accept_probs[2]", so a caller that holds the YAML
// can point at the line.
type FieldError struct {
	Profile, Field string
	Value          any
	Why            string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("profile %q: %s = %v: %s", e.Profile, e.Field, e.Value, e.Why)
}

type validator struct {
	profile string
	err     error
}

func (v *validator) check(ok bool, field string, value any, why string) {
	if !ok && v.err == nil {
		v.err = &FieldError{Profile: v.profile, Field: field, Value: value, Why: why}
	}
}

// choice checks an optional choice: absent, or one of choices.
func (v *validator) choice(field, value string, choices []string) {
	v.check(value == "" || slices.Contains(choices, value), field, value, "must be one of "+strings.Join(choices, ", "))
}

func (v *validator) cost(field string, x float64) {
	v.check(x >= 0 && !math.IsInf(x, 0) && !math.IsNaN(x), field, x, "must be a finite number >= 0")
}

func (v *validator) table(field string, t Table) {
	prevX, prevY := 0.0, 0.0
	for i, pt := range t {
		name := fmt.Sprintf("%s[%d]", field, i)
		v.check(pt[0] > prevX || (i == 0 && pt[0] > 0), name, pt, "tokens must be > 0 and strictly increasing")
		v.check(pt[1] >= prevY, name, pt, "seconds must be >= 0 and non-decreasing")
		prevX, prevY = pt[0], pt[1]
	}
}

package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/sglmock/sglmock/sim"
)

// DefaultMinImpact is the TTFT cut, in percent, from which reuse poisons a
// request: below it the cache changed nothing a benchmark can measure.
const DefaultMinImpact = 1.0

// DefaultMinRunImpact is the change, in percent, of a figure the run
// reports (the mean, median or p99 of TTFT or E2E over the requests the
// tool measured) from which poisoned requests fail the run: below it they
// moved nothing the run reports, and are a finding with its fix.
const DefaultMinRunImpact = 1.0

// SharedPrefixAllowance is --allow-shared-prefix: a number of reused tokens
// beyond a route's floor that never poisons, or Auto: a prefix that 3 or
// more of the run's requests start with is the workload's own (a system
// prompt by design).
type SharedPrefixAllowance struct {
	Auto   bool
	Tokens int
}

// AutoGroup is how many requests must share a prefix for
// --allow-shared-prefix auto to take it for the workload's.
const AutoGroup = 3

// ParseSharedPrefixAllowance reads "auto" or a whole number >= 0.
func ParseSharedPrefixAllowance(s string) (SharedPrefixAllowance, error) {
	if s == "auto" {
		return SharedPrefixAllowance{Auto: true}, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return SharedPrefixAllowance{}, fmt.Errorf("--allow-shared-prefix %q: want auto or a number of tokens >= 0", s)
	}
	return SharedPrefixAllowance{Tokens: n}, nil
}

func (a SharedPrefixAllowance) String() string {
	if a.Auto {
		return "auto"
	}
	return strconv.Itoa(a.Tokens)
}

// MarshalJSON writes "auto" or the number.
func (a SharedPrefixAllowance) MarshalJSON() ([]byte, error) {
	if a.Auto {
		return []byte(`"auto"`), nil
	}
	return []byte(strconv.Itoa(a.Tokens)), nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (a *SharedPrefixAllowance) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		v, err := ParseSharedPrefixAllowance(s)
		*a = v
		return err
	}
	return json.Unmarshal(b, &a.Tokens)
}

// AuditOptions say what reuse counts as poison.
type AuditOptions struct {
	// MinImpact is the TTFT cut, in percent, from which a reuse poisons
	// (0 means DefaultMinImpact).
	MinImpact         float64
	AllowSharedPrefix SharedPrefixAllowance
	// MinRunImpact is the change, in percent, of a figure the run reports
	// from which poisoned requests fail it (0 means DefaultMinRunImpact);
	// Strict fails it on any poisoned request.
	MinRunImpact float64
	Strict       bool
	// Tool is the load tool that ran (ToolSGLang, ToolVLLM,
	// ToolVLLMScript; "" when not known): the fix the verdict names is its.
	Tool string
	// Measured is how many of the last requests the tool measured (its
	// result file's completed and failed); 0 when not known, and a warm-up
	// is then told by its shape (warmUps).
	Measured int
	// NewID makes the floor probes' nonces; nil means random UUIDs.
	NewID func() string
}

func (o AuditOptions) withDefaults() AuditOptions {
	if o.MinImpact == 0 {
		o.MinImpact = DefaultMinImpact
	}
	if o.MinRunImpact == 0 {
		o.MinRunImpact = DefaultMinRunImpact
	}
	if o.NewID == nil {
		o.NewID = newID
	}
	return o
}

// Pattern names how a request came to reuse an earlier one's prefix.
type Pattern string

// The patterns of reuse.
const (
	// Repeat: the same prompt as an earlier request (a warm-up, a retry,
	// a two-point leg); the cache covers it up to its last page.
	Repeat Pattern = "repeat"
	// NearRepeat: all but a short tail shared (a nonce at the end of the
	// prompt: the suffix-nonce trap).
	NearRepeat Pattern = "near-repeat"
	// SharedPrefix: a prefix several prompts start with (a system prompt,
	// few-shot examples, chat history, or chance).
	SharedPrefix Pattern = "shared-prefix"
	// ParallelSample: one of the n copies of a parallel-sampling request
	// (n > 1), which reuses the prompt the server itself prefilled for
	// them first, as SGLang does: the server's design, never poisoning.
	ParallelSample Pattern = "parallel-sample"
	// Copies: one of several identical prompts in flight together (a
	// tool's concurrent warm-ups): the server prefills the prompt once and
	// serves the others from it, whichever of them arrived first.
	Copies Pattern = "copies"
)

// nearRepeatTail and nearRepeatShare bound the tail, beyond a page, that
// makes a prompt a near-repeat of the one it shares the rest with.
const (
	nearRepeatTail  = 32
	nearRepeatShare = 0.05
)

// AuditRequest is one request the command sent, as the server recorded it
// (or the proxy saw it), with what its reuse did to it.
type AuditRequest struct {
	sim.RequestSummary
	// CachedReported is false when the server gave no cached_tokens for
	// this request (through the proxy); CachedTokens is then 0.
	CachedReported bool `json:"cached_reported"`
	// Floor is what every prompt shares on this request's route.
	Floor int `json:"floor_tokens"`
	// Saved is the TTFT, in the server's seconds, that the reuse beyond the
	// floor saved this request: with only the floor cached, at the same
	// moment, its TTFT would have been TTFT+Saved. Impact is Saved as a
	// percentage of that TTFT.
	Saved  float64 `json:"saved_s"`
	Impact float64 `json:"impact_pct"`
	// Pattern is how the reuse came about ("" when nothing beyond the
	// floor was reused); Material says it cut the TTFT by at least
	// --min-impact.
	Pattern  Pattern `json:"pattern"`
	Material bool    `json:"material"`
	// Source is the earlier request the pattern names ("" when unknown).
	Source string `json:"source"`
	// Group is the number of the run's requests that share this request's
	// prefix (with SharedPrefix), or the identical copies in flight
	// together (with Copies).
	Group int `json:"group"`
	// WarmUp: a request the tool sent before its measured run, which its
	// figures leave out; its reuse never fails the run.
	WarmUp bool `json:"warm_up"`
	// ImpactRange is the impact at either end of the timing fit's 95 %
	// interval (through the proxy); Uncertain says it straddles
	// --min-impact, so the reuse is neither poison nor chance.
	ImpactRange *[2]float64 `json:"impact_range_pct,omitempty"`
	Uncertain   bool        `json:"uncertain,omitempty"`
	Verdict     Verdict     `json:"verdict"`
}

// RouteFloor is what two unrelated prompts share on one route, measured
// after the command's run with two unrelated nonce prompts.
type RouteFloor struct {
	Route    string `json:"route"`
	Requests int    `json:"requests"`
	// Floor is -1 when the server reports no cached tokens on the route.
	Floor int `json:"floor_tokens"`
}

// SharedPrefixGroup is a prefix several requests of the run start with.
type SharedPrefixGroup struct {
	Requests int `json:"requests"`
	// Tokens is the shortest reuse among them: about the prefix's length.
	Tokens int `json:"tokens"`
	// PromptTokens and CachedTokens sum the group's prompts and the part
	// of them served from the cache.
	PromptTokens int `json:"prompt_tokens"`
	CachedTokens int `json:"cached_tokens"`
	// Workload: --allow-shared-prefix auto takes it for the workload's own.
	Workload bool     `json:"workload"`
	RIDs     []string `json:"rids"`
}

// ChanceReuse counts the requests whose reuse changed nothing measurable.
type ChanceReuse struct {
	Requests int `json:"requests"`
	// MinTokens and MaxTokens bound their reuse beyond the floor;
	// MaxImpact is the largest TTFT cut among them, in percent.
	MinTokens int     `json:"min_tokens"`
	MaxTokens int     `json:"max_tokens"`
	MaxImpact float64 `json:"max_impact_pct"`
}

// Impact sources: how a request's saved TTFT was found.
const (
	// ImpactModel: the mock's own cost model (its prefill costs).
	ImpactModel = "model"
	// ImpactTimingFit: the proxy's timings: a prefill cost per token fitted
	// to the TTFTs of requests that reused nothing.
	ImpactTimingFit = "timing fit"
	// ImpactTokenShare: no timing to fit: the share of the prompt that
	// came from the cache stands for the TTFT cut.
	ImpactTokenShare = "token share"
)

// AuditReport is what a benchmark command did: every request, every flush,
// which reuse changed a figure and how, and what the cache did to the run.
type AuditReport struct {
	// Profile and Speedup are the mock's; Upstream is the real server the
	// proxy stood in front of (Speedup 1).
	Profile  string `json:"profile,omitempty"`
	Upstream string `json:"upstream,omitempty"`
	// DPRanks is the server's DP ranks, each with a prefix cache of its
	// own, when it runs several (0: one, or not known).
	DPRanks           int                   `json:"dp_ranks,omitempty"`
	Speedup           float64               `json:"speedup"`
	MinImpact         float64               `json:"min_impact_pct"`
	AllowSharedPrefix SharedPrefixAllowance `json:"allow_shared_prefix"`
	Floors            []RouteFloor          `json:"floors"`
	// ImpactFrom says how impacts were found (Impact* constants), with
	// the detail of a timing fit.
	ImpactFrom     string              `json:"impact_from"`
	ImpactDetail   string              `json:"impact_detail,omitempty"`
	Requests       []AuditRequest      `json:"requests"`
	Flushes        []sim.Flush         `json:"flushes"`
	SharedPrefixes []SharedPrefixGroup `json:"shared_prefixes"`
	Chance         ChanceReuse         `json:"chance_reuse"`
	CacheEffect    *CacheEffect        `json:"cache_effect"`
	// MinRunImpact and Strict say when poisoned requests fail the run;
	// RunImpact is what they did to the figures it reports (nil when
	// nothing poisoned, or when their saved time is not known).
	MinRunImpact float64         `json:"min_run_impact_pct"`
	Strict       bool            `json:"strict"`
	RunImpact    *RunImpact      `json:"run_impact"`
	Tool         *ToolComparison `json:"tool,omitempty"`
	// Checked is false when the audit could not vouch for the run: no
	// request reached the server, the server let records go, it reports
	// no cached tokens, or it reported counts no server can have. The
	// verdict says why.
	Checked bool    `json:"checked"`
	Verdict Verdict `json:"verdict"`
}

// Audit reads a mock's records after a command ran against it (GET
// /sim/requests, /sim/flushes, /sim/stats), measures each route's floor
// with two unrelated nonce prompts, and judges every request's reuse by
// what it did to its modelled TTFT. The server must be sglmock.
func Audit(ctx context.Context, c *Client, opt AuditOptions) (*AuditReport, error) {
	opt = opt.withDefaults()
	p, err := c.SimInfo(ctx)
	if err != nil {
		return nil, err
	}
	if p == nil {
		return nil, errNotMock
	}
	reqs, err := c.Requests(ctx)
	if err != nil {
		return nil, err
	}
	flushes, err := c.Flushes(ctx)
	if err != nil {
		return nil, err
	}
	// Read before the floors are measured, which adds requests of their own.
	stats, err := c.Stats(ctx)
	if err != nil {
		return nil, err
	}
	rep := &AuditReport{Profile: p.Name, Speedup: p.Speedup, MinImpact: opt.MinImpact, AllowSharedPrefix: opt.AllowSharedPrefix,
		MinRunImpact: opt.MinRunImpact, Strict: opt.Strict, Flushes: flushes, ImpactFrom: ImpactModel, Checked: true}
	rs := make([]AuditRequest, len(reqs))
	for i, r := range reqs {
		rs[i] = AuditRequest{RequestSummary: r, CachedReported: true}
	}
	floors, ranks, err := measureFloors(ctx, c, routesOf(rs), true, opt.NewID)
	if err != nil {
		return nil, err
	}
	rep.setRanks(ranks)
	m := &modelImpact{c: c, cost: map[[2]int]float64{}}
	if err := judge(ctx, rep, rs, floors, m, pageSize(p), opt); err != nil {
		return nil, err
	}
	if err := saltNotes(ctx, c, rep); err != nil {
		return nil, err
	}
	switch n := int64(len(reqs)); {
	case n == 0 && stats.Requests == 0:
		rep.uncheck("no request reached the server: nothing was checked (does the command read the server's address " +
			"from SGLANG_URL or OPENAI_BASE_URL? a script with a fixed URL needs audit's --port)")
	case n < stats.Requests:
		// The server keeps a bounded history: what it let go is unaudited.
		rep.uncheck(fmt.Sprintf("the server kept the records of only the last %d of %d requests: the rest were not checked "+
			"(raise serve's --sim-truth-bytes; at most 10000 are kept)", n, stats.Requests))
	}
	rep.CacheEffect = cacheEffect(rep.Requests, p.Speedup, ImpactModel)
	return rep, nil
}

// reuseLetThrough tells whether the poisoned requests moved no figure the
// run reports by --min-run-impact, without --strict: their reuse does not
// fail the run.
func (a *AuditReport) reuseLetThrough() bool {
	return a.RunImpact != nil && a.RunImpact.Max < a.MinRunImpact && !a.Strict
}

// setRanks records the server's DP ranks when it runs several.
func (a *AuditReport) setRanks(ranks int) {
	if ranks > 1 {
		a.DPRanks = ranks
	}
}

// uncheck records why the audit cannot vouch for the run.
func (a *AuditReport) uncheck(why string) {
	a.Checked = false
	a.Verdict.add(Suspect, why)
}

// pageSize is the profile's page size, 1 when it says none.
func pageSize(p *sim.Profile) int {
	var prof struct {
		PageSize int `json:"page_size"`
	}
	if p == nil || json.Unmarshal(p.Profile, &prof) != nil {
		return 1
	}
	return max(prof.PageSize, 1)
}

// impactModel says how much TTFT a request's reuse beyond its floor saved.
type impactModel interface {
	// saved returns the seconds saved; ok is false when it cannot tell.
	saved(ctx context.Context, r *AuditRequest) (seconds float64, ok bool, err error)
}

// rangedImpact is an impact model that knows its error: the seconds saved
// at either end of its 95 % interval.
type rangedImpact interface {
	savedRange(r *AuditRequest) (lo, hi float64)
}

// modelImpact is the mock's model: what prefilling the prompt with only
// the floor cached costs (the profile's evaluator, /sim/expect), against
// what the request's own prefill cost as it ran.
type modelImpact struct {
	c    *Client
	cost map[[2]int]float64
}

func (m *modelImpact) saved(ctx context.Context, r *AuditRequest) (float64, bool, error) {
	base := r.ColdPrefillCost
	if r.Floor > 0 {
		k := [2]int{r.PromptTokens, r.Floor}
		v, ok := m.cost[k]
		if !ok {
			e, err := m.c.Expect(ctx, r.PromptTokens, r.Floor, 1)
			if err != nil {
				return 0, false, fmt.Errorf("the model's cost of rid %s's prompt: %w", r.RID, err)
			}
			v = e.TTFT
			m.cost[k] = v
		}
		base = v
	}
	return max(base-r.PrefillCost, 0), true, nil
}

// impossibleAudit describes counts no server can report (countProblems),
// "" when they are possible or unknown (an answer the proxy could not
// read has none).
func impossibleAudit(r *AuditRequest) string {
	if r.PromptTokens == 0 && !r.CachedReported {
		return ""
	}
	if p := countProblems(r.PromptTokens, r.CachedTokens, r.CachedReported, r.CompletionTokens); len(p) > 0 {
		return "the server reported impossible counts: " + strings.Join(p, ", ")
	}
	return ""
}

// judge fills in each request's floor, impact, pattern and verdict, the
// groups of shared prefixes, the chance reuse, and the run's verdict.
func judge(ctx context.Context, rep *AuditReport, rs []AuditRequest, floors []RouteFloor, m impactModel, page int, opt AuditOptions) error {
	rep.Floors = floors
	floorOf := map[string]int{}
	for _, f := range floors {
		floorOf[f.Route] = f.Floor
	}
	impossible := 0
	for i := range rs {
		r := &rs[i]
		r.Floor = max(floorOf[routeKey(r.Route)], 0)
		if why := impossibleAudit(r); why != "" {
			impossible++
			r.Verdict.add(Suspect, why)
			continue
		}
		if !r.CachedReported || r.CachedTokens <= r.Floor {
			continue
		}
		saved, ok, err := m.saved(ctx, r)
		if err != nil {
			return err
		}
		r.Impact = impactOf(r, saved, ok)
		if ok {
			r.Saved = saved
		}
		rm, ranged := m.(rangedImpact)
		if ranged && ok {
			// The cached tokens are the prompt's first, which cost no more
			// to prefill than the later ones it computed (attention grows
			// with the position): the reuse saved at most its share of the
			// prompt's prefill, so a fitted impact is at most the token
			// share.
			r.Impact = min(r.Impact, impactOf(r, 0, false))
		}
		r.Material = r.Impact >= opt.MinImpact
		if ranged && ok {
			lo, hi := rm.savedRange(r)
			r.ImpactRange = &[2]float64{min(impactOf(r, lo, true), r.Impact), min(impactOf(r, hi, true), impactOf(r, 0, false))}
			if r.ImpactRange[0] < opt.MinImpact && opt.MinImpact <= r.ImpactRange[1] {
				r.Uncertain, r.Material = true, false
			}
		}
	}
	markWarmUps(rs, opt.Measured, rep.Flushes)
	classify(rs, page)
	rep.SharedPrefixes = groupSharedPrefixes(rs, opt.AllowSharedPrefix)
	byRID := map[string]*AuditRequest{}
	for i := range rs {
		byRID[rs[i].RID] = &rs[i]
	}
	counts := map[Pattern]int{}
	copySets := map[string]bool{} // prompt hashes of poisoned copies
	firstRepeat := false          // a repeat of the run's first prompt poisons
	tolerated, samples, warm, uncertain := 0, 0, 0, 0
	for i := range rs {
		r := &rs[i]
		if r.Pattern == "" {
			continue
		}
		if r.Pattern == ParallelSample {
			samples++
			r.Material = false // whatever it saved, the server's design saved it
			r.Verdict.add(OK, fmt.Sprintf("a parallel sample (n > 1): reused %d of %d prompt tokens that the server prefilled for its n copies first (rid %s), as SGLang does",
				r.CachedTokens, r.PromptTokens, r.SampleOf))
			continue
		}
		if r.Uncertain {
			cause := reuseCause(r, byRID[r.Source], rs[0].PromptHash, rep.Flushes) +
				fmt.Sprintf("; by the timing fit's 95 %% interval %.1f-%.1f %%, across --min-impact %s %%: uncertain", r.ImpactRange[0], r.ImpactRange[1], trimFloat(opt.MinImpact))
			if r.WarmUp {
				r.Verdict.add(OK, cause+"; a warm-up, which the tool's figures leave out")
				continue
			}
			uncertain++
			r.Verdict.add(Suspect, cause)
			continue
		}
		if !r.Material {
			rep.Chance.add(r)
			continue
		}
		cause := reuseCause(r, byRID[r.Source], rs[0].PromptHash, rep.Flushes)
		switch {
		case !opt.AllowSharedPrefix.Auto && r.CachedTokens <= r.Floor+opt.AllowSharedPrefix.Tokens:
			tolerated++
			r.Verdict.add(OK, cause+fmt.Sprintf(" (tolerated: --allow-shared-prefix %d)", opt.AllowSharedPrefix.Tokens))
		case opt.AllowSharedPrefix.Auto && r.Pattern == SharedPrefix && r.Group >= AutoGroup:
			r.Verdict.add(OK, cause+" (the workload's own: --allow-shared-prefix auto)")
		case r.WarmUp:
			warm++
			r.Verdict.add(OK, cause+"; a warm-up, which the tool's figures leave out")
		default:
			counts[r.Pattern]++
			if r.Pattern == Copies {
				copySets[r.PromptHash] = true
			}
			firstRepeat = firstRepeat || r.Pattern == Repeat && r.PromptHash == rs[0].PromptHash
			r.Verdict.add(Poisoned, cause)
		}
	}
	if n := counts[Repeat] + counts[NearRepeat] + counts[SharedPrefix] + counts[Copies]; n > 0 {
		var kinds []string
		for _, p := range []Pattern{Repeat, NearRepeat, SharedPrefix} {
			if counts[p] > 0 {
				kinds = append(kinds, plural(counts[p], strings.ReplaceAll(string(p), "-", " ")))
			}
		}
		if counts[Copies] > 0 {
			kinds = append(kinds, fmt.Sprintf("%s of identical prompts in flight together", plural(len(copySets), "set")))
		}
		text := fmt.Sprintf("%d of %d requests reused another request's prompt enough to cut their TTFT by %s %% or more (%s)",
			n, len(rs), trimFloat(opt.MinImpact), strings.Join(kinds, ", "))
		fix := "fix: " + strings.Join(reuseFixes(counts, firstRepeat, opt.Tool), "; ")
		rep.RunImpact = runImpact(rs, rep.Speedup)
		switch ri := rep.RunImpact; {
		case rep.reuseLetThrough():
			rep.Verdict.add(OK, fmt.Sprintf("%s, which moved none of the figures the run reports by %s %% (--min-run-impact; at most %.1f %%: %s); %s",
				text, trimFloat(opt.MinRunImpact), ri.Max, ri.Largest, fix))
		default:
			rep.Verdict.add(Poisoned, text+"; "+fix)
		}
	}
	if warm > 0 {
		rep.Verdict.add(OK, fmt.Sprintf("%s of the tool's warm-up reused a prompt: its figures leave %s out", plural(warm, "request"), pronoun(warm)))
	}
	if uncertain > 0 {
		rep.uncheck(fmt.Sprintf("%s reused a prefix whose impact is within the timing fit's error of --min-impact %s %%: uncertain, neither POISONED nor ok "+
			"(a fit from more requests that met an idle server, or the server's own times with --enable-metrics, narrows it)", plural(uncertain, "request"), trimFloat(opt.MinImpact)))
	}
	if samples > 0 {
		rep.Verdict.add(OK, fmt.Sprintf("%d requests are parallel samples (n > 1) of a prompt the server prefilled for them first, as SGLang does: not a benchmark's reuse", samples))
	}
	if tolerated > 0 {
		rep.Verdict.add(OK, fmt.Sprintf("%d requests reused up to %d tokens beyond the floor, tolerated by --allow-shared-prefix", tolerated, opt.AllowSharedPrefix.Tokens))
	}
	for _, g := range rep.SharedPrefixes {
		if g.Workload {
			rep.Verdict.add(OK, "shared prefixes are the workload's own (--allow-shared-prefix auto)")
			break
		}
	}
	if impossible > 0 {
		// Requests not judged leave the run unchecked, as answers the
		// proxy could not read do: a CI job must not pass on them.
		rep.uncheck(fmt.Sprintf("%d requests carry impossible counts from the server and were not judged", impossible))
	}
	refused := 0
	for _, f := range rep.Flushes {
		if !flushTaken(f) && !f.Pending {
			refused++
		}
	}
	placementNotes(rep, rs)
	if refused > 0 {
		rep.Verdict.add(OK, fmt.Sprintf("%d of %d flushes were refused", refused, len(rep.Flushes)))
	}
	rep.Requests = rs
	return nil
}

// impactOf is the percentage of the TTFT the reuse cut: its saved time
// against the TTFT with only the floor cached, or the share of the prompt
// beyond the floor that came from the cache when no time is known.
func impactOf(r *AuditRequest, saved float64, timed bool) float64 {
	if !timed {
		return 100 * float64(r.CachedTokens-r.Floor) / float64(max(r.PromptTokens-r.Floor, 1))
	}
	ttft := r.E2E
	if r.TTFT != nil {
		ttft = *r.TTFT
	}
	if saved <= 0 || ttft+saved <= 0 {
		return 0
	}
	return 100 * saved / (ttft + saved)
}

func (c *ChanceReuse) add(r *AuditRequest) {
	n := r.CachedTokens - r.Floor
	if c.Requests == 0 || n < c.MinTokens {
		c.MinTokens = n
	}
	c.MaxTokens = max(c.MaxTokens, n)
	c.MaxImpact = max(c.MaxImpact, r.Impact)
	c.Requests++
}

// reuseCause names a material reuse in a line or two: its pattern, its
// source, the numbers and the flushes between them. The fix is the run
// verdict's, said once (reuseFixes).
func reuseCause(r, src *AuditRequest, firstHash string, flushes []sim.Flush) string {
	var b strings.Builder
	from := "an earlier request"
	if src != nil {
		from = fmt.Sprintf("%s (at %.3f s)", src.RID, src.Arrival)
	} else if r.Source != "" {
		from = r.Source
	}
	switch r.Pattern {
	case Repeat:
		fmt.Fprintf(&b, "repeats %s", from)
		if r.PromptHash != "" && r.PromptHash == firstHash {
			b.WriteString(", the run's first prompt")
		}
	case Copies:
		fmt.Fprintf(&b, "one of %d identical prompts in flight together, served from %s", max(r.Group, 2), from)
	case NearRepeat:
		fmt.Fprintf(&b, "shares all but its last %d tokens with %s", r.PromptTokens-r.CachedTokens, from)
	default:
		fmt.Fprintf(&b, "starts with the same %d tokens as %s, a prefix %s share", r.CachedTokens, from, plural(max(r.Group, 2), "request"))
	}
	fmt.Fprintf(&b, ": reused %d of %d tokens%s", r.CachedTokens, r.PromptTokens, tierClause(simTiers(r.Tiers)))
	if r.Saved > 0 {
		fmt.Fprintf(&b, ", TTFT %.1f %% shorter", r.Impact)
	} else {
		fmt.Fprintf(&b, " (%.1f %% of its prompt beyond the floor)", r.Impact)
	}
	if src != nil && r.Pattern != Copies {
		b.WriteString(flushesBetween(flushes, src.Arrival, r.Arrival))
	}
	return b.String()
}

// Tools whose fix is named besides those whose result files audit reads:
// vLLM's standalone benchmarks/benchmark_serving.py, whose test prompt no
// flag turns off.
const ToolVLLMScript = "vllm benchmark_serving.py"

// DetectTool names the load tool a command runs (ToolSGLang, ToolVLLM,
// ToolVLLMScript), "" when none of them: a module or script named
// bench_serving is SGLang's; benchmark_serving.py is vLLM's standalone
// script; "vllm bench serve" its command.
func DetectTool(command []string) string {
	for i, arg := range command {
		base := arg[strings.LastIndexByte(arg, '/')+1:]
		switch {
		case strings.Contains(base, "bench_serving"):
			return ToolSGLang
		case strings.Contains(base, "benchmark_serving"):
			return ToolVLLMScript
		case base == "vllm" && i+1 < len(command) && command[i+1] == "bench":
			return ToolVLLM
		}
	}
	return ""
}

// reuseFixes are the fixes of the patterns that poisoned, for the tool
// that ran: a repeat of the run's first prompt is a load tool's warm-up
// (or a script's second leg), whose fix is the tool's own flags.
func reuseFixes(counts map[Pattern]int, firstRepeat bool, tool string) []string {
	var fixes []string
	if counts[Repeat] > 0 {
		switch {
		case !firstRepeat:
			fixes = append(fixes, "a retry or a second leg on the same prompt: flush before it, or put a fresh nonce first in each prompt")
		case tool == ToolSGLang:
			fixes = append(fixes, "bench_serving's warm-up repeats its first prompt: --warmup-requests 0, or --flush-cache to flush after it")
		case tool == ToolVLLM:
			fixes = append(fixes, "vllm bench serve's test prompt repeats its first prompt: --ready-check-timeout-sec 0 --num-warmups 0")
		case tool == ToolVLLMScript:
			fixes = append(fixes, "benchmark_serving.py's test prompt repeats its first prompt, and no flag of it turns that off: vllm bench serve has --ready-check-timeout-sec 0")
		default:
			fixes = append(fixes, "a warm-up or a second leg repeating the first prompt: flush after it (POST /flush_cache), or put a fresh nonce first in each prompt")
		}
	}
	if counts[Copies] > 0 {
		fixes = append(fixes, "identical prompts sent together: give each its own (a fresh nonce first)")
	}
	if counts[NearRepeat] > 0 {
		fixes = append(fixes, "a nonce at the end of a prompt keeps nothing cold: put it first")
	}
	if counts[SharedPrefix] > 0 {
		fixes = append(fixes, "a system prompt, few-shot examples or chat history: --allow-shared-prefix auto if by design, else give each prompt its own start")
	}
	return fixes
}

// pronoun is "it" or "them".
func pronoun(n int) string {
	if n == 1 {
		return "it"
	}
	return "them"
}

// flushesBetween describes the flushes between two times: none, or the
// refused ones with the server's reason.
func flushesBetween(fs []sim.Flush, from, to float64) string {
	var refused, accepted []string
	for _, f := range fs {
		if f.At < from || f.At > to {
			continue
		}
		switch {
		case !f.OK:
			refused = append(refused, fmt.Sprintf("%.3f s: %s", f.At, f.Outcome))
		case refusedBy(f) != "":
			refused = append(refused, fmt.Sprintf("%.3f s: answered 200, but %s", f.At, refusedBy(f)))
		default:
			accepted = append(accepted, fmt.Sprintf("%.3f s", f.At))
		}
	}
	switch {
	case len(refused) == 1:
		return "; the flush between them was refused (" + refused[0] + ")"
	case len(refused) > 1:
		return fmt.Sprintf("; the %d flushes between them were refused (first %s)", len(refused), refused[0])
	case len(accepted) > 0:
		// A reuse across an accepted flush: a tier the flush leaves (the
		// tier clause says which), or a prefix cache the flush never saw.
		return "; after the flush at " + accepted[len(accepted)-1] + ", which it survived"
	}
	return "; no flush between"
}

// refusedBy names the DP ranks that refused a flush answered 200 (SGLang
// answers with the first rank's answer), "" when every rank flushed.
func refusedBy(f sim.Flush) string {
	var ranks []string
	for _, r := range f.Ranks {
		if !r.OK {
			ranks = append(ranks, strconv.Itoa(r.Rank))
		}
	}
	switch len(ranks) {
	case 0:
		return ""
	case 1:
		return "rank " + ranks[0] + " refused it"
	}
	return "ranks " + strings.Join(ranks, ", ") + " refused it"
}

// plural is "1 request", "2 requests", "2 flushes".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	for _, end := range []string{"s", "x", "sh", "ch"} {
		if strings.HasSuffix(what, end) {
			return strconv.Itoa(n) + " " + what + "es"
		}
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// sig renders seconds with four significant digits.
func sig(x float64) string {
	if x == 0 || math.IsNaN(x) || math.IsInf(x, 0) {
		return strconv.FormatFloat(x, 'f', 3, 64)
	}
	return strconv.FormatFloat(x, 'f', max(3-int(math.Floor(math.Log10(math.Abs(x)))), 0), 64)
}

func trimFloat(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

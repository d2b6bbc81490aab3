package harness

import (
	"fmt"
	"math"
	"slices"
)

// Summary is the mean, median and 99th percentile of a figure, computed as
// the load tools compute theirs (numpy's mean, median and percentile with
// linear interpolation), so the two compare.
type Summary struct {
	Mean   float64 `json:"mean"`
	Median float64 `json:"median"`
	P99    float64 `json:"p99"`
}

func summarize(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	sum := 0.0
	for _, x := range s {
		sum += x
	}
	return Summary{Mean: sum / float64(len(s)), Median: percentile(s, 50), P99: percentile(s, 99)}
}

// percentile of sorted values, numpy's default (linear) method.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	at := p / 100 * float64(len(sorted)-1)
	lo := int(math.Floor(at))
	hi := min(lo+1, len(sorted)-1)
	return sorted[lo] + (sorted[hi]-sorted[lo])*(at-float64(lo))
}

func (s Summary) scale(f float64) Summary {
	return Summary{Mean: s.Mean * f, Median: s.Median * f, P99: s.P99 * f}
}

// lowerBy is how much lower, in percent, each statistic of s is than
// the same of base.
func (s Summary) lowerBy(base Summary) Summary {
	f := func(x, b float64) float64 {
		if b <= 0 {
			return 0
		}
		return 100 * (b - x) / b
	}
	return Summary{Mean: f(s.Mean, base.Mean), Median: f(s.Median, base.Median), P99: f(s.P99, base.P99)}
}

// EffectFigure is one figure of the run as it ran and as it would have run
// with no prompt token served from the cache: in the server's seconds and,
// at its speedup, on the wall clock.
type EffectFigure struct {
	Requests         int     `json:"requests"`
	AsRun            Summary `json:"as_run_s"`
	WithoutCache     Summary `json:"without_cache_s"`
	AsRunWall        Summary `json:"as_run_wall_s"`
	WithoutCacheWall Summary `json:"without_cache_wall_s"`
	// LowerPct is how much lower, in percent, each statistic is for the
	// cache.
	LowerPct Summary `json:"lower_pct"`
}

func effectFigure(asRun, without []float64, speedup float64) EffectFigure {
	e := EffectFigure{Requests: len(asRun), AsRun: summarize(asRun), WithoutCache: summarize(without)}
	e.AsRunWall, e.WithoutCacheWall = e.AsRun.scale(1/speedup), e.WithoutCache.scale(1/speedup)
	e.LowerPct = e.AsRun.lowerBy(e.WithoutCache)
	return e
}

// CacheEffect is what the prefix cache did to the run: each request's TTFT
// and E2E as run, against the same with every cached token computed
// instead, at the same moment (each request on its own: the time its
// longer prefill would have cost the requests batched with it is not
// counted).
type CacheEffect struct {
	// From says where the saved time comes from (Impact* constants).
	From    string       `json:"from"`
	Speedup float64      `json:"speedup"`
	TTFT    EffectFigure `json:"ttft"`
	E2E     EffectFigure `json:"e2e"`
}

// cacheEffect computes the effect from each request's saved time with
// nothing cached: ColdPrefillCost - PrefillCost on the mock, a fitted cost
// per cached token through the proxy (savedAll).
func cacheEffect(rs []AuditRequest, speedup float64, from string) *CacheEffect {
	return cacheEffectOf(rs, speedup, from, func(r *AuditRequest) float64 { return max(r.ColdPrefillCost-r.PrefillCost, 0) })
}

func cacheEffectOf(rs []AuditRequest, speedup float64, from string, savedAll func(*AuditRequest) float64) *CacheEffect {
	var ttft, ttftCold, e2e, e2eCold []float64
	for i := range rs {
		r := &rs[i]
		if impossibleAudit(r) != "" {
			continue
		}
		saved := savedAll(r)
		if r.TTFT != nil {
			ttft = append(ttft, *r.TTFT)
			ttftCold = append(ttftCold, *r.TTFT+saved)
		}
		e2e = append(e2e, r.E2E)
		e2eCold = append(e2eCold, r.E2E+saved)
	}
	if len(e2e) == 0 {
		return nil
	}
	return &CacheEffect{From: from, Speedup: speedup, TTFT: effectFigure(ttft, ttftCold, speedup), E2E: effectFigure(e2e, e2eCold, speedup)}
}

// Line says the effect plainly, in one line.
func (e *CacheEffect) Line() string {
	f := func(x float64) string {
		if math.Abs(x) < 0.05 {
			return "0.0 %"
		}
		return fmt.Sprintf("%.1f %%", x)
	}
	ttft := "no request had a first token"
	if e.TTFT.Requests > 0 {
		l := e.TTFT.LowerPct
		ttft = fmt.Sprintf("mean TTFT %s lower (median %s, p99 %s)", f(l.Mean), f(l.Median), f(l.P99))
	}
	l := e.E2E.LowerPct
	return fmt.Sprintf("the prefix cache made this run's %s and its mean E2E latency %s lower (median %s, p99 %s)",
		ttft, f(l.Mean), f(l.Median), f(l.P99))
}

// RunImpact is what the poisoned requests did to the figures the run
// reports, over the requests the tool measured (its warm-ups left out):
// each figure as run against the same with their reuse beyond the floor
// computed instead (their saved time added back).
type RunImpact struct {
	Requests int `json:"requests"`
	Poisoned int `json:"poisoned"`
	// TTFT and E2E are how much lower, in percent, each statistic is for
	// the poisoned reuse; Max is the largest of them and Largest names it.
	TTFT    Summary `json:"ttft_lower_pct"`
	E2E     Summary `json:"e2e_lower_pct"`
	Max     float64 `json:"max_pct"`
	Largest string  `json:"largest"`
}

// runImpact computes the poisoned requests' effect on the measured run's
// figures; nil when none poisoned, or when a poisoned request's saved time
// is not known (its impact stood for by the share of the prompt cached).
// A poisoned request's longer prefill would have held up the server for
// its saved time, so the requests in flight at its first token (in its
// prefill batch, or waiting behind it) would have waited as long: those
// whose first token came with or after it in their TTFT, those that
// finished after it in their E2E; and one that arrived while that longer
// prefill would still have run would have waited for its end, at most
// the rest of it (FCFS with prefill first, as SGLang schedules; batched
// prefills overlap, so this bounds the effect from above).
func runImpact(rs []AuditRequest, speedup float64) *RunImpact {
	ri := &RunImpact{}
	firstToken := func(r *AuditRequest) float64 {
		if r.TTFT != nil {
			return r.Arrival + *r.TTFT
		}
		return r.Arrival + r.E2E
	}
	ttftAdd, e2eAdd := make([]float64, len(rs)), make([]float64, len(rs))
	for i := range rs {
		r := &rs[i]
		if r.WarmUp || impossibleAudit(r) != "" || r.Verdict.Level() != Poisoned {
			continue
		}
		if r.Saved <= 0 {
			return nil
		}
		ri.Poisoned++
		t0 := firstToken(r)
		for j := range rs {
			q := &rs[j]
			switch {
			case j == i:
				ttftAdd[j] += r.Saved
				e2eAdd[j] += r.Saved
			case q.Arrival < t0:
				if firstToken(q) >= t0 { // in its prefill batch, or waiting behind it
					ttftAdd[j] += r.Saved
				}
				if q.Arrival+q.E2E >= t0 {
					e2eAdd[j] += r.Saved
				}
			case q.Arrival < t0+r.Saved:
				ttftAdd[j] += t0 + r.Saved - q.Arrival
				e2eAdd[j] += t0 + r.Saved - q.Arrival
			}
		}
	}
	if ri.Poisoned == 0 {
		return nil
	}
	var ttft, ttftWithout, e2e, e2eWithout []float64
	for i := range rs {
		r := &rs[i]
		if r.WarmUp || impossibleAudit(r) != "" {
			continue
		}
		ri.Requests++
		if r.TTFT != nil {
			ttft, ttftWithout = append(ttft, *r.TTFT), append(ttftWithout, *r.TTFT+ttftAdd[i])
		}
		e2e, e2eWithout = append(e2e, r.E2E), append(e2eWithout, r.E2E+e2eAdd[i])
	}
	ri.TTFT = effectFigure(ttft, ttftWithout, speedup).LowerPct
	ri.E2E = effectFigure(e2e, e2eWithout, speedup).LowerPct
	for _, f := range []struct {
		name string
		pct  float64
	}{
		{"mean TTFT", ri.TTFT.Mean}, {"median TTFT", ri.TTFT.Median}, {"p99 TTFT", ri.TTFT.P99},
		{"mean E2E", ri.E2E.Mean}, {"median E2E", ri.E2E.Median}, {"p99 E2E", ri.E2E.P99},
	} {
		if math.Abs(f.pct) > ri.Max || ri.Largest == "" {
			ri.Max, ri.Largest = math.Abs(f.pct), f.name
		}
	}
	return ri
}

// Line says the poisoned requests' effect on the measured run in one line.
func (ri *RunImpact) Line(minRunImpact float64) string {
	than := "at or above"
	if ri.Max < minRunImpact {
		than = "below"
	}
	return fmt.Sprintf("the reuse that poisoned %s made the measured run's mean TTFT %s lower (median %s, p99 %s) and its mean E2E %s lower (median %s, p99 %s): %s --min-run-impact %s %%",
		plural(ri.Poisoned, "request"), pct1(ri.TTFT.Mean), pct1(ri.TTFT.Median), pct1(ri.TTFT.P99),
		pct1(ri.E2E.Mean), pct1(ri.E2E.Median), pct1(ri.E2E.P99), than, trimFloat(minRunImpact))
}

// pct1 is a percentage with one decimal, 0.0 for what rounds to it.
func pct1(x float64) string {
	if math.Abs(x) < 0.05 {
		return "0.0 %"
	}
	return fmt.Sprintf("%.1f %%", x)
}

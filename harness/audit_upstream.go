package harness

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/sglmock/sglmock/sim"
)

// AuditUpstream judges what the recording proxy saw a command send to a
// real server, by the server's own cache reports: the same patterns and
// verdicts as Audit. Each route's floor is measured on the server itself
// with nonce prompts (not recorded). With no model, a reuse's impact comes
// from the proxy's timings: a prefill cost per token fitted to the TTFTs
// of the streamed requests that reused nothing; without such timings, the
// share of the prompt the cache served stands for it. A server that
// reports no cached tokens leaves the run unchecked, with the flag that
// turns its reports on.
func AuditUpstream(ctx context.Context, rec *Recorder, c *Client, opt AuditOptions) (*AuditReport, error) {
	opt = opt.withDefaults()
	got := rec.recording()
	rep := &AuditReport{Upstream: rec.Upstream(), Speedup: 1, MinImpact: opt.MinImpact, AllowSharedPrefix: opt.AllowSharedPrefix,
		Flushes: got.flushes, Checked: true}
	var rs []AuditRequest
	var usage []bool
	var keys []string
	rids := map[string]bool{}
	unread, batches := 0, 0
	for i, pr := range got.records {
		v := pr.seen()
		if v.batch {
			batches++
			continue
		}
		r := AuditRequest{RequestSummary: sim.RequestSummary{Route: v.route, PromptHash: v.hash, Arrival: v.start.Seconds()}}
		if !v.readable {
			unread++
			r.Verdict.add(Suspect, "its answer could not be read ("+v.unread+")")
		} else {
			c := v.counts
			r.Finished, r.E2E = v.end.Seconds(), (v.end - v.start).Seconds()
			r.PromptTokens, r.CompletionTokens, r.FinishReason = c.prompt, c.completion, c.finish
			r.CachedTokens, r.CachedReported = c.cached, c.cachedKnown
			if v.first > 0 {
				ttft := (v.first - v.start).Seconds()
				r.TTFT = &ttft
			}
		}
		r.RID = v.rid
		if r.RID == "" {
			r.RID = v.counts.id
		}
		if r.RID == "" || rids[r.RID] {
			r.RID = fmt.Sprintf("%s#%d", r.RID, i+1)
		}
		rids[r.RID] = true
		rs = append(rs, r)
		usage = append(usage, v.readable && v.counts.usage)
		keys = append(keys, v.key)
	}
	linkSources(keys, rs)
	// The probes go to a server the command is done with, which may have
	// stopped answering, or answer them as it should not: they get
	// probeWait in all, and past it, or when one fails, the floors are left
	// unmeasured rather than the audit hanging on or giving no report.
	probes, cancel := context.WithTimeout(ctx, probeWait)
	defer cancel()
	floors, err := measureFloors(probes, c, routesOf(rs), false, opt.NewID)
	unmeasured := "the floors were not measured (each taken as 0), and a reuse of what every prompt shares (a BOS token, a chat template's head) counts as reuse"
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, err
	case err != nil && probes.Err() != nil:
		floors = routesOf(rs)
		rep.uncheck(fmt.Sprintf("the server did not answer audit's floor probes within %v after the command ended: %s", probeWait, unmeasured))
	case err != nil:
		floors = routesOf(rs)
		rep.uncheck(fmt.Sprintf("audit's floor probes failed (%v): %s", err, unmeasured))
	}
	floorOf := map[string]int{}
	for _, f := range floors {
		floorOf[f.Route] = f.Floor
	}
	silent := 0
	for i := range rs {
		r := &rs[i]
		if r.Verdict.Level() != OK {
			continue
		}
		switch {
		case r.CachedReported:
		case usage[i] && floorOf[routeKey(r.Route)] >= 0:
			// The route reports cached tokens, and leaves them out when
			// there are none (SGLang's and vLLM's OpenAI routes).
			r.CachedReported = true
		default:
			silent++
		}
	}
	m := fitPrefill(rs)
	if err := judge(ctx, rep, rs, floors, m, upstreamPage(probes, c), opt); err != nil {
		return nil, err
	}
	rep.ImpactFrom, rep.ImpactDetail = m.describe()
	if m.perToken > 0 {
		rep.CacheEffect = cacheEffectOf(rep.Requests, 1, ImpactTimingFit, func(r *AuditRequest) float64 {
			if !r.CachedReported {
				return 0
			}
			return m.perToken * float64(r.CachedTokens)
		})
	}
	switch {
	case len(rs) == 0:
		rep.uncheck("no request reached the server through the proxy: nothing was checked (does the command read the server's address " +
			"from SGLANG_URL or OPENAI_BASE_URL? a script with a fixed URL needs audit's --port)")
	case silent > 0:
		rep.uncheck(fmt.Sprintf("%d of %d requests came back without cached_tokens, so their reuse was not checked: %s", silent, len(rs), cacheReportFlags))
	}
	if unread > 0 {
		rep.uncheck(fmt.Sprintf("%d answers could not be read, so their requests were not checked", unread))
	}
	if got.letGo > 0 {
		rep.uncheck(fmt.Sprintf("the proxy kept the records of only the first %d requests; %d more went unchecked", len(rs), got.letGo))
	}
	if batches > 0 {
		rep.uncheck(fmt.Sprintf("%d requests asked for several prompts or samples at once (a batch, n > 1): forwarded, not checked", batches))
	}
	return rep, nil
}

// probeWait bounds what audit sends a real server after the command ended
// (the floor probes, its page size).
const probeWait = 10 * time.Second

// cacheReportFlags says how a server is made to report cached tokens.
const cacheReportFlags = "SGLang reports them in /generate's meta_info, and on its OpenAI routes only when started with --enable-cache-report; " +
	"vLLM only when started with --enable-prompt-tokens-details (prefix caching on), and in a stream only with stream_options.include_usage " +
	"or --enable-force-include-usage; its Prometheus vllm:prefix_cache_hits and _queries count the hits of all requests together"

// linkSources sets each request's ReusedFrom to the earlier request whose
// prompt shares the longest prefix with its own (by text: the server's
// tokens are not seen), the first of identical prompts, as a radix cache
// names the request that inserted the tokens. Prompts are kept sorted, so
// the longest match is a neighbour.
func linkSources(keys []string, rs []AuditRequest) {
	type entry struct {
		key string
		i   int
	}
	var sorted []entry
	seen := map[string]bool{}
	for i, k := range keys {
		if k == "" {
			continue
		}
		kind := strings.IndexByte(k, 0) + 1
		pos := sort.Search(len(sorted), func(j int) bool { return sorted[j].key >= k })
		best, bestLen := -1, kind
		for _, j := range []int{pos - 1, pos} {
			if j >= 0 && j < len(sorted) {
				if l := commonPrefix(sorted[j].key, k); l > bestLen {
					best, bestLen = j, l
				}
			}
		}
		if best >= 0 && rs[i].CachedTokens > 0 {
			rs[i].ReusedFrom = rs[sorted[best].i].RID
		}
		if !seen[k] {
			seen[k] = true
			sorted = append(sorted, entry{})
			copy(sorted[pos+1:], sorted[pos:])
			sorted[pos] = entry{k, i}
		}
	}
}

func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// upstreamPage is the server's page size (SGLang's /get_server_info), or
// vLLM's default block of 16 tokens when it does not say.
func upstreamPage(ctx context.Context, c *Client) int {
	var info struct {
		PageSize int `json:"page_size"`
	}
	if _, err := c.get(ctx, "/get_server_info", &info); err != nil || info.PageSize < 1 {
		return 16
	}
	return info.PageSize
}

// prefillFit is a prefill cost fitted to the proxy's timings: TTFT =
// overhead + perToken x computed tokens (the prompt's tokens not served
// from the cache), by least squares over the streamed requests whose
// cached tokens the server reported: a repeat, which computes one token,
// pins the overhead, and the cold prompts the cost per token.
type prefillFit struct {
	perToken, overhead float64
	n                  int
}

// minFit is the fewest streamed requests, of at least two lengths
// computed, a fit needs.
const minFit = 3

func fitPrefill(rs []AuditRequest) *prefillFit {
	var xs, ys []float64
	for i := range rs {
		r := &rs[i]
		if r.TTFT == nil || !r.CachedReported || impossibleAudit(r) != "" {
			continue
		}
		xs, ys = append(xs, float64(r.PromptTokens-r.CachedTokens)), append(ys, *r.TTFT)
	}
	f := &prefillFit{n: len(xs)}
	if len(xs) < minFit {
		return f
	}
	var mx, my float64
	for i := range xs {
		mx, my = mx+xs[i], my+ys[i]
	}
	mx, my = mx/float64(len(xs)), my/float64(len(xs))
	var sxy, sxx float64
	for i := range xs {
		sxy += (xs[i] - mx) * (ys[i] - my)
		sxx += (xs[i] - mx) * (xs[i] - mx)
	}
	if sxx == 0 || sxy <= 0 || math.IsNaN(sxy/sxx) {
		return f
	}
	f.perToken = sxy / sxx
	f.overhead = my - f.perToken*mx
	return f
}

func (f *prefillFit) saved(_ context.Context, r *AuditRequest) (float64, bool, error) {
	if f.perToken <= 0 {
		return 0, false, nil
	}
	return f.perToken * float64(r.CachedTokens-r.Floor), true, nil
}

func (f *prefillFit) describe() (string, string) {
	if f.perToken <= 0 {
		return ImpactTokenShare, fmt.Sprintf("no prefill cost could be fitted to the proxy's timings: %s with cached tokens reported, where %d computing "+
			"prompts of two lengths or more are needed; the cache's effect on the run is not known", plural(f.n, "streamed request"), minFit)
	}
	return ImpactTimingFit, fmt.Sprintf("prefill %s us a computed prompt token and %s ms besides, fitted to the TTFT the proxy saw of %s",
		sig(f.perToken*1e6), sig(f.overhead*1e3), plural(f.n, "streamed request"))
}

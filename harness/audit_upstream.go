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
		MinRunImpact: opt.MinRunImpact, Strict: opt.Strict, Flushes: got.flushes, Checked: true}
	var rs []AuditRequest
	var usage []bool
	var keys []string
	var stats []serverPrefill // the server's own prefill times, by request
	var ends []float64        // when each answer ended; +Inf when it had not
	rids := map[string]bool{}
	unread, batches := 0, 0
	for i, pr := range got.records {
		v := pr.seen()
		if v.batch {
			batches++
			continue
		}
		r := AuditRequest{RequestSummary: sim.RequestSummary{Route: v.route, PromptHash: v.hash, Arrival: v.start.Seconds(), CacheSalt: v.salted}}
		if !v.readable {
			unread++
			r.Verdict.add(Unchecked, "its answer could not be read ("+v.unread+")")
		} else {
			c := v.counts
			r.Finished, r.E2E = v.end.Seconds(), (v.end - v.start).Seconds()
			r.PromptTokens, r.CompletionTokens, r.FinishReason = c.prompt, c.completion, c.finish
			r.CachedTokens, r.CachedReported, r.Tiers = c.cached, c.cachedKnown, c.tiers
			r.DPRank = c.dpRank
			if v.first > 0 {
				ttft := (v.first - v.start).Seconds()
				r.TTFT = &ttft
			}
			if c.received > 0 && c.prefillDone >= c.received {
				// The server's own TTFT, from receiving the request to the
				// end of its prefill: without the transport's time on the
				// way, which the impact would count as prefill.
				ttft := c.prefillDone - c.received
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
		stats = append(stats, serverPrefill{v.counts.prefillEntry, v.counts.prefillDone})
		end := math.Inf(1)
		if v.end > 0 {
			end = v.end.Seconds()
		}
		ends = append(ends, end)
	}
	linkSources(keys, rs)
	// The probes go to a server the command is done with, which may have
	// stopped answering, or answer them as it should not: they get
	// probeWait in all, and past it, or when one fails, the floors are left
	// unmeasured rather than the audit hanging on or giving no report.
	probes, cancel := context.WithTimeout(ctx, probeWait)
	defer cancel()
	floors, ranks, err := measureFloors(probes, c, routesOf(rs), false, opt.NewID)
	rep.setRanks(ranks)
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
			r.Verdict.add(Unchecked, "the server reported no cached tokens for it: its reuse was not checked")
		}
	}
	m := fitPrefill(rs, stats, ends)
	if err := judge(ctx, rep, rs, floors, m, upstreamPage(probes, c), opt); err != nil {
		return nil, err
	}
	// The server's version, asked when a salted request was poisoned, is a
	// probe too.
	if err := saltNotes(probes, c, rep); err != nil {
		switch {
		case ctx.Err() != nil:
			return nil, err
		case probes.Err() != nil:
			// The probes' time ran out: the floors' note already says the
			// server stopped answering.
		default:
			rep.uncheck(fmt.Sprintf("audit could not ask the server its SGLang version (%v): whether its /generate ignored the cache_salt "+
				"of the poisoned requests that sent one is unknown", err))
		}
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

// prefillFit is a prefill cost fitted to timings: prefill = overhead +
// perToken x computed tokens (the prompt's tokens not served from the
// cache), by least squares. From the server's own times when it reports
// them (SGLang's meta_info with --enable-metrics: from entering the
// prefill batch to its end, each batch once, its requests' computed tokens
// summed), which hold no queueing; else from the TTFTs the proxy saw of
// the streamed requests that met an idle server (none other in flight
// when they arrived): a TTFT that waited in a queue, or shared a batch,
// would put that wait on the prompt's tokens. Requests whose cached tokens
// were reported count: a repeat, which computes one token, pins the
// overhead, and the cold prompts the cost per token.
type prefillFit struct {
	perToken, overhead float64
	// half is the 95 % half-width of perToken, from the fit's residuals.
	half float64
	// n points from candidates requests; from says which timings.
	n, candidates int
	from          string
}

// serverPrefill is the server's own time of a request's prefill batch:
// when the request entered it and when it ended (0 when not reported).
type serverPrefill struct{ entry, done float64 }

// minFit is the fewest points, of at least two sizes computed, a fit
// needs.
const minFit = 3

// The timings a fit is made from.
const (
	fitServer = "the server's own prefill times"
	fitIdle   = "the TTFT the proxy saw"
)

func fitPrefill(rs []AuditRequest, stats []serverPrefill, ends []float64) *prefillFit {
	counted := func(r *AuditRequest) bool { return r.CachedReported && impossibleAudit(r) == "" }
	// The server's times: one point a batch, its requests' computed
	// tokens summed.
	batches := map[serverPrefill]int{}
	var order []serverPrefill
	for i := range rs {
		r, st := &rs[i], stats[i]
		if !counted(r) || st.entry <= 0 || st.done < st.entry {
			continue
		}
		if _, ok := batches[st]; !ok {
			order = append(order, st)
		}
		batches[st] += r.PromptTokens - r.CachedTokens
	}
	var xs, ys []float64
	for _, st := range order {
		xs, ys = append(xs, float64(batches[st])), append(ys, st.done-st.entry)
	}
	if f := leastSquares(xs, ys); f != nil {
		f.candidates, f.from = len(order), fitServer
		return f
	}
	// The proxy's TTFTs of the requests that met an idle server.
	xs, ys = nil, nil
	candidates := 0
	for i := range rs {
		r := &rs[i]
		if r.TTFT == nil || !counted(r) {
			continue
		}
		candidates++
		if busyAt(rs, ends, i) {
			continue
		}
		xs, ys = append(xs, float64(r.PromptTokens-r.CachedTokens)), append(ys, *r.TTFT)
	}
	f := leastSquares(xs, ys)
	if f == nil {
		f = &prefillFit{n: len(xs)}
	}
	f.candidates, f.from = candidates, fitIdle
	return f
}

// busyAt tells whether another request was in flight when rs[i] arrived:
// it arrived no later and its answer had not ended (ends[j], +Inf for one
// that never did as far as the proxy saw).
func busyAt(rs []AuditRequest, ends []float64, i int) bool {
	for j := range rs {
		if j != i && rs[j].Arrival <= rs[i].Arrival && ends[j] > rs[i].Arrival {
			return true
		}
	}
	return false
}

// leastSquares fits y = overhead + perToken x; nil without minFit points
// of two sizes or more, or for a cost that does not grow with the tokens.
func leastSquares(xs, ys []float64) *prefillFit {
	n := len(xs)
	if n < minFit {
		return nil
	}
	var mx, my float64
	for i := range xs {
		mx, my = mx+xs[i], my+ys[i]
	}
	mx, my = mx/float64(n), my/float64(n)
	var sxy, sxx float64
	for i := range xs {
		sxy += (xs[i] - mx) * (ys[i] - my)
		sxx += (xs[i] - mx) * (xs[i] - mx)
	}
	if sxx == 0 || sxy <= 0 || math.IsNaN(sxy/sxx) {
		return nil
	}
	f := &prefillFit{perToken: sxy / sxx, n: n}
	f.overhead = my - f.perToken*mx
	ssr := 0.0
	for i := range xs {
		d := ys[i] - f.overhead - f.perToken*xs[i]
		ssr += d * d
	}
	if n > 2 {
		f.half = studentT95(n-2) * math.Sqrt(ssr/float64(n-2)/sxx)
	}
	if f.half >= f.perToken {
		// Its interval holds a cost of 0: the timings cannot tell what a
		// token costs, and the share of the prompt stands for the impact.
		return nil
	}
	return f
}

// studentT95 is the two-sided 95 % quantile of Student's t with df
// degrees of freedom: the slope's interval from few points is wider than
// the normal's 1.96.
func studentT95(df int) float64 {
	table := []float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
		2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086}
	switch {
	case df < 1:
		return math.Inf(1)
	case df <= len(table):
		return table[df-1]
	case df <= 40:
		return 2.04
	}
	return z95
}

func (f *prefillFit) saved(_ context.Context, r *AuditRequest) (float64, bool, error) {
	if f.perToken <= 0 {
		return 0, false, nil
	}
	return f.perToken * float64(r.CachedTokens-r.Floor), true, nil
}

// savedRange is the saved time at either end of the fit's 95 % interval.
func (f *prefillFit) savedRange(r *AuditRequest) (lo, hi float64) {
	n := float64(r.CachedTokens - r.Floor)
	return max(f.perToken-f.half, 0) * n, (f.perToken + f.half) * n
}

func (f *prefillFit) describe() (string, string) {
	if f.perToken <= 0 {
		what := fmt.Sprintf("%d of %s met an idle server", f.n, plural(f.candidates, "streamed request"))
		if f.from == fitServer {
			what = fmt.Sprintf("%s reported the server's own prefill times", plural(f.candidates, "batch"))
		}
		return ImpactTokenShare, fmt.Sprintf("no prefill cost could be fitted: %s with cached tokens reported, where %d "+
			"of two sizes computed or more are needed, and a cost whose 95 %% interval excludes 0; the cache's effect on the run is not known", what, minFit)
	}
	interval := ""
	if f.half > 0 {
		interval = fmt.Sprintf(" ± %s (95 %%)", sig(f.half*1e6))
	}
	source := fmt.Sprintf("fitted to %s of %d of %s, those that met an idle server", fitIdle, f.n, plural(f.candidates, "streamed request"))
	if f.from == fitServer {
		source = fmt.Sprintf("fitted to %s (meta_info, --enable-metrics) of %s", fitServer, plural(f.n, "prefill batch"))
	}
	return ImpactTimingFit, fmt.Sprintf("prefill %s us%s a computed prompt token and %s ms besides, %s",
		sig(f.perToken*1e6), interval, sig(f.overhead*1e3), source)
}

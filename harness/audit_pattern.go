package harness

import (
	"slices"

	"github.com/sglmock/sglmock/sim"
)

// reused tells whether a request reused tokens beyond its floor, with
// counts the audit can believe.
func (r *AuditRequest) reused() bool {
	return r.CachedReported && r.CachedTokens > r.Floor && impossibleAudit(r) == ""
}

// classify names the pattern of every reuse, in arrival order: a prompt
// identical to another one's is a repeat of the latest earlier such, or
// one of several copies when the two were in flight together (whichever
// the server served first: it may be the one that arrived later); one that
// differs from the prompt it reused only in a short tail is a near-repeat;
// any other reuse is of a shared prefix.
func classify(rs []AuditRequest, page int) {
	index := map[string]int{}      // rid -> request
	sameHash := map[string][]int{} // prompt hash -> requests, in order
	for i := range rs {
		index[rs[i].RID] = i
		if h := rs[i].PromptHash; h != "" {
			sameHash[h] = append(sameHash[h], i)
		}
	}
	for i := range rs {
		r := &rs[i]
		if !r.reused() {
			continue
		}
		src := identicalSource(rs, i, index, sameHash[r.PromptHash])
		switch {
		case r.SampleOf != "" && r.ReusedFrom == r.SampleOf:
			r.Pattern, r.Source = ParallelSample, r.SampleOf
		case src >= 0 && inFlightTogether(r, &rs[src]):
			r.Pattern, r.Source = Copies, rs[src].RID
			for _, j := range sameHash[r.PromptHash] {
				if j == i || inFlightTogether(r, &rs[j]) {
					r.Group++
				}
			}
		case src >= 0:
			r.Pattern, r.Source = Repeat, rs[src].RID
		case nearRepeat(r.PromptTokens, r.CachedTokens, page):
			r.Pattern, r.Source = NearRepeat, r.ReusedFrom
		default:
			r.Pattern, r.Source = SharedPrefix, r.ReusedFrom
		}
	}
}

// identicalSource is the request with the same prompt as rs[i] that it
// reused (same holds the requests with its prompt, in order): the latest
// earlier one; else the one the server names; else one in flight together
// with it. -1 when no other request sent its prompt.
func identicalSource(rs []AuditRequest, i int, index map[string]int, same []int) int {
	if len(same) < 2 {
		return -1
	}
	latest := -1
	for _, j := range same {
		if j < i {
			latest = j
		}
	}
	if latest >= 0 {
		return latest
	}
	if j, ok := index[rs[i].ReusedFrom]; ok && j != i && rs[j].PromptHash == rs[i].PromptHash {
		return j
	}
	for _, j := range same {
		if j != i && inFlightTogether(&rs[i], &rs[j]) {
			return j
		}
	}
	return -1
}

// inFlightTogether tells whether two requests were in flight at once: each
// arrived before the other finished.
func inFlightTogether(a, b *AuditRequest) bool {
	return a.Arrival < b.Finished && b.Arrival < a.Finished
}

// markWarmUps marks the requests a tool sent before its measured run: all
// but the last measured when its result file says how many it measured;
// else by the load tools' shapes, the run's first requests being copies
// of its first prompt: those before a flush that follows them
// (bench_serving's --flush-cache after its warm-up), or those all sent
// before the first of them finished (bench_serving sends its
// --warmup-requests at once, vLLM its test prompt alone) when a later
// request sends that prompt again after they all finished (the measured
// run's first).
func markWarmUps(rs []AuditRequest, measured int, flushes []sim.Flush) {
	mark := func(n int) {
		for i := range rs[:n] {
			rs[i].WarmUp = true
		}
	}
	if measured > 0 {
		mark(max(len(rs)-measured, 0))
		return
	}
	if len(rs) < 2 || rs[0].PromptHash == "" {
		return
	}
	first := &rs[0]
	copies := 1
	for copies < len(rs) && rs[copies].PromptHash == first.PromptHash {
		copies++
	}
	for _, f := range flushes {
		if f.At > first.Arrival {
			// The requests before the run's first flush, if copies of its
			// first prompt all.
			before := 0
			for before < len(rs) && rs[before].Arrival < f.At {
				before++
			}
			if before <= copies && before < len(rs) {
				mark(before)
				return
			}
			break
		}
	}
	k, end := 1, first.Finished
	for k < len(rs) && rs[k].PromptHash == first.PromptHash && rs[k].Arrival < first.Finished {
		end = max(end, rs[k].Finished)
		k++
	}
	for j := k; j < len(rs); j++ {
		if rs[j].PromptHash == first.PromptHash && rs[j].Arrival >= end {
			mark(k)
			return
		}
	}
}

// groupSharedPrefixes joins the requests that material shared-prefix
// reuse links (each to the request it reused) into groups, sets each
// member's Group to its group's size, and describes the groups.
func groupSharedPrefixes(rs []AuditRequest, allow SharedPrefixAllowance) []SharedPrefixGroup {
	index := map[string]int{}
	for i := range rs {
		index[rs[i].RID] = i
	}
	parent := make([]int, len(rs))
	for i := range parent {
		parent[i] = i
	}
	var find func(int) int
	find = func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	linked := make([]bool, len(rs))
	for i := range rs {
		r := &rs[i]
		if r.Pattern != SharedPrefix || !r.Material {
			continue
		}
		linked[i] = true
		if j, ok := index[r.Source]; ok {
			linked[j] = true
			parent[find(i)] = find(j)
		}
	}
	members := map[int][]int{}
	var roots []int
	for i := range rs {
		if !linked[i] {
			continue
		}
		root := find(i)
		if members[root] == nil {
			roots = append(roots, root)
		}
		members[root] = append(members[root], i)
	}
	var groups []SharedPrefixGroup
	for _, root := range roots {
		g := SharedPrefixGroup{Requests: len(members[root])}
		for _, i := range members[root] {
			r := &rs[i]
			r.Group = g.Requests
			g.RIDs = append(g.RIDs, r.RID)
			g.PromptTokens += r.PromptTokens
			if r.CachedReported {
				g.CachedTokens += r.CachedTokens
			}
			if r.Pattern == SharedPrefix && r.Material && (g.Tokens == 0 || r.CachedTokens < g.Tokens) {
				g.Tokens = r.CachedTokens
			}
		}
		g.Workload = allow.Auto && g.Requests >= AutoGroup
		groups = append(groups, g)
	}
	return groups
}

// routesOf lists the routes the requests came by, in order of first use.
func routesOf(rs []AuditRequest) []RouteFloor {
	var out []RouteFloor
	for _, r := range rs {
		k := routeKey(r.Route)
		i := slices.IndexFunc(out, func(f RouteFloor) bool { return f.Route == k })
		if i < 0 {
			out = append(out, RouteFloor{Route: k})
			i = len(out) - 1
		}
		out[i].Requests++
	}
	return out
}

// routeKey is a request's route, /generate text when the server did not
// say.
func routeKey(route string) string {
	if route == "" {
		return sim.RouteGenerate
	}
	return route
}

// nearRepeat tells whether a prompt that reused cached of its tokens
// differs from the one it reused only in a short tail: at most
// nearRepeatTail tokens beyond a page, and at most nearRepeatShare of the
// prompt (a nonce or a counter appended to the same text, not a question
// after a system prompt).
func nearRepeat(prompt, cached, page int) bool {
	tail := prompt - cached
	return tail <= page+1 || tail <= nearRepeatTail+page && float64(tail) <= nearRepeatShare*float64(prompt)
}

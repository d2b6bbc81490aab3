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
// identical to an earlier one's is a repeat (of the latest such); one that
// differs from the prompt it reused only in a short tail is a near-repeat;
// any other reuse is of a shared prefix.
func classify(rs []AuditRequest, page int) {
	latest := map[string]string{} // prompt hash -> rid
	for i := range rs {
		r := &rs[i]
		if r.reused() {
			switch src, ok := latest[r.PromptHash]; {
			case r.SampleOf != "" && r.ReusedFrom == r.SampleOf:
				r.Pattern, r.Source = ParallelSample, r.SampleOf
			case ok && r.PromptHash != "":
				r.Pattern, r.Source = Repeat, src
			case nearRepeat(r.PromptTokens, r.CachedTokens, page):
				r.Pattern, r.Source = NearRepeat, r.ReusedFrom
			default:
				r.Pattern, r.Source = SharedPrefix, r.ReusedFrom
			}
		}
		if r.PromptHash != "" {
			latest[r.PromptHash] = r.RID
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

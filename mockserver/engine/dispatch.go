package engine

import (
	"fmt"

	"github.com/sglmock/sglmock/mockserver/profile"
)

// dispatcher picks the DP rank each request runs on, as SGLang's
// DataParallelController does (managers/data_parallel_controller.py): a
// request with a routed_dp_rank goes there (maybe_external_dp_rank_routing,
// which leaves the round-robin counter alone); otherwise round_robin takes
// the next rank in turn, and total_requests and total_tokens the rank with
// the least load in their budget (DPBudget), ties to the lowest rank. The
// budget holds each rank's load as the rank last reported it
// (update_budget: its running and waiting requests, and its used and
// waiting tokens), plus, since then, one request and its prompt tokens for
// every request dispatched there (DPBudget.dispatch's heuristic). It is an
// unsynchronized core: the engine's loop owns it.
type dispatcher struct {
	method string
	ranks  int
	// next is round_robin_counter: the rank round_robin gives next.
	next int
	// requests and tokens are DPBudget's total_requests and total_tokens.
	requests, tokens []int
}

func newDispatcher(p *profile.Profile) *dispatcher {
	n := p.Ranks()
	return &dispatcher{method: p.BalanceMethod(), ranks: n, requests: make([]int, n), tokens: make([]int, n)}
}

// dispatch returns the rank for a request with inputLen prompt tokens,
// pinned to rank *routed when routed is set (validated by checkRoutedRank).
func (d *dispatcher) dispatch(routed *int, inputLen int) int {
	if routed != nil && d.ranks > 1 {
		return *routed
	}
	var target int
	switch d.method {
	case profile.TotalRequests:
		target = argmin(d.ranks, func(i int) [2]int { return [2]int{d.requests[i], 0} })
	case profile.TotalTokens:
		// total_requests breaks ties between equal total_tokens.
		target = argmin(d.ranks, func(i int) [2]int { return [2]int{d.tokens[i], d.requests[i]} })
	default:
		target = d.next
		d.next = (d.next + 1) % d.ranks
		return target
	}
	d.requests[target]++
	d.tokens[target] += inputLen
	return target
}

// readsLoads reports whether dispatch reads the ranks' loads: only a
// load-based method choosing among several ranks does, so with one rank or
// round_robin the engine skips the reports (a rank's stats walk its queue
// and cache after every batch).
func (d *dispatcher) readsLoads() bool {
	return d.ranks > 1 && (d.method == profile.TotalRequests || d.method == profile.TotalTokens)
}

// report is a rank's load update (WatchLoadUpdateReq), which replaces its
// budget: requests running and waiting, and num_total_tokens.
func (d *dispatcher) report(rank, requests, tokens int) {
	d.requests[rank], d.tokens[rank] = requests, tokens
}

// argmin is the first index whose key is least (Python's min over a
// range, keys compared as tuples).
func argmin(n int, key func(int) [2]int) int {
	best := 0
	for i := 1; i < n; i++ {
		k, b := key(i), key(best)
		if k[0] < b[0] || (k[0] == b[0] && k[1] < b[1]) {
			best = i
		}
	}
	return best
}

// checkRoutedRank applies the tokenizer manager's check of a request's
// routed_dp_rank (generate_request): with one rank, 0 is ignored (SGLang
// logs a warning); otherwise it must name a rank.
func checkRoutedRank(routed *int, ranks int) error {
	if routed == nil || (ranks <= 1 && *routed == 0) {
		return nil
	}
	if *routed < 0 || *routed >= ranks {
		return &InvalidRequestError{Message: fmt.Sprintf("routed_dp_rank=%d out of range [0, %d)", *routed, ranks)}
	}
	return nil
}

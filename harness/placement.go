package harness

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/sglmock/sglmock/sim"
)

// Placement: a deployment of several DP ranks (SGLang's --dp-size, often
// with --enable-dp-attention) has a prefix cache a rank, and its controller
// puts each request on one rank (round robin by default). A request finds
// cached only what earlier requests left on its own rank, so a leg can be
// cold because it ran on another rank than the request it repeats: by
// placement, not by method. The next run, with one more request in between
// (another client, a warm-up, a retry), puts both on one rank and the same
// script is poisoned. So a row counts as clean only when its method keeps
// leg b cold on any placement (a nonce, or a flush that every rank took),
// and a flush counts as taken only when every rank took it: SGLang answers
// /flush_cache with the first rank's answer, so a 200 can hide a rank that
// refused.
//
// The harness learns the ranks from /server_info's dp_size, each
// request's rank from meta_info.dp_rank (SGLang's /generate, with several
// ranks) or, against sglmock, from /sim/requests/{rid}, and each rank's
// answer to a flush from /sim/flushes. Its own probes (the shared floor)
// are pinned to rank 0 with routed_dp_rank, which leaves the controller's
// round robin where it was.

// DPRanks asks the server how many DP ranks it runs: /server_info's
// dp_size (SGLang). 1 when it does not say (vLLM, an OpenAI server).
func (c *Client) DPRanks(ctx context.Context) (int, error) {
	if c.Backend != SGLang {
		return 1, nil
	}
	var info struct {
		DPSize *int `json:"dp_size"`
	}
	_, err := c.get(ctx, "/server_info", &info)
	var he *HTTPError
	switch {
	case errors.As(err, &he) && (he.Status == http.StatusNotFound || he.Status == http.StatusMethodNotAllowed):
		return 1, nil
	case err != nil:
		return 0, err
	case info.DPSize == nil || *info.DPSize < 1:
		return 1, nil
	}
	return *info.DPSize, nil
}

// probeRank is the rank the harness's own probes are pinned to: rank 0 on
// a deployment of several ranks, none on one.
func probeRank(ranks int) *int {
	if ranks <= 1 {
		return nil
	}
	r := 0
	return &r
}

// placementCause says, of a run whose method does not keep leg b cold by
// itself (naive), that leg b was cold only by placement: its legs ran on
// different ranks, or the server has several and does not say where each
// ran. "" when there is nothing to say: one rank, the legs on one rank, or
// leg b reused (the reuse check says so).
func placementCause(m Method, r Run, ranks, floor, allow int) string {
	if ranks <= 1 || m.nonces() || m.Flushes() || m.salts() || r.B.CachedTokens == nil || *r.B.CachedTokens > max(floor, 0)+allow {
		return ""
	}
	a, b := r.A.DPRank, r.B.DPRank
	switch {
	case a == nil || b == nil:
		return fmt.Sprintf("the server runs %d DP ranks and does not say which ran each leg: leg b may be cold by placement, not by method "+
			"(the same prompt twice on one rank is poisoned; use a nonce, or a flush)", ranks)
	case *a != *b:
		return fmt.Sprintf("leg b ran on rank %d, leg a on rank %d: cold by placement, not by method "+
			"(one more request between them, from any client, puts both on one rank and poisons the row; use a nonce, or a flush)", *b, *a)
	}
	return ""
}

// verifyRanks checks a flush the server answered 200 on every DP rank,
// against sglmock's record of it (GET /sim/flushes, its last answered
// flush): the ranks that refused it, and why, go into the attempt, which is
// then not OK. Nothing is checked on one rank or without /sim/.
func (s *session) verifyRanks(ctx context.Context, a *FlushAttempt) error {
	if !a.OK() || s.sim == nil || s.server.DPRanks <= 1 {
		return nil
	}
	flushes, err := s.c.Flushes(ctx)
	if err != nil {
		return err
	}
	for i := len(flushes) - 1; i >= 0; i-- {
		if flushes[i].Pending {
			continue
		}
		a.RefusedRanks = refusedRanks(flushes[i])
		return nil
	}
	return nil
}

// refusedRanks lists, as "rank 1 (Cache not flushed ...; 1 running)", the
// ranks that did not flush.
func refusedRanks(f sim.Flush) []string {
	var out []string
	for _, r := range f.Ranks {
		if !r.OK {
			out = append(out, fmt.Sprintf("rank %d (%s; %d running, %d queued)", r.Rank, strings.TrimSuffix(r.Outcome, "."), r.Running, r.Queued))
		}
	}
	return out
}

// flushTaken tells whether a flush in sglmock's record flushed every rank.
func flushTaken(f sim.Flush) bool {
	return f.OK && !slices.ContainsFunc(f.Ranks, func(r sim.FlushRank) bool { return !r.OK })
}

// placementNotes marks, on a deployment of several ranks, each request that
// repeats earlier requests' prompt (the same prompt tokens) and reused
// nothing beyond its floor only because every one of them ran on another
// rank, with no flush that every rank took in between: cold by placement,
// not by method. A repeat on a server of several ranks that does not say
// where it or the request it repeats ran may be cold by placement too: it
// is not clean either. The run is then not clean.
func placementNotes(rep *AuditReport, rs []AuditRequest) {
	cold, unplaced := 0, 0
	for i := range rs {
		r := &rs[i]
		if (r.DPRank == nil && rep.DPRanks <= 1) || r.SampleOf != "" || !r.CachedReported || r.CachedTokens > r.Floor {
			continue
		}
		var src, unknown *AuditRequest
		for j := i - 1; j >= 0; j-- {
			e := &rs[j]
			if e.PromptHash != r.PromptHash || flushedBetween(rep.Flushes, e.Finished, r.Arrival) {
				continue
			}
			switch {
			case e.DPRank == nil || r.DPRank == nil:
				if unknown == nil && rep.DPRanks > 1 {
					unknown = e
				}
				continue
			case *e.DPRank == *r.DPRank:
				src, unknown = nil, nil // it could have reused this one
			case src == nil:
				src = e
				continue
			default:
				continue
			}
			break
		}
		switch {
		case src != nil:
			cold++
			r.Verdict.add(Suspect, fmt.Sprintf("repeats rid %s's prompt but ran on DP rank %d, rid %s on rank %d: cold by placement, not by method",
				src.RID, *r.DPRank, src.RID, *src.DPRank))
		case unknown != nil:
			unplaced++
			r.Verdict.add(Suspect, fmt.Sprintf("repeats rid %s's prompt, and the server runs %d DP ranks without saying which ran each: "+
				"it may be cold by placement, not by method", unknown.RID, rep.DPRanks))
		}
	}
	if cold > 0 {
		rep.Verdict.add(Suspect, fmt.Sprintf("%d requests repeated an earlier prompt and were cold only because the DP controller put them on "+
			"another rank: one more request in between, from any client, puts a repeat on the same rank and poisons it (use a nonce, or a flush)", cold))
	}
	if unplaced > 0 {
		rep.Verdict.add(Suspect, fmt.Sprintf("%d requests repeated an earlier prompt and were cold, on a server of %d DP ranks that does not say "+
			"which ran each (meta_info.dp_rank): cold by placement or not is unknown (use a nonce, or a flush)", unplaced, rep.DPRanks))
	}
}

// flushedBetween tells whether a flush that every rank took was answered
// between from and to (simulated seconds).
func flushedBetween(flushes []sim.Flush, from, to float64) bool {
	return slices.ContainsFunc(flushes, func(f sim.Flush) bool { return flushTaken(f) && f.Answered >= from && f.Answered <= to })
}

package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"github.com/sglmock/sglmock/sim"
)

// AuditRequest is one request a benchmark sent, as the server recorded it.
type AuditRequest struct {
	sim.RequestSummary
	Verdict Verdict `json:"verdict"`
}

// AuditReport is what a mock saw a benchmark do: every request, every
// flush, and whether any request was served from a prefix an earlier one
// left in the cache.
type AuditReport struct {
	Profile           string  `json:"profile"`
	Speedup           float64 `json:"speedup"`
	AllowSharedPrefix int     `json:"allow_shared_prefix"`
	// SharedFloor is what two unrelated prompts share on this server (a
	// BOS token), measured after the command's requests were read.
	SharedFloor int            `json:"shared_floor"`
	Requests    []AuditRequest `json:"requests"`
	Flushes     []sim.Flush    `json:"flushes"`
	Verdict     Verdict        `json:"verdict"`
}

// Audit reads the server's records (GET /sim/requests and /sim/flushes)
// and flags every request that reused more than allow prompt tokens beyond
// the shared floor from the cache: a prefix it shares with an earlier
// request, with no accepted flush between them (an accepted flush empties
// the cache, so any reuse means none came between). The floor (a BOS token
// every text prompt starts with) is measured afterwards with two unrelated
// nonce prompts, as the methods measure it. The server must be sglmock.
func Audit(ctx context.Context, c *Client, allow int) (*AuditReport, error) {
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
	// Read before the floor is measured, which adds requests of its own.
	stats, err := c.Stats(ctx)
	if err != nil {
		return nil, err
	}
	s, err := startSession(ctx, c, Options{})
	if err != nil {
		return nil, err
	}
	floor := max(s.server.SharedFloor, 0)
	rep := &AuditReport{Profile: p.Name, Speedup: p.Speedup, AllowSharedPrefix: allow, SharedFloor: floor, Flushes: flushes}
	byRID := map[string]sim.RequestSummary{}
	poisoned := 0
	for _, r := range reqs {
		ar := AuditRequest{RequestSummary: r}
		if r.CachedTokens > floor+allow {
			poisoned++
			text := fmt.Sprintf("reused %d of %d prompt tokens", r.CachedTokens, r.PromptTokens)
			if from, ok := byRID[r.ReusedFrom]; ok {
				text += fmt.Sprintf(" from %s (sent at %.3f s)", from.RID, from.Arrival)
				text += flushesBetween(flushes, from.Arrival, r.Arrival)
			} else if r.ReusedFrom != "" {
				text += " from " + r.ReusedFrom
			}
			ar.Verdict.add(Poisoned, text)
		}
		byRID[r.RID] = r
		rep.Requests = append(rep.Requests, ar)
	}
	refused := 0
	for _, f := range flushes {
		if !f.OK {
			refused++
		}
	}
	if poisoned > 0 {
		rep.Verdict.add(Poisoned, fmt.Sprintf("%d of %d requests reused more than %d cached prompt tokens", poisoned, len(reqs), floor+allow))
	}
	if refused > 0 {
		rep.Verdict.add(OK, fmt.Sprintf("%d of %d flushes were refused", refused, len(flushes)))
	}
	if n := int64(len(reqs)); n < stats.Requests {
		// The server keeps a bounded history: what it let go is unaudited.
		rep.Verdict.add(Suspect, fmt.Sprintf("the server kept the records of only the last %d of %d requests "+
			"(raise serve's --sim-truth-bytes; at most 10000 are kept)", n, stats.Requests))
	}
	return rep, nil
}

// flushesBetween describes the flushes between two times: none, or the
// refused ones with the server's reason.
func flushesBetween(fs []sim.Flush, from, to float64) string {
	var refused []string
	for _, f := range fs {
		if f.At >= from && f.At <= to && !f.OK {
			refused = append(refused, fmt.Sprintf("%.3f s: %s", f.At, f.Outcome))
		}
	}
	switch len(refused) {
	case 0:
		return "; no flush between them"
	case 1:
		return "; the flush between them was refused (" + refused[0] + ")"
	}
	return fmt.Sprintf("; the %d flushes between them were refused (first %s)", len(refused), refused[0])
}

// WriteTable prints the report: every request, every flush, the verdict.
func (a *AuditReport) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "audit: %d requests and %d flushes on sglmock profile %s (x%g; times are simulated seconds);\n", len(a.Requests), len(a.Flushes), a.Profile, a.Speedup)
	fmt.Fprintf(w, "reuse beyond %d tokens is flagged (every prompt shares %d on this server, and --allow-shared-prefix is %d)\n\n",
		a.SharedFloor+a.AllowSharedPrefix, a.SharedFloor, a.AllowSharedPrefix)
	t := &table{head: []string{"arrival_s", "rid", "prompt_tok", "cached_tok", "reused_from", "verdict"}}
	for _, r := range a.Requests {
		from := r.ReusedFrom
		if from == "" {
			from = "-"
		}
		t.add(f3(r.Arrival), r.RID, strconv.Itoa(r.PromptTokens), strconv.Itoa(r.CachedTokens), from, r.Verdict.String())
	}
	if len(a.Requests) == 0 {
		fmt.Fprintln(w, "no request reached the server")
	} else {
		fmt.Fprintln(w, "requests, in arrival order:")
		if err := t.write(w); err != nil {
			return err
		}
	}
	if len(a.Flushes) > 0 {
		fmt.Fprintln(w, "\nflushes (/flush_cache calls) and their outcomes:")
		ft := &table{head: []string{"at_s", "answered_s", "timeout_s", "queued", "running", "outcome"}}
		for _, f := range a.Flushes {
			ft.add(f3(f.At), f3(f.Answered), f3(f.Timeout), strconv.Itoa(f.Queued), strconv.Itoa(f.Running), f.Outcome)
		}
		if err := ft.write(w); err != nil {
			return err
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "verdict:", a.Verdict.String())
	return nil
}

// WriteJSON writes the report for CI.
func (a *AuditReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(a)
}

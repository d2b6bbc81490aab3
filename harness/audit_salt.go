package harness

import (
	"context"
	"fmt"

	"github.com/sglmock/sglmock/compat"
	"github.com/sglmock/sglmock/sim"
)

// hasGenerateCacheSalt selects compat's rule that /generate takes
// cache_salt (PR #30827).
func hasGenerateCacheSalt(r compat.Rules) bool { return r.GenerateCacheSalt }

// generateSaltDoubt says why an SGLang server reporting version may ignore
// cache_salt on /generate: it is older than PR #30827, which added the
// field (compat.No), reports no version, or one compat cannot place. ok is
// false when it has the rule.
func generateSaltDoubt(version string) (p compat.Presence, why string, ok bool) {
	first := compat.FirstWith(hasGenerateCacheSalt)
	switch p = compat.Has(version, hasGenerateCacheSalt); {
	case p == compat.Yes:
		return p, "", false
	case p == compat.No:
		return p, fmt.Sprintf("the server reports SGLang %s, older than PR #30827 (first in %s): its /generate ignores cache_salt", version, first), true
	case version == "":
		return p, fmt.Sprintf("the server reports no SGLang version (/server_info), so whether its /generate takes cache_salt "+
			"(PR #30827, SGLang %s and later) is unknown", first), true
	}
	return p, fmt.Sprintf("the server reports SGLang %s, which is not known to have PR #30827 (first known in %s): "+
		"its /generate may ignore cache_salt", version, first), true
}

// saltNotes names, in the verdict of each request that sent cache_salt to
// /generate and was poisoned by reuse, why its salt kept it in no cache
// namespace of its own when the server's release may ignore the field, as
// bench's salt method does (session.saltCause); the run's verdict counts
// them, failing only where their reuse fails the run (not below
// --min-run-impact). The server's version is asked only when such a
// request exists.
func saltNotes(ctx context.Context, c *Client, rep *AuditReport) error {
	var salted []*AuditRequest
	for i := range rep.Requests {
		r := &rep.Requests[i]
		if r.CacheSalt && (r.Route == sim.RouteGenerate || r.Route == sim.RouteGenerateIDs) && r.Verdict.Level() == Poisoned {
			salted = append(salted, r)
		}
	}
	if len(salted) == 0 {
		return nil
	}
	version, err := c.SGLangVersion(ctx)
	if err != nil {
		return err
	}
	p, why, ok := generateSaltDoubt(version)
	if !ok {
		return nil
	}
	level := Suspect // it may be why
	if p == compat.No {
		level = Poisoned // it is why
	}
	for _, r := range salted {
		r.Verdict.add(level, "it sent cache_salt to keep its prompt cold, but "+why)
	}
	if rep.reuseLetThrough() {
		level = OK // it explains a reuse that moved no figure of the run
	}
	rep.Verdict.add(level, fmt.Sprintf("%s sent cache_salt to /generate and reused an earlier prompt: %s "+
		"(keep prompts apart with a nonce at their start, or flush)", plural(len(salted), "request"), why))
	return nil
}

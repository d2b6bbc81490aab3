package harness

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// WriteTable prints the report: the floors, the requests whose reuse
// mattered, the reuse that did not, the shared prefixes, the flushes, what
// the cache did to the run, the tool's error, and the verdict. Every
// request is in the JSON.
func (a *AuditReport) WriteTable(w io.Writer) error {
	var b strings.Builder
	if a.Upstream != "" {
		fmt.Fprintf(&b, "audit: %s and %s through the recording proxy to %s (times are the proxy's wall seconds)\n",
			plural(len(a.Requests), "request"), plural(len(a.Flushes), "flush"), a.Upstream)
	} else {
		fmt.Fprintf(&b, "audit: %s and %s on sglmock profile %s (x%g; times are simulated seconds)\n",
			plural(len(a.Requests), "request"), plural(len(a.Flushes), "flush"), a.Profile, a.Speedup)
	}
	if len(a.Floors) > 0 {
		var fs []string
		for _, f := range a.Floors {
			floor := plural(f.Floor, "token")
			if f.Floor < 0 {
				floor = "no cached tokens reported"
			}
			fs = append(fs, fmt.Sprintf("%s %s (%s)", f.Route, floor, plural(f.Requests, "request")))
		}
		fmt.Fprintf(&b, "what unrelated prompts share on each route: %s\n", strings.Join(fs, "; "))
	}
	fmt.Fprintf(&b, "a reuse poisons a request when it cuts its TTFT by %s %% or more (--min-impact); --allow-shared-prefix %s; impact from %s",
		trimFloat(a.MinImpact), a.AllowSharedPrefix, a.ImpactFrom)
	if a.ImpactDetail != "" {
		fmt.Fprintf(&b, " (%s)", a.ImpactDetail)
	}
	b.WriteString("\n\n")
	if len(a.Requests) == 0 {
		b.WriteString("no request reached the server\n")
	}
	t := &table{head: []string{"arrival_s", "rid", "route", "prompt_tok", "cached_tok", "ttft_s", "ttft_no_reuse_s", "impact", "pattern", "verdict"}}
	var causes [][]Cause // each row's, written under it
	for _, r := range a.Requests {
		if r.Verdict.Level() == OK {
			continue
		}
		ttft, without := "-", "-"
		if r.TTFT != nil {
			ttft, without = sig(*r.TTFT), sig(*r.TTFT+r.Saved)
		}
		pattern := string(r.Pattern)
		if pattern == "" {
			pattern = "-"
		}
		if r.WarmUp {
			pattern += " (warm-up)"
		}
		t.add(f3(r.Arrival), r.RID, r.Route, strconv.Itoa(r.PromptTokens), strconv.Itoa(r.CachedTokens), ttft, without,
			fmt.Sprintf("%.1f%%", r.Impact), pattern, r.Verdict.Level().String())
		causes = append(causes, r.Verdict.Causes)
	}
	if len(t.rows) > 0 {
		b.WriteString("requests that are not ok, each with its causes (every request is in --json):\n")
		var tb strings.Builder
		if err := t.write(&tb); err != nil {
			return err
		}
		lines := strings.SplitAfter(tb.String(), "\n")
		b.WriteString(lines[0])
		for i, line := range lines[1 : len(lines)-1] {
			b.WriteString(line)
			for _, c := range causes[i] {
				b.WriteString(wrapText("      ", "      ", c.Text, causeWidth))
			}
		}
	} else if len(a.Requests) > 0 {
		fmt.Fprintf(&b, "no request's reuse poisons it (every request is in --json)\n")
	}
	if c := a.Chance; c.Requests > 0 {
		span := strconv.Itoa(c.MinTokens)
		if c.MaxTokens != c.MinTokens {
			span += "-" + strconv.Itoa(c.MaxTokens)
		}
		tokens := "head tokens"
		if c.MaxTokens == 1 {
			tokens = "head token"
		}
		// Below the default bound the cut is within a benchmark's noise;
		// above it, only the user's --min-impact excuses it.
		effect := "no measurable effect"
		if c.MaxImpact >= DefaultMinImpact {
			effect = fmt.Sprintf("below --min-impact %s %%", trimFloat(a.MinImpact))
		}
		fmt.Fprintf(&b, "%s shared %s %s beyond the floor with earlier prompts: %s (each cut its TTFT by at most %.2f %%)\n",
			plural(c.Requests, "request"), span, tokens, effect, c.MaxImpact)
	}
	if line := a.sharedPrefixLine(); line != "" {
		b.WriteString(line + "\n")
	}
	if len(a.Flushes) > 0 {
		b.WriteString("\nflushes and their outcomes:\n")
		ft := &table{head: []string{"at_s", "answered_s", "timeout_s", "queued", "running", "outcome"}}
		for _, f := range a.Flushes {
			ft.add(f3(f.At), f3(f.Answered), f3(f.Timeout), strconv.Itoa(f.Queued), strconv.Itoa(f.Running), f.Outcome)
		}
		if err := ft.write(&b); err != nil {
			return err
		}
	}
	if a.CacheEffect != nil {
		fmt.Fprintf(&b, "\n%s\n", a.CacheEffect.Line())
	}
	if a.RunImpact != nil {
		fmt.Fprintf(&b, "%s\n", a.RunImpact.Line(a.MinRunImpact))
	}
	if a.Tool != nil {
		b.WriteString("\n")
		a.Tool.write(&b)
	}
	fmt.Fprintf(&b, "\nverdict: %s\n", a.Verdict)
	_, err := io.WriteString(w, b.String())
	return err
}

// sharedPrefixLine describes the groups of requests that share a prefix.
func (a *AuditReport) sharedPrefixLine() string {
	if len(a.SharedPrefixes) == 0 {
		return ""
	}
	same := true
	prompt, cached := 0, 0
	for _, g := range a.SharedPrefixes {
		first := a.SharedPrefixes[0]
		same = same && g.Requests == first.Requests && g.Workload == first.Workload
		prompt += g.PromptTokens
		cached += g.CachedTokens
	}
	var parts []string
	if same {
		g := a.SharedPrefixes[0]
		sizes := make([]int, len(a.SharedPrefixes))
		for i, g := range a.SharedPrefixes {
			sizes[i] = g.Tokens
		}
		parts = append(parts, fmt.Sprintf("%s of about %s, %s each", plural(len(a.SharedPrefixes), "shared prefix"),
			plural(sizes[0], "token"), plural(g.Requests, "request")))
		if len(sizes) > 1 && !nearlyEqual(sizes) {
			parts[0] = fmt.Sprintf("%s of %s tokens, %s each", plural(len(a.SharedPrefixes), "shared prefix"), joinInts(sizes), plural(g.Requests, "request"))
		}
	} else {
		for _, g := range a.SharedPrefixes {
			parts = append(parts, fmt.Sprintf("a prefix of about %s shared by %s", plural(g.Tokens, "token"), plural(g.Requests, "request")))
		}
	}
	line := strings.Join(parts, "; ") + fmt.Sprintf("; %.0f %% of their prompt tokens came from the cache", 100*float64(cached)/float64(max(prompt, 1)))
	large := slices.ContainsFunc(a.SharedPrefixes, func(g SharedPrefixGroup) bool { return g.Requests >= AutoGroup })
	switch {
	case a.AllowSharedPrefix.Auto && same && a.SharedPrefixes[0].Workload:
		line += " (the workload's own: --allow-shared-prefix auto)"
	case a.AllowSharedPrefix.Auto:
		line += fmt.Sprintf(" (--allow-shared-prefix auto takes a prefix %d or more requests share for the workload's own)", AutoGroup)
	case large:
		// The fix when the prefix is there by design, said once.
		line += fmt.Sprintf(" (a system prompt by design? --allow-shared-prefix auto takes a prefix %d or more requests share for the workload's own)", AutoGroup)
	}
	return line
}

func nearlyEqual(xs []int) bool {
	lo, hi := xs[0], xs[0]
	for _, x := range xs {
		lo, hi = min(lo, x), max(hi, x)
	}
	return float64(hi-lo) <= 0.05*float64(hi)
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}

// WriteJSON writes the report for CI.
func (a *AuditReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(a)
}

package calibrate

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
)

// WriteReport prints what the fit took of each row, the noise it judged
// the legs by, the fitted costs, every leg's residual and leave-one-out
// error, the stated accuracy, the predictions asked for, and what to
// measure next.
func (r *Result) WriteReport(w io.Writer) error {
	var b strings.Builder
	r.writeRows(&b)
	r.writeNoise(&b)
	r.writeCosts(&b)
	if err := r.writeLegs(&b); err != nil {
		return err
	}
	r.writeAccuracy(&b)
	r.writePredictions(&b)
	b.WriteString("measure next:")
	if len(r.Next) == 0 {
		fmt.Fprintf(&b, " nothing the rows leave uncertain beyond ±%s\n", pctPlain(Tolerance))
	} else {
		b.WriteString("\n")
		for _, n := range r.Next {
			fmt.Fprintf(&b, "  - %s\n", n)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// usedLegs counts the legs used and the legs the rows have.
func (r *Result) usedLegs() (used, all int) { return len(r.Legs), 2 * len(r.Rows) }

// writeRows says what the fit took of each row.
func (r *Result) writeRows(b *strings.Builder) {
	used, all := r.usedLegs()
	sizes := map[int]bool{}
	for _, l := range r.Legs {
		sizes[l.Prompt] = true
	}
	fmt.Fprintf(b, "rows: %d; legs used: %d of %d, at %d prompt sizes (%d..%d tokens)\n", len(r.Rows), used, all, len(sizes), r.MinPrompt, r.MaxPrompt)
	for i, u := range r.Rows {
		fmt.Fprintf(b, "  %s: ", u.label(i))
		if u.Dropped != "" {
			fmt.Fprintf(b, "not used: %s\n", u.Dropped)
			continue
		}
		var parts []string
		for _, l := range []struct {
			name string
			use  LegUse
		}{{"a", u.A}, {"b", u.B}} {
			if l.use.Used() {
				parts = append(parts, l.name+": "+l.use.What)
			} else {
				parts = append(parts, l.name+" not used: "+l.use.Why)
			}
		}
		if c := u.Informs; c != nil {
			if c.Coefficient == "" {
				parts = append(parts, "without it the other rows do not determine the formulas")
			} else {
				parts = append(parts, fmt.Sprintf("informs %s most (±%s, ±%s without it)", c.Coefficient, pctPlain(c.With), pctPlain(c.Without)))
			}
		}
		if u.Verdict == "SUSPECT" {
			cause, _, _ := strings.Cut(u.Cause, ":")
			cause, _, _ = strings.Cut(cause, ";")
			parts = append(parts, "SUSPECT in bench ("+cause+")")
		}
		b.WriteString(strings.Join(parts, "; ") + "\n")
	}
}

// label names a row: its line (or index), context and method.
func (u RowUse) label(i int) string {
	s := fmt.Sprintf("%s (ctx %d", u.where(i), u.CtxReq)
	if u.PromptTokens != u.CtxReq {
		s += fmt.Sprintf(", %d tokens", u.PromptTokens)
	}
	if u.Method != "" {
		s += ", " + u.Method
	}
	return s + ")"
}

// writeNoise says what each kind of leg was judged by.
func (r *Result) writeNoise(b *strings.Builder) {
	b.WriteString("noise (what each leg is weighed and judged by):\n")
	for _, k := range r.Noise {
		if k.Legs == 0 {
			continue
		}
		what := "legs of one token (prefill alone)"
		if k.Name == "decode" {
			what = "legs that decode"
		}
		if k.Assumed() {
			fmt.Fprintf(b, "  %s: no row measured their spread, so each is taken as known to ±%s (95 %%)", what, pctPlain(Tolerance))
			if k.Name == "prefill" {
				b.WriteString(" (bench's CSV has decode's spread only; its --json has every leg's runs)")
			}
			b.WriteString("\n")
			continue
		}
		fmt.Fprintf(b, "  %s: %d of %d measured by their own runs (%s): a run varies by %s (one standard deviation, pooled); "+
			"each leg's own spread is pooled with that, which counts for %s\n",
			what, k.Measured, k.Legs, degrees(k.DoF), pctPlain(k.SD), degrees(min(priorDoF, k.DoF)))
	}
	var notes []string
	rows := map[string][]string{}
	for i, u := range r.Rows {
		for _, l := range []LegUse{u.A, u.B} {
			if l.NoiseNote != "" {
				if rows[l.NoiseNote] == nil {
					notes = append(notes, l.NoiseNote)
				}
				rows[l.NoiseNote] = append(rows[l.NoiseNote], u.where(i))
			}
		}
	}
	for _, n := range notes {
		fmt.Fprintf(b, "  spread not used (%s): %s\n", n, strings.Join(rows[n], ", "))
	}
}

// writeCosts prints the fitted forms and how they fit.
func (r *Result) writeCosts(b *strings.Builder) {
	p := r.Profile
	coef := func(name string) string {
		i := slices.IndexFunc(r.Coefficients, func(c Coefficient) bool { return c.Name == name })
		c := r.Coefficients[i]
		switch {
		case c.Held:
			return fmt.Sprintf("%s 0 (held at 0)", name)
		case c.Half == 0:
			return fmt.Sprintf("%s %.4g", name, c.Value)
		}
		return fmt.Sprintf("%s %.4g ±%s", name, c.Value, pctPlain(c.Half))
	}
	switch r.PrefillForm {
	case Formula:
		if r.Coefficients != nil {
			fmt.Fprintf(b, "prefill: formula: %s per chunk, %s, %s (95 %%)\n", coef("overhead_s"), coef("per_token_s"), coef("attention_s"))
		} else {
			fmt.Fprintf(b, "prefill: formula: overhead_s %.4g per chunk, per_token_s %.4g, attention_s %.4g\n",
				p.Prefill.OverheadS, p.Prefill.PerTokenS, p.Prefill.AttentionS)
		}
	case Table:
		fmt.Fprintf(b, "prefill: table of %d points, overhead_s %.4g per chunk\n", len(p.Prefill.Table), p.Prefill.OverheadS)
	}
	switch r.DecodeForm {
	case Formula:
		if r.Coefficients != nil {
			fmt.Fprintf(b, "decode:  formula: %s per round (per_seq_s %.4g of it), %s (95 %%)\n",
				coef("step_overhead_s+per_seq_s"), p.Decode.PerSeqS, coef("per_ctx_token_s"))
		} else {
			fmt.Fprintf(b, "decode:  formula: step_overhead_s %.4g, per_seq_s %.4g, per_ctx_token_s %.4g\n",
				p.Decode.StepOverheadS, p.Decode.PerSeqS, p.Decode.PerCtxTokenS)
		}
	case Table:
		fmt.Fprintf(b, "decode:  ctx_table of %d points, step_overhead_s %.4g, per_seq_s %.4g\n", len(p.Decode.CtxTable), p.Decode.StepOverheadS, p.Decode.PerSeqS)
	}
	for _, t := range r.AlsoTried {
		var note string
		switch {
		case !t.Allowed:
			note = fmt.Sprintf("not allowed: %d parameters for %d distinct legs would pass through every row (--table allows it)", t.Parameters, r.Distinct)
		case t.Gain <= t.GainLimit:
			note = fmt.Sprintf("%.1f less than the formulas' for %d more parameters, which noise alone would take (its %g %% quantile is %.1f)",
				t.Gain, t.Parameters-5, 100*Confidence, t.GainLimit)
		default:
			note = fmt.Sprintf("%.1f less than the formulas' for %d more parameters, more than noise alone would take (%.1f)",
				t.Gain, t.Parameters-5, t.GainLimit)
		}
		fmt.Fprintf(b, "  tried prefill %s, decode %s: χ² %.1f over %s: %s\n", t.Prefill, t.Decode, t.ChiSquare, degrees(t.DoF), note)
	}
	fmt.Fprintf(b, "fit: %s\n", r.Judgement())
	if !r.Within() {
		var worst []string
		for _, l := range r.Outside(3) {
			worst = append(worst, fmt.Sprintf("%s leg %s %s (%.1f standard errors)", r.Rows[l.Row].where(l.Row), l.Leg, signedPct(l.Err()), math.Abs(l.Z())))
		}
		fmt.Fprintf(b, "  furthest outside their noise: %s\n", strings.Join(worst, ", "))
	}
}

// Z is the leg's residual in standard errors.
func (l LegFit) Z() float64 { return l.Err() / (l.Noise / z95) }

// Outside lists up to n legs whose residuals are more than the
// Confidence quantile of a normal residual, the furthest first.
func (r *Result) Outside(n int) []LegFit {
	limit := normalQuantile(1 - (1-Confidence)/2)
	var out []LegFit
	for _, l := range r.Legs {
		if math.Abs(l.Z()) > limit {
			out = append(out, l)
		}
	}
	slices.SortStableFunc(out, func(x, y LegFit) int { return cmp.Compare(math.Abs(y.Z()), math.Abs(x.Z())) })
	return out[:min(n, len(out))]
}

// Judgement says how the forms fit the legs against their noise.
func (r *Result) Judgement() string {
	legs := len(r.Legs)
	switch {
	case r.Exact():
		return fmt.Sprintf("%d parameters for %d distinct legs pass through every row by construction, so the residuals check nothing (only leave-one-out says how it predicts)",
			r.Parameters, r.Distinct)
	case r.DoF <= 0:
		return fmt.Sprintf("%d legs for %d parameters leave nothing to judge the forms by", legs, r.Parameters)
	}
	s := fmt.Sprintf("χ² %.1f over %s (%d legs, %d parameters): ", r.ChiSquare, degrees(r.DoF), legs, r.Parameters)
	if r.Within() {
		return s + fmt.Sprintf("within the rows' noise (its %g %% quantile is %.1f)", 100*Confidence, r.Limit)
	}
	s += fmt.Sprintf("MORE than the rows' noise explains (its %g %% quantile is %.1f)", 100*Confidence, r.Limit)
	if r.PrefillForm == Formula && r.DecodeForm == Formula {
		return s + "; no table the rows allow takes more from it than its extra parameters would take from noise alone, so the formulas stay"
	}
	return s + "; of the forms the rows allow, this one is the closest to it"
}

// writeLegs prints every leg: measured, fitted, residual, noise and
// leave-one-out error.
func (r *Result) writeLegs(b *strings.Builder) error {
	methods := slices.ContainsFunc(r.Rows, func(u RowUse) bool { return u.Method != "" })
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "row\tctx_req\tprompt_tok\t"
	if len(r.Rows) > 0 && r.Rows[0].Line > 0 {
		head = "line\tctx_req\tprompt_tok\t"
	}
	if methods {
		head += "method\t"
	}
	fmt.Fprintln(tw, head+"leg\tcached\tnew_tok\truns\tseconds\tfit\terr\tnoise\tloo\t")
	for _, l := range r.Legs {
		u := r.Rows[l.Row]
		line := fmt.Sprintf("%s\t%d\t%d\t", strings.TrimPrefix(strings.TrimPrefix(u.where(l.Row), "line "), "row "), u.CtxReq, u.PromptTokens)
		if methods {
			line += u.Method + "\t"
		}
		noise := "±" + strings.TrimSuffix(pctPlain(l.Noise), " %") + "%"
		if l.NoiseAssumed {
			noise += "*"
		}
		loo := "-"
		if l.LOO != nil {
			loo = signedPct(*l.LOO)
		}
		fmt.Fprintf(tw, "%s%s\t%d\t%d\t%d\t%.4f\t%.4f\t%s\t%s\t%s\t\n", line, l.Leg, l.Cached, l.Completion, l.Runs, l.Seconds, l.Fit, signedPct(l.Err()), noise, loo)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if slices.ContainsFunc(r.Legs, func(l LegFit) bool { return l.NoiseAssumed }) {
		fmt.Fprintf(b, "  noise: the 95 %% half-width of the leg's time; * assumed (no row measured it)\n")
	}
	b.WriteString("  loo: the leg predicted by a fit without its prompt size (leave-one-out)\n")
	return nil
}

// signedPct renders a relative error as "+1.23%".
func signedPct(x float64) string {
	p := math.Round(10000*x) / 100
	if p == 0 {
		p = 0 // no "-0.00%"
	}
	return fmt.Sprintf("%+.2f%%", p)
}

// AccuracyText states the profile's accuracy: the largest leave-one-out
// error, where it is, and the largest inside the measured range.
func (r *Result) AccuracyText() string {
	a := r.Accuracy
	if !a.Known() {
		if a.Need > 0 {
			return fmt.Sprintf("not known: leave-one-out needs rows at %d prompt sizes or more, and these have %d", minSizes+1, minSizes+1-a.Need)
		}
		return "not known: " + a.Why
	}
	l := r.Legs[a.MaxLeg]
	u := r.Rows[l.Row]
	s := fmt.Sprintf("±%s: the largest leave-one-out error over %d prompt sizes, leg %s of %s", pctPlain(a.Max), a.Sizes, l.Leg, u.label(l.Row))
	switch l.Prompt {
	case r.MaxPrompt:
		s += fmt.Sprintf(", extrapolated from the next largest prompt (%d)", r.below(l.Prompt))
	case r.MinPrompt:
		s += ", extrapolated below the next smallest prompt"
	}
	return s + fmt.Sprintf("; ±%s between %d and %d tokens", pctPlain(a.Inside), r.MinPrompt, r.MaxPrompt)
}

// below is the largest prompt size measured below n.
func (r *Result) below(n int) int {
	best := 0
	for _, l := range r.Legs {
		if l.Prompt < n && l.Prompt > best {
			best = l.Prompt
		}
	}
	return best
}

func (r *Result) writeAccuracy(b *strings.Builder) {
	fmt.Fprintf(b, "accuracy: %s\n", r.AccuracyText())
}

// writePredictions prints the predictions asked for.
func (r *Result) writePredictions(b *strings.Builder) {
	if len(r.Predictions) == 0 {
		return
	}
	fmt.Fprintf(b, "predicted (a = %d, b = %d):\n", r.Predictions[0].A, r.Predictions[0].B)
	for _, pr := range r.Predictions {
		fmt.Fprintf(b, "  ctx %d: t_a %.4g s", pr.Prompt, pr.TA)
		if pr.Term != "" {
			fmt.Fprintf(b, " ±%s", pctPlain(pr.HalfA))
		}
		fmt.Fprintf(b, ", t_b %.4g s", pr.TB)
		if pr.Term != "" {
			fmt.Fprintf(b, " ±%s (95 %%, mostly from %s)", pctPlain(pr.HalfB), pr.Term)
		}
		if pr.Beyond > 0 {
			fmt.Fprintf(b, ": an EXTRAPOLATION, %.1fx past the largest prompt measured (%d)", pr.Beyond, r.MaxPrompt)
		}
		b.WriteString("\n")
	}
}

// Comment is the fitted profile's YAML comment: where it comes from, how
// its forms fit, its stated accuracy and its measured range.
func (r *Result) Comment(source, base string) string {
	used, _ := r.usedLegs()
	lines := []string{
		fmt.Sprintf("Fitted by sglmock calibrate from %s: %d rows, %d legs used, base profile %s.", source, len(r.Rows)-r.dropped(), used, base),
		fmt.Sprintf("Prefill %s, decode %s: %s.", r.PrefillForm, r.DecodeForm, r.Judgement()),
		"Accuracy: " + r.AccuracyText() + ".",
		fmt.Sprintf("Measured prompts: %d..%d tokens; a longer prompt is an extrapolation (calibration.max_prompt_tokens).", r.MinPrompt, r.MaxPrompt),
	}
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(wrapComment(l))
	}
	return b.String()
}

// wrapComment renders text as YAML comment lines of about 100 columns.
func wrapComment(text string) string {
	var b strings.Builder
	line := "#"
	for _, word := range strings.Fields(text) {
		if len(line)+1+len(word) > 100 && line != "#" {
			b.WriteString(line + "\n")
			line = "#  "
		}
		line += " " + word
	}
	return b.String() + line + "\n"
}

// degrees renders a count of degrees of freedom.
func degrees(n int) string {
	if n == 1 || n == -1 {
		return fmt.Sprintf("%d degree of freedom", n)
	}
	return fmt.Sprintf("%d degrees of freedom", n)
}

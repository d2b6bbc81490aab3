package calibrate

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteReport prints the fitted coefficients and every row's residuals.
func (r *Result) WriteReport(w io.Writer) error {
	p := r.Profile
	switch r.PrefillForm {
	case Formula:
		fmt.Fprintf(w, "prefill: formula: overhead_s %.6g per chunk, per_token_s %.6g, attention_s %.6g\n",
			p.Prefill.OverheadS, p.Prefill.PerTokenS, p.Prefill.AttentionS)
	case Table:
		fmt.Fprintf(w, "prefill: table of %d points (the formula left more than %g %%), overhead_s %.6g per chunk\n",
			len(p.Prefill.Table), Tolerance*100, p.Prefill.OverheadS)
	}
	switch r.DecodeForm {
	case Formula:
		fmt.Fprintf(w, "decode:  formula: step_overhead_s %.6g, per_seq_s %.6g, per_ctx_token_s %.6g\n",
			p.Decode.StepOverheadS, p.Decode.PerSeqS, p.Decode.PerCtxTokenS)
	case Table:
		fmt.Fprintf(w, "decode:  ctx_table of %d points (the formula left more than %g %%), step_overhead_s %.6g, per_seq_s %.6g\n",
			len(p.Decode.CtxTable), Tolerance*100, p.Decode.StepOverheadS, p.Decode.PerSeqS)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "ctx_req\tprompt_tok\ta\tb\tb_cached\tt_a\tt_a_fit\terr_a\tt_b\tt_b_fit\terr_b\t")
	for _, row := range r.Rows {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%v\t%.4f\t%.4f\t%+.2f%%\t%.4f\t%.4f\t%+.2f%%\t\n",
			row.CtxReq, row.PromptTokens, row.A, row.B, row.BCached,
			row.TA, row.TAFit, 100*row.ErrA(), row.TB, row.TBFit, 100*row.ErrB())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.Exact() {
		_, err := fmt.Fprintf(w, "largest residual %.2f %%, which checks nothing: %s", 100*r.MaxError, r.ExactNote())
		return err
	}
	verdict := "within"
	if r.MaxError > Tolerance {
		verdict = "ABOVE"
	}
	_, err := fmt.Fprintf(w, "largest residual %.2f %% (%s the %g %% tolerance)\n", 100*r.MaxError, verdict, Tolerance*100)
	return err
}

// ExactNote says why an exact fit's residual is no check, and what would
// make one.
func (r *Result) ExactNote() string {
	return fmt.Sprintf("%d parameters for %d measured legs pass through every row by construction "+
		"(rows at more prompt sizes would test the fit)\n", r.Parameters, r.Legs)
}

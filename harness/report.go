package harness

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// methodTitles explain each variant in the table's heading.
var methodTitles = map[Method]string{
	Naive:       "the same prompt twice, no flush (the original benchmark's first run)",
	FlushMethod: "POST /flush_cache before each leg, same prompt",
	NonceMethod: "a fresh nonce in each leg's prompt, no flush",
	SaltMethod:  "the same prompt with a fresh cache_salt on each leg, no flush",
	FlushNonce:  "flush before each leg and a fresh nonce at the start of each prompt (the original benchmark's fix)",
}

// methodTitlesBetweenLegs explain the flush variants that flush only
// before leg b (TwoPoint.FlushOnlyBetweenLegs).
var methodTitlesBetweenLegs = map[Method]string{
	FlushMethod: "POST /flush_cache between the legs only (none before leg a), same prompt",
	FlushNonce:  "POST /flush_cache between the legs only (none before leg a) and a fresh nonce at the start of each prompt",
}

// table is an aligned text table: right-aligned columns but the last,
// which is left-aligned and free in width unless alignLast.
type table struct {
	head      []string
	rows      [][]string
	alignLast bool
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) write(w io.Writer) error {
	widths := make([]int, len(t.head))
	for _, r := range append([][]string{t.head}, t.rows...) {
		for i, c := range r {
			widths[i] = max(widths[i], len(c))
		}
	}
	var sb strings.Builder
	for _, r := range append([][]string{t.head}, t.rows...) {
		for i, c := range r {
			if i == len(r)-1 && !t.alignLast {
				sb.WriteString(" " + c)
				continue
			}
			fmt.Fprintf(&sb, " %*s", widths[i], c)
		}
		sb.WriteString("\n")
	}
	_, err := io.WriteString(w, sb.String())
	return err
}

func f2(x float64) string { return strconv.FormatFloat(x, 'f', 2, 64) }
func f3(x float64) string { return strconv.FormatFloat(x, 'f', 3, 64) }

func fptr(x *float64, prec int) string {
	if x == nil {
		return "-"
	}
	return strconv.FormatFloat(*x, 'f', prec, 64)
}

func iptr(x *int) string {
	if x == nil {
		return "-"
	}
	return strconv.Itoa(*x)
}

// pct renders a relative error as a signed percentage.
func pct(x float64) string {
	p := math.Round(10000*x) / 100
	if p == 0 {
		p = 0 // no "-0.00%"
	}
	return fmt.Sprintf("%+.2f%%", p)
}

func pctPtr(x *float64) string {
	if x == nil {
		return "-"
	}
	return pct(*x)
}

func speedupText(s float64) string { return "x" + strconv.FormatFloat(s, 'g', 4, 64) }

// WriteJSON writes the whole report, every run and leg included.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// csvCalibration are the columns `sglmock calibrate` reads, first.
var csvCalibration = []string{"ctx_req", "prompt_tok", "t_a", "t_b", "a", "b", "b_cached"}

// WriteCSV writes one line per row. The two-point CSV starts with the
// calibration columns ctx_req,prompt_tok,t_a,t_b,a,b,b_cached: b_cached is
// true when leg b reused more than the shared floor (its prompt came from
// the cache); a_cached says the same of leg a (empty when the server does
// not say), and cached_a and cached_b give the counts.
func (r *Report) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	g := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	gp := func(x *float64) string {
		if x == nil {
			return ""
		}
		return g(*x)
	}
	ip := func(x *int) string {
		if x == nil {
			return ""
		}
		return strconv.Itoa(*x)
	}
	truth := r.Server.Mock != ""
	if r.Method == "stream" {
		head := []string{"ctx_req", "prompt_tok", "ttft_s", "prefill_tok_s", "decode_tok_s", "s_per_out_tok", "events", "tokens_per_event", "event_itl_s", "event_itl_err", "cached", "speedup"}
		if truth {
			head = append(head, "ttft_true_s", "decode_true_tok_s", "ttft_err", "decode_err", "ttft_bias", "decode_bias")
		}
		cw.Write(append(append(head, figureColumns...), "verdict", "cause"))
		for _, row := range r.Stream {
			rec := []string{strconv.Itoa(row.CtxReq), strconv.Itoa(row.PromptTokens), g(row.TTFT), g(row.PrefillTPS), g(row.DecodeTPS),
				g(row.SPerOutTok), strconv.Itoa(row.Events), g(row.TokensPerEvent), g(row.EventITL), g(row.EventITLErr), ip(row.Cached), g(row.Speedup)}
			if truth {
				tr := row.Truth
				rec = append(rec, g(tr.TTFT), gp(tr.Decode), g(tr.TTFTErr), gp(tr.DecodeErr), g(tr.TTFTBias), gp(tr.DecodeBias))
			}
			rec = append(rec, row.FigureVerdicts.csv()...)
			cw.Write(append(rec, row.Verdict.Level().String(), row.Verdict.texts()))
		}
		cw.Flush()
		return cw.Error()
	}
	head := append(append([]string{}, csvCalibration...), "cached_a", "cached_b", "method", "ttft_s", "prefill_tok_s", "decode_tok_s", "s_per_out_tok", "runs", "spread", "speedup")
	if truth {
		head = append(head, "ttft_true_s", "decode_true_tok_s", "ttft_cold_s", "decode_steady_tok_s", "ttft_err", "decode_err", "ttft_bias", "decode_bias")
	}
	cw.Write(append(append(append(head, "a_cached"), figureColumns...), "verdict", "cause"))
	floor := max(r.Server.SharedFloor, 0)
	for _, row := range r.Rows {
		bCached := row.CachedB != nil && *row.CachedB > floor
		rec := []string{strconv.Itoa(row.CtxReq), strconv.Itoa(row.PromptTokens), g(row.TA), g(row.TB), strconv.Itoa(row.A), strconv.Itoa(row.B),
			strconv.FormatBool(bCached), ip(row.CachedA), ip(row.CachedB), string(row.Method), g(row.TTFT), g(row.PrefillTPS), gp(row.DecodeTPS), gp(row.SPerOutTok),
			strconv.Itoa(len(row.Runs)), g(row.Spread), g(row.Speedup)}
		if truth {
			tr := row.Truth
			rec = append(rec, g(tr.TTFT), gp(tr.Decode), g(tr.ColdTTFT), gp(tr.SteadyDecode), g(tr.TTFTErr), gp(tr.DecodeErr), g(tr.TTFTBias), gp(tr.DecodeBias))
		}
		rec = append(append(rec, row.aCached(floor)), row.FigureVerdicts.csv()...)
		cw.Write(append(rec, row.Verdict.Level().String(), row.Verdict.texts()))
	}
	cw.Flush()
	return cw.Error()
}

// figureColumns are each figure's verdict and error bound (relative; empty
// where the figure is POISONED).
var figureColumns = []string{"ttft_verdict", "ttft_bound", "prefill_verdict", "prefill_bound", "decode_verdict", "decode_bound"}

func (fv FigureVerdicts) csv() []string {
	var out []string
	for _, f := range rowFigures {
		v := fv.Of(f)
		bound := ""
		if v.Bound != nil {
			bound = strconv.FormatFloat(*v.Bound, 'g', -1, 64)
		}
		out = append(out, v.Level.String(), bound)
	}
	return out
}

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
	Naive:       "the same prompt twice, no flush (the seed's first run)",
	FlushMethod: "POST /flush_cache before each leg, same prompt",
	NonceMethod: "a fresh nonce in each leg's prompt, no flush",
	FlushNonce:  "flush before each leg and a fresh nonce at the start of each prompt (the seed's fix)",
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

// WriteTable writes the report as aligned tables on w, one per method: the
// seed's columns, then cached_a, cached_b, the speedup and the error
// columns when the server is sglmock, and the verdict last (it is the one
// column of free width).
func (r *Report) WriteTable(w io.Writer) error {
	fmt.Fprintln(w, r.serverLine())
	if r.Method == "stream" {
		return r.writeStreamTable(w)
	}
	truth := r.Server.Mock != ""
	var methods []Method
	for _, row := range r.Rows {
		if len(methods) == 0 || methods[len(methods)-1] != row.Method {
			methods = append(methods, row.Method)
		}
	}
	for _, m := range methods {
		fmt.Fprintf(w, "\nmethod %s: %s\n", m, r.methodTitle(m))
		t := &table{head: []string{"ctx_req", "prompt_tok", "TTFT_s", "prefill_tok/s", "decode_tok/s", "s/out_tok", "t_a", "t_b", "cached_a", "cached_b"}}
		repeat := false
		for _, row := range r.Rows {
			repeat = repeat || (row.Method == m && len(row.Runs) > 1)
		}
		if repeat {
			t.head = append(t.head, "runs", "spread")
		}
		if truth {
			t.head = append(t.head, "speedup", "ttft_err", "decode_err", "ttft_bias", "decode_bias")
		}
		t.head = append(t.head, "verdict")
		for _, row := range r.Rows {
			if row.Method != m {
				continue
			}
			cells := []string{strconv.Itoa(row.CtxReq), strconv.Itoa(row.PromptTokens), f3(row.TTFT),
				strconv.FormatFloat(row.PrefillTPS, 'f', 0, 64), fptr(row.DecodeTPS, 1), fptr(row.SPerOutTok, 4),
				f3(row.TA), f3(row.TB), iptr(row.CachedA), iptr(row.CachedB)}
			if repeat {
				cells = append(cells, strconv.Itoa(len(row.Runs)), pct(row.Spread))
			}
			if truth {
				tr := row.Truth
				cells = append(cells, speedupText(row.Speedup), pct(tr.TTFTErr), pctPtr(tr.DecodeErr), pct(tr.TTFTBias), pctPtr(tr.DecodeBias))
			}
			t.add(append(cells, row.Verdict.String())...)
		}
		if err := t.write(w); err != nil {
			return err
		}
	}
	if truth {
		fmt.Fprintln(w, "\n*_err: against the modelled times of the very requests sent (the client's measurement error);")
		fmt.Fprintln(w, "*_bias: against the cold TTFT and the steady-state decode rate at that context (the method's own error).")
	}
	return nil
}

// methodTitle explains a variant in its table's heading; a flush method
// that sent no flush before leg a says it flushed only between the legs.
func (r *Report) methodTitle(m Method) string {
	title := methodTitles[m]
	for _, row := range r.Rows {
		if row.Method == m && m.flushes() && len(row.Runs) > 0 && row.Runs[0].A.Flush == nil {
			title = methodTitlesBetweenLegs[m]
		}
	}
	return r.noncePositionTitle(m, title)
}

func (r *Report) serverLine() string {
	s := r.Server
	floor := fmt.Sprintf("every prompt shares %d cached tokens (measured with two unrelated nonces)", s.SharedFloor)
	if s.SharedFloor < 0 {
		floor = "the server reports no cached tokens"
	}
	if s.Mock != "" {
		return fmt.Sprintf("server: sglmock, profile %s, backend %s; times in simulated seconds (wall x speedup); %s", s.Mock, s.Backend, floor)
	}
	return fmt.Sprintf("server: backend %s, no /sim/ (no truth columns); times in wall seconds; %s", s.Backend, floor)
}

func (r *Report) writeStreamTable(w io.Writer) error {
	truth := r.Server.Mock != ""
	fmt.Fprintln(w, "\nmethod stream: one streaming request per context, decode rate token-weighted from meta_info.completion_tokens")
	t := &table{head: []string{"ctx_req", "prompt_tok", "TTFT_s", "prefill_tok/s", "decode_tok/s", "s/out_tok", "events", "tok/event", "event_ITL_s", "event_ITL_err", "cached"}}
	if truth {
		t.head = append(t.head, "speedup", "ttft_err", "decode_err", "ttft_bias", "decode_bias")
	}
	t.head = append(t.head, "verdict")
	for _, row := range r.Stream {
		cells := []string{strconv.Itoa(row.CtxReq), strconv.Itoa(row.PromptTokens), f3(row.TTFT),
			strconv.FormatFloat(row.PrefillTPS, 'f', 0, 64), strconv.FormatFloat(row.DecodeTPS, 'f', 1, 64),
			strconv.FormatFloat(row.SPerOutTok, 'f', 4, 64), strconv.Itoa(row.Events), f2(row.TokensPerEvent),
			strconv.FormatFloat(row.EventITL, 'f', 4, 64), pct(row.EventITLErr), iptr(row.Cached)}
		if truth {
			tr := row.Truth
			cells = append(cells, speedupText(row.Speedup), pct(tr.TTFTErr), pctPtr(tr.DecodeErr), pct(tr.TTFTBias), pctPtr(tr.DecodeBias))
		}
		t.add(append(cells, row.Verdict.String())...)
	}
	if err := t.write(w); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nevent_ITL: the mean gap between events, what a script that counts one token per event reports;")
	fmt.Fprintln(w, "event_ITL_err: how far that is from the true time per token (s/out_tok).")
	return nil
}

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
		cw.Write(append(head, "verdict", "cause"))
		for _, row := range r.Stream {
			rec := []string{strconv.Itoa(row.CtxReq), strconv.Itoa(row.PromptTokens), g(row.TTFT), g(row.PrefillTPS), g(row.DecodeTPS),
				g(row.SPerOutTok), strconv.Itoa(row.Events), g(row.TokensPerEvent), g(row.EventITL), g(row.EventITLErr), ip(row.Cached), g(row.Speedup)}
			if truth {
				tr := row.Truth
				rec = append(rec, g(tr.TTFT), gp(tr.Decode), g(tr.TTFTErr), gp(tr.DecodeErr), g(tr.TTFTBias), gp(tr.DecodeBias))
			}
			cw.Write(append(rec, row.Verdict.Level().String(), row.Verdict.texts()))
		}
		cw.Flush()
		return cw.Error()
	}
	head := append(append([]string{}, csvCalibration...), "cached_a", "cached_b", "method", "ttft_s", "prefill_tok_s", "decode_tok_s", "s_per_out_tok", "runs", "spread", "speedup")
	if truth {
		head = append(head, "ttft_true_s", "decode_true_tok_s", "ttft_cold_s", "decode_steady_tok_s", "ttft_err", "decode_err", "ttft_bias", "decode_bias")
	}
	cw.Write(append(head, "a_cached", "verdict", "cause"))
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
		cw.Write(append(rec, row.aCached(floor), row.Verdict.Level().String(), row.Verdict.texts()))
	}
	cw.Flush()
	return cw.Error()
}

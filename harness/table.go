package harness

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// TableWriter writes a report's tables while the report grows: Write
// prints the rows that arrived since the last call, so a sweep that takes
// minutes shows each context as it finishes. A method's table starts with
// its first row and its notes follow its last: the verdict column gives a
// level and note numbers ("POISONED [1,2]"), and each cause is written once,
// under the table, however many legs and rows it concerns.
//
// The compact table has the figures a reader compares; the wide one has
// every column, as the CSV does. Column widths are fixed before the first
// row, since the rows arrive one at a time: a wider cell pushes its own row
// to the right, never the table.
type TableWriter struct {
	w    io.Writer
	wide bool
	// speedupColumn adds a speedup column to the compact table: the
	// report's rows ran at different speedups (the demo's do).
	speedupColumn bool

	// rowsPerTable, when known, ends a table with its last row.
	rowsPerTable int

	started      bool
	truth        bool
	rows, stream int // rows of each kind written so far
	sect         *section
	lastMethod   string
	err          error
}

// NewTableWriter writes compact tables on w, or wide ones with every
// column.
func NewTableWriter(w io.Writer, wide bool) *TableWriter {
	return &TableWriter{w: w, wide: wide}
}

// SetRowsPerTable says how many rows each method's table will have (the
// sweep's contexts), so that a table's notes follow its last row at once
// rather than wait for the next method's first.
func (tw *TableWriter) SetRowsPerTable(n int) { tw.rowsPerTable = n }

// WriteTable writes the report as compact tables, one per method, each
// followed by its notes.
func (r *Report) WriteTable(w io.Writer) error { return r.writeTable(w, false) }

// WriteWideTable writes the report with every column.
func (r *Report) WriteWideTable(w io.Writer) error { return r.writeTable(w, true) }

func (r *Report) writeTable(w io.Writer, wide bool) error {
	tw := NewTableWriter(w, wide)
	for _, row := range r.Rows {
		tw.speedupColumn = tw.speedupColumn || row.Speedup != r.Server.Speedup
	}
	if err := tw.Write(r); err != nil {
		return err
	}
	return tw.Close()
}

// section is one method's table: its columns, its rows so far and its
// notes.
type section struct {
	method string
	heads  []string
	widths []int
	rows   int
	notes  notes
}

// cell is one column's heading, width and value for one row.
type cell struct {
	head  string
	width int
	text  string
}

// Write prints the report's rows that arrived since the last call: the
// server line before the first, a method's heading before its first row,
// and the notes of a table when the next method's table starts.
func (tw *TableWriter) Write(r *Report) error {
	if !tw.started {
		tw.started, tw.truth = true, r.Server.Mock != ""
		tw.printf("%s\n", r.serverLine(tw.speedupColumn))
	}
	for ; tw.rows < len(r.Rows); tw.rows++ {
		row := r.Rows[tw.rows]
		if tw.sect == nil || tw.sect.method != string(row.Method) {
			tw.endSection()
			tw.printf("\nmethod %s: %s; a=%d, b=%d\n", row.Method, methodTitle(row), row.A, row.B)
			tw.sect = &section{method: string(row.Method)}
			tw.lastMethod = tw.sect.method
		}
		tw.writeRow(tw.twoPointCells(row), row.Verdict, row.CtxReq)
	}
	for ; tw.stream < len(r.Stream); tw.stream++ {
		row := r.Stream[tw.stream]
		if tw.sect == nil {
			tw.printf("\nmethod stream: one streaming request per context, decode rate token-weighted from the completion tokens the events report; max_new_tokens %d\n", row.Leg.MaxNewTokens)
			tw.sect = &section{method: "stream"}
			tw.lastMethod = tw.sect.method
		}
		tw.writeRow(tw.streamCells(row), row.Verdict, row.CtxReq)
	}
	return tw.err
}

// Close writes the last table's notes and the legend of the columns.
func (tw *TableWriter) Close() error {
	if !tw.started {
		return tw.err
	}
	method := tw.lastMethod
	tw.endSection()
	if method == "stream" {
		tw.printf("\nevent_ITL: the mean gap between events, what a script that counts one token per event reports;\n")
		tw.printf("event_ITL_err: how far that is from the true time per token (s/out_tok).\n")
	}
	if tw.truth {
		if method != "stream" {
			tw.printf("\n")
		}
		tw.printf("*_err: against the modelled times of the very requests sent (the client's measurement error);\n")
		if method != "stream" || tw.wide { // stream's compact table has no bias column
			tw.printf("*_bias: against the cold TTFT and the steady-state decode rate at that context (the method's own error).\n")
		}
	}
	return tw.err
}

func (tw *TableWriter) printf(format string, args ...any) {
	if tw.err == nil {
		_, tw.err = fmt.Fprintf(tw.w, format, args...)
	}
}

// writeRow writes the heading before a table's first row, then the row
// with its verdict as a level and note numbers.
func (tw *TableWriter) writeRow(cells []cell, v Verdict, ctx int) {
	s := tw.sect
	if s.heads == nil {
		for _, c := range cells {
			s.heads = append(s.heads, c.head)
			s.widths = append(s.widths, max(c.width, len(c.head)))
		}
		tw.printf("%s verdict\n", s.line(s.heads))
	}
	texts := make([]string, len(cells))
	for i, c := range cells {
		texts[i] = c.text
	}
	verdict := verdictCell(v)
	if refs := s.notes.refs(v, ctx, tw.wide); refs != "" {
		verdict += " " + refs
	}
	tw.printf("%s %s\n", s.line(texts), verdict)
	if s.rows++; s.rows == tw.rowsPerTable {
		tw.endSection()
	}
}

// verdictCell is a row's verdict in the table: its level, the worst of
// its figures', and in brackets the figures whose own verdict is better,
// "POISONED (TTFT ok)", TTFT standing for the prefill rate too where the
// two agree.
func verdictCell(v Verdict) string {
	worst := v.Level()
	ttft, prefill, decode := v.LevelOf(FigureTTFT), v.LevelOf(FigurePrefill), v.LevelOf(FigureDecode)
	var better []string
	switch {
	case ttft == prefill && ttft != worst:
		better = append(better, "TTFT "+ttft.String())
	case ttft != prefill:
		better = append(better, "TTFT "+ttft.String(), "prefill "+prefill.String())
	}
	if decode != worst {
		better = append(better, "decode "+decode.String())
	}
	if len(better) == 0 {
		return worst.String()
	}
	return worst.String() + " (" + strings.Join(better, ", ") + ")"
}

func (s *section) line(cells []string) string {
	var sb strings.Builder
	for i, c := range cells {
		fmt.Fprintf(&sb, " %*s", s.widths[i], c)
	}
	return sb.String()
}

// endSection writes the notes of the table that ends.
func (tw *TableWriter) endSection() {
	if tw.sect == nil {
		return
	}
	if len(tw.sect.notes.list) > 0 {
		tw.printf("\n")
		for i, n := range tw.sect.notes.list {
			tw.printf("%s", wrapNote(fmt.Sprintf("[%d] ", i+1), n.text(tw.wide), noteWidth))
		}
	}
	tw.sect = nil
}

// The columns. The compact table keeps the original benchmark's figures
// (TTFT_s is t_a), t_b that decode comes from, the cache reuse and, against sglmock, the
// errors; the wide one adds every other column of the CSV.

func (tw *TableWriter) twoPointCells(row Row) []cell {
	cells := []cell{
		{"ctx_req", 7, strconv.Itoa(row.CtxReq)},
		{"prompt_tok", 10, strconv.Itoa(row.PromptTokens)},
		{"TTFT_s", 7, f3(row.TTFT)},
		{"prefill_tok/s", 13, strconv.FormatFloat(row.PrefillTPS, 'f', 0, 64)},
		{"decode_tok/s", 12, fptr(row.DecodeTPS, 1)},
	}
	if tw.wide {
		cells = append(cells, cell{"s/out_tok", 9, fptr(row.SPerOutTok, 4)}, cell{"t_a", 7, f3(row.TA)})
	}
	cells = append(cells, cell{"t_b", 7, f3(row.TB)})
	if tw.wide {
		cells = append(cells, cell{"cached_a", 8, iptr(row.CachedA)}, cell{"cached_b", 8, iptr(row.CachedB)})
	} else {
		cells = append(cells, cell{"cached_a/b", 11, iptr(row.CachedA) + "/" + iptr(row.CachedB)})
	}
	if len(row.Runs) > 1 {
		cells = append(cells, cell{"runs", 4, strconv.Itoa(len(row.Runs))}, cell{"spread", 8, strconv.FormatFloat(100*row.Spread, 'f', 2, 64) + "%"})
	}
	if tw.wide || tw.speedupColumn {
		cells = append(cells, cell{"speedup", 7, speedupText(row.Speedup)})
	}
	if tw.truth && row.Truth != nil {
		cells = append(cells, truthCells(row.Truth, tw.wide, true)...)
	}
	return cells
}

// truthCells are the truth columns: the errors, and the biases when
// bias (the two-point method's own error is its main trap), or wide, which
// also has the true figures they come from.
func truthCells(tr *TruthFigures, wide, bias bool) []cell {
	var cells []cell
	if wide {
		cells = append(cells, cell{"TTFT_true", 9, f3(tr.TTFT)}, cell{"decode_true", 11, fptr(tr.Decode, 1)},
			cell{"TTFT_cold", 9, f3(tr.ColdTTFT)}, cell{"decode_steady", 13, fptr(tr.SteadyDecode, 1)})
	}
	cells = append(cells, cell{"ttft_err", 8, pct(tr.TTFTErr)}, cell{"decode_err", 10, pctPtr(tr.DecodeErr)})
	if wide || bias {
		cells = append(cells, cell{"ttft_bias", 9, pct(tr.TTFTBias)}, cell{"decode_bias", 11, pctPtr(tr.DecodeBias)})
	}
	return cells
}

func (tw *TableWriter) streamCells(row StreamRow) []cell {
	cells := []cell{
		{"ctx_req", 7, strconv.Itoa(row.CtxReq)},
		{"prompt_tok", 10, strconv.Itoa(row.PromptTokens)},
		{"TTFT_s", 7, f3(row.TTFT)},
		{"prefill_tok/s", 13, strconv.FormatFloat(row.PrefillTPS, 'f', 0, 64)},
		{"decode_tok/s", 12, strconv.FormatFloat(row.DecodeTPS, 'f', 1, 64)},
		{"s/out_tok", 9, strconv.FormatFloat(row.SPerOutTok, 'f', 4, 64)},
		{"event_ITL_s", 11, strconv.FormatFloat(row.EventITL, 'f', 4, 64)},
		{"event_ITL_err", 13, pct(row.EventITLErr)},
	}
	if tw.wide {
		cells = append(cells, cell{"events", 6, strconv.Itoa(row.Events)}, cell{"tok/event", 9, f2(row.TokensPerEvent)})
	}
	cells = append(cells, cell{"cached", 6, iptr(row.Cached)})
	if tw.wide || tw.speedupColumn {
		cells = append(cells, cell{"speedup", 7, speedupText(row.Speedup)})
	}
	if tw.truth && row.Truth != nil {
		cells = append(cells, truthCells(row.Truth, tw.wide, false)...)
	}
	return cells
}

// methodTitle explains a variant in its table's heading; a flush method
// that sent no flush before leg a says it flushed only between the legs.
func methodTitle(row Row) string {
	title := methodTitles[row.Method]
	if row.Method.Flushes() && len(row.Runs) > 0 && row.Runs[0].A.Flush == nil {
		title = methodTitlesBetweenLegs[row.Method]
	}
	return noncePositionTitle(row, title)
}

// serverLine says what was measured and how to read the times.
func (r *Report) serverLine(perRowSpeedup bool) string {
	s := r.Server
	floor := fmt.Sprintf("shared prefix floor: %d cached tokens (what two unrelated nonce prompts share; only reuse beyond it counts)", s.SharedFloor)
	if s.SharedFloor < 0 {
		floor = "the server reports no cached tokens: cache reuse cannot be checked"
	}
	if s.Mock == "" {
		return fmt.Sprintf("server: backend %s, no /sim/ (no truth columns); times in wall seconds\n%s", s.Backend, floor)
	}
	speedup := "speedup " + speedupText(s.Speedup)
	if perRowSpeedup {
		speedup = "the speedup of each row"
	}
	return fmt.Sprintf("server: sglmock, profile %s at %s, backend %s; times in simulated seconds (wall x speedup)\n%s", s.Mock, speedup, s.Backend, floor)
}

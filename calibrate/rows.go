package calibrate

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Columns are the CSV columns a row needs, in the order bench writes them.
var Columns = []string{"ctx_req", "prompt_tok", "t_a", "t_b", "a", "b", "b_cached"}

// maxRows bounds the rows read: a sweep has tens, a file with more is not
// a sweep.
const maxRows = 100000

// maxLineBytes bounds a line of the CSV: bench's longest, with every cause
// of a row's verdict, is a few kilobytes; a longer one is refused after
// this many bytes are read, never held whole.
const maxLineBytes = 64 << 10

// ErrBadInput wraps every error about the rows themselves: a file that is
// not a sweep's CSV, a row no deployment can have produced, too few rows.
// The command exits 2 on it, as on any usage error.
var ErrBadInput = errors.New("bad input")

// inputError is an error about the rows, which errors.Is ErrBadInput.
type inputError struct{ err error }

func (e inputError) Error() string           { return e.err.Error() }
func (e inputError) Unwrap() []error         { return []error{ErrBadInput, e.err} }
func badInput(format string, a ...any) error { return inputError{fmt.Errorf(format, a...)} }

// Row is one measured context of a two-point sweep.
type Row struct {
	CtxReq       int
	PromptTokens int
	TA, TB       float64 // seconds, end to end
	A, B         int     // max_new_tokens of the legs
	// BCached says leg b's prompt came from the prefix cache.
	BCached bool
	// CachedB is how many prompt tokens leg b reused, when the CSV says
	// (bench's cached_b column); nil means the prompt's reusable prefix.
	CachedB *int
	// Line is the row's line in its file, for messages; 0 when not read
	// from a file.
	Line int
	// What bench said of the row, when the CSV has its columns: ACached
	// (a_cached) whether leg a reused more than every prompt shares,
	// CachedA (cached_a) how many tokens it reused, Verdict its level (ok,
	// SUSPECT or POISONED) and Cause the findings behind it.
	ACached *bool
	CachedA *int
	Verdict string
	Cause   string
	// Method is bench's method column (naive, flush+nonce, ...); "" when
	// the CSV has none.
	Method string
	// Runs is how many runs the times are the medians of (bench's runs
	// column); 0 when the CSV does not say, which counts as one.
	Runs int
	// Spread is bench's spread column, (max-min)/median over the runs of
	// what SpreadOf names: the decode rate, or t_a when the row has no
	// decode rate (bench's decode_tok_s is empty); SpreadOf is "" when the
	// CSV does not say which.
	Spread   float64
	SpreadOf SpreadOf
	// RunsA and RunsB are each run's leg a and leg b when the rows come
	// from bench's JSON report: every leg's own time and reuse, where the
	// CSV has only their medians.
	RunsA, RunsB []LegRun
}

// SpreadOf names the figure a row's spread is of.
type SpreadOf string

// The figures bench's spread column is of.
const (
	SpreadOfDecode SpreadOf = "decode"
	SpreadOfTA     SpreadOf = "t_a"
)

// LegRun is one run of a leg: its time and the prompt tokens it reused
// beyond what every prompt shares (0 for a cold leg).
type LegRun struct {
	Seconds float64
	Cached  int
}

// runs is how many runs the row's times are the medians of: at least one.
func (r Row) runs() int {
	if len(r.RunsA) > 0 {
		return len(r.RunsA)
	}
	return max(r.Runs, 1)
}

// ErrTooFewRows is returned when the rows cannot determine the
// coefficients.
var ErrTooFewRows = inputError{errors.New("too few rows")}

// ReadCSV reads rows from a CSV with a header naming at least Columns, in
// any order; other columns are ignored. name prefixes error messages.
//
// Every error is ErrBadInput, and no line is read whole beyond
// maxLineBytes.
func ReadCSV(r io.Reader, name string) ([]Row, error) {
	cr := csv.NewReader(&lineLimit{r: r, max: maxLineBytes, line: 1})
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, badInput("%s: empty file: want a header with %s", name, strings.Join(Columns, ","))
		}
		return nil, badInput("%s: %w", name, err)
	}
	col := map[string]int{}
	for i, h := range header {
		col[strings.TrimSpace(h)] = i
	}
	var missing []string
	for _, c := range Columns {
		if _, ok := col[c]; !ok {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return nil, badInput("%s:1: header lacks %s (want %s)", name, strings.Join(missing, ", "), strings.Join(Columns, ","))
	}
	var rows []Row
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, badInput("%s: %w", name, err)
		}
		line, _ := cr.FieldPos(0)
		if len(rows) == maxRows {
			return nil, badInput("%s:%d: more than %d rows", name, line, maxRows)
		}
		row := Row{Line: line}
		for _, c := range Columns {
			i := col[c]
			if i >= len(rec) {
				return nil, badInput("%s:%d: no %s value", name, line, c)
			}
			if err := row.set(c, strings.TrimSpace(rec[i])); err != nil {
				return nil, badInput("%s:%d: %w", name, line, err)
			}
		}
		// bench's own columns, when the file has them.
		optional := func(c string) string {
			if i, ok := col[c]; ok && i < len(rec) {
				return strings.TrimSpace(rec[i])
			}
			return ""
		}
		for _, c := range []struct {
			name string
			dst  **int
		}{{"cached_a", &row.CachedA}, {"cached_b", &row.CachedB}} {
			if v := optional(c.name); v != "" {
				n, err := strconv.Atoi(v)
				if err != nil || n < 0 {
					return nil, badInput("%s:%d: %s = %q: want a whole number of tokens", name, line, c.name, clip(v))
				}
				*c.dst = &n
			}
		}
		if v := optional("a_cached"); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return nil, badInput("%s:%d: a_cached = %q: want true or false", name, line, clip(v))
			}
			row.ACached = &b
		}
		row.Verdict, row.Cause = optional("verdict"), strings.Clone(optional("cause"))
		row.Method = strings.Clone(optional("method"))
		if v := optional("runs"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return nil, badInput("%s:%d: runs = %q: want a whole number of runs, at least 1", name, line, clip(v))
			}
			row.Runs = n
		}
		if v := optional("spread"); v != "" {
			s, err := strconv.ParseFloat(v, 64)
			if err != nil || !(s >= 0) || math.IsInf(s, 0) {
				return nil, badInput("%s:%d: spread = %q: want a relative spread >= 0", name, line, clip(v))
			}
			row.Spread = s
		}
		if _, ok := col["decode_tok_s"]; ok && row.Runs > 1 {
			row.SpreadOf = SpreadOfTA
			if optional("decode_tok_s") != "" {
				row.SpreadOf = SpreadOfDecode
			}
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// clip shortens a field for a message.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// lineLimit passes r through, and fails a line longer than max bytes: the
// CSV reader would otherwise hold a line of any length whole.
type lineLimit struct {
	r        io.Reader
	max, cur int
	line     int
	exceeded bool
}

func (l *lineLimit) Read(p []byte) (int, error) {
	if l.exceeded {
		return 0, fmt.Errorf("line %d is longer than %d bytes: not a sweep's CSV", l.line, l.max)
	}
	n, err := l.r.Read(p)
	for i, c := range p[:n] {
		if c == '\n' {
			l.cur, l.line = 0, l.line+1
			continue
		}
		if l.cur++; l.cur > l.max {
			// Pass what came before the excess; the next read fails.
			l.exceeded = true
			return i, nil
		}
	}
	return n, err
}

// set parses one column's value into the row.
func (r *Row) set(column, s string) error {
	var err error
	switch column {
	case "ctx_req", "prompt_tok", "a", "b":
		dst := map[string]*int{"ctx_req": &r.CtxReq, "prompt_tok": &r.PromptTokens, "a": &r.A, "b": &r.B}[column]
		if *dst, err = strconv.Atoi(s); err != nil {
			return fmt.Errorf("%s = %q: want a whole number", column, clip(s))
		}
	case "t_a", "t_b":
		dst := &r.TA
		if column == "t_b" {
			dst = &r.TB
		}
		if *dst, err = strconv.ParseFloat(s, 64); err != nil {
			return fmt.Errorf("%s = %q: want seconds", column, clip(s))
		}
	case "b_cached":
		if r.BCached, err = strconv.ParseBool(s); err != nil {
			return fmt.Errorf("b_cached = %q: want true or false", clip(s))
		}
	}
	return nil
}

// where names a row in messages: its file line, or its index.
func (r Row) where(i int) string {
	if r.Line > 0 {
		return fmt.Sprintf("line %d", r.Line)
	}
	return fmt.Sprintf("row %d", i+1)
}

// checkRow refuses a row no deployment can have produced. Sizes are
// compared without sums, so that no count (b = 2^63-1) overflows.
func checkRow(r Row, i, contextLength int) error {
	at := r.where(i)
	var err error
	switch {
	case r.PromptTokens < 2 || r.PromptTokens >= contextLength:
		err = fmt.Errorf("%s: prompt_tok = %d: must be in 2..%d (the base profile's context length - 1)", at, r.PromptTokens, contextLength-1)
	case r.A < 1 || r.B < 1:
		err = fmt.Errorf("%s: a = %d, b = %d: both legs must generate at least one token", at, r.A, r.B)
	case r.B <= r.A:
		err = fmt.Errorf("%s: b = %d <= a = %d: leg b must generate more tokens than leg a", at, r.B, r.A)
	case r.B > contextLength-r.PromptTokens:
		err = fmt.Errorf("%s: prompt_tok + b = %d + %d: longer than the base profile's context length %d", at, r.PromptTokens, r.B, contextLength)
	case !(r.TA > 0) || math.IsInf(r.TA, 0):
		err = fmt.Errorf("%s: t_a = %v: times must be positive seconds", at, r.TA)
	case !(r.TB > 0) || math.IsInf(r.TB, 0):
		err = fmt.Errorf("%s: t_b = %v: times must be positive seconds", at, r.TB)
	case r.ACached != nil && *r.ACached && r.CachedA != nil && *r.CachedA >= r.PromptTokens:
		err = fmt.Errorf("%s: cached_a = %d: a leg reuses at most prompt_tok - 1 = %d tokens", at, *r.CachedA, r.PromptTokens-1)
	case slices.ContainsFunc(append(slices.Clone(r.RunsA), r.RunsB...), func(l LegRun) bool { return l.Cached >= r.PromptTokens }):
		err = fmt.Errorf("%s: a run's leg reused all %d prompt tokens or more: a leg reuses at most prompt_tok - 1", at, r.PromptTokens)
	case r.BCached && r.CachedB != nil && *r.CachedB >= r.PromptTokens:
		err = fmt.Errorf("%s: cached_b = %d: a leg reuses at most prompt_tok - 1 = %d tokens", at, *r.CachedB, r.PromptTokens-1)
	case !r.BCached && !(r.ACached != nil && *r.ACached) && r.TB <= r.TA:
		err = fmt.Errorf("%s: t_b = %v <= t_a = %v on a row whose leg b is cold (b_cached false): "+
			"leg b generates more tokens, so it cannot be faster unless its prompt came from the cache; "+
			"measure with --method flush+nonce, or mark the row b_cached=true", at, r.TB, r.TA)
	}
	if err != nil {
		return inputError{err}
	}
	return nil
}

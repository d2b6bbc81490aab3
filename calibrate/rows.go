package calibrate

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Columns are the CSV columns a row needs, in the order bench writes them.
var Columns = []string{"ctx_req", "prompt_tok", "t_a", "t_b", "a", "b", "b_cached"}

// maxRows bounds the rows read: a sweep has tens, a file with more is not
// a sweep.
const maxRows = 100000

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
}

// ErrTooFewRows is returned when the rows cannot determine the
// coefficients.
var ErrTooFewRows = errors.New("too few rows")

// ReadCSV reads rows from a CSV with a header naming at least Columns, in
// any order; other columns are ignored. name prefixes error messages.
func ReadCSV(r io.Reader, name string) ([]Row, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: empty file: want a header with %s", name, strings.Join(Columns, ","))
		}
		return nil, fmt.Errorf("%s: %w", name, err)
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
		return nil, fmt.Errorf("%s:1: header lacks %s (want %s)", name, strings.Join(missing, ", "), strings.Join(Columns, ","))
	}
	var rows []Row
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		line, _ := cr.FieldPos(0)
		if len(rows) == maxRows {
			return nil, fmt.Errorf("%s:%d: more than %d rows", name, line, maxRows)
		}
		row := Row{Line: line}
		for _, c := range Columns {
			i := col[c]
			if i >= len(rec) {
				return nil, fmt.Errorf("%s:%d: no %s value", name, line, c)
			}
			if err := row.set(c, strings.TrimSpace(rec[i])); err != nil {
				return nil, fmt.Errorf("%s:%d: %w", name, line, err)
			}
		}
		if i, ok := col["cached_b"]; ok && i < len(rec) && strings.TrimSpace(rec[i]) != "" {
			n, err := strconv.Atoi(strings.TrimSpace(rec[i]))
			if err != nil || n < 0 {
				return nil, fmt.Errorf("%s:%d: cached_b = %q: want a whole number of tokens", name, line, rec[i])
			}
			row.CachedB = &n
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// set parses one column's value into the row.
func (r *Row) set(column, s string) error {
	var err error
	switch column {
	case "ctx_req", "prompt_tok", "a", "b":
		dst := map[string]*int{"ctx_req": &r.CtxReq, "prompt_tok": &r.PromptTokens, "a": &r.A, "b": &r.B}[column]
		if *dst, err = strconv.Atoi(s); err != nil {
			return fmt.Errorf("%s = %q: want a whole number", column, s)
		}
	case "t_a", "t_b":
		dst := &r.TA
		if column == "t_b" {
			dst = &r.TB
		}
		if *dst, err = strconv.ParseFloat(s, 64); err != nil {
			return fmt.Errorf("%s = %q: want seconds", column, s)
		}
	case "b_cached":
		if r.BCached, err = strconv.ParseBool(s); err != nil {
			return fmt.Errorf("b_cached = %q: want true or false", s)
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

// check refuses rows no deployment can have produced.
func check(rows []Row, contextLength int) error {
	for i, r := range rows {
		at := r.where(i)
		switch {
		case r.PromptTokens < 2 || r.PromptTokens >= contextLength:
			return fmt.Errorf("%s: prompt_tok = %d: must be in 2..%d (the base profile's context length - 1)", at, r.PromptTokens, contextLength-1)
		case r.A < 1 || r.B < 1:
			return fmt.Errorf("%s: a = %d, b = %d: both legs must generate at least one token", at, r.A, r.B)
		case r.B <= r.A:
			return fmt.Errorf("%s: b = %d <= a = %d: leg b must generate more tokens than leg a", at, r.B, r.A)
		case r.PromptTokens+r.B > contextLength:
			return fmt.Errorf("%s: prompt_tok + b = %d: longer than the base profile's context length %d", at, r.PromptTokens+r.B, contextLength)
		case !(r.TA > 0) || math.IsInf(r.TA, 0):
			return fmt.Errorf("%s: t_a = %v: times must be positive seconds", at, r.TA)
		case !(r.TB > 0) || math.IsInf(r.TB, 0):
			return fmt.Errorf("%s: t_b = %v: times must be positive seconds", at, r.TB)
		case r.BCached && r.CachedB != nil && *r.CachedB >= r.PromptTokens:
			return fmt.Errorf("%s: cached_b = %d: a leg reuses at most prompt_tok - 1 = %d tokens", at, *r.CachedB, r.PromptTokens-1)
		case !r.BCached && r.TB <= r.TA:
			return fmt.Errorf("%s: t_b = %v <= t_a = %v on a row whose leg b is cold (b_cached false): "+
				"leg b generates more tokens, so it cannot be faster unless its prompt came from the cache; "+
				"measure with --method flush+nonce, or mark the row b_cached=true", at, r.TB, r.TA)
		}
	}
	return nil
}

package calibrate

import (
	"encoding/json"
	"errors"
	"io"
	"math"
	"strings"

	"github.com/sglmock/sglmock/harness"
)

// maxJSONBytes bounds bench's JSON report read: a report holds every leg
// of every run, a few kilobytes each with its truth, so a sweep of tens of
// rows is megabytes; a larger file is refused after this many bytes are
// read, never held whole.
const maxJSONBytes = 64 << 20

// ReadJSON reads the rows of the report `sglmock bench twopoint --json`
// writes: every run's legs with their own times and reuse, from which the
// fit takes each leg's noise and tells a cold leg from a cached one run
// by run. name prefixes error messages; every error is ErrBadInput.
func ReadJSON(r io.Reader, name string) ([]Row, error) {
	lr := &io.LimitedReader{R: r, N: maxJSONBytes + 1}
	var rep harness.Report
	if err := json.NewDecoder(lr).Decode(&rep); err != nil {
		if lr.N <= 0 {
			return nil, badInput("%s: longer than %d MiB: not a bench report", name, maxJSONBytes>>20)
		}
		if errors.Is(err, io.EOF) {
			return nil, badInput("%s: empty file: want the report 'sglmock bench twopoint --json' writes", name)
		}
		return nil, badInput("%s: not a bench report: %v", name, err)
	}
	rows, err := FromReport(&rep)
	if err != nil {
		return nil, badInput("%s: %w", name, err)
	}
	return rows, nil
}

// FromReport takes the rows of a two-point report: each row's medians as
// the CSV has them, and every run's legs. A leg counts as cached when it
// reused more than the shared floor (what every prompt shares, a BOS);
// when some leg does not say what it reused, the row keeps its medians
// only, as a CSV row would.
func FromReport(rep *harness.Report) ([]Row, error) {
	if rep.Method != "twopoint" {
		return nil, badInput("a %q report has no two-point rows: calibrate reads what 'sglmock bench twopoint' writes", rep.Method)
	}
	if len(rep.Rows) > maxRows {
		return nil, badInput("more than %d rows", maxRows)
	}
	floor := max(rep.Server.SharedFloor, 0)
	beyond := func(n *int) (*bool, int) {
		if n == nil {
			return nil, 0
		}
		cached := *n > floor
		if cached {
			return &cached, *n
		}
		return &cached, 0
	}
	var rows []Row
	for i, hr := range rep.Rows {
		row := Row{CtxReq: hr.CtxReq, PromptTokens: hr.PromptTokens, TA: hr.TA, TB: hr.TB, A: hr.A, B: hr.B,
			CachedA: hr.CachedA, CachedB: hr.CachedB, Method: string(hr.Method), Runs: len(hr.Runs), Spread: hr.Spread,
			Verdict: hr.Verdict.Level().String()}
		// The causes of the verdict's level, as the CSV's cause leads with them.
		var causes []string
		for _, c := range hr.Verdict.Causes {
			if c.Level == hr.Verdict.Level() {
				causes = append(causes, c.Text)
			}
		}
		row.Cause = strings.Join(causes, "; ")
		row.ACached, _ = beyond(hr.CachedA)
		if b, _ := beyond(hr.CachedB); b != nil {
			row.BCached = *b
		}
		if row.Runs > 1 {
			row.SpreadOf = SpreadOfTA
			if hr.DecodeTPS != nil {
				row.SpreadOf = SpreadOfDecode
			}
		}
		known := true
		var legsA, legsB []LegRun
		for j, run := range hr.Runs {
			for _, leg := range []struct {
				l   harness.Leg
				dst *[]LegRun
			}{{run.A, &legsA}, {run.B, &legsB}} {
				if !(leg.l.Seconds > 0) || math.IsInf(leg.l.Seconds, 0) {
					return nil, badInput("row %d, run %d: leg %s took %v s: times must be positive seconds", i+1, j+1, leg.l.Name, leg.l.Seconds)
				}
				known = known && leg.l.CachedTokens != nil
				_, c := beyond(leg.l.CachedTokens)
				*leg.dst = append(*leg.dst, LegRun{Seconds: leg.l.Seconds, Cached: c})
			}
		}
		if known && len(legsA) > 0 {
			row.RunsA, row.RunsB = legsA, legsB
		}
		rows = append(rows, row)
	}
	if len(rows) == 0 {
		return nil, badInput("the report has no rows")
	}
	return rows, nil
}

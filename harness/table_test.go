package harness_test

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/sglmock/sglmock/harness"
	"github.com/sglmock/sglmock/internal/norace"
	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
)

// causeSweep runs, on the original benchmark's profile and sizes, naive, flush with each
// flush tried once (kimi refuses a flush for 50 ms after a response, so
// every one is refused) and flush+nonce with retries: causes on one leg and
// on both, with the same figures on every row and with other figures, ok
// notes and POISONED ones.
func causeSweep(t *testing.T) *harness.Report {
	m := mocktest.Start(t, api.Config{Profile: mocktest.Profile(t, "kimi-k2.6-rtx6000")})
	rep := run(t, twoPoint(m, originalPoints, harness.Naive, harness.FlushNonce))
	tp := twoPoint(m, originalPoints[:2], harness.FlushMethod)
	tp.Flush = harness.FlushPolicy{}
	flush := run(t, tp)
	rep.Rows = append(rep.Rows[:3], append(flush.Rows, rep.Rows[3:]...)...)
	return rep
}

// The default table: the figures a reader compares, the verdict as a level
// and note numbers, each cause once under its method's table: one note for
// both legs ("legs a and b"), one for every row whatever its figures (the
// note gives the first row's and says so).
func TestCompactTable(t *testing.T) {
	norace.Skip(t, "checks a sweep's table")
	synctest.Test(t, func(t *testing.T) {
		var out bytes.Buffer
		if err := causeSweep(t).WriteTable(&out); err != nil {
			t.Fatal(err)
		}
		mocktest.Golden(t, "table-compact.txt", out.Bytes())
		for _, line := range strings.Split(out.String(), "\n") {
			if len(line) > 150 {
				t.Errorf("a line of %d characters:\n%s", len(line), line)
			}
		}
	})
}

// --wide: every column, and a note per distinct text (each row's own
// figures), still once for both legs.
func TestWideTable(t *testing.T) {
	norace.Skip(t, "checks a sweep's table")
	synctest.Test(t, func(t *testing.T) {
		var out bytes.Buffer
		if err := causeSweep(t).WriteWideTable(&out); err != nil {
			t.Fatal(err)
		}
		mocktest.Golden(t, "table-wide.txt", out.Bytes())
	})
}

// A TableWriter fed the report as it grows writes each row as it comes,
// and in the end the same bytes as the whole report's table.
func TestTableWriterStreams(t *testing.T) {
	norace.Skip(t, "checks the table's rows")
	synctest.Test(t, func(t *testing.T) {
		rep := causeSweep(t)
		for _, wide := range []bool{false, true} {
			var whole, streamed bytes.Buffer
			write := rep.WriteTable
			if wide {
				write = rep.WriteWideTable
			}
			if err := write(&whole); err != nil {
				t.Fatal(err)
			}
			tw := harness.NewTableWriter(&streamed, wide)
			grown := &harness.Report{Method: rep.Method, Server: rep.Server}
			for i, row := range rep.Rows {
				grown.Rows = append(grown.Rows, row)
				if err := tw.Write(grown); err != nil {
					t.Fatal(err)
				}
				// This row is out, and no row after it.
				if got := rowLines(streamed.String()); got != i+1 {
					t.Fatalf("wide %v: after row %d, %d row lines:\n%s", wide, i+1, got, streamed.String())
				}
			}
			if err := tw.Close(); err != nil {
				t.Fatal(err)
			}
			if streamed.String() != whole.String() {
				t.Errorf("wide %v: streamed\n%s\nwhole\n%s", wide, streamed.String(), whole.String())
			}
		}
	})
}

var rowLine = regexp.MustCompile(`(?m)^ +\d+ +\d+ `)

// rowLines counts the lines of a table that are rows.
func rowLines(table string) int { return len(rowLine.FindAllString(table, -1)) }

// Told how many rows a table has, the writer ends each table with its last
// row: the notes come out before the next method has a row.
func TestTableWriterEndsTables(t *testing.T) {
	norace.Skip(t, "checks the table's rows")
	synctest.Test(t, func(t *testing.T) {
		rep := causeSweep(t)
		var out bytes.Buffer
		tw := harness.NewTableWriter(&out, false)
		tw.SetRowsPerTable(3)
		if err := tw.Write(&harness.Report{Method: rep.Method, Server: rep.Server, Rows: rep.Rows[:3]}); err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(out.String(), " [2] POISONED: t_b < t_a, so decode is undefined\n") {
			t.Errorf("naive's three rows written, its notes not:\n%s", out.String())
		}
	})
}

// Stream's wide table (its compact one is stream.txt): every column, and a
// note per distinct text.
func TestStreamWideTable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mocktest.Profile(t, "llama-8b-eagle3-h100")
		p.FlushBusyAfterFinishS = 0 // no overlap flush window: this run never retries its flush
		m := mocktest.Start(t, api.Config{Profile: p})
		rep := streamRun(t, m, []harness.Point{{CtxReq: 1024, Tokens: 1024}, {CtxReq: 8192, Tokens: 8192}}, 512)
		var wide bytes.Buffer
		if err := rep.WriteWideTable(&wide); err != nil {
			t.Fatal(err)
		}
		mocktest.Golden(t, "stream-wide.txt", wide.Bytes())
	})
}

package scenarios

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/sglmock/sglmock/harness"
)

// Target is the server a scenario is played against: a fresh sglmock
// serving the scenario's profile, with an empty cache.
type Target struct {
	HTTP *http.Client
	URL  string
	// Restart, if set, stops the server and starts it again as a restart
	// of the process would (HiCache's file storage tier kept, every other
	// cache empty), and returns where the new one answers: a restart step
	// needs it.
	Restart func(context.Context) (Target, error)
}

// RunOptions say how to play a scenario.
type RunOptions struct {
	// Out receives each step's table and each expectation's PASS or FAIL.
	Out io.Writer
	// RealTime says the server runs on the wall clock: a figure
	// expectation with real_time bounds is held to those.
	RealTime bool
}

// Outcome is one expectation's result.
type Outcome struct {
	Step string
	Line int
	// Text says what was expected.
	Text string
	Pass bool
	// Got is what the rows had.
	Got string
}

// Result is how a scenario went.
type Result struct {
	Scenario string
	Outcomes []Outcome
}

// Failed counts the expectations that did not hold.
func (r *Result) Failed() int {
	n := 0
	for _, o := range r.Outcomes {
		if !o.Pass {
			n++
		}
	}
	return n
}

// action is what a step does.
type action interface {
	kind() string
	// describe is a one-line account of the step, for its heading.
	describe() string
	// figures are the names a figure expectation may use.
	figures() []string
	// expectations are the kinds of expectation the step's rows support.
	expectations() []string
	// contexts are the step's context labels (none for most kinds).
	contexts() []int
	// legs are the names of the flushes a row records.
	legs() []string
	run(ctx context.Context, r *runner) (*result, error)
}

// result is a step's rows and how to print them.
type result struct {
	rows  []*row
	write func(w io.Writer) error
}

// runner plays one scenario against one server.
type runner struct {
	sc      *Scenario
	c       *harness.Client
	http    *http.Client
	url     string
	speedup float64
	out     io.Writer
	ids     int
	loads   map[string]*load
	restart func(context.Context) (Target, error)
}

// newID makes the harness's nonces and rids: unique on the server, which
// is fresh for each run, and the same from run to run, so that the
// speculative draws (seeded by rid) are too.
func (r *runner) newID() string {
	r.ids++
	return fmt.Sprintf("%s-%d", r.sc.Name, r.ids)
}

// wall is a span of the server's seconds on the wall clock.
func (r *runner) wall(seconds float64) time.Duration {
	return time.Duration(seconds / r.speedup * float64(time.Second))
}

func (r *runner) options(fp flushPolicy, allowShared int) harness.Options {
	return harness.Options{
		Flush:             harness.FlushPolicy{Retries: fp.retries, RetryWait: r.wall(fp.retryWait), Timeout: fp.timeout},
		AllowSharedPrefix: allowShared,
		NewID:             r.newID,
	}
}

// Run plays the scenario against t, printing each step's table and each
// expectation's outcome to opt.Out. The error is for a scenario that could
// not be played (the server refused a request, or is not sglmock serving
// the scenario's profile); expectations that fail are in the Result.
func (sc *Scenario) Run(ctx context.Context, t Target, opt RunOptions) (*Result, error) {
	out := opt.Out
	if out == nil {
		out = io.Discard
	}
	r := &runner{sc: sc, http: t.HTTP, url: t.URL, out: out, loads: map[string]*load{}, restart: t.Restart,
		c: &harness.Client{HTTP: t.HTTP, BaseURL: t.URL, Backend: harness.SGLang}}
	defer r.stopLoads()
	info, err := r.c.SimInfo(ctx)
	switch {
	case err != nil:
		return nil, err
	case info == nil:
		return nil, errors.New("the server has no /sim/ endpoints: a scenario runs against sglmock")
	case info.Name != sc.Profile.Name:
		return nil, fmt.Errorf("the server serves profile %q, the scenario wants %q", info.Name, sc.Profile.Name)
	}
	r.speedup = info.Speedup
	fmt.Fprintf(out, "scenario %s (%s): profile %s, speedup x%g\n\n", sc.Name, sc.File, sc.Profile.Name, r.speedup)
	fmt.Fprintln(out, wrap(sc.Description, "", textWidth))
	res := &Result{Scenario: sc.Name}
	for i, st := range sc.Steps {
		fmt.Fprintf(out, "\n--- step %d/%d %s: %s\n", i+1, len(sc.Steps), st.Name, st.action.describe())
		if st.Note != "" {
			fmt.Fprintln(out, wrap(st.Note, "    ", textWidth))
		}
		sr, err := st.action.run(ctx, r)
		if err != nil {
			return res, fmt.Errorf("step %s: %w", st.Name, err)
		}
		fmt.Fprintln(out)
		if err := sr.write(out); err != nil {
			return res, err
		}
		if len(st.Expect) > 0 {
			fmt.Fprintln(out)
		}
		stepFailed := false
		for _, e := range st.Expect {
			o := e.evaluate(sr.rows, opt.RealTime)
			stepFailed = stepFailed || !o.Pass
			o.Step = st.Name
			res.Outcomes = append(res.Outcomes, o)
			mark := "PASS"
			if !o.Pass {
				mark = "FAIL"
			}
			fmt.Fprintf(out, "  %s  %s: %s", mark, o.Text, o.Got)
			if !o.Pass {
				fmt.Fprintf(out, "  (%s:%d)", sc.File, e.Line)
			}
			fmt.Fprintln(out)
		}
		if worst := measurementError(sr.rows); opt.RealTime && stepFailed && worst > lateClient {
			fmt.Fprintf(out, "  note: the client measured this step up to %.1f %% off the modelled times of its own requests\n", 100*worst)
			fmt.Fprintf(out, "  (ttft_err, decode_err): the host was too busy for its wall clock at x%g, where a stall of\n", r.speedup)
			fmt.Fprintln(out, "  e wall seconds is speedup*e simulated. Run it again, or with a lower --speedup.")
		}
	}
	failed := res.Failed()
	verdict := "PASS"
	if failed > 0 {
		verdict = "FAIL"
	}
	fmt.Fprintf(out, "\nscenario %s: %s, %d of %d expectations hold\n", sc.Name, verdict, len(res.Outcomes)-failed, len(res.Outcomes))
	return res, nil
}

// lateClient is the measurement error beyond which a real-time run's
// failure is put down to the host: at the scenarios' speedups a few
// milliseconds of wall-clock jitter stay below it.
const lateClient = 0.03

// measurementError is the largest |ttft_err| or |decode_err| of a step's
// rows: the client's own error against the truth of the requests it sent.
func measurementError(rows []*row) float64 {
	worst := 0.0
	for _, rw := range rows {
		for _, name := range []string{"ttft_err", "decode_err"} {
			if v := rw.figures[name]; v != nil {
				worst = max(worst, math.Abs(*v))
			}
		}
	}
	return worst
}

// evaluate checks the expectation against the rows it selects: it holds
// when it holds for every one.
func (e *Expectation) evaluate(rows []*row, realTime bool) Outcome {
	o := Outcome{Line: e.Line, Text: e.check.describe(realTime), Pass: true}
	var got, same []string
	n, hasCtx := 0, false
	for _, rw := range rows {
		if len(e.Ctx) > 0 && !slices.Contains(e.Ctx, rw.ctx) {
			continue
		}
		n++
		hasCtx = hasCtx || rw.ctx != 0
		ok, g := e.check.check(rw, realTime)
		if !slices.Contains(same, g) {
			same = append(same, g)
		}
		o.Pass = o.Pass && ok
		if rw.label != "" {
			g += " (" + rw.label + ")"
		}
		got = append(got, g)
	}
	if n == 0 {
		o.Pass, got = false, []string{"no row to check"}
	}
	o.Got = strings.Join(got, ", ")
	prompts := n > 0 && strings.HasPrefix(rows[0].label, "prompt ")
	switch {
	case n > 1 && len(same) == 1 && !hasCtx:
		// Every row of a raw request shares its step's figures: say it once.
		o.Got = same[0] + " (every copy)"
	case n > 1 && len(same) == 1 && prompts && len(e.Ctx) == 0:
		o.Got = same[0] + " (every prompt)"
	}
	return o
}

// textWidth is the width descriptions and notes are wrapped to.
const textWidth = 96

// wrap reflows text to width columns, each line after prefix; blank lines
// separate paragraphs, which stay apart.
func wrap(text, prefix string, width int) string {
	var out []string
	for _, para := range strings.Split(strings.TrimSpace(text), "\n\n") {
		line := prefix
		for _, w := range strings.Fields(para) {
			if len(line) > len(prefix) && len(line)+1+len(w) > width {
				out = append(out, line)
				line = prefix
			}
			if len(line) > len(prefix) {
				line += " "
			}
			line += w
		}
		out = append(out, line, "")
	}
	return strings.Join(out[:len(out)-1], "\n")
}

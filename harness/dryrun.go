package harness

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"time"
)

// Predictor is a cost model's prediction for a lone request on an idle
// server. The command passes the profile's evaluator; the harness does not
// import the mock.
type Predictor interface {
	// Seconds is the end-to-end time of a request of prompt tokens,
	// cached of them reused, generating completion tokens.
	Seconds(prompt, cached, completion int) float64
	// CachedOnRepeat is what a prompt sent a second time reuses.
	CachedOnRepeat(prompt int) int
}

// plannedLeg is one request of a run as planned, what a cost model is
// asked about.
type plannedLeg struct {
	prompt, completion int
	// repeated: the same prompt went just before (naive), so the cache
	// serves most of it.
	repeated bool
}

// cached is what the leg is expected to reuse: the model's figure, or,
// with no model, all but the last token, as a radix cache reuses a
// repeated prompt.
func (l plannedLeg) cached(m Predictor) int {
	switch {
	case !l.repeated:
		return 0
	case m != nil:
		return m.CachedOnRepeat(l.prompt)
	}
	return max(l.prompt-1, 0)
}

// pointLegs are the legs of one method at one context, in order: every
// run's legs a and b. Naive repeats its prompt, so its leg b, and its leg
// a after the first run, find it cached.
func (tp *TwoPoint) pointLegs(m Method, p Point) []plannedLeg {
	var legs []plannedLeg
	for i := range tp.Repeat {
		legs = append(legs, plannedLeg{p.Tokens, tp.A, m == Naive && i > 0}, plannedLeg{p.Tokens, tp.B, m == Naive})
	}
	return legs
}

// plan lists every leg of the run in the order it is sent.
func (tp *TwoPoint) plan() []plannedLeg {
	var legs []plannedLeg
	for _, m := range tp.Methods {
		for _, p := range tp.Points {
			legs = append(legs, tp.pointLegs(m, p)...)
		}
	}
	return legs
}

// plan lists the stream run's requests.
func (st *Stream) plan() []plannedLeg {
	var legs []plannedLeg
	for _, p := range st.Points {
		legs = append(legs, plannedLeg{prompt: p.Tokens, completion: st.MaxNewTokens})
	}
	return legs
}

// WriteDryRun prints each method's predicted time for the sweep, sending
// nothing: the flush methods pay the prefill twice per point, which at long
// contexts is minutes.
func (tp *TwoPoint) WriteDryRun(w io.Writer, profileName string, p Predictor) error {
	if err := tp.Validate(); err != nil {
		return err
	}
	fmt.Fprintf(w, "dry run: nothing sent. Predicted time of the sweep on profile %s (a=%d, b=%d, %d run(s) per context;\n", profileName, tp.A, tp.B, tp.Repeat)
	fmt.Fprintln(w, "a lone request on an idle server, so these are lower bounds for a busy one):")
	fmt.Fprintln(w)
	t := &table{head: []string{"method"}, alignLast: true}
	for _, pt := range tp.Points {
		t.head = append(t.head, fmt.Sprintf("ctx %d (%d tok)", pt.CtxReq, pt.Tokens))
	}
	t.head = append(t.head, "total")
	for _, m := range tp.Methods {
		cells := []string{string(m)}
		total := 0.0
		for _, pt := range tp.Points {
			secs := 0.0
			for _, l := range tp.pointLegs(m, pt) {
				secs += p.Seconds(l.prompt, l.cached(p), l.completion)
			}
			total += secs
			cells = append(cells, human(secs))
		}
		t.add(append(cells, human(total))...)
	}
	if err := t.write(w); err != nil {
		return err
	}
	last := tp.Points[len(tp.Points)-1]
	fmt.Fprintf(w, "\nA cold leg at %d tokens costs %s; the naive method pays that once per point and measures nothing,\n",
		last.Tokens, human(p.Seconds(last.Tokens, 0, tp.A)))
	fmt.Fprintln(w, "the flush and nonce methods pay it on both legs and measure decode.")
	return nil
}

// human renders seconds as "0.46 s", "23.7 s" or "4m12s".
func human(s float64) string {
	switch {
	case s < 10:
		return strconv.FormatFloat(s, 'f', 2, 64) + " s"
	case s < 120:
		return strconv.FormatFloat(s, 'f', 1, 64) + " s"
	}
	return time.Duration(s * float64(time.Second)).Round(time.Second).String()
}

// ETA is the predicted wall time a run takes from now.
type ETA struct {
	Left   time.Duration
	Source ETASource
}

// ETASource says what an ETA comes from.
type ETASource int

// The sources of an ETA.
const (
	// ETAUnknown: nothing predicts the time left yet (no cost model, and
	// too few legs done to fit one).
	ETAUnknown ETASource = iota
	// ETAModel: the server's cost model (the dry run's), plus the mean
	// overhead the legs done so far had beyond it (flushes and their
	// retries, the client, the host).
	ETAModel
	// ETAMeasured: a cost fitted to the legs done so far (a real server,
	// which has no /sim/profile).
	ETAMeasured
)

// eta predicts the wall time of the legs not done yet.
func (t *tracker) eta() ETA {
	rest := t.plan[min(t.next, len(t.plan)):]
	var cost func(plannedLeg) float64
	source := ETAModel
	if m := t.model; m != nil {
		model := func(l plannedLeg) float64 { return m.Seconds(l.prompt, l.cached(m), l.completion) / t.speedup }
		overhead := 0.0
		for _, d := range t.done {
			overhead += (d.seconds - model(d.leg)) / float64(len(t.done))
		}
		cost = func(l plannedLeg) float64 { return model(l) + overhead }
	} else {
		f, ok := fitLegs(t.done)
		if !ok {
			return ETA{}
		}
		cost, source = f.seconds, ETAMeasured
	}
	left := 0.0
	for _, l := range rest {
		left += max(cost(l), 0)
	}
	return ETA{time.Duration(left * float64(time.Second)), source}
}

// legCost is a leg's wall time fitted to the legs done: a fixed part per
// leg, a part per prompt token computed (not served from the cache) and a
// part per output token.
type legCost struct{ perLeg, perPromptToken, perOutputToken float64 }

func (c legCost) seconds(l plannedLeg) float64 {
	return c.perLeg + c.perPromptToken*float64(l.prompt-l.cached(nil)) + c.perOutputToken*float64(l.completion)
}

// fitLegs fits a legCost to the legs done by least squares, with every
// part >= 0: it drops the parts the legs cannot tell apart (one context
// done cannot separate the fixed part from the prompt's) or that come out
// negative. It fails until two legs are done.
func fitLegs(done []doneLeg) (legCost, bool) {
	if len(done) < 2 {
		return legCost{}, false
	}
	features := func(l plannedLeg) [3]float64 {
		return [3]float64{1, float64(l.prompt - l.cached(nil)), float64(l.completion)}
	}
	// The parts tried, most first.
	for _, use := range [][]int{{0, 1, 2}, {1, 2}, {0, 1}, {0, 2}, {1}, {2}, {0}} {
		var ata [3][3]float64
		var aty [3]float64
		for _, d := range done {
			x := features(d.leg)
			for i, fi := range use {
				aty[i] += x[fi] * d.seconds
				for j, fj := range use {
					ata[i][j] += x[fi] * x[fj]
				}
			}
		}
		coef, ok := solve(ata, aty, len(use))
		if !ok {
			continue
		}
		var c [3]float64
		neg := false
		for i, fi := range use {
			c[fi] = coef[i]
			neg = neg || coef[i] < 0
		}
		if !neg {
			return legCost{c[0], c[1], c[2]}, true
		}
	}
	return legCost{}, false
}

// solve solves the n x n system a x = b by Gaussian elimination with
// partial pivoting; ok is false when a is singular (the legs done cannot
// tell the parts apart).
func solve(a [3][3]float64, b [3]float64, n int) ([3]float64, bool) {
	var x [3]float64
	scale := 0.0
	for i := range n {
		for j := range n {
			scale = max(scale, math.Abs(a[i][j]))
		}
	}
	for col := range n {
		pivot := col
		for r := col + 1; r < n; r++ {
			if math.Abs(a[r][col]) > math.Abs(a[pivot][col]) {
				pivot = r
			}
		}
		if math.Abs(a[pivot][col]) <= 1e-12*scale {
			return x, false
		}
		a[col], a[pivot] = a[pivot], a[col]
		b[col], b[pivot] = b[pivot], b[col]
		for r := col + 1; r < n; r++ {
			f := a[r][col] / a[col][col]
			for k := col; k < n; k++ {
				a[r][k] -= f * a[col][k]
			}
			b[r] -= f * b[col]
		}
	}
	for i := n - 1; i >= 0; i-- {
		s := b[i]
		for k := i + 1; k < n; k++ {
			s -= a[i][k] * x[k]
		}
		x[i] = s / a[i][i]
	}
	return x, true
}

package harness

import (
	"fmt"
	"io"
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
			for i := range tp.Repeat {
				if m == Naive {
					cachedA := 0
					if i > 0 {
						cachedA = p.CachedOnRepeat(pt.Tokens)
					}
					secs += p.Seconds(pt.Tokens, cachedA, tp.A) + p.Seconds(pt.Tokens, p.CachedOnRepeat(pt.Tokens), tp.B)
				} else {
					secs += p.Seconds(pt.Tokens, 0, tp.A) + p.Seconds(pt.Tokens, 0, tp.B)
				}
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

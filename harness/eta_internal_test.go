package harness

import (
	"math"
	"testing"
	"time"
)

// recorder keeps what a Progress is told.
type recorder struct {
	legs  int
	etas  []ETA
	done  int
	rows  int
	ended bool
}

func (r *recorder) Start(legs int)         { r.legs = legs }
func (r *recorder) Leg(_ string, left ETA) { r.etas = append(r.etas, left) }
func (r *recorder) Done()                  { r.done++ }
func (r *recorder) Row(*Report)            { r.rows++ }
func (r *recorder) Finish()                { r.ended = true }

// A cost exactly of legCost's form is fitted exactly, from two legs of one
// context on (which cannot separate the fixed part from the prompt's: it
// goes into the prompt's), and all three parts from two contexts on.
func TestFitLegs(t *testing.T) {
	cost := legCost{perLeg: 0.5, perPromptToken: 0.0003, perOutputToken: 0.01}
	leg := func(prompt, completion int, repeated bool) doneLeg {
		l := plannedLeg{prompt, completion, repeated}
		return doneLeg{l, cost.seconds(l)}
	}
	if _, ok := fitLegs([]doneLeg{leg(1024, 1, false)}); ok {
		t.Errorf("one leg: fitted; want no fit")
	}
	one := []doneLeg{leg(1024, 1, false), leg(1024, 17, false)}
	got, ok := fitLegs(one)
	want := legCost{0, 0.0003 + 0.5/1024, 0.01}
	if !ok || !near(got, want) {
		t.Errorf("one context: got %+v, %v; want %+v", got, ok, want)
	}
	two := append(one, leg(8192, 1, false), leg(8192, 17, false))
	if got, ok := fitLegs(two); !ok || !near(got, cost) {
		t.Errorf("two contexts: got %+v, %v; want %+v", got, ok, cost)
	}
	// A repeated prompt (naive) computes one token: its legs fit too.
	naive := append(two, leg(4096, 1, true), leg(4096, 17, true))
	if got, ok := fitLegs(naive); !ok || !near(got, cost) {
		t.Errorf("with naive legs: got %+v, %v; want %+v", got, ok, cost)
	}
	// A part that comes out negative is dropped: a longer prompt that went
	// faster gives a fit without it, every part >= 0.
	odd := []doneLeg{{plannedLeg{1024, 1, false}, 2}, {plannedLeg{8192, 1, false}, 1}, {plannedLeg{8192, 17, false}, 1.16}}
	if got, ok := fitLegs(odd); !ok || got.perLeg < 0 || got.perPromptToken < 0 || got.perOutputToken < 0 {
		t.Errorf("odd legs: got %+v, %v; want every part >= 0", got, ok)
	}
}

func near(a, b legCost) bool {
	close := func(x, y float64) bool { return math.Abs(x-y) <= 1e-9*math.Max(1, math.Abs(y)) }
	return close(a.perLeg, b.perLeg) && close(a.perPromptToken, b.perPromptToken) && close(a.perOutputToken, b.perOutputToken)
}

// Without a cost model the ETA is unknown until two legs are done, then
// fitted to them: here exactly, since the legs cost what legCost can say.
func TestETAFromLegsDone(t *testing.T) {
	rec := &recorder{}
	tr := newTracker(rec)
	clock := time.Unix(0, 0)
	tr.now = func() time.Time { return clock }
	tp := &TwoPoint{Points: []Point{{1024, 1024}, {8192, 8192}, {32768, 32768}}, A: 1, B: 17, Methods: []Method{FlushNonce}, Repeat: 1}
	cost := legCost{perLeg: 0.5, perPromptToken: 0.0003, perOutputToken: 0.01}
	tr.Start(tp.plan())
	if rec.legs != 6 {
		t.Fatalf("legs: got %d, want 6", rec.legs)
	}
	for _, l := range tr.plan {
		tr.Leg("leg")
		clock = clock.Add(time.Duration(cost.seconds(l) * float64(time.Second)))
		tr.Done()
	}
	for i, eta := range rec.etas {
		if i < 2 {
			if eta.Source != ETAUnknown {
				t.Errorf("leg %d: %+v, want unknown", i+1, eta)
			}
			continue
		}
		want := 0.0
		for _, l := range tr.plan[i:] {
			want += cost.seconds(l)
		}
		// Two legs of one context put the fixed part into the prompt's: the
		// ETA overshoots at first and is exact from the second context on.
		if i >= 4 && math.Abs(eta.Left.Seconds()-want) > 1e-6 || eta.Source != ETAMeasured || eta.Left.Seconds() < want-1e-6 {
			t.Errorf("leg %d: %v (%v), want %.6f s measured", i+1, eta.Left, eta.Source, want)
		}
	}
}

// flatModel predicts a fixed time per leg, and a prompt sent again reuses
// all but a page.
type flatModel struct{ seconds float64 }

func (m flatModel) Seconds(prompt, cached, completion int) float64 { return m.seconds }
func (m flatModel) CachedOnRepeat(prompt int) int                  { return prompt - 16 }

// With a cost model the ETA is the model's time of the legs left, in
// wall seconds (over the speedup), plus the mean time the legs done took
// beyond it.
func TestETAFromModel(t *testing.T) {
	rec := &recorder{}
	tr := newTracker(rec)
	clock := time.Unix(0, 0)
	tr.now = func() time.Time { return clock }
	tr.model, tr.speedup = flatModel{10}, 5 // 2 wall seconds a leg
	tr.Start((&Stream{Points: []Point{{1024, 1024}, {2048, 2048}, {4096, 4096}}, MaxNewTokens: 64}).plan())
	took := []time.Duration{2500 * time.Millisecond, 3500 * time.Millisecond, 2 * time.Second}
	for _, d := range took {
		tr.Leg("leg")
		clock = clock.Add(d)
		tr.Done()
	}
	// Before leg 1: 3 x 2 s. Before leg 2: 2 x (2 + 0.5). Before leg 3:
	// 1 x (2 + 1).
	for i, want := range []time.Duration{6 * time.Second, 5 * time.Second, 3 * time.Second} {
		if got := rec.etas[i]; got.Left != want || got.Source != ETAModel {
			t.Errorf("leg %d: ETA %v (%v), want %v from the model", i+1, got.Left, got.Source, want)
		}
	}
}

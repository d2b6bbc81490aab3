package harness_test

import (
	"bytes"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglmock/sglmock/harness"
	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
	"github.com/sglmock/sglmock/mockserver/profile"
	"github.com/sglmock/sglmock/sim"
)

// profileModel is the profile's evaluator, as the command passes it.
type profileModel struct{ p *profile.Profile }

func (m profileModel) Seconds(prompt, cached, completion int) float64 {
	e := m.p.Expect(prompt, cached, completion)
	return e.TTFT.Seconds() + e.DecodeSeconds
}

func (m profileModel) CachedOnRepeat(prompt int) int { return m.p.ReusablePrefixLen(prompt) }

func readModel(p *sim.Profile) (harness.Predictor, error) {
	prof, err := profile.Parse(bytes.NewReader(p.Profile), p.Name)
	return profileModel{prof}, err
}

// timedProgress notes when each leg is announced and its ETA, and when the
// run ends.
type timedProgress struct {
	harness.NoProgress
	at   []time.Time
	etas []harness.ETA
	end  time.Time
}

func (p *timedProgress) Leg(_ string, left harness.ETA) {
	p.at, p.etas = append(p.at, time.Now()), append(p.etas, left)
}
func (p *timedProgress) Finish() { p.end = time.Now() }

// Against sglmock the ETA comes from the server's own cost model, read from
// /sim/profile: on virtual time a lone request takes exactly what the model
// says, so the time left announced before each leg is the time the rest of
// the run then took, at any speedup.
func TestETAIsTheModelsTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mocktest.Profile(t, "default")
		m := mocktest.Start(t, api.Config{Profile: p, Speedup: 4})
		prog := &timedProgress{}
		tp := twoPoint(m, []harness.Point{{CtxReq: 1024, Tokens: 1024}, {CtxReq: 8192, Tokens: 8192}}, harness.NonceMethod)
		tp.Progress, tp.CostModel = prog, readModel
		tp.Repeat = 2
		run(t, tp)
		if len(prog.etas) != 8 {
			t.Fatalf("got %d legs announced, want 8", len(prog.etas))
		}
		for i, eta := range prog.etas {
			if took := prog.end.Sub(prog.at[i]); eta.Source != harness.ETAModel || (eta.Left-took).Abs() > time.Microsecond {
				t.Errorf("leg %d: ETA %v (%v); the rest took %v", i+1, eta.Left, eta.Source, took)
			}
		}
	})
}

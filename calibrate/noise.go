package calibrate

import (
	"math"
)

// The noise of a leg is the standard error of its time: how far the median
// of its runs may be from the median of many. The fit weighs each leg by it
// and judges each residual against it.
const (
	// z95 is the normal quantile of a 95 % interval, as bench's ± figures
	// use it.
	z95 = 1.96
	// medianSE is the standard error of the median of n runs, times √n,
	// in standard deviations of one run: √(π/2), the large-sample figure
	// bench's spread check takes.
	medianSE = 1.2533
	// priorDoF is how many degrees of freedom the sweep's pooled spread
	// counts for against a leg's own: two runs give one, so a row measured
	// twice leans on the sweep, and one measured six times or more on
	// itself.
	priorDoF = 4
	// minNoise is the least relative standard error a leg is taken to
	// have: the client's clock and the HTTP round trip alone vary that
	// much, and runs that agree exactly (a mock's) would otherwise weigh
	// without bound.
	minNoise = 0.001
)

// medianFactor is the standard error of the median of n runs against one
// run's standard deviation, before the 1/√n: 1 for one run, medianSE for
// a median, as bench reckons it.
func medianFactor(n int) float64 {
	if n > 1 {
		return medianSE
	}
	return 1
}

// spreadSD is the relative standard deviation of one run from bench's
// spread, (max-min)/median over n runs: for two runs their sample
// standard deviation exactly (the range over √2, as bench's own ± figures
// have it), for more the range over d2(n), the expected range of n normal
// draws in standard deviations.
func (f *fitter) spreadSD(spread float64, n int) float64 {
	if n == 2 {
		return spread / math.Sqrt2
	}
	d, ok := f.d2[n]
	if !ok {
		d = expectedRange(n)
		f.d2[n] = d
	}
	return spread / d
}

// expectedRange is d2(n), the expected range of n standard normal draws:
// the integral of 1 - Φ(x)^n - (1-Φ(x))^n over x, by Simpson's rule.
func expectedRange(n int) float64 {
	const lo, hi, steps = -12.0, 12.0, 4800
	h := (hi - lo) / steps
	g := func(x float64) float64 {
		phi := 0.5 * math.Erfc(-x/math.Sqrt2)
		return 1 - math.Pow(phi, float64(n)) - math.Pow(1-phi, float64(n))
	}
	s := g(lo) + g(hi)
	for i := 1; i < steps; i++ {
		w := 2.0
		if i%2 == 1 {
			w = 4
		}
		s += w * g(lo+float64(i)*h)
	}
	return s * h / 3
}

// NoiseKind is the legs whose noise is pooled together: legs of one token
// (a prefill alone) and legs that decode, whose run-to-run variation is
// mostly decode's.
type NoiseKind struct {
	Name string // "prefill" or "decode"
	// Legs is how many legs of the kind the fit used, Measured how many of
	// them had a spread of their own, over DoF degrees of freedom in all.
	Legs, Measured, DoF int
	// SD is the pooled relative standard deviation of one run; when no
	// leg measured it (DoF 0), it is Tolerance/z95: taken as known to
	// ±Tolerance (95 %).
	SD float64
}

// Assumed tells whether no leg of the kind measured its noise.
func (k NoiseKind) Assumed() bool { return k.DoF == 0 }

// assignNoise sets each leg's standard error: its own relative variance,
// where its runs show one, pooled with its kind's (each leg's weighted by
// its degrees of freedom, the kind's by priorDoF), over √runs and times
// the median's factor; a kind that no leg measured is taken as known to
// ±Tolerance (95 %).
func assignNoise(obs []observation) [2]NoiseKind {
	kinds := [2]NoiseKind{{Name: "prefill"}, {Name: "decode"}}
	var pooled [2]float64
	kindOf := func(o observation) int {
		if o.decodes() {
			return 1
		}
		return 0
	}
	for _, o := range obs {
		k := &kinds[kindOf(o)]
		k.Legs++
		if o.ownDoF > 0 {
			k.Measured++
			k.DoF += o.ownDoF
			pooled[kindOf(o)] += float64(o.ownDoF) * o.own
		}
	}
	for i := range kinds {
		if kinds[i].DoF > 0 {
			kinds[i].SD = math.Sqrt(pooled[i] / float64(kinds[i].DoF))
		} else {
			kinds[i].SD = Tolerance / z95
		}
	}
	for i := range obs {
		o := &obs[i]
		k := kinds[kindOf(*o)]
		if k.Assumed() {
			o.sigma, o.assumed = k.SD*o.seconds, true
		} else {
			prior := float64(min(priorDoF, k.DoF))
			v := (float64(o.ownDoF)*o.own + prior*k.SD*k.SD) / (float64(o.ownDoF) + prior)
			o.sigma = medianFactor(o.runs) * math.Sqrt(v) * o.seconds / math.Sqrt(float64(o.runs))
		}
		o.sigma = max(o.sigma, minNoise*o.seconds)
	}
	return kinds
}

package calibrate

import "math"

// The fit judges residuals by two distributions only: the standard normal
// (one residual over its standard error) and the χ² of k degrees of
// freedom (their sum of squares). Their quantiles are computed here rather
// than taken from a statistics library: the normal one is closed-form in
// the inverse error function, and the χ² one inverts the regularized
// incomplete gamma function, P(k/2, x/2), to the last few bits.

// normalQuantile is the standard normal quantile: the z below which a
// standard normal draw falls with probability p, for 0 < p < 1.
func normalQuantile(p float64) float64 {
	return math.Sqrt2 * math.Erfinv(2*p-1)
}

// chiSquareQuantile is the x below which a χ² draw of k degrees of freedom
// falls with probability p, for 0 < p < 1 and k >= 1: the root of
// P(k/2, x/2) = p, found by Newton's method on the density, kept inside a
// bracket that bisection narrows whenever a Newton step would leave it.
func chiSquareQuantile(p float64, k int) float64 {
	a := float64(k) / 2
	cdf := func(x float64) float64 { return lowerGammaP(a, x/2) }
	lgam, _ := math.Lgamma(a)
	density := func(x float64) float64 { return math.Exp((a-1)*math.Log(x/2)-x/2-lgam) / 2 }
	// Wilson and Hilferty's cube of a normal starts Newton close to the root.
	h := 2 / (9 * float64(k))
	x := float64(k) * math.Pow(max(1-h+normalQuantile(p)*math.Sqrt(h), 0.01), 3)
	lo, hi := 0.0, x
	for cdf(hi) < p {
		lo, hi = hi, 2*hi
	}
	for range 200 {
		f := cdf(x) - p
		if f < 0 {
			lo = x
		} else {
			hi = x
		}
		next := x - f/density(x)
		if !(next > lo && next < hi) {
			next = lo + (hi-lo)/2
		}
		if math.Abs(next-x) <= 1e-15*x || hi-lo <= 1e-15*hi {
			return next
		}
		x = next
	}
	return x
}

// lowerGammaP is the regularized lower incomplete gamma function P(a, x) =
// γ(a, x)/Γ(a) for a > 0: its power series below x = a + 1, one minus the
// continued fraction of Q(a, x) (evaluated by Lentz's method) above, each
// summed until a term no longer changes the sum in float64. Both take
// about √a terms near x = a, so the loops are bounded by that.
func lowerGammaP(a, x float64) float64 {
	if x <= 0 {
		return 0
	}
	lgam, _ := math.Lgamma(a)
	front := math.Exp(a*math.Log(x) - x - lgam)
	limit := 1000 + int(100*math.Sqrt(a))
	const eps = 1e-17
	if x < a+1 {
		term := 1 / a
		sum := term
		for n := 1; n < limit; n++ {
			term *= x / (a + float64(n))
			sum += term
			if term < sum*eps {
				break
			}
		}
		return min(sum*front, 1)
	}
	const tiny = 1e-300
	b := x + 1 - a
	c := 1 / tiny
	d := 1 / b
	frac := d
	for n := 1; n < limit; n++ {
		an := -float64(n) * (float64(n) - a)
		b += 2
		d = an*d + b
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = b + an/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		delta := d * c
		frac *= delta
		if math.Abs(delta-1) < eps {
			break
		}
	}
	return max(1-front*frac, 0)
}

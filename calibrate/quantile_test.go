package calibrate

import (
	"math"
	"testing"
)

// The χ² quantiles a fit judges by, against the published tables (to the
// digits given, checked in 30-digit arithmetic): the 99 % quantiles the
// reports print (27.7 for 13 degrees of freedom, 18.5 for 7), both tails,
// and degrees of freedom from 1 to 1000.
func TestChiSquareQuantileTable(t *testing.T) {
	for _, c := range []struct {
		p    float64
		k    int
		want float64
	}{
		{0.99, 1, 6.634896601},
		{0.99, 2, 9.210340372},
		{0.99, 3, 11.34486673},
		{0.99, 4, 13.27670414},
		{0.99, 7, 18.47530691},
		{0.99, 10, 23.20925116},
		{0.99, 13, 27.68824961},
		{0.99, 100, 135.8067232},
		{0.99, 1000, 1106.968994},
		{0.95, 1, 3.841458821},
		{0.95, 10, 18.30703805},
		{0.05, 10, 3.940299136},
		{0.5, 1, 0.4549364231},
		{0.5, 2, 1.386294361},
		{0.01, 1, 0.0001570878579},
	} {
		if got := chiSquareQuantile(c.p, c.k); math.Abs(got/c.want-1) > 1e-9 {
			t.Errorf("χ² quantile p %g, k %d: got %.10g, want %.10g", c.p, c.k, got, c.want)
		}
	}
}

// The quantile inverts the distribution function at every degrees of
// freedom a fit can have, up to a million legs.
func TestChiSquareQuantileInverts(t *testing.T) {
	for _, k := range []int{1, 2, 5, 31, 500, 12345, 1000000} {
		for _, p := range []float64{1e-6, 0.01, 0.5, 0.99, 1 - 1e-9} {
			x := chiSquareQuantile(p, k)
			// Relative to the nearer tail, down to float64's spacing at 1.
			if got := lowerGammaP(float64(k)/2, x/2); math.Abs(got-p) > 1e-9*min(p, 1-p)+4e-16 {
				t.Errorf("k %d, p %g: quantile %.12g has P %.15g, want %.15g", k, p, x, got, p)
			}
		}
	}
}

// The regularized incomplete gamma function against its closed forms:
// P(1, x) = 1 - e^-x, P(1/2, x) = erf(√x), P(2, x) = 1 - (1+x)e^-x, on
// both sides of a + 1, where it changes from series to continued fraction.
func TestLowerGammaP(t *testing.T) {
	for _, x := range []float64{1e-8, 0.01, 0.5, 1.4, 1.6, 2.9, 3.1, 10, 40, 700} {
		for _, c := range []struct {
			a    float64
			want float64
		}{
			{1, -math.Expm1(-x)},
			{0.5, math.Erf(math.Sqrt(x))},
			{2, 1 - (1+x)*math.Exp(-x)},
		} {
			if got := lowerGammaP(c.a, x); math.Abs(got-c.want) > 1e-14*math.Max(c.want, 1e-300) && math.Abs(got-c.want) > 1e-15 {
				t.Errorf("P(%g, %g): got %.17g, want %.17g", c.a, x, got, c.want)
			}
		}
	}
}

// The normal quantiles against the tables: the 95 % half-width the
// reports use (1.96), the 99 % two-sided one residuals are judged by.
func TestNormalQuantile(t *testing.T) {
	for _, c := range []struct{ p, want float64 }{
		{0.5, 0},
		{0.9, 1.281551566},
		{0.975, 1.959963985},
		{0.995, 2.575829304},
		{0.999, 3.090232306},
		{1e-6, -4.753424309},
	} {
		if got := normalQuantile(c.p); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("normal quantile %g: got %.10g, want %.10g", c.p, got, c.want)
		}
	}
}

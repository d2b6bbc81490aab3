package calibrate

import (
	"math"
)

// gram holds the normal equations of a weighted least-squares problem in
// k unknowns, over rows already divided by their standard errors: m = Σ
// x xᵀ, v = Σ x y and yy = Σ y². A fit without some rows is the fit of
// the gram less theirs, so leaving a prompt size out costs its own rows,
// not a pass over all of them, and the whole fit stays linear in the rows.
type gram struct {
	k  int
	m  []float64 // k×k, row-major
	v  []float64
	yy float64
}

func newGram(k int) *gram { return &gram{k: k, m: make([]float64, k*k), v: make([]float64, k)} }

// add adds one row: coefficients x, value y.
func (g *gram) add(x []float64, y float64) {
	for i := range g.k {
		for j := range g.k {
			g.m[i*g.k+j] += x[i] * x[j]
		}
		g.v[i] += x[i] * y
	}
	g.yy += y * y
}

// minus is g without h's rows.
func (g *gram) minus(h *gram) *gram {
	out := newGram(g.k)
	for i := range g.m {
		out.m[i] = g.m[i] - h.m[i]
	}
	for i := range g.v {
		out.v[i] = g.v[i] - h.v[i]
	}
	out.yy = g.yy - h.yy
	return out
}

// chiSquare is the sum of squared residuals at x: Σ (x·row - y)².
func (g *gram) chiSquare(x []float64) float64 {
	s := g.yy
	for i := range g.k {
		s -= 2 * x[i] * g.v[i]
		for j := range g.k {
			s += x[i] * g.m[i*g.k+j] * x[j]
		}
	}
	return max(s, 0)
}

// pivotFloor is the smallest pivot of a column-scaled Cholesky factor
// taken as independent: a column within 1e-6 of a combination of the
// others (in unit norm) leaves the rows unable to tell them apart.
const pivotFloor = 1e-12

// nonNegative solves min Σ (x·row - y)² subject to x >= 0, exactly: the
// optimum is the unconstrained solution on some subset of the columns
// with every coefficient >= 0, so every subset is tried and the feasible
// one with the smallest residual wins. It returns nil when no subset
// determines its coefficients (the rows are too few or too alike).
func (g *gram) nonNegative() []float64 {
	var best []float64
	bestRes := math.Inf(1)
	for mask := 1; mask < 1<<g.k; mask++ {
		var idx []int
		for j := range g.k {
			if mask&(1<<j) != 0 {
				idx = append(idx, j)
			}
		}
		coef := g.solve(idx)
		if coef == nil {
			continue
		}
		x := make([]float64, g.k)
		feasible := true
		for n, j := range idx {
			feasible = feasible && coef[n] >= 0
			x[j] = coef[n]
		}
		if !feasible {
			continue
		}
		if res := g.chiSquare(x); res < bestRes*(1-1e-12) || best == nil {
			best, bestRes = x, res
		}
	}
	return best
}

// scaled is the normal matrix and vector on the columns idx, each column
// scaled to unit norm (the columns differ by many orders of magnitude:
// chunks against squared tokens), and the scales; nil when a column is
// empty.
func (g *gram) scaled(idx []int) (a, b, scale []float64) {
	n := len(idx)
	scale = make([]float64, n)
	for p, j := range idx {
		scale[p] = math.Sqrt(g.m[j*g.k+j])
		if !(scale[p] > 0) {
			return nil, nil, nil
		}
	}
	a, b = make([]float64, n*n), make([]float64, n)
	for p, i := range idx {
		for q, j := range idx {
			a[p*n+q] = g.m[i*g.k+j] / (scale[p] * scale[q])
		}
		b[p] = g.v[i] / scale[p]
	}
	return a, b, scale
}

// cholesky factors the symmetric n×n matrix a in place into L (lower,
// row-major); false when a pivot falls below pivotFloor.
func cholesky(a []float64, n int) bool {
	for j := range n {
		d := a[j*n+j]
		for k := range j {
			d -= a[j*n+k] * a[j*n+k]
		}
		if d < pivotFloor {
			return false
		}
		d = math.Sqrt(d)
		a[j*n+j] = d
		for i := j + 1; i < n; i++ {
			s := a[i*n+j]
			for k := range j {
				s -= a[i*n+k] * a[j*n+k]
			}
			a[i*n+j] = s / d
		}
	}
	return true
}

// cholSolve solves L Lᵀ x = b in place.
func cholSolve(l []float64, n int, b []float64) {
	for i := range n {
		for k := range i {
			b[i] -= l[i*n+k] * b[k]
		}
		b[i] /= l[i*n+i]
	}
	for i := n - 1; i >= 0; i-- {
		for k := i + 1; k < n; k++ {
			b[i] -= l[k*n+i] * b[k]
		}
		b[i] /= l[i*n+i]
	}
}

// solve is the unconstrained least-squares solution on the columns idx;
// nil when they are not independent.
func (g *gram) solve(idx []int) []float64 {
	a, b, scale := g.scaled(idx)
	if a == nil || !cholesky(a, len(idx)) {
		return nil
	}
	cholSolve(a, len(idx), b)
	for p := range b {
		b[p] /= scale[p]
	}
	return b
}

// covariance is the inverse of the normal matrix on the columns idx, the
// covariance of their coefficients when each row's standard error is 1;
// nil when they are not independent.
func (g *gram) covariance(idx []int) [][]float64 {
	n := len(idx)
	a, _, scale := g.scaled(idx)
	if a == nil || !cholesky(a, n) {
		return nil
	}
	out := make([][]float64, n)
	for q := range n {
		e := make([]float64, n)
		e[q] = 1
		cholSolve(a, n, e)
		out[q] = e
	}
	for p := range n {
		for q := range n {
			out[p][q] /= scale[p] * scale[q]
		}
	}
	return out
}

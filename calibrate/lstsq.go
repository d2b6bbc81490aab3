package calibrate

import (
	"math"
	"slices"
)

// nnls solves min ||A x - y|| subject to x >= 0 for a handful of columns,
// exactly: the optimum is the unconstrained least-squares solution on some
// subset of the columns with every coefficient >= 0, so every subset is
// tried and the feasible one with the smallest residual wins. It returns
// nil when no subset determines its coefficients (the rows are too few or
// too alike).
//
// With more rows than columns the problem is first reduced, once, to its
// triangular factor (reduce): every subset is then solved on a few rows, so
// the cost is linear in the rows, not in rows x subsets.
func nnls(a [][]float64, y []float64) []float64 {
	cols := len(a[0])
	if len(a) > cols {
		a, y = reduce(a, y)
	}
	var best []float64
	bestRes := math.Inf(1)
	for mask := 1; mask < 1<<cols; mask++ {
		var idx []int
		for j := range cols {
			if mask&(1<<j) != 0 {
				idx = append(idx, j)
			}
		}
		sub := make([][]float64, len(a))
		for i, row := range a {
			sub[i] = make([]float64, len(idx))
			for k, j := range idx {
				sub[i][k] = row[j]
			}
		}
		coef := lstsq(sub, y)
		if coef == nil {
			continue
		}
		x := make([]float64, cols)
		feasible := true
		for k, j := range idx {
			if coef[k] < 0 {
				feasible = false
			}
			x[j] = coef[k]
		}
		if !feasible {
			continue
		}
		if res := residual(a, y, x); res < bestRes*(1-1e-12) {
			best, bestRes = x, res
		}
	}
	return best
}

func residual(a [][]float64, y, x []float64) float64 {
	s := 0.0
	for i, row := range a {
		r := -y[i]
		for j, v := range row {
			r += v * x[j]
		}
		s += r * r
	}
	return s
}

// reduce returns R and c, n rows each, such that ||A x - y||² = ||R x -
// c||² + a constant for every x, and so for x on any subset of the columns:
// A = QR by Householder reflections (on columns scaled to unit norm, scaled
// back after), c the first n entries of Q^T y. A column that is zero or a
// combination of the others leaves a zero on R's diagonal, which lstsq
// then refuses, as it would on A.
func reduce(a [][]float64, y []float64) ([][]float64, []float64) {
	n := len(a[0])
	r, scale := scaleColumns(a)
	b := append([]float64(nil), y...)
	v := make([]float64, len(a))
	for k := range n {
		householder(r, b, v, k)
	}
	out := make([][]float64, n)
	for k := range n {
		out[k] = make([]float64, n)
		for j := range n {
			out[k][j] = r[k][j] * scale[j]
		}
	}
	return out, b[:n]
}

// scaleColumns copies a with each column scaled to unit norm, and returns
// the norms (a zero column stays zero): the columns differ by many orders
// of magnitude (chunks against squared tokens).
func scaleColumns(a [][]float64) ([][]float64, []float64) {
	m, n := len(a), len(a[0])
	r := make([][]float64, m)
	for i := range r {
		r[i] = append([]float64(nil), a[i]...)
	}
	scale := make([]float64, n)
	for j := range n {
		s := 0.0
		for i := range m {
			s += r[i][j] * r[i][j]
		}
		scale[j] = math.Sqrt(s)
		if scale[j] > 0 {
			for i := range m {
				r[i][j] /= scale[j]
			}
		}
	}
	return r, scale
}

// householder applies to the columns k.. of r and to b the reflection that
// zeroes column k below its diagonal, and returns that part of the
// column's norm before it; v is scratch of len(r).
func householder(r [][]float64, b, v []float64, k int) float64 {
	m, n := len(r), len(r[0])
	norm := 0.0
	for i := k; i < m; i++ {
		norm += r[i][k] * r[i][k]
	}
	norm = math.Sqrt(norm)
	size := norm
	if r[k][k] > 0 {
		norm = -norm
	}
	for i := k; i < m; i++ {
		v[i] = r[i][k]
	}
	v[k] -= norm
	vv := 0.0
	for i := k; i < m; i++ {
		vv += v[i] * v[i]
	}
	if vv == 0 {
		return size
	}
	for j := k; j < n; j++ {
		d := 0.0
		for i := k; i < m; i++ {
			d += v[i] * r[i][j]
		}
		f := 2 * d / vv
		for i := k; i < m; i++ {
			r[i][j] -= f * v[i]
		}
	}
	d := 0.0
	for i := k; i < m; i++ {
		d += v[i] * b[i]
	}
	f := 2 * d / vv
	for i := k; i < m; i++ {
		b[i] -= f * v[i]
	}
	return size
}

// lstsq solves min ||A x - y|| by Householder QR on column-scaled A. It
// returns nil when A is rank-deficient (a column is a combination of the
// others within rounding) or has fewer rows than columns.
func lstsq(a [][]float64, y []float64) []float64 {
	m, n := len(a), len(a[0])
	if m < n {
		return nil
	}
	r, scale := scaleColumns(a)
	if slices.Contains(scale, 0) {
		return nil
	}
	b := append([]float64(nil), y...)
	v := make([]float64, m)
	for k := range n {
		if householder(r, b, v, k) < 1e-10 {
			return nil
		}
	}
	x := make([]float64, n)
	for k := n - 1; k >= 0; k-- {
		s := b[k]
		for j := k + 1; j < n; j++ {
			s -= r[k][j] * x[j]
		}
		x[k] = s / r[k][k]
	}
	for j := range x {
		x[j] /= scale[j]
	}
	return x
}

// isotonic returns the non-decreasing sequence closest to y in weighted
// least squares (pool adjacent violators).
func isotonic(y, w []float64) []float64 {
	type block struct {
		sum, weight float64
		n           int
	}
	var blocks []block
	for i := range y {
		blocks = append(blocks, block{y[i] * w[i], w[i], 1})
		for len(blocks) > 1 {
			last, prev := blocks[len(blocks)-1], blocks[len(blocks)-2]
			if prev.sum/prev.weight <= last.sum/last.weight {
				break
			}
			blocks = blocks[:len(blocks)-2]
			blocks = append(blocks, block{prev.sum + last.sum, prev.weight + last.weight, prev.n + last.n})
		}
	}
	out := make([]float64, 0, len(y))
	for _, b := range blocks {
		for range b.n {
			out = append(out, b.sum/b.weight)
		}
	}
	return out
}

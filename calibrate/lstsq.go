package calibrate

import "math"

// nnls solves min ||A x - y|| subject to x >= 0 for a handful of columns,
// exactly: the optimum is the unconstrained least-squares solution on some
// subset of the columns with every coefficient >= 0, so every subset is
// tried and the feasible one with the smallest residual wins. It returns
// nil when no subset determines its coefficients (the rows are too few or
// too alike).
func nnls(a [][]float64, y []float64) []float64 {
	cols := len(a[0])
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

// lstsq solves min ||A x - y|| by Householder QR on column-scaled A. It
// returns nil when A is rank-deficient (a column is a combination of the
// others within rounding) or has fewer rows than columns.
func lstsq(a [][]float64, y []float64) []float64 {
	m, n := len(a), len(a[0])
	if m < n {
		return nil
	}
	// Scale each column to unit norm: the columns differ by many orders of
	// magnitude (chunks against squared tokens).
	scale := make([]float64, n)
	r := make([][]float64, m)
	for i := range r {
		r[i] = append([]float64(nil), a[i]...)
	}
	for j := range n {
		s := 0.0
		for i := range m {
			s += r[i][j] * r[i][j]
		}
		s = math.Sqrt(s)
		if s == 0 {
			return nil
		}
		scale[j] = s
		for i := range m {
			r[i][j] /= s
		}
	}
	b := append([]float64(nil), y...)
	for k := range n {
		norm := 0.0
		for i := k; i < m; i++ {
			norm += r[i][k] * r[i][k]
		}
		norm = math.Sqrt(norm)
		if norm < 1e-10 {
			return nil
		}
		if r[k][k] > 0 {
			norm = -norm
		}
		v := make([]float64, m)
		for i := k; i < m; i++ {
			v[i] = r[i][k]
		}
		v[k] -= norm
		vv := 0.0
		for i := k; i < m; i++ {
			vv += v[i] * v[i]
		}
		if vv == 0 {
			continue
		}
		apply := func(col func(i int) *float64) {
			d := 0.0
			for i := k; i < m; i++ {
				d += v[i] * *col(i)
			}
			f := 2 * d / vv
			for i := k; i < m; i++ {
				*col(i) -= f * v[i]
			}
		}
		for j := k; j < n; j++ {
			apply(func(i int) *float64 { return &r[i][j] })
		}
		apply(func(i int) *float64 { return &b[i] })
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

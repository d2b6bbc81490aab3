package calibrate

import (
	"math"
	"slices"
)

// Accuracy is what leaving each prompt size out says of the fit: each
// leg predicted by the same forms fitted to every other prompt size.
type Accuracy struct {
	// Max is the largest relative error over every leg predicted, at
	// MaxLeg (an index into Result.Legs); Inside the largest over the
	// prompt sizes between the smallest and the largest measured, whose
	// prediction is an interpolation.
	Max, Inside float64
	MaxLeg      int
	// Sizes is how many prompt sizes were left out and predicted; 0 when
	// the rows have too few for any (Need more are needed) or too many to
	// refit a table for each (more than maxTablePoints).
	Sizes, Need int
}

// Known tells whether any prompt size could be left out and predicted.
func (a Accuracy) Known() bool { return a.Sizes > 0 }

// minSizes is the prompt sizes the formula needs: one per prefill
// coefficient.
const minSizes = 3

// leaveOneOut predicts every leg by the chosen forms fitted without its
// prompt size. The formulas' fit without a size is the fit of the normal
// equations less that size's legs, so it costs that size's legs; a table
// is fitted again, for at most maxTablePoints sizes.
func (f *fitter) leaveOneOut(res *Result, obs []observation, c *candidate) {
	sizes := promptSizes(obs)
	if len(sizes) <= minSizes {
		res.Accuracy.Need = minSizes + 1 - len(sizes)
		return
	}
	formula := c.forms == [2]Form{Formula, Formula}
	if !formula && len(sizes) > maxTablePoints {
		return
	}
	bySize := map[int][]int{}
	for i, o := range obs {
		bySize[o.prompt] = append(bySize[o.prompt], i)
	}
	var all *gram
	if formula {
		all = f.gramOf(obs)
	}
	acc := &res.Accuracy
	acc.MaxLeg = -1
	for _, size := range sizes {
		idx := bySize[size]
		var predict func(o observation) float64
		if formula {
			left := make([]observation, len(idx))
			for n, i := range idx {
				left[n] = obs[i]
			}
			rest := all.minus(f.gramOf(left))
			if rest.solve([]int{0, 1, 2, 3, 4}) == nil {
				continue
			}
			theta := rest.nonNegative()
			if theta == nil {
				continue
			}
			predict = func(o observation) float64 {
				s := 0.0
				for j, x := range f.features(o) {
					s += x * theta[j]
				}
				return s
			}
		} else {
			rest := slices.DeleteFunc(slices.Clone(obs), func(o observation) bool { return o.prompt == size })
			refit := f.fitForms(rest, c.forms)
			if refit == nil {
				continue
			}
			predict = func(o observation) float64 { return legSeconds(refit.profile, o.prompt, o.cached, o.completion) }
		}
		acc.Sizes++
		for _, i := range idx {
			e := predict(obs[i])/obs[i].seconds - 1
			res.Legs[i].LOO = &e
			if math.Abs(e) > acc.Max {
				acc.Max, acc.MaxLeg = math.Abs(e), i
			}
			if size != sizes[0] && size != sizes[len(sizes)-1] {
				acc.Inside = max(acc.Inside, math.Abs(e))
			}
		}
	}
}

// Contribution is what a row adds to the formulas: the coefficient whose
// uncertainty would grow most without it, and by how much.
type Contribution struct {
	// Coefficient is "" when the other rows do not determine the formulas.
	Coefficient string
	// With and Without are its relative 95 % half-widths with and without
	// the row; Without is +Inf when the other rows do not determine it.
	With, Without float64
}

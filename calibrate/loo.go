package calibrate

import (
	"fmt"
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
	// refit for each (Why says so).
	Sizes, Need int
	Why         string
}

// Known tells whether any prompt size could be left out and predicted.
func (a Accuracy) Known() bool { return a.Sizes > 0 }

// minSizes is the prompt sizes the formula needs: one per prefill
// coefficient.
const minSizes = 3

// maxLOOWork bounds the legs leave-one-out weighs, over every refit: a
// sweep of tens of sizes and legs needs thousands, and a file of a
// hundred thousand rows that each show their own spread would need 10^10.
const maxLOOWork = 1 << 24

// leaveOneOut predicts every leg by the chosen forms fitted without its
// prompt size: without its legs, and without their spreads in the noise
// the other legs are weighed by. When the left-out legs show no spread of
// their own the others' noise is unchanged, and the formulas' fit is that
// of the normal equations less those legs; otherwise the noise is pooled
// again and the rest refitted, as a table always is (for at most
// maxTablePoints sizes).
func (f *fitter) leaveOneOut(res *Result, obs []observation, c *candidate) {
	acc := &res.Accuracy
	sizes := promptSizes(obs)
	if len(sizes) <= minSizes {
		acc.Need = minSizes + 1 - len(sizes)
		return
	}
	formula := c.forms == [2]Form{Formula, Formula}
	if !formula && len(sizes) > maxTablePoints {
		acc.Why = fmt.Sprintf("a table is refitted for leave-one-out at %d prompt sizes at most, and these have %d", maxTablePoints, len(sizes))
		return
	}
	bySize := map[int][]int{}
	for i, o := range obs {
		bySize[o.prompt] = append(bySize[o.prompt], i)
	}
	spread := func(size int) bool {
		return slices.ContainsFunc(bySize[size], func(i int) bool { return obs[i].ownDoF > 0 })
	}
	refits := 0
	for _, size := range sizes {
		if !formula || spread(size) {
			refits++
		}
	}
	if refits > maxLOOWork/len(obs) {
		acc.Why = fmt.Sprintf("leave-one-out would refit the rest %d times over %d legs, more than the %d legs it weighs at most",
			refits, len(obs), maxLOOWork)
		return
	}
	var all *gram
	var xs [][]float64
	if formula {
		all = f.gramOf(obs)
		xs = make([][]float64, len(obs))
		for i, o := range obs {
			xs[i] = f.features(o)
		}
	}
	acc.MaxLeg = -1
	for _, size := range sizes {
		idx := bySize[size]
		var predict func(i int) float64
		if formula {
			var rest *gram
			if spread(size) {
				rest = f.refitGram(obs, xs, size)
			} else {
				left := make([]observation, len(idx))
				for n, i := range idx {
					left[n] = obs[i]
				}
				rest = all.minus(f.gramOf(left))
			}
			if rest.solve([]int{0, 1, 2, 3, 4}) == nil {
				continue
			}
			theta := rest.nonNegative()
			if theta == nil {
				continue
			}
			predict = func(i int) float64 {
				s := 0.0
				for j, x := range xs[i] {
					s += x * theta[j]
				}
				return s
			}
		} else {
			rest := slices.DeleteFunc(slices.Clone(obs), func(o observation) bool { return o.prompt == size })
			assignNoise(rest)
			refit := f.fitForms(rest, c.forms)
			if refit == nil {
				continue
			}
			predict = func(i int) float64 { return legSeconds(refit.profile, obs[i].prompt, obs[i].cached, obs[i].completion) }
		}
		acc.Sizes++
		for _, i := range idx {
			e := predict(i)/obs[i].seconds - 1
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

// refitGram is the normal equations of the legs at every prompt size but
// size, each weighed by its noise pooled from those legs alone; xs are
// the legs' features.
func (f *fitter) refitGram(obs []observation, xs [][]float64, size int) *gram {
	var rest []observation
	var restX [][]float64
	for i, o := range obs {
		if o.prompt != size {
			rest, restX = append(rest, o), append(restX, xs[i])
		}
	}
	assignNoise(rest)
	g := newGram(5)
	x := make([]float64, 5)
	for i, o := range rest {
		for j, v := range restX[i] {
			x[j] = v / o.sigma
		}
		g.add(x, o.seconds/o.sigma)
	}
	return g
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

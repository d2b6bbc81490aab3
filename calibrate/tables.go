package calibrate

import (
	"cmp"
	"math"
	"slices"

	"github.com/sglmock/sglmock/mockserver/profile"
)

// point is one span for a table: y at x, with weight.
type point struct{ x, y, w float64 }

// maxTablePoints bounds a fitted table: a sweep measures tens of sizes, and
// a table of a point per row of a large file would make every lookup (a
// scan of the table) and the profile's YAML as large as the file.
const maxTablePoints = 64

// table turns observations into a valid monotone table: equal x are
// averaged, beyond maxTablePoints neighbours are pooled into as many
// groups of equal weight, and y is made non-decreasing and >= 0.
func table(pts []point) profile.Table {
	slices.SortFunc(pts, func(a, b point) int {
		switch {
		case a.x < b.x:
			return -1
		case a.x > b.x:
			return 1
		}
		return 0
	})
	var xs, ys, ws []float64
	for _, p := range pts {
		if n := len(xs); n > 0 && xs[n-1] == p.x {
			ys[n-1] = (ys[n-1]*ws[n-1] + p.y*p.w) / (ws[n-1] + p.w)
			ws[n-1] += p.w
			continue
		}
		xs, ys, ws = append(xs, p.x), append(ys, p.y), append(ws, p.w)
	}
	xs, ys, ws = pool(xs, ys, ws, maxTablePoints)
	ys = isotonic(ys, ws)
	t := make(profile.Table, len(xs))
	for i := range xs {
		t[i] = [2]float64{xs[i], max(ys[i], 0)}
	}
	return t
}

// pool merges sorted points into at most n groups of consecutive points of
// about equal weight, each at its weighted mean x and y.
func pool(xs, ys, ws []float64, n int) ([]float64, []float64, []float64) {
	if len(xs) <= n {
		return xs, ys, ws
	}
	total := 0.0
	for _, w := range ws {
		total += w
	}
	var px, py, pw []float64
	sx, sy, sw, before := 0.0, 0.0, 0.0, 0.0
	for i := range xs {
		sx, sy, sw = sx+xs[i]*ws[i], sy+ys[i]*ws[i], sw+ws[i]
		// A group closes once the weight so far reaches its share.
		if i == len(xs)-1 || before+sw >= total*float64(len(pw)+1)/float64(n) {
			px, py, pw = append(px, sx/sw), append(py, sy/sw), append(pw, sw)
			before += sw
			sx, sy, sw = 0, 0, 0
		}
	}
	return px, py, pw
}

// prefillTable replaces p's per-token and attention terms with a table of
// cold-prefill compute time through every cold leg's prompt size, each
// leg weighed by its variance (a leg that decodes tells its prefill only
// through its decode's noise), keeping the per-chunk overhead and p's
// decode model.
func (f *fitter) prefillTable(p *profile.Profile, obs []observation) {
	overhead := p.Prefill.OverheadS
	var legs []span
	for _, o := range obs {
		if o.cached == 0 {
			legs = append(legs, span{prompt: o.prompt, to: o.completion, seconds: o.seconds, weight: 1 / (o.sigma * o.sigma)})
		}
	}
	var pts []point
	for _, o := range aggregate(legs) {
		chunks := f.prefillFeatures(o.prompt, 0)[0]
		pts = append(pts, point{float64(o.prompt), o.seconds - decodeSeconds(p, o.prompt, o.to) - chunks*overhead, o.weight})
	}
	p.Prefill = profile.PrefillCost{OverheadS: overhead, Table: table(pts)}
}

// span is a measured time of legs alike: decode from output token from
// to to after a prompt (the whole leg, for prefill), the mean seconds of
// weight legs.
type span struct {
	prompt, from, to int
	seconds, weight  float64
}

// maxSpans bounds what the tables are fitted through: the legs of
// a large file are pooled into as many groups of neighbours (a table keeps
// at most maxTablePoints points), so the fit's cost does not grow with the
// legs' number beyond reading them.
const maxSpans = 1024

// aggregate merges legs of the same prompt and outputs into one of their
// mean time, and pools neighbours (by outputs, then prompt) beyond
// maxSpans, each group at its weighted mean prompt and time.
func aggregate(legs []span) []span {
	slices.SortFunc(legs, func(a, b span) int {
		return cmp.Or(cmp.Compare(a.from, b.from), cmp.Compare(a.to, b.to), cmp.Compare(a.prompt, b.prompt))
	})
	var out []span
	for _, o := range legs {
		if n := len(out); n > 0 && out[n-1].prompt == o.prompt && out[n-1].from == o.from && out[n-1].to == o.to {
			last := &out[n-1]
			last.seconds = (last.seconds*last.weight + o.seconds*o.weight) / (last.weight + o.weight)
			last.weight += o.weight
			continue
		}
		out = append(out, o)
	}
	if len(out) <= maxSpans {
		return out
	}
	group := (len(out) + maxSpans - 1) / maxSpans
	var pooled []span
	var prompt, secs, weight float64
	for i, o := range out {
		prompt, secs, weight = prompt+float64(o.prompt)*o.weight, secs+o.seconds*o.weight, weight+o.weight
		last := i == len(out)-1 || out[i+1].from != o.from || out[i+1].to != o.to
		if last || (i+1)%group == 0 {
			pooled = append(pooled, span{prompt: int(math.Round(prompt / weight)), from: o.from, to: o.to, seconds: secs / weight, weight: weight})
			prompt, secs, weight = 0, 0, 0
		}
	}
	return pooled
}

// decodeTable replaces p's decode cost with a table of per-round cost
// against context through every row's decode time, on top of the base
// profile's step and per-sequence overheads (lowered as far as the
// cheapest round requires), and keeps p's prefill model.
func (f *fitter) decodeTable(p *profile.Profile, obs []observation) {
	legs := f.decodeSpans(p, obs)
	spans := aggregate(legs)
	factor := 1.0
	if p.Speculative != nil {
		factor = p.Speculative.RoundCostFactor
	}
	rounds := func(o span) float64 {
		return (f.unitDecodeOf(o.to).rounds - f.unitDecodeOf(o.from).rounds) / factor
	}
	measured := func(q *profile.Profile, o span) float64 {
		return decodeSeconds(q, o.prompt, o.to) - decodeSeconds(q, o.prompt, o.from)
	}
	perSeq := f.base.Decode.PerSeqS
	overhead := f.base.Decode.StepOverheadS
	perRound := make([]float64, len(spans))
	for i, o := range spans {
		perRound[i] = o.seconds / rounds(o) / factor
		overhead = min(overhead, perRound[i]-perSeq)
	}
	if overhead < 0 {
		perSeq, overhead = max(perSeq+overhead, 0), 0
	}
	pts := make([]point, len(spans))
	for i, o := range spans {
		pts[i] = point{float64(o.prompt) + float64(o.from+o.to)/2, perRound[i] - overhead - perSeq, o.weight}
	}
	p.Decode = profile.DecodeCost{StepOverheadS: overhead, PerSeqS: perSeq, CtxTable: table(slices.Clone(pts))}
	// The table's points stand for a leg's mean context; the context grows
	// during the leg, so correct each point by what its leg still misses.
	for range 4 {
		for i, o := range spans {
			pts[i].y += (o.seconds - measured(p, o)) / (factor * rounds(o))
		}
		p.Decode.CtxTable = table(slices.Clone(pts))
	}
}

// decodeSpans are the decode times the legs measured, each weighed by its
// variance: t_b - t_a between the cold legs of a row, which removes the
// prefill from both; for every other leg that decodes, its time less p's
// prediction of its prefill.
func (f *fitter) decodeSpans(p *profile.Profile, obs []observation) []span {
	coldA := map[int]observation{}
	for _, o := range obs {
		if o.leg == "a" && o.cached == 0 {
			coldA[o.row] = o
		}
	}
	var spans []span
	for _, o := range obs {
		if !o.decodes() || o.leg == "a" && o.cached == 0 {
			continue
		}
		if a, ok := coldA[o.row]; ok && o.cached == 0 && o.completion > a.completion {
			spans = append(spans, span{o.prompt, a.completion, o.completion, o.seconds - a.seconds, 1 / (o.sigma*o.sigma + a.sigma*a.sigma)})
			continue
		}
		spans = append(spans, span{o.prompt, 0, o.completion, o.seconds - prefillSeconds(p, o.prompt, o.cached), 1 / (o.sigma * o.sigma)})
	}
	return spans
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

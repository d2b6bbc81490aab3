package harness

import (
	"fmt"
	"image/color"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// series is one method's figures against context.
type series struct {
	name                       string
	ttft, prefill, decode      plotter.XYs
	badTTFT, badPre, badDecode plotter.XYs
}

func (r *Report) series() []*series {
	var out []*series
	byName := map[string]*series{}
	add := func(name string, ctx int, ttft, prefill float64, decode *float64, poisoned bool) {
		s := byName[name]
		if s == nil {
			s = &series{name: name}
			byName[name] = s
			out = append(out, s)
		}
		x := float64(ctx)
		s.ttft = append(s.ttft, plotter.XY{X: x, Y: ttft})
		s.prefill = append(s.prefill, plotter.XY{X: x, Y: prefill})
		if decode != nil {
			s.decode = append(s.decode, plotter.XY{X: x, Y: *decode})
		}
		if poisoned {
			s.badTTFT = append(s.badTTFT, plotter.XY{X: x, Y: ttft})
			s.badPre = append(s.badPre, plotter.XY{X: x, Y: prefill})
			if decode != nil {
				s.badDecode = append(s.badDecode, plotter.XY{X: x, Y: *decode})
			}
		}
	}
	for _, row := range r.Rows {
		add(string(row.Method), row.CtxReq, row.TTFT, row.PrefillTPS, row.DecodeTPS, row.Verdict.Level() == Poisoned)
	}
	for _, row := range r.Stream {
		d := row.DecodeTPS
		add("stream", row.CtxReq, row.TTFT, row.PrefillTPS, &d, row.Verdict.Level() == Poisoned)
	}
	return out
}

var plotColors = []color.RGBA{
	{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, {R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, {R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
}

// WritePlot draws TTFT, prefill tok/s and decode tok/s against context,
// one panel each and one line per method, to a PNG file. Poisoned points
// are circled in red; a poisoned row with no decode rate has no decode
// point at all.
func (r *Report) WritePlot(path string) error {
	ss := r.series()
	unit := "s"
	if r.Server.Mock != "" {
		unit = "simulated s"
	}
	// The legend goes where the curves are not: TTFT grows with context,
	// the rates fall.
	panels := []struct {
		title, y  string
		legendTop bool
		pick      func(*series) (plotter.XYs, plotter.XYs)
	}{
		{"Time to first token", "TTFT (" + unit + ")", true, func(s *series) (plotter.XYs, plotter.XYs) { return s.ttft, s.badTTFT }},
		{"Prefill throughput", "prefill tok/s", false, func(s *series) (plotter.XYs, plotter.XYs) { return s.prefill, s.badPre }},
		{"Decode throughput", "decode tok/s", false, func(s *series) (plotter.XYs, plotter.XYs) { return s.decode, s.badDecode }},
	}
	logX := r.contextRange() >= 8
	ticks := r.contextTicks()
	plots := make([][]*plot.Plot, len(panels))
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.X.Label.Text = "context (ctx_req, tokens)"
		p.Y.Label.Text = pn.y
		p.Legend.Top, p.Legend.Left = pn.legendTop, true
		p.Legend.XOffs = vg.Points(40)
		p.X.Tick.Marker = ticks
		if logX {
			p.X.Scale = plot.LogScale{}
			p.X.Label.Text += ", log scale"
		}
		badInLegend := false
		for j, s := range ss {
			good, bad := pn.pick(s)
			col := plotColors[j%len(plotColors)]
			if len(good) > 0 {
				l, pts, err := plotter.NewLinePoints(good)
				if err != nil {
					return err
				}
				l.Color, pts.Color = col, col
				pts.Shape = draw.CircleGlyph{}
				p.Add(l, pts)
				p.Legend.Add(s.name, l, pts)
			}
			if len(bad) > 0 {
				sc, err := plotter.NewScatter(bad)
				if err != nil {
					return err
				}
				sc.Color = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
				sc.Shape = draw.CrossGlyph{}
				sc.Radius = vg.Points(6)
				p.Add(sc)
				if !badInLegend {
					p.Legend.Add("POISONED", sc)
					badInLegend = true
				}
			}
		}
		p.Add(plotter.NewGrid())
		plots[i] = []*plot.Plot{p}
	}
	img := vgimg.New(8*vg.Inch, 11*vg.Inch)
	dc := draw.New(img)
	t := draw.Tiles{Rows: len(panels), Cols: 1, PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(12), PadY: vg.Points(12)}
	canvases := plot.Align(plots, t, dc)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}

// contextRange is the largest context over the smallest.
func (r *Report) contextRange() float64 {
	lo, hi := 0, 0
	for _, row := range r.Rows {
		lo, hi = minPos(lo, row.CtxReq), max(hi, row.CtxReq)
	}
	for _, row := range r.Stream {
		lo, hi = minPos(lo, row.CtxReq), max(hi, row.CtxReq)
	}
	if lo == 0 {
		return 1
	}
	return float64(hi) / float64(lo)
}

func minPos(a, b int) int {
	if a == 0 {
		return b
	}
	return min(a, b)
}

// contextTicks marks the measured contexts on the x axis.
func (r *Report) contextTicks() plot.ConstantTicks {
	seen := map[int]bool{}
	var ticks plot.ConstantTicks
	add := func(ctx int) {
		if !seen[ctx] {
			seen[ctx] = true
			ticks = append(ticks, plot.Tick{Value: float64(ctx), Label: fmt.Sprint(ctx)})
		}
	}
	for _, row := range r.Rows {
		add(row.CtxReq)
	}
	for _, row := range r.Stream {
		add(row.CtxReq)
	}
	return ticks
}

package harness

import (
	"cmp"
	"fmt"
	"image/color"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// plotFormats are the extensions WritePlot draws, by the file's name.
var plotFormats = []string{".png", ".svg", ".pdf", ".jpg", ".jpeg", ".tif", ".tiff", ".eps"}

// PlotFormats lists the extensions a plot file can have.
func PlotFormats() []string { return slices.Clone(plotFormats) }

// PlotFormat is the format a plot file's extension asks for ("png"), or
// an error naming the ones there are.
func PlotFormat(path string) (string, error) {
	ext := strings.ToLower(filepath.Ext(path))
	switch {
	case slices.Contains(plotFormats, ext):
		return ext[1:], nil
	case ext == "":
		return "", fmt.Errorf("no extension to pick the format by: use one of %s", strings.Join(plotFormats, ", "))
	}
	return "", fmt.Errorf("cannot draw %s: use one of %s", ext, strings.Join(plotFormats, ", "))
}

// PlotCaption is what the plot's subtitle says beyond the report: the
// server's address and when the run started.
type PlotCaption struct {
	Server string
	Date   time.Time
}

// plotPoint is one figure of one row.
type plotPoint struct {
	ctx, y float64
	level  Level
}

// plotSeries is one line of a panel.
type plotSeries struct {
	name   string
	colour color.RGBA
	dashes []vg.Length
	// model: the server's own figure (cold TTFT, steady decode), drawn
	// thin and without markers.
	model  bool
	points []plotPoint
}

// plotPanel is one panel: a figure against context. Its y axis runs from
// 0 to YMax, which the points that are not poisoned set; a poisoned point
// is drawn apart, and one beyond YMax sits on the top edge with its value.
type plotPanel struct {
	title, yLabel string
	series        []plotSeries
	yMax          float64
	yTicks        []plot.Tick
	// scaledByPoisoned: every point is poisoned, so they set the scale.
	scaledByPoisoned bool
}

// The colours: one per method, fixed so that plots of different runs
// compare; red and orange mark POISONED and SUSPECT points.
var (
	methodColours = map[string]color.RGBA{
		string(FlushNonce):  {R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
		string(FlushMethod): {R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
		string(NonceMethod): {R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
		string(Naive):       {R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
		string(SaltMethod):  {R: 0x17, G: 0xbe, B: 0xcf, A: 0xff},
		"stream":            {R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	}
	perEventColour = color.RGBA{R: 0xe3, G: 0x77, B: 0xc2, A: 0xff}
	modelColour    = color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff}
	poisonColour   = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	suspectColour  = color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}
	dashed         = []vg.Length{vg.Points(5), vg.Points(3)}
	dotted         = []vg.Length{vg.Points(1.5), vg.Points(2.5)}
)

// panels lays out the plot's data: per panel its series and its y scale.
func (r *Report) panels() []plotPanel {
	unit, ms := "s", "ms"
	if r.Server.Mock != "" {
		unit, ms = "simulated s", "simulated ms"
	}
	ttft := plotPanel{title: "Time to first token", yLabel: "TTFT (" + unit + ")"}
	prefill := plotPanel{title: "Prefill throughput", yLabel: "prefill tok/s"}
	decode := plotPanel{title: "Decode throughput", yLabel: "decode tok/s"}
	var panels []*plotPanel
	if r.Method == "stream" {
		itl := plotPanel{title: "Inter-token latency: token-weighted against per event", yLabel: "ITL (" + ms + ")"}
		weighted := plotSeries{name: "token-weighted ITL (s/out_tok)", colour: methodColours["stream"]}
		perEvent := plotSeries{name: "per-event ITL (one token per event)", colour: perEventColour, dashes: dashed}
		var t, p, d plotSeries
		t = plotSeries{name: "stream", colour: methodColours["stream"]}
		p, d = t, t
		for _, row := range r.Stream {
			x, v := float64(row.CtxReq), row.Verdict
			t.points = append(t.points, plotPoint{x, row.TTFT, v.LevelOf(FigureTTFT)})
			p.points = append(p.points, plotPoint{x, row.PrefillTPS, v.LevelOf(FigurePrefill)})
			if row.DecodeTPS > 0 {
				l := v.LevelOf(FigureDecode)
				d.points = append(d.points, plotPoint{x, row.DecodeTPS, l})
				weighted.points = append(weighted.points, plotPoint{x, 1000 * row.SPerOutTok, l})
				perEvent.points = append(perEvent.points, plotPoint{x, 1000 * row.EventITL, l})
			}
		}
		ttft.series, prefill.series, decode.series = []plotSeries{t}, []plotSeries{p}, []plotSeries{d}
		itl.series = []plotSeries{weighted, perEvent}
		panels = []*plotPanel{&ttft, &prefill, &decode, &itl}
	} else {
		var methods []Method
		for _, row := range r.Rows {
			if !slices.Contains(methods, row.Method) {
				methods = append(methods, row.Method)
			}
		}
		var undefined []string
		for _, m := range methods {
			t := plotSeries{name: string(m), colour: methodColours[string(m)]}
			p, d := t, t
			var at []string
			for _, row := range r.Rows {
				if row.Method != m {
					continue
				}
				x, v := float64(row.CtxReq), row.Verdict
				t.points = append(t.points, plotPoint{x, row.TTFT, v.LevelOf(FigureTTFT)})
				p.points = append(p.points, plotPoint{x, row.PrefillTPS, v.LevelOf(FigurePrefill)})
				if row.DecodeTPS != nil {
					d.points = append(d.points, plotPoint{x, *row.DecodeTPS, v.LevelOf(FigureDecode)})
				} else {
					at = append(at, strconv.Itoa(row.CtxReq))
				}
			}
			ttft.series, prefill.series, decode.series = append(ttft.series, t), append(prefill.series, p), append(decode.series, d)
			switch {
			case len(at) == len(d.points)+len(at) && len(at) > 1:
				undefined = append(undefined, string(m)+" at every context")
			case len(at) > 0:
				undefined = append(undefined, string(m)+" at "+strings.Join(at, ", "))
			}
		}
		if len(undefined) > 0 {
			// A row with t_b <= t_a has no decode point: the title says so.
			decode.title += " (undefined, t_b <= t_a: " + strings.Join(undefined, "; ") + ")"
		}
		panels = []*plotPanel{&ttft, &prefill, &decode}
	}
	r.addModel(&ttft, &prefill, &decode)
	out := make([]plotPanel, len(panels))
	for i, p := range panels {
		p.scale()
		out[i] = *p
	}
	return out
}

// addModel adds the server's own figures, against sglmock: the cold TTFT,
// the prefill rate it implies and the steady-state decode rate, once per
// context.
func (r *Report) addModel(ttft, prefill, decode *plotPanel) {
	t := plotSeries{name: "sglmock's model (cold TTFT, steady decode)", colour: modelColour, dashes: dotted, model: true}
	p, d := t, t
	seen := map[int]bool{}
	add := func(ctx, prompt int, tr *TruthFigures) {
		if tr == nil || seen[ctx] {
			return
		}
		seen[ctx] = true
		x := float64(ctx)
		t.points = append(t.points, plotPoint{x, tr.ColdTTFT, OK})
		if tr.ColdTTFT > 0 {
			p.points = append(p.points, plotPoint{x, float64(prompt) / tr.ColdTTFT, OK})
		}
		if tr.SteadyDecode != nil {
			d.points = append(d.points, plotPoint{x, *tr.SteadyDecode, OK})
		}
	}
	for _, row := range r.Rows {
		add(row.CtxReq, row.PromptTokens, row.Truth)
	}
	for _, row := range r.Stream {
		add(row.CtxReq, row.PromptTokens, row.Truth)
	}
	for _, pair := range []struct {
		panel *plotPanel
		s     plotSeries
	}{{ttft, t}, {prefill, p}, {decode, d}} {
		if len(pair.s.points) > 0 {
			slices.SortFunc(pair.s.points, func(a, b plotPoint) int { return cmp.Compare(a.ctx, b.ctx) })
			pair.panel.series = append(pair.panel.series, pair.s)
		}
	}
}

// scale sets the y axis from 0 to a round number above every point that
// is not poisoned; if all are, they set it.
func (p *plotPanel) scale() {
	top, poisonedTop := 0.0, 0.0
	for _, s := range p.series {
		for _, pt := range s.points {
			if pt.level == Poisoned {
				poisonedTop = max(poisonedTop, pt.y)
			} else {
				top = max(top, pt.y)
			}
		}
	}
	if top == 0 && poisonedTop > 0 {
		top, p.scaledByPoisoned = poisonedTop, true
	}
	p.yMax, p.yTicks = plainTicks(top)
	if poisonedTop > p.yMax {
		// A band above the data for the triangles of the points beyond.
		last := p.yTicks[len(p.yTicks)-1]
		decimals := 0
		if _, frac, ok := strings.Cut(last.Label, "."); ok {
			decimals = len(frac)
		}
		p.yMax += p.yTicks[1].Value
		p.yTicks = append(p.yTicks, plot.Tick{Value: p.yMax, Label: plainNumber(p.yMax, decimals)})
	}
}

// plainTicks chooses a round top above max and 4 to 8 ticks from 0 to it
// at a step of 1, 2 or 5 times a power of ten, labelled in plain digits
// ("2,500", "0.25"), never "1e+05".
func plainTicks(top float64) (float64, []plot.Tick) {
	headroom := 1.04
	if !(top > 0) || math.IsInf(top, 0) {
		top, headroom = 1, 1 // no data: an empty axis to 1
	}
	exp := math.Floor(math.Log10(top / 5))
	mult := 10.0
	for _, m := range []float64{1, 2, 5} {
		if m*math.Pow(10, exp) >= top/5 {
			mult = m
			break
		}
	}
	// value i is i*mult*10^exp, computed from whole numbers so that 0.6
	// is 0.6, not 0.6000000000000001.
	value := func(i float64) float64 {
		if exp < 0 {
			return i * mult / math.Pow(10, -exp)
		}
		return i * mult * math.Pow(10, exp)
	}
	n := math.Ceil(top/value(1) - 1e-9)
	if value(n) < top*headroom {
		n++ // room above the highest point
	}
	decimals := max(0, -int(math.Floor(math.Log10(value(1))+1e-9)))
	var ticks []plot.Tick
	for i := 0.0; i <= n; i++ {
		ticks = append(ticks, plot.Tick{Value: value(i), Label: plainNumber(value(i), decimals)})
	}
	return value(n), ticks
}

// plainNumber renders x with decimals places and thousands separators.
func plainNumber(x float64, decimals int) string {
	s := strconv.FormatFloat(x, 'f', decimals, 64)
	whole, frac, hasFrac := strings.Cut(s, ".")
	var sb strings.Builder
	for i, c := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			sb.WriteByte(',')
		}
		sb.WriteRune(c)
	}
	if hasFrac {
		sb.WriteString("." + frac)
	}
	return sb.String()
}

// The figure: a title and subtitle, a legend under them, outside the
// data, and the panels one above the other.
const (
	plotWidth  = 8 * vg.Inch
	plotHeight = 11 * vg.Inch
)

var plotFont = font.Font{Typeface: "Liberation", Variant: "Sans"}

func textStyle(size vg.Length, c color.Color) text.Style {
	return text.Style{Color: c, Font: font.From(plotFont, size), Handler: plot.DefaultTextHandler, XAlign: draw.XLeft, YAlign: draw.YTop}
}

// WritePlot draws the report in the format PlotFormat gave: TTFT, prefill
// tok/s and decode tok/s against context (for stream also the ITL, token-
// weighted against per event), one line per method, the server's model in
// grey. Each panel marks its own figure's verdict (a naive row whose leg
// a was cold has a good TTFT and a poisoned decode). Poisoned points stay
// off the lines and out of the scale: a red cross beside its context, with
// a leader to it and its method's name, so that it never sits on a good
// point, or a red triangle on the top edge with its value when beyond the
// scale; the subtitle says in red which method is poisoned, in which
// figures, at which contexts. SUSPECT points are boxed in orange.
func (r *Report) WritePlot(w io.Writer, format string, caption PlotCaption) error {
	c, err := draw.NewFormattedCanvas(plotWidth, plotHeight, format)
	if err != nil {
		return err
	}
	if err := r.drawPlot(draw.New(c), caption); err != nil {
		return err
	}
	_, err = c.WriteTo(w)
	return err
}

func (r *Report) drawPlot(dc draw.Canvas, caption PlotCaption) error {
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	margin := vg.Points(18)
	x0, y := dc.Min.X+margin, dc.Max.Y-margin
	for _, line := range r.plotHeading(caption) {
		for _, part := range fitText(line.style, line.text, dc.Max.X-margin-x0) {
			dc.FillText(line.style, vg.Point{X: x0, Y: y}, part)
			y -= line.style.Rectangle(part).Size().Y + vg.Points(3)
		}
	}
	panels := r.panels()
	y = drawLegend(dc, legendEntries(panels), x0, dc.Max.X-margin, y-vg.Points(4))
	area := draw.Crop(dc, 0, 0, 0, -(dc.Max.Y - y + vg.Points(6)))
	logX := r.contextRange() >= 8
	ticks := r.contextTicks()
	var plots [][]*plot.Plot
	for _, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.Title.TextStyle.Font = font.From(plotFont, 12)
		p.X.Label.Text = "context (ctx_req, tokens)"
		if logX {
			p.X.Scale = plot.LogScale{}
			p.X.Label.Text += ", log scale"
		}
		p.Y.Label.Text = pn.yLabel
		for _, sty := range []*text.Style{&p.X.Label.TextStyle, &p.Y.Label.TextStyle, &p.X.Tick.Label, &p.Y.Tick.Label} {
			sty.Font = font.From(plotFont, sty.Font.Size)
		}
		p.X.Tick.Marker, p.Y.Tick.Marker = ticks, plot.ConstantTicks(pn.yTicks)
		p.Add(gridLines{pn.yTicks}, panelPlotter{pn})
		p.X.Min, p.X.Max = r.xRange(logX)
		p.Y.Min, p.Y.Max = 0, pn.yMax
		plots = append(plots, []*plot.Plot{p})
	}
	tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadTop: vg.Points(4), PadBottom: margin, PadLeft: margin, PadRight: margin, PadY: vg.Points(14)}
	canvases := plot.Align(plots, tiles, area)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	return nil
}

// fitText breaks text at spaces into lines no wider than width.
func fitText(sty text.Style, s string, width vg.Length) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		if line != "" && sty.Rectangle(line+" "+word).Size().X > width {
			lines, line = append(lines, line), word
			continue
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	return append(lines, line)
}

type headingLine struct {
	text  string
	style text.Style
}

// plotHeading is the title and the subtitle: what was measured, on which
// server, how, and when.
func (r *Report) plotHeading(caption PlotCaption) []headingLine {
	title := "sglmock bench twopoint: TTFT, prefill and decode against context"
	how := ""
	if r.Method == "stream" {
		title = "sglmock bench stream: TTFT, prefill, decode and ITL against context"
		if len(r.Stream) > 0 {
			how = fmt.Sprintf("max_new_tokens %d", r.Stream[0].Leg.MaxNewTokens)
		}
	} else if len(r.Rows) > 0 {
		var methods []string
		for _, row := range r.Rows {
			if !slices.Contains(methods, string(row.Method)) {
				methods = append(methods, string(row.Method))
			}
		}
		how = fmt.Sprintf("a=%d, b=%d; methods %s", r.Rows[0].A, r.Rows[0].B, strings.Join(methods, ", "))
	}
	s := r.Server
	server := "server " + caption.Server
	if s.Mock != "" {
		server += fmt.Sprintf(" (sglmock, profile %s, speedup %s, backend %s)", s.Mock, speedupText(s.Speedup), s.Backend)
		how += "; times in simulated seconds"
	} else {
		server += fmt.Sprintf(" (backend %s, no /sim/: no model line)", s.Backend)
		how += "; times in wall seconds"
	}
	if !caption.Date.IsZero() {
		how += "; " + caption.Date.Format("2006-01-02 15:04 MST")
	}
	grey := color.Gray{Y: 0x40}
	lines := []headingLine{
		{title, textStyle(15, color.Black)},
		{server, textStyle(10, grey)},
		{strings.TrimPrefix(how, "; "), textStyle(10, grey)},
	}
	if wrong := r.wrongLine(); wrong != "" {
		lines = append(lines, headingLine{wrong, textStyle(10, poisonColour)})
	}
	return lines
}

// wrongLine says which method is wrong, and where: "POISONED: naive's
// decode at 1024, 8192, 32768"; "" when no figure is poisoned.
func (r *Report) wrongLine() string {
	type where struct {
		method string
		figs   []Figure
		ctxs   []string
	}
	var found []*where
	note := func(method string, ctx int, v Verdict) {
		var figs []Figure
		for _, f := range rowFigures {
			if v.LevelOf(f) == Poisoned {
				figs = append(figs, f)
			}
		}
		if len(figs) == 0 {
			return
		}
		i := slices.IndexFunc(found, func(w *where) bool { return w.method == method && slices.Equal(w.figs, figs) })
		if i < 0 {
			found = append(found, &where{method: method, figs: figs})
			i = len(found) - 1
		}
		found[i].ctxs = append(found[i].ctxs, strconv.Itoa(ctx))
	}
	for _, row := range r.Rows {
		note(string(row.Method), row.CtxReq, row.Verdict)
	}
	for _, row := range r.Stream {
		note("stream", row.CtxReq, row.Verdict)
	}
	var parts []string
	for _, w := range found {
		names := map[Figure]string{FigureTTFT: "TTFT", FigurePrefill: "prefill", FigureDecode: "decode"}
		var figs []string
		for _, f := range w.figs {
			figs = append(figs, names[f])
		}
		if len(w.figs) == len(rowFigures) {
			figs = []string{"every figure"}
		}
		parts = append(parts, fmt.Sprintf("%s's %s at %s", w.method, strings.Join(figs, " and "), strings.Join(w.ctxs, ", ")))
	}
	if len(parts) == 0 {
		return ""
	}
	return "POISONED, so wrong: " + strings.Join(parts, "; ") + " (red crosses, beside their context)"
}

// legendEntry is one entry of the legend.
type legendEntry struct {
	name   string
	thumb  func(c draw.Canvas, at vg.Point)
	colour color.Color
}

// legendEntries are the series of every panel, once each, then the marks.
func legendEntries(panels []plotPanel) []legendEntry {
	var out []legendEntry
	var seen []string
	poisoned, suspect := false, false
	clean := map[string]bool{} // the series with a point that is not poisoned
	for _, p := range panels {
		for _, s := range p.series {
			for _, pt := range s.points {
				poisoned = poisoned || pt.level == Poisoned
				suspect = suspect || pt.level == Suspect
				clean[s.name] = clean[s.name] || pt.level != Poisoned
			}
		}
	}
	for _, p := range panels {
		for _, s := range p.series {
			if slices.Contains(seen, s.name) {
				continue
			}
			seen = append(seen, s.name)
			if !clean[s.name] {
				out = append(out, legendEntry{name: s.name + ": every row POISONED", thumb: func(c draw.Canvas, at vg.Point) {
					drawPoisoned(c, vg.Point{X: at.X + vg.Points(11), Y: at.Y}, s.colour)
				}})
				continue
			}
			out = append(out, legendEntry{name: s.name, thumb: func(c draw.Canvas, at vg.Point) {
				c.StrokeLine2(lineStyle(s), at.X, at.Y, at.X+vg.Points(22), at.Y)
				if !s.model {
					c.DrawGlyph(glyph(s.colour), vg.Point{X: at.X + vg.Points(11), Y: at.Y})
				}
			}})
		}
	}
	if poisoned {
		out = append(out, legendEntry{name: "POISONED: off the lines, beside its context, with its method; beyond the scale, a triangle on the top edge",
			thumb: func(c draw.Canvas, at vg.Point) {
				drawPoisoned(c, vg.Point{X: at.X + vg.Points(11), Y: at.Y}, modelColour)
			}, colour: poisonColour})
	}
	if suspect {
		out = append(out, legendEntry{name: "SUSPECT (see the verdicts)",
			thumb: func(c draw.Canvas, at vg.Point) {
				c.DrawGlyph(glyph(modelColour), vg.Point{X: at.X + vg.Points(11), Y: at.Y})
				drawSuspect(c, vg.Point{X: at.X + vg.Points(11), Y: at.Y})
			}, colour: suspectColour})
	}
	return out
}

// drawLegend lays the entries out in rows from x0 to x1 starting at y,
// and returns the y below the last row.
func drawLegend(c draw.Canvas, entries []legendEntry, x0, x1, y vg.Length) vg.Length {
	sty := textStyle(10, color.Black)
	sty.YAlign = draw.YCenter
	rowHeight := vg.Points(16)
	x, rowY := x0, y-rowHeight/2
	for _, e := range entries {
		width := vg.Points(28) + sty.Rectangle(e.name).Size().X + vg.Points(16)
		if x > x0 && x+width > x1 {
			x, rowY = x0, rowY-rowHeight
		}
		e.thumb(c, vg.Point{X: x, Y: rowY})
		tsty := sty
		if e.colour != nil {
			tsty.Color = e.colour
		}
		c.FillText(tsty, vg.Point{X: x + vg.Points(28), Y: rowY}, e.name)
		x += width
	}
	return rowY - rowHeight/2
}

func lineStyle(s plotSeries) draw.LineStyle {
	width := vg.Points(1.5)
	if s.model {
		width = vg.Points(1.2)
	}
	return draw.LineStyle{Color: s.colour, Width: width, Dashes: s.dashes}
}

func glyph(c color.Color) draw.GlyphStyle {
	return draw.GlyphStyle{Color: c, Radius: vg.Points(2.5), Shape: draw.CircleGlyph{}}
}

// drawPoisoned marks a poisoned point: a cross in its series' colour in a
// red ring.
func drawPoisoned(c draw.Canvas, at vg.Point, col color.Color) {
	c.DrawGlyph(draw.GlyphStyle{Color: col, Radius: vg.Points(4), Shape: draw.CrossGlyph{}}, at)
	c.DrawGlyph(draw.GlyphStyle{Color: poisonColour, Radius: vg.Points(6), Shape: draw.RingGlyph{}}, at)
}

// drawSuspect marks a SUSPECT point with an orange square around it.
func drawSuspect(c draw.Canvas, at vg.Point) {
	c.DrawGlyph(draw.GlyphStyle{Color: suspectColour, Radius: vg.Points(7.5), Shape: draw.SquareGlyph{}}, at)
}

// panelPlotter draws a panel's series: the lines through the points that
// are not poisoned, their markers, SUSPECT rings, and the poisoned points
// apart.
type panelPlotter struct{ p plotPanel }

func (pp panelPlotter) Plot(c draw.Canvas, plt *plot.Plot) {
	tx, ty := plt.Transforms(&c)
	label := textStyle(9, poisonColour)
	label.XAlign, label.YAlign = draw.XLeft, draw.YTop
	// The lines and their points first, then the poisoned points over
	// them, so that a poisoned point on a clean one shows whose it is.
	for _, s := range pp.p.series {
		var line []vg.Point
		for _, pt := range s.points {
			if pt.level != Poisoned || pp.p.scaledByPoisoned {
				line = append(line, vg.Point{X: tx(pt.ctx), Y: ty(pt.y)})
			}
		}
		switch {
		case len(line) > 1:
			c.StrokeLines(lineStyle(s), c.ClipLinesXY(line)...)
		case len(line) == 1 && s.model:
			// One context: the model has no line and no marker, so a short
			// one of its own stroke stands for its figure there.
			at := line[0]
			c.StrokeLine2(lineStyle(s), at.X-vg.Points(14), at.Y, at.X+vg.Points(14), at.Y)
		}
		for _, pt := range s.points {
			if pt.level != Poisoned && !s.model {
				at := vg.Point{X: tx(pt.ctx), Y: ty(pt.y)}
				c.DrawGlyph(glyph(s.colour), at)
				if pt.level == Suspect {
					drawSuspect(c, at)
				}
			}
		}
	}
	var beyond []offScaleLabel
	within := map[float64]int{} // the poisoned points within the scale at each context
	for _, s := range pp.p.series {
		for _, pt := range s.points {
			at := vg.Point{X: tx(pt.ctx), Y: ty(pt.y)}
			switch {
			case pt.level != Poisoned:
			case pt.y > pp.p.yMax:
				at.Y = c.Max.Y - vg.Points(5)
				c.DrawGlyph(draw.GlyphStyle{Color: poisonColour, Radius: vg.Points(5), Shape: draw.TriangleGlyph{}}, at)
				beyond = append(beyond, offScaleLabel{x: at.X, text: s.name + " " + figureText(pt.y)})
			case pp.p.scaledByPoisoned:
				drawPoisoned(c, at, s.colour)
			default:
				// Beside its context, where no clean point is, with a
				// leader to its context and its method's name: on a clean
				// point of the same value it would pass for one.
				name := textStyle(8, poisonColour)
				name.YAlign = draw.YCenter
				mark, label := poisonedMark(at, within[pt.ctx], name.Rectangle(s.name).Size().X, c.Max.X)
				within[pt.ctx]++
				c.StrokeLine2(draw.LineStyle{Color: poisonColour, Width: vg.Points(0.6)}, at.X, at.Y, mark.X, mark.Y)
				drawPoisoned(c, mark, s.colour)
				c.FillText(name, label, s.name)
			}
		}
	}
	for i, at := range placeOffScale(beyond, label, c.Min.X, c.Max.X, c.Max.Y-vg.Points(1)) {
		c.FillText(label, at, beyond[i].text)
	}
}

// poisonedMark is where a poisoned point within the scale is drawn, and
// where its method's name (width wide) goes: beside its context at its
// value, to the right, or to the left where the name would pass xMax; the
// i-th at one context a line higher than the one before, so that they
// stay apart.
func poisonedMark(at vg.Point, i int, width, xMax vg.Length) (mark, label vg.Point) {
	mark = vg.Point{X: at.X + vg.Points(16), Y: at.Y + vg.Points(float64(12*i))}
	label = vg.Point{X: mark.X + vg.Points(8), Y: mark.Y}
	if label.X+width > xMax {
		mark.X = at.X - vg.Points(16)
		label.X = mark.X - vg.Points(8) - width
	}
	return mark, label
}

// offScaleLabel is the label of a poisoned point beyond the scale: its
// series and value, written beside its triangle on the top edge.
type offScaleLabel struct {
	x    vg.Length // the triangle's
	text string
}

// placeOffScale lays the labels out from the top edge down: each beside
// its triangle, on the right, or on the left where the right would run
// past xMax, and one line lower while it would cover a label placed
// before it (two series poisoned at one context, neighbouring contexts).
// It returns each label's top left corner, for sty aligned XLeft, YTop.
func placeOffScale(labels []offScaleLabel, sty text.Style, xMin, xMax, top vg.Length) []vg.Point {
	var placed []vg.Rectangle
	out := make([]vg.Point, len(labels))
	for i, l := range labels {
		size := sty.Rectangle(l.text).Size()
		x := l.x + vg.Points(8)
		if x+size.X > xMax {
			x = max(l.x-vg.Points(8)-size.X, xMin)
		}
		r := vg.Rectangle{Min: vg.Point{X: x, Y: top - size.Y}, Max: vg.Point{X: x + size.X, Y: top}}
		for slices.ContainsFunc(placed, func(p vg.Rectangle) bool { return overlaps(p, r) }) {
			r.Min.Y, r.Max.Y = r.Min.Y-size.Y, r.Max.Y-size.Y
		}
		placed = append(placed, r)
		out[i] = vg.Point{X: r.Min.X, Y: r.Max.Y}
	}
	return out
}

func overlaps(a, b vg.Rectangle) bool {
	return a.Min.X < b.Max.X && b.Min.X < a.Max.X && a.Min.Y < b.Max.Y && b.Min.Y < a.Max.Y
}

// figureText renders a figure to three significant digits, and whole
// figures of three digits or more in full, with thousands separators:
// "0.463", "30.7", "225,741".
func figureText(y float64) string {
	decimals := 0
	if a := math.Abs(y); a > 0 && a < 100 {
		decimals = 2 - int(math.Floor(math.Log10(a)))
	}
	return plainNumber(y, decimals)
}

// gridLines draws a light line at each y tick.
type gridLines struct{ ticks []plot.Tick }

func (g gridLines) Plot(c draw.Canvas, plt *plot.Plot) {
	_, ty := plt.Transforms(&c)
	ls := draw.LineStyle{Color: color.Gray{Y: 0xdd}, Width: vg.Points(0.5)}
	for _, t := range g.ticks {
		c.StrokeLine2(ls, c.Min.X, ty(t.Value), c.Max.X, ty(t.Value))
	}
}

// xRange pads the contexts so the first and last points are off the
// axes: from 0 on a linear axis, by a quarter of a step on a log one; a
// lone context sits in the middle.
func (r *Report) xRange(logX bool) (float64, float64) {
	lo, hi := math.Inf(1), 0.0
	for _, t := range r.contextTicks() {
		lo, hi = math.Min(lo, t.Value), math.Max(hi, t.Value)
	}
	if hi == 0 {
		return 0, 1
	}
	switch {
	case logX:
		return lo / 1.3, hi * 1.3
	case lo == hi:
		return 0, 2 * hi // one context: in the middle
	}
	return 0, hi * 1.08
}

// contextRange is the largest context over the smallest.
func (r *Report) contextRange() float64 {
	lo, hi := math.Inf(1), 0.0
	for _, t := range r.contextTicks() {
		lo, hi = math.Min(lo, t.Value), math.Max(hi, t.Value)
	}
	if hi == 0 {
		return 1
	}
	return hi / lo
}

// contextTicks marks the measured contexts on the x axis.
func (r *Report) contextTicks() plot.ConstantTicks {
	var ticks plot.ConstantTicks
	add := func(ctx int) {
		for _, t := range ticks {
			if t.Value == float64(ctx) {
				return
			}
		}
		ticks = append(ticks, plot.Tick{Value: float64(ctx), Label: strconv.Itoa(ctx)})
	}
	for _, row := range r.Rows {
		add(row.CtxReq)
	}
	for _, row := range r.Stream {
		add(row.CtxReq)
	}
	return ticks
}

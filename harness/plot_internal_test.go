package harness

import (
	"bytes"
	"image/jpeg"
	"image/png"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"

	"github.com/sglmock/sglmock/internal/norace"
)

func fp(x float64) *float64 { return &x }

// gpuSweep is a naive+flush+nonce sweep as a GPU gives it: naive's leg b
// served from the cache, its decode undefined at 8192 and absurd at 1024
// (t_b just above t_a), flush+nonce about 2,700 tok/s, one row SUSPECT.
func gpuSweep() *Report {
	poisoned := Verdict{Causes: []Cause{{Level: Poisoned, Text: "leg b reused 1406 of 1407 prompt tokens (cached_tokens)"}}}
	suspect := Verdict{Causes: []Cause{{Level: Suspect, Text: "the spread over 5 runs is 40 %"}}}
	row := func(m Method, ctx int, ttft, prefill float64, decode *float64, v Verdict) Row {
		return Row{Method: m, CtxReq: ctx, PromptTokens: ctx, A: 1, B: 17, Figures: Figures{TTFT: ttft, PrefillTPS: prefill, DecodeTPS: decode}, Verdict: v, Speedup: 1}
	}
	return &Report{Method: "twopoint", Server: Server{Backend: SGLang, Speedup: 1}, Rows: []Row{
		row(Naive, 1024, 0.46, 2226, fp(225741), poisoned),
		row(Naive, 8192, 3.9, 2100, nil, poisoned),
		row(FlushNonce, 1024, 0.46, 2226, fp(2712), Verdict{}),
		row(FlushNonce, 8192, 3.9, 2100, fp(2650), suspect),
	}}
}

// The y axes start at 0 and end at a round number just above the points
// that are not poisoned: naive's 225,741 tok/s stays out of the decode
// scale (it is drawn on the top edge with its value) and the flush+nonce
// line keeps the panel.
func TestPlotScale(t *testing.T) {
	panels := gpuSweep().panels()
	if len(panels) != 3 {
		t.Fatalf("got %d panels, want 3", len(panels))
	}
	for _, tt := range []struct {
		panel  int
		yMax   float64
		labels string
	}{
		{0, 5, "0 1 2 3 4 5"},
		{1, 2500, "0 500 1,000 1,500 2,000 2,500"},
		// A band above the data for the triangle of 225,741.
		{2, 4000, "0 1,000 2,000 3,000 4,000"},
	} {
		p := panels[tt.panel]
		labels := tickLabels(p.yTicks)
		if p.yMax != tt.yMax || labels != tt.labels || p.yTicks[0].Value != 0 || p.scaledByPoisoned {
			t.Errorf("%s: y 0..%g, ticks %q; want 0..%g, %q", p.title, p.yMax, labels, tt.yMax, tt.labels)
		}
	}
	decode := panels[2]
	if want := "Decode throughput (undefined, t_b <= t_a: naive at 8192)"; decode.title != want {
		t.Errorf("decode title %q, want %q", decode.title, want)
	}
	naive, fixed := decode.series[0], decode.series[1]
	if naive.name != "naive" || len(naive.points) != 1 || naive.points[0] != (plotPoint{1024, 225741, Poisoned}) {
		t.Errorf("naive's decode points: %+v; want the one defined, poisoned", naive.points)
	}
	if fixed.points[1].level != Suspect {
		t.Errorf("flush+nonce at 8192: level %v, want SUSPECT (marked)", fixed.points[1].level)
	}
}

// A panel whose points are all poisoned is scaled by them: there is nothing
// else to draw.
func TestPlotScaleAllPoisoned(t *testing.T) {
	r := gpuSweep()
	r.Rows = r.Rows[:2]
	p := r.panels()[2]
	if !p.scaledByPoisoned || p.yMax != 250000 {
		t.Errorf("naive alone: y 0..%g, scaled by poisoned %v; want 0..250,000 by the poisoned point", p.yMax, p.scaledByPoisoned)
	}
}

// Stream's last panel is the ITL, token-weighted against per event, in
// milliseconds.
func TestPlotStreamITL(t *testing.T) {
	r := &Report{Method: "stream", Server: Server{Speedup: 1}, Stream: []StreamRow{
		{CtxReq: 1024, TTFT: 0.06, PrefillTPS: 17000, DecodeTPS: 385, SPerOutTok: 0.0026, EventITL: 0.0075},
	}}
	panels := r.panels()
	itl := panels[len(panels)-1]
	if len(panels) != 4 || len(itl.series) != 2 ||
		itl.series[0].points[0].y != 2.6 || itl.series[1].points[0].y != 7.5 || itl.yMax != 8 {
		t.Fatalf("the ITL panel: %+v", itl)
	}
	for _, tt := range []struct{ mock, want string }{{"", "ITL (ms)"}, {"default", "ITL (simulated ms)"}} {
		r.Server.Mock = tt.mock
		if got := r.panels()[3].yLabel; got != tt.want {
			t.Errorf("server %q: the ITL axis says %q, want %q", tt.mock, got, tt.want)
		}
	}
}

func tickLabels(ticks []plot.Tick) string {
	var labels []string
	for _, tick := range ticks {
		labels = append(labels, tick.Label)
	}
	return strings.Join(labels, " ")
}

// The y ticks step by 1, 2 or 5 times a power of ten from 0 to just above
// the top, labelled in plain digits.
func TestPlainTicks(t *testing.T) {
	for _, tt := range []struct {
		top    float64
		yMax   float64
		labels string
	}{
		{0.46, 0.5, "0.0 0.1 0.2 0.3 0.4 0.5"},
		{0.5, 0.6, "0.0 0.1 0.2 0.3 0.4 0.5 0.6"},
		{23.7, 25, "0 5 10 15 20 25"},
		{225741, 250000, "0 50,000 100,000 150,000 200,000 250,000"},
		{0, 1, "0.0 0.2 0.4 0.6 0.8 1.0"},
	} {
		yMax, ticks := plainTicks(tt.top)
		if labels := tickLabels(ticks); yMax != tt.yMax || labels != tt.labels {
			t.Errorf("top %g: 0..%g %q, want 0..%g %q", tt.top, yMax, labels, tt.yMax, tt.labels)
		}
	}
}

func TestPlotFormat(t *testing.T) {
	for _, tt := range []struct{ path, want, err string }{
		{"sweep.png", "png", ""},
		{"out/Sweep.JPG", "jpg", ""},
		{"sweep.svg", "svg", ""},
		{"sweep.gif", "", "cannot draw .gif: use one of .png, .svg, .pdf, .jpg, .jpeg, .tif, .tiff, .eps"},
		{"sweep", "", "no extension to pick the format by"},
	} {
		got, err := PlotFormat(tt.path)
		if got != tt.want || (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("%s: got %q, %v; want %q, %q", tt.path, got, err, tt.want, tt.err)
		}
	}
}

// Every format draws; the SVG carries the title and the subtitle's server,
// speedup and date.
func TestWritePlotFormats(t *testing.T) {
	norace.Skip(t, "checks the plot's files")
	caption := PlotCaption{Server: "http://gpu:30000", Date: time.Date(2026, 5, 1, 14, 3, 0, 0, time.UTC)}
	for _, ext := range PlotFormats() {
		var out bytes.Buffer
		if err := gpuSweep().WritePlot(&out, ext[1:], caption); err != nil || out.Len() < 1000 {
			t.Errorf("%s: %v, %d bytes", ext, err, out.Len())
		}
		switch ext {
		case ".png":
			if cfg, err := png.DecodeConfig(&out); err != nil || cfg.Width != 768 || cfg.Height != 1056 {
				t.Errorf("png: %v, %dx%d", err, cfg.Width, cfg.Height)
			}
		case ".jpg":
			if cfg, err := jpeg.DecodeConfig(&out); err != nil || cfg.Width != 768 {
				t.Errorf("jpg: %v, %dx%d", err, cfg.Width, cfg.Height)
			}
		case ".svg":
			for _, want := range []string{"sglmock bench twopoint", "server http://gpu:30000 (backend sglang", "a=1, b=17; methods naive, flush+nonce", "2026-05-01 14:03 UTC"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("svg: no %q", want)
				}
			}
		}
	}
}

// The poisoned points beyond the scale are labelled with their values to
// three significant digits, inside the figure, and never over one
// another: here two at the last context of the decode panel, where a
// label on the right of its triangle would run off the page.
func TestPlotOffScaleLabels(t *testing.T) {
	poisoned := Verdict{Causes: []Cause{{Level: Poisoned, Text: "leg b reused 32767 of 32768 prompt tokens (cached_tokens)"}}}
	row := func(m Method, ctx int, ttft float64, decode float64, v Verdict) Row {
		return Row{Method: m, CtxReq: ctx, PromptTokens: ctx, A: 1, B: 17,
			Figures: Figures{TTFT: ttft, PrefillTPS: float64(ctx) / ttft, DecodeTPS: fp(decode)}, Verdict: v, Speedup: 1}
	}
	r := &Report{Method: "twopoint", Server: Server{Backend: SGLang, Speedup: 1}, Rows: []Row{
		row(FlushNonce, 1024, 0.46, 2712, Verdict{}),
		row(FlushNonce, 32768, 15.9, 2600, Verdict{}),
		row(FlushMethod, 1024, 0.46, 2712, Verdict{}),
		row(FlushMethod, 32768, 30.7, 225700, poisoned),
		row(Naive, 1024, 0.46, 2700, poisoned),
		row(Naive, 32768, 15.9, 225741, poisoned),
	}}
	var out bytes.Buffer
	if err := r.WritePlot(&out, "svg", PlotCaption{}); err != nil {
		t.Fatal(err)
	}
	width := 576.0 // points, the SVG's units
	sty := textStyle(9, poisonColour)
	type box struct {
		text           string
		x0, x1, y0, y1 float64
	}
	var boxes []box
	for _, m := range regexp.MustCompile(`<text x="([-\d.]+)" y="([-\d.]+)"[^>]*fill:#D62728">([^<]*)</text>`).FindAllStringSubmatch(out.String(), -1) {
		if !strings.Contains(m[3], " ") || strings.HasPrefix(m[3], "POISONED") {
			continue // the legend
		}
		x, _ := strconv.ParseFloat(m[1], 64)
		y, _ := strconv.ParseFloat(m[2], 64)
		size := sty.Rectangle(m[3]).Size()
		boxes = append(boxes, box{m[3], x, x + size.X.Points(), y - size.Y.Points(), y})
	}
	var texts []string
	for _, b := range boxes {
		texts = append(texts, b.text)
		if b.x0 < 0 || b.x1 > width {
			t.Errorf("%q spans x %.1f..%.1f, off the %.0f-point page", b.text, b.x0, b.x1, width)
		}
	}
	if got, want := strings.Join(texts, "|"), "flush 30.7|flush 225,700|naive 225,741"; got != want {
		t.Errorf("labels %q, want %q", got, want)
	}
	for i, a := range boxes {
		for _, b := range boxes[i+1:] {
			if a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1 {
				t.Errorf("%q and %q overlap: %+v, %+v", a.text, b.text, a, b)
			}
		}
	}
}

// With one context the model has one point per panel, and it is drawn
// (a short stroke at its figure), since it is in the legend and sets the
// scale: one grey stroke in the legend and one in each panel.
func TestPlotModelAtOneContext(t *testing.T) {
	decode, steady := 320.0, 248.0
	r := &Report{Method: "twopoint", Server: Server{Backend: SGLang, Mock: "default", Speedup: 1}, Rows: []Row{{
		Method: FlushNonce, CtxReq: 2048, PromptTokens: 2048, A: 1, B: 17,
		Figures: Figures{TTFT: 0.087, PrefillTPS: 23500, DecodeTPS: &decode},
		Truth:   &TruthFigures{TTFT: 0.05, ColdTTFT: 0.047, SteadyDecode: &steady}, Speedup: 1,
	}}}
	var out bytes.Buffer
	if err := r.WritePlot(&out, "svg", PlotCaption{}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(out.String(), "stroke:#7F7F7F"); got != 4 {
		t.Errorf("%d strokes in the model's grey, want 4 (the legend's and one per panel)", got)
	}
}

// A linear x axis runs from 0 to past the last context; a lone context
// sits in the middle rather than against the right edge.
func TestPlotXRange(t *testing.T) {
	for _, tt := range []struct {
		ctxs   []int
		logX   bool
		lo, hi float64
	}{
		{[]int{2048}, false, 0, 4096},
		{[]int{1024, 2048}, false, 0, 2048 * 1.08},
	} {
		r := &Report{Method: "twopoint"}
		for _, c := range tt.ctxs {
			r.Rows = append(r.Rows, Row{Method: FlushNonce, CtxReq: c})
		}
		logX := r.contextRange() >= 8
		if lo, hi := r.xRange(logX); logX != tt.logX || lo != tt.lo || hi != tt.hi {
			t.Errorf("contexts %v: log %v, x %g..%g; want log %v, %g..%g", tt.ctxs, logX, lo, hi, tt.logX, tt.lo, tt.hi)
		}
	}
}

// Each panel marks its own figure's verdict: a naive row whose leg a was
// cold has a good TTFT and prefill rate and a poisoned decode, and the
// subtitle says in red which method is wrong, in which figure, where.
func TestPlotPerFigure(t *testing.T) {
	decodeOnly := Verdict{Causes: []Cause{{Level: Poisoned, Text: "leg b reused 1406 of 1407 prompt tokens (cached_tokens)", Figures: []Figure{FigureDecode}}}}
	rep := gpuSweep()
	rep.Rows[0].Verdict, rep.Rows[1].Verdict = decodeOnly, decodeOnly
	rep.Rows[1].DecodeTPS = fp(2500)
	panels := rep.panels()
	for i, want := range []Level{OK, OK, Poisoned} {
		if got := panels[i].series[0].points[0].level; got != want {
			t.Errorf("%s: naive at 1024 is %s, want %s", panels[i].title, got, want)
		}
	}
	if got, want := rep.wrongLine(), "POISONED, so wrong: naive's decode at 1024, 8192 (red crosses, beside their context)"; got != want {
		t.Errorf("subtitle %q, want %q", got, want)
	}
	if got, want := gpuSweep().wrongLine(), "POISONED, so wrong: naive's every figure at 1024, 8192 (red crosses, beside their context)"; got != want {
		t.Errorf("subtitle %q, want %q", got, want)
	}
	rep.Rows = rep.Rows[2:]
	if got := rep.wrongLine(); got != "" {
		t.Errorf("a sweep with nothing poisoned: subtitle %q", got)
	}
}

// A poisoned point within the scale is drawn beside its context, never on
// it (where a clean point of the same value is), with its method's name
// on the side that keeps it in the panel; two at one context stack apart.
func TestPoisonedMark(t *testing.T) {
	at := vg.Point{X: 100, Y: 50}
	for _, tt := range []struct {
		i            int
		xMax         vg.Length
		mark, labelX vg.Length
		markY        vg.Length
	}{
		{0, 400, 116, 124, 50},
		{1, 400, 116, 124, 62},
		{0, 140, 84, 46, 50},
	} {
		mark, label := poisonedMark(at, tt.i, 30, tt.xMax)
		if mark.X != tt.mark || mark.Y != tt.markY || label.X != tt.labelX || label.Y != mark.Y || mark == at {
			t.Errorf("i %d, xMax %v: mark %v, label %v; want (%v, %v), label at %v", tt.i, tt.xMax, mark, label, tt.mark, tt.markY, tt.labelX)
		}
	}
}

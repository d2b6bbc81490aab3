package scenarios

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sglmock/sglmock/mockserver/profile"

	"github.com/sglmock/sglmock/harness"
)

// row is one line of a step's result that expectations look at: a
// context of a two-point or stream run, a flush, one copy of a raw
// request, a load.
type row struct {
	ctx     int // the context's label; 0 for a step without contexts
	label   string
	figures map[string]*float64 // nil: undefined (a nan)
	verdict *harness.Verdict
	flushes map[string]*harness.FlushRecord // by leg: a, b, stream
	status  int
	body    string
}

func (r *row) set(name string, v float64) { r.figures[name] = &v }

func (r *row) setPtr(name string, v *float64) {
	if v == nil {
		r.figures[name] = nil
		return
	}
	r.set(name, *v)
}

func (r *row) setInt(name string, v *int) {
	if v == nil {
		r.figures[name] = nil
		return
	}
	r.set(name, float64(*v))
}

// Expectation is one claim a step's result must meet.
type Expectation struct {
	Line int
	// Ctx selects the rows of a two-point or stream step, or the prompts
	// of a raw batch (by number, from 1); empty means every row.
	Ctx   []int
	check checker
}

// checker is one kind of expectation.
type checker interface {
	// describe says what is expected; realTime picks the bounds that hold
	// in real time.
	describe(realTime bool) string
	// check tests one row, and says what it found.
	check(r *row, realTime bool) (ok bool, got string)
}

// The expectation kinds, each one key of an expectation's mapping.
const (
	expVerdict = "verdict"
	expFigure  = "figure"
	expFlush   = "flush"
	expStatus  = "status"
	expBody    = "body"
)

func (p *parser) expectation(n *yaml.Node, path string, a action) (*Expectation, error) {
	f, err := p.d.mapping(n, path, expVerdict, "cause", "figures", expFigure, "min", "max", "equals", "defined", "real_time",
		expFlush, expStatus, expBody, "body_contains", "tries", "ctx", "prompt")
	if err != nil {
		return nil, err
	}
	var kind string
	for _, k := range []string{expVerdict, expFigure, expFlush, expStatus, expBody, "body_contains"} {
		if !f.has(k) {
			continue
		}
		if kind != "" && !(kind == expFlush && (k == expStatus || k == expBody)) {
			return nil, f.errorf(k, "an expectation checks one thing: it already checks %s", kind)
		}
		if kind == "" {
			kind = k
		}
	}
	if kind == "" {
		return nil, p.d.errorf(n, path, "say what is expected: verdict, figure, flush, status, body or body_contains")
	}
	allowed := map[string][]string{
		expVerdict:      {expVerdict, "cause", "figures", "ctx"},
		expFigure:       {expFigure, "min", "max", "equals", "defined", "real_time", "ctx", "prompt"},
		expFlush:        {expFlush, expStatus, expBody, "tries", "ctx"},
		expStatus:       {expStatus},
		expBody:         {expBody},
		"body_contains": {"body_contains"},
	}[kind]
	for k := range f.values {
		if !slices.Contains(allowed, k) {
			return nil, f.errorf(k, "not a key of a %s expectation (want %s)", kind, strings.Join(allowed, ", "))
		}
	}
	if len(a.expectations()) == 0 {
		return nil, p.d.errorf(n, path, "a %s step has nothing to check", a.kind())
	}
	if !slices.Contains(a.expectations(), kind) && !(kind == "body_contains" && slices.Contains(a.expectations(), expBody)) {
		return nil, f.errorf(kind, "a %s step has no %s to check (it checks %s)", a.kind(), kind, strings.Join(a.expectations(), ", "))
	}
	e := &Expectation{Line: n.Line}
	if f.has("ctx") {
		if e.Ctx, err = p.ctxSelection(f, a); err != nil {
			return nil, err
		}
	}
	if f.has("prompt") {
		if e.Ctx, err = p.promptSelection(f, a); err != nil {
			return nil, err
		}
	}
	switch kind {
	case expVerdict:
		e.check, err = p.verdictCheck(f)
	case expFigure:
		e.check, err = p.figureCheck(f, a)
	case expFlush:
		e.check, err = p.flushCheck(f, a)
	case expStatus:
		c := &statusCheck{}
		e.check, err = c, f.integer(expStatus, &c.status, 100, 599)
	case expBody, "body_contains":
		c := &bodyCheck{contains: kind == "body_contains"}
		e.check, err = c, f.str(kind, &c.body)
	}
	if err != nil {
		return nil, err
	}
	return e, nil
}

func (p *parser) ctxSelection(f *fields, a action) ([]int, error) {
	list, err := f.list("ctx")
	if err != nil {
		return nil, err
	}
	have := a.contexts()
	var out []int
	for i, n := range list {
		c, err := strconv.Atoi(n.Value)
		if err != nil || n.Kind != yaml.ScalarNode || !slices.Contains(have, c) {
			return nil, p.d.errorf(n, fmt.Sprintf("%s[%d]", f.sub("ctx"), i), "%s: want one of the step's contexts %v", profile.NodeKind(n), have)
		}
		out = append(out, c)
	}
	return out, nil
}

// promptSelection reads the prompts of a raw batch an expectation checks,
// by number from 1.
func (p *parser) promptSelection(f *fields, a action) ([]int, error) {
	ra, ok := a.(*rawAction)
	if !ok || ra.prompts == nil {
		return nil, f.errorf("prompt", "only a raw step with prompts has prompts to select")
	}
	list, err := f.list("prompt")
	if err != nil {
		return nil, err
	}
	var out []int
	for i, n := range list {
		k, err := strconv.Atoi(n.Value)
		if err != nil || n.Kind != yaml.ScalarNode || k < 1 || k > len(ra.prompts) {
			return nil, p.d.errorf(n, fmt.Sprintf("%s[%d]", f.sub("prompt"), i), "%s: want a prompt's number, 1 to %d", profile.NodeKind(n), len(ra.prompts))
		}
		out = append(out, k)
	}
	return out, nil
}

// verdictCheck: the row's verdict level, and a text one of its causes
// contains; with figures, the level of each of those figures (their own
// verdicts: TTFT and the prefill rate are leg a's, decode the legs'
// difference) and a cause that concerns them.
type verdictCheck struct {
	level   harness.Level
	cause   string
	figures []harness.Figure
}

func (p *parser) verdictCheck(f *fields) (checker, error) {
	c := &verdictCheck{}
	var level string
	if err := f.oneOf(expVerdict, &level, harness.OK.String(), harness.Suspect.String(), harness.Poisoned.String()); err != nil {
		return nil, err
	}
	if err := c.level.UnmarshalText([]byte(level)); err != nil {
		return nil, f.errorf(expVerdict, "%v", err)
	}
	if f.has("figures") {
		list, err := f.list("figures")
		if err != nil {
			return nil, err
		}
		names := []string{string(harness.FigureTTFT), string(harness.FigurePrefill), string(harness.FigureDecode)}
		for i, n := range list {
			if n.Kind != yaml.ScalarNode || !slices.Contains(names, n.Value) {
				return nil, p.d.errorf(n, fmt.Sprintf("%s[%d]", f.sub("figures"), i), "%s: want one of %s", profile.NodeKind(n), strings.Join(names, ", "))
			}
			c.figures = append(c.figures, harness.Figure(n.Value))
		}
	}
	return c, f.str("cause", &c.cause)
}

func (c *verdictCheck) describe(bool) string {
	what := "verdict " + c.level.String()
	if len(c.figures) > 0 {
		var names []string
		for _, fig := range c.figures {
			names = append(names, string(fig))
		}
		what = fmt.Sprintf("verdict of %s %s", strings.Join(names, ", "), c.level)
	}
	if c.cause == "" {
		return what
	}
	return fmt.Sprintf("%s, cause %q", what, c.cause)
}

func (c *verdictCheck) check(r *row, _ bool) (bool, string) {
	v := r.verdict
	if len(c.figures) == 0 {
		ok := v.Level() == c.level
		if c.cause != "" {
			ok = ok && slices.ContainsFunc(v.Causes, func(x harness.Cause) bool { return strings.Contains(x.Text, c.cause) })
		}
		if ok {
			return true, v.Level().String()
		}
		return false, v.String()
	}
	var got []string
	ok := true
	for _, fig := range c.figures {
		l := v.LevelOf(fig)
		got = append(got, fmt.Sprintf("%s %s", fig, l))
		ok = ok && l == c.level
		if c.cause != "" {
			ok = ok && slices.ContainsFunc(v.Causes, func(x harness.Cause) bool {
				return x.Level == l && (len(x.Figures) == 0 || slices.Contains(x.Figures, fig)) && strings.Contains(x.Text, c.cause)
			})
		}
	}
	if ok {
		return true, strings.Join(got, ", ")
	}
	return false, strings.Join(got, ", ") + ": " + v.String()
}

// figureCheck: a named figure of the row, or the ratio of two, or the
// absolute value of either (|X|), within bounds, equal to a value, or
// (un)defined.
type figureCheck struct {
	abs         bool
	num, den    string
	min, max    *float64
	equals      *float64
	defined     *bool
	rtMin       *float64
	rtMax       *float64
	hasRealTime bool
}

func (p *parser) figureCheck(f *fields, a action) (checker, error) {
	c := &figureCheck{}
	var name string
	if err := f.str(expFigure, &name); err != nil {
		return nil, err
	}
	if len(name) > 2 && strings.HasPrefix(name, "|") && strings.HasSuffix(name, "|") {
		c.abs, name = true, name[1:len(name)-1]
	}
	num, den, ratio := strings.Cut(name, "/")
	c.num, c.den = strings.TrimSpace(num), strings.TrimSpace(den)
	for _, fig := range []string{c.num, c.den} {
		if fig == "" && !ratio {
			continue
		}
		if !slices.Contains(a.figures(), fig) {
			return nil, f.errorf(expFigure, "%q: a %s step has the figures %s (or X / Y, their ratio; |X|, its absolute value)", fig, a.kind(), strings.Join(a.figures(), ", "))
		}
	}
	var err error
	if c.min, err = f.optNumber("min"); err != nil {
		return nil, err
	}
	if c.max, err = f.optNumber("max"); err != nil {
		return nil, err
	}
	if c.equals, err = f.optNumber("equals"); err != nil {
		return nil, err
	}
	if f.has("defined") {
		var d bool
		if err := f.boolean("defined", &d); err != nil {
			return nil, err
		}
		c.defined = &d
	}
	bounded := c.min != nil || c.max != nil
	switch {
	case c.equals != nil && bounded:
		return nil, f.errorf("equals", "give equals, or min and max, not both")
	case c.min != nil && c.max != nil && *c.min > *c.max:
		return nil, f.errorf("min", "%g is above max %g", *c.min, *c.max)
	case c.defined != nil && !*c.defined && (bounded || c.equals != nil):
		return nil, f.errorf("defined", "an undefined figure has no value to bound")
	case c.defined == nil && !bounded && c.equals == nil:
		return nil, p.d.errorf(f.node, f.path, "say what the figure must be: min, max, equals or defined")
	}
	if f.has("real_time") {
		if !bounded {
			return nil, f.errorf("real_time", "only min and max have real-time bounds")
		}
		rt, err := p.d.mapping(f.values["real_time"], f.sub("real_time"), "min", "max")
		if err != nil {
			return nil, err
		}
		if c.rtMin, err = rt.optNumber("min"); err != nil {
			return nil, err
		}
		if c.rtMax, err = rt.optNumber("max"); err != nil {
			return nil, err
		}
		c.hasRealTime = true
	}
	return c, nil
}

func (c *figureCheck) name() string {
	n := c.num
	if c.den != "" {
		n += " / " + c.den
	}
	if c.abs {
		return "|" + n + "|"
	}
	return n
}

func (c *figureCheck) bounds(realTime bool) (lo, hi *float64) {
	if realTime && c.hasRealTime {
		return c.rtMin, c.rtMax
	}
	return c.min, c.max
}

func (c *figureCheck) describe(realTime bool) string {
	lo, hi := c.bounds(realTime)
	switch {
	case c.equals != nil:
		return fmt.Sprintf("%s = %s", c.name(), num(*c.equals))
	case lo != nil && hi != nil:
		return fmt.Sprintf("%s in [%s, %s]", c.name(), num(*lo), num(*hi))
	case lo != nil:
		return fmt.Sprintf("%s >= %s", c.name(), num(*lo))
	case hi != nil:
		return fmt.Sprintf("%s <= %s", c.name(), num(*hi))
	case *c.defined:
		return c.name() + " defined"
	}
	return c.name() + " undefined (nan)"
}

func (c *figureCheck) value(r *row) *float64 {
	v := r.figures[c.num]
	if v == nil {
		return nil
	}
	x := *v
	if c.den != "" {
		d := r.figures[c.den]
		if d == nil || *d == 0 {
			return nil
		}
		x /= *d
	}
	if c.abs {
		x = math.Abs(x)
	}
	return &x
}

func (c *figureCheck) check(r *row, realTime bool) (bool, string) {
	v := c.value(r)
	if v == nil {
		return c.defined != nil && !*c.defined, "undefined"
	}
	got := num(*v)
	if c.defined != nil && !*c.defined {
		return false, got
	}
	if c.equals != nil {
		return *v == *c.equals, got
	}
	lo, hi := c.bounds(realTime)
	return (lo == nil || *v >= *lo) && (hi == nil || *v <= *hi), got
}

// num renders a figure: integers as they are, others with four significant
// digits.
func num(x float64) string {
	if x == math.Trunc(x) && math.Abs(x) < 1e12 {
		return strconv.FormatFloat(x, 'f', 0, 64)
	}
	return strconv.FormatFloat(x, 'g', 4, 64)
}

// flushCheck: the flush before a leg, its last answer and its tries.
type flushCheck struct {
	leg    string
	status *int
	body   *string
	tries  *int
}

func (p *parser) flushCheck(f *fields, a action) (checker, error) {
	c := &flushCheck{}
	legs := a.legs()
	if err := f.oneOf(expFlush, &c.leg, legs...); err != nil {
		return nil, err
	}
	if f.has(expStatus) {
		c.status = new(int)
		if err := f.integer(expStatus, c.status, 100, 599); err != nil {
			return nil, err
		}
	}
	if f.has(expBody) {
		c.body = new(string)
		if err := f.str(expBody, c.body); err != nil {
			return nil, err
		}
	}
	if f.has("tries") {
		c.tries = new(int)
		if err := f.integer("tries", c.tries, 0, 1001); err != nil {
			return nil, err
		}
	}
	if c.status == nil && c.body == nil && c.tries == nil {
		return nil, p.d.errorf(f.node, f.path, "say what the flush must be: status, body or tries (0 tries: no flush)")
	}
	return c, nil
}

func (c *flushCheck) describe(bool) string {
	var parts []string
	if c.tries != nil {
		parts = append(parts, tries(*c.tries))
	}
	if c.status != nil {
		parts = append(parts, fmt.Sprintf("last HTTP %d", *c.status))
	}
	if c.body != nil {
		parts = append(parts, fmt.Sprintf("%q", *c.body))
	}
	return fmt.Sprintf("flush before %s: %s", legName(c.leg), strings.Join(parts, ", "))
}

// tries counts flush attempts in words: "1 try", "3 tries".
func tries(n int) string {
	if n == 1 {
		return "1 try"
	}
	return fmt.Sprintf("%d tries", n)
}

func legName(leg string) string {
	if leg == "stream" {
		return "the stream"
	}
	return "leg " + leg
}

func (c *flushCheck) check(r *row, _ bool) (bool, string) {
	rec := r.flushes[c.leg]
	if rec == nil || len(rec.Attempts) == 0 {
		return c.tries != nil && *c.tries == 0 && c.status == nil && c.body == nil, "no flush"
	}
	last := rec.Attempts[len(rec.Attempts)-1]
	got := fmt.Sprintf("%s, last HTTP %d", tries(len(rec.Attempts)), last.Status)
	if c.body != nil {
		got += fmt.Sprintf(" %q", last.Body)
	}
	ok := (c.tries == nil || *c.tries == len(rec.Attempts)) &&
		(c.status == nil || *c.status == last.Status) &&
		(c.body == nil || *c.body == last.Body)
	return ok, got
}

// statusCheck: the HTTP status of a flush or a raw request.
type statusCheck struct{ status int }

func (c *statusCheck) describe(bool) string { return fmt.Sprintf("HTTP %d", c.status) }

func (c *statusCheck) check(r *row, _ bool) (bool, string) {
	return r.status == c.status, fmt.Sprintf("HTTP %d", r.status)
}

// bodyCheck: the answer's body, exactly or a part of it.
type bodyCheck struct {
	body     string
	contains bool
}

func (c *bodyCheck) describe(bool) string {
	if c.contains {
		return fmt.Sprintf("body contains %q", c.body)
	}
	return fmt.Sprintf("body %q", c.body)
}

func (c *bodyCheck) check(r *row, _ bool) (bool, string) {
	got := fmt.Sprintf("%.200q", r.body)
	if c.contains {
		return strings.Contains(r.body, c.body), got
	}
	return r.body == c.body, got
}

package tokenizer

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/ardanlabs/jinja"
)

// What a chat template prints, as Python prints it: jinja2 prints str(x)
// of an expression, its format filter is Python's % operator, and
// transformers' strftime_now is datetime.strftime.

// pyPrint is what {{ x }} prints in jinja2, where the engine's own
// printing differs: None prints "None", a float as Python's repr, a list
// or a dict as Python's repr (floats with their ".0", a string with a
// quote in the other quotes). An undefined value prints nothing in both.
func pyPrint(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) != 1 {
		return jinja.Undefined(), errors.New("an output takes one value")
	}
	switch v := args[0]; {
	case v.IsNone():
		return jinja.NewString("None"), nil
	case v.IsFloat():
		return jinja.NewString(pyFloat(v.AsFloat())), nil
	case v.IsList(), v.IsDict():
		return jinja.NewString(pyRepr(v)), nil
	default:
		return v, nil
	}
}

// pyFloat is Python's repr of a float: the shortest digits that read
// back, positional from 1e-4 up to 1e16 (with ".0" when whole), else in
// exponent form.
func pyFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	if a := math.Abs(f); a != 0 && (a < 1e-4 || a >= 1e16) {
		return strconv.FormatFloat(f, 'e', -1, 64)
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}

// pyStr is Python's str(v).
func pyStr(v jinja.Value) string {
	switch {
	case v.IsUndefined():
		return ""
	case v.IsString():
		return v.AsString()
	case v.IsList(), v.IsDict():
		return pyRepr(v)
	}
	return pyScalar(v)
}

// pyScalar prints a value that is neither a string nor a container.
func pyScalar(v jinja.Value) string {
	switch {
	case v.IsNone():
		return "None"
	case v.IsBool():
		if v.AsBool() {
			return "True"
		}
		return "False"
	case v.IsInt():
		return strconv.FormatInt(v.AsInt(), 10)
	case v.IsFloat():
		return pyFloat(v.AsFloat())
	}
	return v.String()
}

// pyRepr is Python's repr(v).
func pyRepr(v jinja.Value) string {
	switch {
	case v.IsString():
		return pyQuote(v.AsString())
	case v.IsList():
		parts := make([]string, 0, v.AsList().Len())
		for _, item := range v.AsList().Items {
			parts = append(parts, pyRepr(item))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case v.IsDict():
		d := v.AsDict()
		parts := make([]string, 0, d.Len())
		for _, k := range d.Keys {
			parts = append(parts, pyQuote(k)+": "+pyRepr(d.Data[k]))
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case v.IsUndefined():
		return "Undefined"
	}
	return pyScalar(v)
}

// pyQuote is Python's repr of a string: single quotes unless the string
// has one and no double quote.
func pyQuote(s string) string {
	quote := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		quote = '"'
	}
	var b strings.Builder
	b.WriteByte(quote)
	for _, r := range s {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == rune(quote):
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case unicode.IsPrint(r) || r == ' ':
			b.WriteRune(r)
		case r <= 0xff:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
	}
	b.WriteByte(quote)
	return b.String()
}

// pyStringFilter is jinja2's string filter: str(value).
func pyStringFilter(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), errors.New("string: no value")
	}
	return jinja.NewString(pyStr(args[0])), nil
}

// pyToJSON is transformers' tojson filter: json.dumps(x,
// ensure_ascii=False, indent=None, separators=None, sort_keys=False),
// each settable.
func pyToJSON(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), errors.New("tojson: no value")
	}
	j := jsonDumper{itemSep: ", ", keySep: ": "}
	names := []string{"ensure_ascii", "indent", "separators", "sort_keys"}
	opts := map[string]jinja.Value{}
	for i, a := range args[1:] {
		if i >= len(names) {
			return jinja.Undefined(), errors.New("tojson() takes at most 5 arguments")
		}
		opts[names[i]] = a
	}
	for k, v := range kwargs {
		if !slices.Contains(names, k) {
			return jinja.Undefined(), fmt.Errorf("tojson() got an unexpected keyword argument '%s'", k)
		}
		opts[k] = v
	}
	if v, ok := opts["ensure_ascii"]; ok {
		j.ascii = v.IsTruthy()
	}
	if v, ok := opts["sort_keys"]; ok {
		j.sortKeys = v.IsTruthy()
	}
	if v, ok := opts["indent"]; ok && !v.IsNone() {
		switch {
		case v.IsInt():
			j.indent = strings.Repeat(" ", max(0, int(v.AsInt())))
		case v.IsString():
			j.indent = v.AsString()
		default:
			return jinja.Undefined(), fmt.Errorf("tojson: indent must be an int or a string, not %s", pyType(v))
		}
		j.indented, j.itemSep = true, ","
	}
	if v, ok := opts["separators"]; ok && !v.IsNone() {
		if !v.IsList() || v.AsList().Len() != 2 || !v.AsList().Get(0).IsString() || !v.AsList().Get(1).IsString() {
			return jinja.Undefined(), errors.New("tojson: separators must be two strings")
		}
		j.itemSep, j.keySep = v.AsList().Get(0).AsString(), v.AsList().Get(1).AsString()
	}
	var b strings.Builder
	if err := j.dump(&b, args[0], 0); err != nil {
		return jinja.Undefined(), err
	}
	return jinja.NewString(b.String()), nil
}

// jsonDumper writes values as Python's json.dumps does.
type jsonDumper struct {
	ascii, sortKeys, indented bool
	indent, itemSep, keySep   string
}

func (j *jsonDumper) newline(b *strings.Builder, level int) {
	if j.indented {
		b.WriteByte('\n')
		b.WriteString(strings.Repeat(j.indent, level))
	}
}

// maxJSONDepth is the deepest container json.dumps reaches from a
// template before Python's recursion limit (1000 frames) stops it: 990
// levels under jinja2's render, fewer under SGLang's deeper stack.
const maxJSONDepth = 990

func (j *jsonDumper) dump(b *strings.Builder, v jinja.Value, level int) error {
	if level >= maxJSONDepth && (v.IsList() || v.IsDict()) {
		return errors.New("RecursionError: maximum recursion depth exceeded while encoding a JSON object")
	}
	switch {
	case v.IsNone():
		b.WriteString("null")
	case v.IsBool():
		b.WriteString(map[bool]string{true: "true", false: "false"}[v.AsBool()])
	case v.IsInt():
		b.WriteString(strconv.FormatInt(v.AsInt(), 10))
	case v.IsFloat():
		f := v.AsFloat()
		switch {
		case math.IsInf(f, 1):
			b.WriteString("Infinity")
		case math.IsInf(f, -1):
			b.WriteString("-Infinity")
		case math.IsNaN(f):
			b.WriteString("NaN")
		default:
			b.WriteString(pyFloat(f))
		}
	case v.IsString():
		j.str(b, v.AsString())
	case v.IsList():
		items := v.AsList().Items
		if len(items) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, item := range items {
			if i > 0 {
				b.WriteString(j.itemSep)
			}
			j.newline(b, level+1)
			if err := j.dump(b, item, level+1); err != nil {
				return err
			}
		}
		j.newline(b, level)
		b.WriteByte(']')
	case v.IsDict():
		d := v.AsDict()
		keys := slices.Clone(d.Keys)
		if j.sortKeys {
			slices.Sort(keys)
		}
		if len(keys) == 0 {
			b.WriteString("{}")
			return nil
		}
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(j.itemSep)
			}
			j.newline(b, level+1)
			j.str(b, k)
			b.WriteString(j.keySep)
			if err := j.dump(b, d.Data[k], level+1); err != nil {
				return err
			}
		}
		j.newline(b, level)
		b.WriteByte('}')
	case v.IsUndefined():
		return errors.New("Object of type Undefined is not JSON serializable")
	default:
		return fmt.Errorf("Object of type %s is not JSON serializable", pyType(v))
	}
	return nil
}

// str writes a JSON string as json.dumps does: control characters
// escaped, the rest as it is (or as \uXXXX with ensure_ascii).
func (j *jsonDumper) str(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r < 0x20 || j.ascii && r > 0x7f:
			if r > 0xffff {
				r -= 0x10000
				fmt.Fprintf(b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
			} else {
				fmt.Fprintf(b, `\u%04x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
}

// pyFormatFilter is jinja2's format filter: str(value) % args, or %
// kwargs (a mapping) when only keyword arguments are given.
func pyFormatFilter(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), errors.New("format: no value to format")
	}
	if len(args) > 1 && len(kwargs) > 0 {
		return jinja.Undefined(), errors.New("can't handle positional and keyword arguments at the same time")
	}
	s, err := pyPercent(pyStr(args[0]), args[1:], kwargs)
	if err != nil {
		return jinja.Undefined(), err
	}
	return jinja.NewString(s), nil
}

// pyPercent is Python's format % args (or % mapping).
func pyPercent(format string, args []jinja.Value, mapping map[string]jinja.Value) (string, error) {
	var b strings.Builder
	next := 0
	arg := func() (jinja.Value, error) {
		if mapping != nil {
			return jinja.Undefined(), errors.New("format requires a mapping")
		}
		if next >= len(args) {
			return jinja.Undefined(), errors.New("not enough arguments for format string")
		}
		next++
		return args[next-1], nil
	}
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			b.WriteByte(format[i])
			continue
		}
		i++
		if i >= len(format) {
			return "", errors.New("incomplete format")
		}
		var key *string
		if format[i] == '(' {
			end := strings.IndexByte(format[i:], ')')
			if end < 0 {
				return "", errors.New("incomplete format key")
			}
			k := format[i+1 : i+end]
			key, i = &k, i+end+1
		}
		flags := ""
		for i < len(format) && strings.IndexByte("-+ #0", format[i]) >= 0 {
			flags += string(format[i])
			i++
		}
		width, prec := "", ""
		for i < len(format) && (format[i] >= '0' && format[i] <= '9' || format[i] == '*') {
			if format[i] == '*' {
				v, err := arg()
				if err != nil {
					return "", err
				}
				width += strconv.FormatInt(v.AsInt(), 10)
			} else {
				width += string(format[i])
			}
			i++
		}
		if i < len(format) && format[i] == '.' {
			prec = "."
			i++
			for i < len(format) && format[i] >= '0' && format[i] <= '9' {
				prec += string(format[i])
				i++
			}
		}
		for i < len(format) && strings.IndexByte("hlL", format[i]) >= 0 {
			i++
		}
		if i >= len(format) {
			return "", errors.New("incomplete format")
		}
		verb := format[i]
		if verb == '%' {
			b.WriteByte('%')
			continue
		}
		var v jinja.Value
		var err error
		if key != nil {
			if mapping == nil {
				return "", errors.New("format requires a mapping")
			}
			var ok bool
			if v, ok = mapping[*key]; !ok {
				return "", fmt.Errorf("KeyError: %s", pyQuote(*key))
			}
		} else if v, err = arg(); err != nil {
			return "", err
		}
		s, err := pyConvert(verb, flags, width, prec, v)
		if err != nil {
			return "", err
		}
		b.WriteString(s)
	}
	if mapping == nil && next < len(args) {
		return "", errors.New("not all arguments converted during string formatting")
	}
	return b.String(), nil
}

// pyConvert formats one value for a % conversion.
func pyConvert(verb byte, flags, width, prec string, v jinja.Value) (string, error) {
	spec := "%" + flags + width + prec
	switch verb {
	case 's', 'r', 'a':
		s := pyStr(v)
		if verb != 's' {
			s = pyRepr(v)
		}
		return fmt.Sprintf("%"+strings.NewReplacer("0", "", "#", "").Replace(flags)+width+prec+"s", s), nil
	case 'd', 'i', 'u':
		n, err := pyNumber(v, verb)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf(spec+"d", int64(n)), nil
	case 'x', 'X', 'o':
		if !v.IsInt() && !v.IsBool() {
			return "", fmt.Errorf("%%%c format: an integer is required, not %s", verb, pyType(v))
		}
		n, _ := pyNumber(v, verb)
		s := fmt.Sprintf(spec+string(verb), int64(n))
		if verb == 'o' && strings.Contains(flags, "#") {
			s = strings.Replace(s, "0", "0o", 1)
		}
		return s, nil
	case 'e', 'E', 'f', 'F', 'g', 'G':
		f, err := pyNumber(v, verb)
		if err != nil {
			return "", err
		}
		if prec == "" {
			spec += ".6"
		}
		if verb == 'F' {
			verb = 'f'
		}
		return fmt.Sprintf(spec+string(verb), f), nil
	case 'c':
		switch {
		case v.IsInt():
			return fmt.Sprintf("%"+flags+width+"c", rune(v.AsInt())), nil
		case v.IsString() && len([]rune(v.AsString())) == 1:
			return fmt.Sprintf("%"+flags+width+"s", v.AsString()), nil
		}
		return "", errors.New("%c requires an int or a unicode character")
	}
	return "", fmt.Errorf("unsupported format character %s", pyQuote(string(verb)))
}

// pyNumber is a value as a % conversion reads a number: an int, a float
// or a bool; anything else is Python's TypeError.
func pyNumber(v jinja.Value, verb byte) (float64, error) {
	switch {
	case v.IsInt():
		return float64(v.AsInt()), nil
	case v.IsFloat():
		f := v.AsFloat()
		if strings.IndexByte("diuxXo", verb) >= 0 {
			f = math.Trunc(f)
		}
		return f, nil
	case v.IsBool():
		if v.AsBool() {
			return 1, nil
		}
		return 0, nil
	}
	if strings.IndexByte("diu", verb) >= 0 {
		return 0, fmt.Errorf("%%%c format: a real number is required, not %s", verb, pyType(v))
	}
	return 0, fmt.Errorf("must be real number, not %s", pyType(v))
}

// pyType is the Python type name of a value, for errors.
func pyType(v jinja.Value) string {
	switch {
	case v.IsString():
		return "str"
	case v.IsList():
		return "list"
	case v.IsDict():
		return "dict"
	case v.IsNone():
		return "NoneType"
	case v.IsUndefined():
		return "Undefined"
	case v.IsFloat():
		return "float"
	}
	return "int"
}

// pyStrftime is Python's (glibc's) strftime of a naive datetime: %z and
// %Z are empty, a "-" after % drops the padding, an unknown directive is
// kept as written.
func pyStrftime(format string, t time.Time) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		if format[i] != '%' || i+1 >= len(format) {
			b.WriteByte(format[i])
			continue
		}
		i++
		pad := byte(0) // the directive's own
		if c := format[i]; (c == '-' || c == '_' || c == '0') && i+1 < len(format) {
			pad = c
			i++
		}
		num := func(n, width int, fill byte) {
			s := strconv.Itoa(n)
			switch pad {
			case '-':
				fill = 0
			case '_':
				fill = ' '
			case '0':
				fill = '0'
			}
			for fill != 0 && len(s) < width {
				s = string(fill) + s
			}
			b.WriteString(s)
		}
		_, week := t.ISOWeek()
		hour12 := t.Hour() % 12
		if hour12 == 0 {
			hour12 = 12
		}
		switch c := format[i]; c {
		case 'a':
			b.WriteString(t.Format("Mon"))
		case 'A':
			b.WriteString(t.Format("Monday"))
		case 'b', 'h':
			b.WriteString(t.Format("Jan"))
		case 'B':
			b.WriteString(t.Format("January"))
		case 'c':
			b.WriteString(t.Format("Mon Jan _2 15:04:05 2006"))
		case 'd':
			num(t.Day(), 2, '0')
		case 'e':
			num(t.Day(), 2, ' ')
		case 'f':
			num(t.Nanosecond()/1000, 6, '0')
		case 'H':
			num(t.Hour(), 2, '0')
		case 'I':
			num(hour12, 2, '0')
		case 'j':
			num(t.YearDay(), 3, '0')
		case 'm':
			num(int(t.Month()), 2, '0')
		case 'M':
			num(t.Minute(), 2, '0')
		case 'p':
			b.WriteString(t.Format("PM"))
		case 'S':
			num(t.Second(), 2, '0')
		case 'u':
			num((int(t.Weekday())+6)%7+1, 1, 0)
		case 'w':
			num(int(t.Weekday()), 1, 0)
		case 'U':
			num((t.YearDay()+6-int(t.Weekday()))/7, 2, '0')
		case 'W':
			num((t.YearDay()+6-(int(t.Weekday())+6)%7)/7, 2, '0')
		case 'V':
			num(week, 2, '0')
		case 'G':
			year, _ := t.ISOWeek()
			num(year, 4, '0')
		case 'x':
			b.WriteString(t.Format("01/02/06"))
		case 'X':
			b.WriteString(t.Format("15:04:05"))
		case 'y':
			num(t.Year()%100, 2, '0')
		case 'Y':
			num(t.Year(), 4, '0')
		case 'z', 'Z':
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			if pad != 0 {
				b.WriteByte(pad)
			}
			b.WriteByte(c)
		}
	}
	return b.String()
}

package scenarios

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sglmock/sglmock/mockserver/profile"
)

// FileError is a problem in a scenario file: the file, the line and the
// field (its path from the document's root, "steps[2].twopoint.a").
type FileError struct {
	File  string
	Line  int
	Field string
	Msg   string
}

func (e *FileError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s:%d: %s: %s", e.File, e.Line, e.Field, e.Msg)
}

// decoder reads one file's YAML nodes strictly: every key must be known,
// every value of its kind and range, and every error names the line.
type decoder struct {
	file string
	// keys, when set, hears every mapping's allowed keys, by its path
	// ("steps[].twopoint"): the test that Format names them all.
	keys func(path string, allowed []string)
}

func (d *decoder) errorf(n *yaml.Node, field, format string, args ...any) error {
	line := 0
	if n != nil {
		line = n.Line
	}
	return &FileError{File: d.file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// fields is a mapping node whose keys have been checked against a list.
type fields struct {
	d      *decoder
	node   *yaml.Node
	path   string
	values map[string]*yaml.Node
	keys   map[string]*yaml.Node
}

// mapping checks that n is a mapping with only the allowed keys, each once.
func (d *decoder) mapping(n *yaml.Node, path string, allowed ...string) (*fields, error) {
	if n.Kind != yaml.MappingNode {
		return nil, d.errorf(n, path, "want a mapping with keys %s, got %s", strings.Join(allowed, ", "), profile.NodeKind(n))
	}
	if d.keys != nil {
		d.keys(path, allowed)
	}
	f := &fields{d: d, node: n, path: path, values: map[string]*yaml.Node{}, keys: map[string]*yaml.Node{}}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return nil, d.errorf(k, path, "a key must be a plain name, got %s", profile.NodeKind(k))
		}
		if !slices.Contains(allowed, k.Value) {
			return nil, d.errorf(k, f.sub(k.Value), "unknown key (want one of %s)", strings.Join(allowed, ", "))
		}
		if _, dup := f.values[k.Value]; dup {
			return nil, d.errorf(k, f.sub(k.Value), "given twice")
		}
		f.values[k.Value], f.keys[k.Value] = v, k
	}
	return f, nil
}

func (f *fields) sub(key string) string {
	if f.path == "" {
		return key
	}
	return f.path + "." + key
}

func (f *fields) has(key string) bool { _, ok := f.values[key]; return ok }

// errorf reports a problem with key's value, at its line.
func (f *fields) errorf(key, format string, args ...any) error {
	n := f.values[key]
	if n == nil {
		n = f.node
	}
	return f.d.errorf(n, f.sub(key), format, args...)
}

// require fails unless every key is present.
func (f *fields) require(keys ...string) error {
	for _, k := range keys {
		if !f.has(k) {
			return f.d.errorf(f.node, f.sub(k), "missing")
		}
	}
	return nil
}

// scalar is key's value when it is a scalar; ok is false when key is absent.
func (f *fields) scalar(key string) (string, bool, error) {
	n, ok := f.values[key]
	if !ok {
		return "", false, nil
	}
	if n.Kind != yaml.ScalarNode {
		return "", true, f.errorf(key, "want a single value, got %s", profile.NodeKind(n))
	}
	return n.Value, true, nil
}

// str reads a string; absent keeps *dst.
func (f *fields) str(key string, dst *string) error {
	v, ok, err := f.scalar(key)
	if ok && err == nil {
		*dst = v
	}
	return err
}

// integer reads an integer in [lo, hi]; absent keeps *dst.
func (f *fields) integer(key string, dst *int, lo, hi int) error {
	v, ok, err := f.scalar(key)
	if !ok || err != nil {
		return err
	}
	i, err := strconv.Atoi(v)
	if err != nil {
		return f.errorf(key, "want an integer, got %q", v)
	}
	if i < lo || i > hi {
		return f.errorf(key, "%d is out of range: want %d..%d", i, lo, hi)
	}
	*dst = i
	return nil
}

// number reads a finite number in [lo, hi]; absent keeps *dst.
func (f *fields) number(key string, dst *float64, lo, hi float64) error {
	v, ok, err := f.scalar(key)
	if !ok || err != nil {
		return err
	}
	x, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
		return f.errorf(key, "want a finite number, got %q", v)
	}
	if x < lo || x > hi {
		return f.errorf(key, "%g is out of range: want %g..%g", x, lo, hi)
	}
	*dst = x
	return nil
}

// optNumber reads an optional finite number.
func (f *fields) optNumber(key string) (*float64, error) {
	if !f.has(key) {
		return nil, nil
	}
	var x float64
	if err := f.number(key, &x, -math.MaxFloat64, math.MaxFloat64); err != nil {
		return nil, err
	}
	return &x, nil
}

// boolean reads true or false; absent keeps *dst.
func (f *fields) boolean(key string, dst *bool) error {
	v, ok, err := f.scalar(key)
	if !ok || err != nil {
		return err
	}
	switch v {
	case "true":
		*dst = true
	case "false":
		*dst = false
	default:
		return f.errorf(key, "want true or false, got %q", v)
	}
	return nil
}

// oneOf reads a string that must be one of choices; absent keeps *dst.
func (f *fields) oneOf(key string, dst *string, choices ...string) error {
	v, ok, err := f.scalar(key)
	if !ok || err != nil {
		return err
	}
	if !slices.Contains(choices, v) {
		return f.errorf(key, "%q: want one of %s", v, strings.Join(choices, ", "))
	}
	*dst = v
	return nil
}

// list is key's value as a sequence; a single scalar is a list of one.
func (f *fields) list(key string) ([]*yaml.Node, error) {
	n := f.values[key]
	switch n.Kind {
	case yaml.SequenceNode:
		return n.Content, nil
	case yaml.ScalarNode:
		return []*yaml.Node{n}, nil
	}
	return nil, f.errorf(key, "want a value or a list, got %s", profile.NodeKind(n))
}

package api

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"

	"github.com/sglmock/sglmock/mockserver/engine"
)

// number is a JSON number kept with the text Python prints for it, for
// SGLang's sampling-parameter messages: /generate's sampling_params is a
// plain dict, so an integer literal stays an int ("-1") and any other a
// float ("-1.5", "1e-07"); asFloat renders it as a float field of
// pydantic's would ("-1.0").
type number struct{ engine.Number }

func (n *number) UnmarshalJSON(b []byte) error {
	lit := strings.TrimSpace(string(b))
	v, err := strconv.ParseFloat(lit, 64)
	if err != nil || lit == "" || !strings.ContainsAny(lit[:1], "-0123456789") {
		return &json.UnmarshalTypeError{Value: jsonKind(lit), Type: reflect.TypeFor[float64]()}
	}
	n.Value, n.Text = v, lit
	switch {
	case strings.ContainsAny(lit, ".eE"):
		n.Text = pyFloat(v)
	case lit == "-0":
		n.Text = "0" // Python's int has no negative zero
	}
	return nil
}

// param is n as the engine's, nil when not given.
func (n *number) param() *engine.Number {
	if n == nil {
		return nil
	}
	v := n.Number
	return &v
}

// asFloat is n as pydantic's float field holds it: printed as a float.
func (n *number) asFloat() *engine.Number {
	if n == nil {
		return nil
	}
	return &engine.Number{Value: n.Value, Text: pyFloat(n.Value)}
}

// pyFloat is Python's repr of a float: the shortest text that reads back,
// with ".0" on a whole number, and in exponent form below 1e-4 or from
// 1e16 on ("1e-05", "1e+16").
func pyFloat(v float64) string {
	e := strconv.FormatFloat(v, 'e', -1, 64)
	exp, _ := strconv.Atoi(e[strings.IndexByte(e, 'e')+1:])
	if v != 0 && (exp < -4 || exp >= 16) {
		return e
	}
	s := strconv.FormatFloat(v, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}

// objectKeys are the keys of a JSON object in the order they came, as a
// Python dict keeps them (logit_bias); null is none.
type objectKeys []string

func (k *objectKeys) UnmarshalJSON(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok == nil {
		return nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return &json.UnmarshalTypeError{Value: jsonKind(strings.TrimSpace(string(b))), Type: reflect.TypeFor[map[string]float64]()}
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return err
		}
		var v float64
		if err := dec.Decode(&v); err != nil {
			return err
		}
		*k = append(*k, key.(string))
	}
	return nil
}

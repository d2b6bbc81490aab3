package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
)

// integer is a JSON integer field decoded exactly: it refuses every
// literal outside int64, and describeJSONError names the bound it broke
// (encoding/json's error for an int names no bound). Python,
// whose ints are unbounded, would take such a number and refuse it later
// for its size (the context length check); the mock refuses it while
// decoding, with the field and the exact literal.
type integer int

// integerType marks an integer's decoding errors in UnmarshalTypeError,
// whose Field encoding/json fills with the key path.
var integerType = reflect.TypeFor[integer]()

func (n *integer) UnmarshalJSON(b []byte) error {
	lit := string(b)
	if lit == "null" {
		return nil // as for an int: null leaves the value alone
	}
	v, err := strconv.ParseInt(lit, 10, 64)
	if err == nil {
		*n = integer(v)
		return nil
	}
	if !errors.Is(err, strconv.ErrRange) {
		return &json.UnmarshalTypeError{Value: jsonKind(lit), Type: reflect.TypeFor[int]()}
	}
	return &json.UnmarshalTypeError{Value: "number " + lit, Type: integerType}
}

// jsonKind describes a JSON value as encoding/json's errors do.
func jsonKind(lit string) string {
	switch {
	case lit == "":
		return "nothing"
	case lit[0] == '"':
		return "string"
	case lit == "true" || lit == "false":
		return "bool"
	case lit[0] == '[':
		return "array"
	case lit[0] == '{':
		return "object"
	case len(lit) > 40:
		return "number " + lit[:40] + "..."
	}
	return "number " + lit
}

// ptr returns n as an *int, nil for nil.
func (n *integer) ptr() *int {
	if n == nil {
		return nil
	}
	v := int(*n)
	return &v
}

// outOfRange reports whether a decoding error is an integer literal past
// int64, and renders SGLang-style text for it: "<field> must be at most
// 9223372036854775807, got <literal>." (or at least, for a negative one).
func outOfRange(typ *json.UnmarshalTypeError) (string, bool) {
	if typ.Type != integerType {
		return "", false
	}
	lit, ok := strings.CutPrefix(typ.Value, "number ")
	if !ok {
		return "", false
	}
	if _, err := strconv.ParseInt(lit, 10, 64); !errors.Is(err, strconv.ErrRange) {
		return "", false
	}
	field := typ.Field
	if field == "" {
		field = "The value"
	}
	if len(lit) > 40 {
		lit = fmt.Sprintf("%s... (%d digits)", lit[:40], len(strings.TrimPrefix(lit, "-")))
	}
	if lit[0] == '-' {
		return fmt.Sprintf("%s must be at least %d, got %s.", field, int64(math.MinInt64), lit), true
	}
	return fmt.Sprintf("%s must be at most %d, got %s.", field, int64(math.MaxInt64), lit), true
}

package profile

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// wholeNumbers refuses a fraction given for an integer field of t in n.
// The YAML decoder would truncate "context_length: 32768.5" to 32768
// without a word; a profile whose limits are not what its file says must
// not load. A float literal that is a whole number (1e5) is taken.
func wholeNumbers(n *yaml.Node, t reflect.Type, path, profileName string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return nil
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			f, ok := fieldByYAMLKey(t, n.Content[i].Value)
			if !ok {
				continue // KnownFields reports unknown keys
			}
			if err := wholeNumbers(n.Content[i+1], f.Type, join(path, n.Content[i].Value), profileName); err != nil {
				return err
			}
		}
	case reflect.Slice, reflect.Array:
		if n.Kind != yaml.SequenceNode {
			return nil
		}
		for i, c := range n.Content {
			if err := wholeNumbers(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i), profileName); err != nil {
				return err
			}
		}
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint, reflect.Uint64, reflect.Uint32:
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!float" {
			return nil
		}
		f, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
		if err == nil && f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			return nil
		}
		return &FieldError{Profile: profileName, Field: path, Value: n.Value, Why: "must be a whole number"}
	}
	return nil
}

func fieldByYAMLKey(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == key {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

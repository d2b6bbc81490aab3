package api

import (
	"bytes"
	"fmt"

	json "github.com/goccy/go-json"
)

// stringOrList is a JSON string or list of strings (SGLang's stop).
type stringOrList []string

func (s *stringOrList) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		*s = nil
		return nil
	}
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*s = []string{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return fmt.Errorf("stop: must be a string or a list of strings")
	}
	*s = many
	return nil
}

func isNull(b json.RawMessage) bool { return len(b) == 0 || bytes.Equal(b, []byte("null")) }

func isList(b json.RawMessage) bool { return len(b) > 0 && b[0] == '[' }

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

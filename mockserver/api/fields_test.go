package api

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// plainString takes a JSON string's bytes as they are only where the
// decoder would give the same text; everything else goes to the decoder,
// and parsePrompt gives what the decoder gives either way.
func TestPlainString(t *testing.T) {
	tests := []struct {
		raw   string
		plain bool
	}{
		{`"hello world"`, true},
		{`""`, true},
		{`"héllo 🙂"`, true},
		{`"a\"b"`, false},
		{`"line\nbreak"`, false},
		{`"\u00e9"`, false},
		{"\"tab\there\"", false},
		{"\"bad \xff byte\"", false},
		{`["a"]`, false},
		{`12`, false},
		{`"`, false},
		{`"eight by` + "\x01" + `tes and more"`, false},
		{`"` + strings.Repeat("long plain text ", 40) + `"`, true},
		{`"` + strings.Repeat("long plain text ", 40) + "\x1f" + `"`, false},
		{`"` + strings.Repeat("long text é ", 40) + `"`, true},
		{`"` + strings.Repeat("long text ", 40) + "\xc3" + `"`, false},
	}
	for _, tt := range tests {
		got, ok := plainString([]byte(tt.raw))
		if ok != tt.plain {
			t.Errorf("plainString(%q): got ok %v, want %v", tt.raw, ok, tt.plain)
		}
		var want string
		if ok && (json.Unmarshal([]byte(tt.raw), &want) != nil || got != want) {
			t.Errorf("plainString(%q) = %q, the decoder gives %q", tt.raw, got, want)
		}
		reqs, err := parsePrompt(json.RawMessage(tt.raw), false)
		if tt.raw == `""` {
			// SGLang refuses an empty prompt before it reads one.
			if !errors.Is(err, errEmptyPrompt) {
				t.Errorf("parsePrompt(%q): got %+v, %v; want %v", tt.raw, reqs, err, errEmptyPrompt)
			}
			continue
		}
		if json.Unmarshal([]byte(tt.raw), &want) == nil && (err != nil || len(reqs) != 1 || reqs[0].Text != want) {
			t.Errorf("parsePrompt(%q): got %+v, %v; want the text %q", tt.raw, reqs, err, want)
		}
	}
}

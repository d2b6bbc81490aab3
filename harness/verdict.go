package harness

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Level is how bad a measurement is.
type Level int

// Levels, from good to bad.
const (
	OK Level = iota
	// Suspect: something the harness cannot rule out may have distorted
	// the figure (a refused flush, no cache report, a short output).
	Suspect
	// Poisoned: the figure does not measure what it claims (a leg meant
	// to be cold was served from the prefix cache, t_b <= t_a).
	Poisoned
)

func (l Level) String() string {
	switch l {
	case Suspect:
		return "SUSPECT"
	case Poisoned:
		return "POISONED"
	}
	return "ok"
}

// MarshalText writes the level's name.
func (l Level) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// UnmarshalText reads a level's name.
func (l *Level) UnmarshalText(b []byte) error {
	for _, c := range []Level{OK, Suspect, Poisoned} {
		if string(b) == c.String() {
			*l = c
			return nil
		}
	}
	return fmt.Errorf("verdict level %q: want ok, SUSPECT or POISONED", b)
}

// Cause is one finding of the checks.
type Cause struct {
	Level Level  `json:"level"`
	Text  string `json:"text"`
}

// Verdict is a measurement's level and every finding behind it.
type Verdict struct {
	Causes []Cause
}

// add records a finding, once.
func (v *Verdict) add(l Level, text string) {
	for _, c := range v.Causes {
		if c.Text == text {
			return
		}
	}
	v.Causes = append(v.Causes, Cause{l, text})
}

// merge adds another verdict's findings.
func (v *Verdict) merge(o Verdict) {
	for _, c := range o.Causes {
		v.add(c.Level, c.Text)
	}
}

// Level is the worst finding's.
func (v Verdict) Level() Level {
	l := OK
	for _, c := range v.Causes {
		l = max(l, c.Level)
	}
	return l
}

// String is "ok", or the level and every finding: "POISONED: leg b reused
// 1406 of 1407 prompt tokens (cached_tokens); t_b < t_a".
func (v Verdict) String() string {
	l := v.Level()
	if l == OK {
		if len(v.Causes) == 0 {
			return "ok"
		}
		return "ok (" + v.texts() + ")"
	}
	return l.String() + ": " + v.texts()
}

func (v Verdict) texts() string {
	var parts []string
	// The worst findings first: they explain the level.
	for l := Poisoned; l >= OK; l-- {
		for _, c := range v.Causes {
			if c.Level == l {
				parts = append(parts, c.Text)
			}
		}
	}
	return strings.Join(parts, "; ")
}

// verdictJSON is a verdict on the wire: the level and text for readers,
// the causes for programs.
type verdictJSON struct {
	Level  Level   `json:"level"`
	Text   string  `json:"text"`
	Causes []Cause `json:"causes"`
}

// MarshalJSON writes {"level": ..., "text": ..., "causes": [...]}.
func (v Verdict) MarshalJSON() ([]byte, error) {
	causes := v.Causes
	if causes == nil {
		causes = []Cause{}
	}
	return json.Marshal(verdictJSON{v.Level(), v.String(), causes})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (v *Verdict) UnmarshalJSON(b []byte) error {
	var w verdictJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	v.Causes = w.Causes
	return nil
}

package scenarios

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sglmock/sglmock/mockserver/profile"
)

// Scenario is one methodology trap and its fix, played step by step against
// a fresh mock of its profile.
type Scenario struct {
	Name string
	// Description says what trap the scenario shows and why it matters on
	// real hardware.
	Description string
	// File is where the scenario was read from: "builtin/NAME.yaml" for an
	// embedded one.
	File    string
	Profile *profile.Profile
	// Speedup is the speedup `sglmock scenario run` serves the mock at: fast
	// enough to finish in seconds, slow enough that its real_time bounds
	// hold (a client's jitter of e wall seconds is Speedup*e simulated).
	Speedup float64
	Steps   []*Step
}

// Summary is the first sentence of the description.
func (sc *Scenario) Summary() string {
	d := strings.Join(strings.Fields(sc.Description), " ")
	if i := strings.Index(d, ". "); i >= 0 {
		return d[:i+1]
	}
	return d
}

// Step is one thing the scenario does, and what must then hold.
type Step struct {
	Name string
	// Note says what the step shows; it is printed above its table.
	Note   string
	Line   int
	action action
	Expect []*Expectation
}

//go:embed builtin/*.yaml
var builtinFS embed.FS

// Names lists the built-in scenarios, sorted.
func Names() []string {
	entries, err := builtinFS.ReadDir("builtin")
	if err != nil {
		panic(err) // the embedded directory is part of the binary
	}
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	return names
}

// Builtin returns a built-in scenario by name.
func Builtin(name string) (*Scenario, error) {
	file := path.Join("builtin", name+".yaml")
	b, err := builtinFS.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("no built-in scenario %q (built-ins: %s)", name, strings.Join(Names(), ", "))
	}
	sc, err := Parse(b, file)
	if err != nil {
		return nil, err
	}
	if sc.Name != name {
		return nil, fmt.Errorf("%s: name %q: a built-in scenario is named after its file", file, sc.Name)
	}
	return sc, nil
}

// Load returns a built-in scenario by name, or reads a scenario file when
// the argument is a path (it contains a path separator or ends in .yaml or
// .yml).
func Load(nameOrPath string) (*Scenario, error) {
	if !strings.ContainsAny(nameOrPath, `/\`) && !strings.HasSuffix(nameOrPath, ".yaml") && !strings.HasSuffix(nameOrPath, ".yml") {
		return Builtin(nameOrPath)
	}
	b, err := os.ReadFile(nameOrPath)
	if err != nil {
		return nil, err
	}
	return Parse(b, nameOrPath)
}

// Parse reads a scenario file strictly: an unknown key, a value of the
// wrong kind or out of range, an expectation a step cannot meet are errors
// (*FileError) naming the file, the line and the field.
func Parse(data []byte, file string) (*Scenario, error) {
	return parse(data, &decoder{file: file})
}

func parse(data []byte, d *decoder) (*Scenario, error) {
	file := d.file
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &FileError{File: file, Line: 1, Msg: "empty file"}
		}
		line, msg := yamlErr(err)
		return nil, &FileError{File: file, Line: line, Msg: msg}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, &FileError{File: file, Line: extra.Line, Msg: "one scenario a file: a second YAML document follows"}
	}
	root := doc.Content[0]
	f, err := d.mapping(root, "", "name", "description", "profile", "speedup", "steps")
	if err != nil {
		return nil, err
	}
	if err := f.require("description", "profile", "speedup", "steps"); err != nil {
		return nil, err
	}
	sc := &Scenario{File: file, Name: strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))}
	if err := f.str("name", &sc.Name); err != nil {
		return nil, err
	}
	if !validName(sc.Name) {
		return nil, f.errorf("name", "%q: want lower-case letters, digits and dashes", sc.Name)
	}
	if err := f.str("description", &sc.Description); err != nil {
		return nil, err
	}
	if strings.TrimSpace(sc.Description) == "" {
		return nil, f.errorf("description", "empty: say what trap the scenario shows and why it matters")
	}
	if err := f.number("speedup", &sc.Speedup, 0.001, 1e6); err != nil {
		return nil, err
	}
	if sc.Profile, err = d.readProfile(f.values["profile"], sc.Name); err != nil {
		return nil, err
	}
	steps := f.values["steps"]
	if steps.Kind != yaml.SequenceNode || len(steps.Content) == 0 {
		return nil, f.errorf("steps", "want a list of steps, got %s", profile.NodeKind(steps))
	}
	p := &parser{d: d, loads: map[string]bool{}}
	for i, n := range steps.Content {
		st, err := p.step(n, fmt.Sprintf("steps[%d]", i))
		if err != nil {
			return nil, err
		}
		if slices.ContainsFunc(sc.Steps, func(o *Step) bool { return o.Name == st.Name }) {
			return nil, d.errorf(n, fmt.Sprintf("steps[%d].name", i), "%q: another step has this name", st.Name)
		}
		sc.Steps = append(sc.Steps, st)
	}
	return sc, nil
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' {
			return false
		}
	}
	return true
}

// yamlErr splits a yaml syntax error ("yaml: line 3: ...") into the line
// the parser names (1 when it names none) and the message.
func yamlErr(err error) (int, string) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	var line int
	if _, e := fmt.Sscanf(msg, "line %d:", &line); e == nil {
		_, rest, _ := strings.Cut(msg, ": ")
		return line, rest
	}
	return 1, msg
}

package main

import (
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

// SGLang's launch flags: serve takes every flag of SGLang's
// launch_server, so that a user's real launch command starts the mock.
// Those that describe what the mock models act (serve's own flag set
// defines them); the others are accepted with their value syntax, as
// argparse reads them, and named in one warning line: the profile stands
// for the hardware, kernels and parallelism they describe.

//go:embed launchflags.txt
var launchFlagsText string

// launchArity is what a flag of SGLang's takes after its name.
type launchArity string

const (
	arSwitch    launchArity = "switch"    // no value
	arNegatable launchArity = "switch/no" // --NAME or --no-NAME, no value
	arValue     launchArity = "value"     // one value
	arOptional  launchArity = "value?"    // zero or one value
	arValues    launchArity = "values"    // one or more values
	arAnyValues launchArity = "values*"   // any number of values
	arRemoved   launchArity = "removed"   // SGLang refuses it
)

// launchFlag is one flag of SGLang's launch_server.
type launchFlag struct {
	name    string // without the dashes: "tp-size"
	arity   launchArity
	aliases []string // "tensor-parallel-size"
}

// launchFlags parses launchflags.txt once.
var launchFlags = sync.OnceValues(func() ([]launchFlag, error) { return parseLaunchFlags(launchFlagsText) })

var launchFlagName = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)

// parseLaunchFlags reads the table: one flag a line, NAME ARITY
// [ALIAS...]; # starts a comment line. Every name and alias is unique.
func parseLaunchFlags(text string) ([]launchFlag, error) {
	var out []launchFlag
	seen := map[string]bool{}
	for i, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			return nil, fmt.Errorf("launchflags.txt:%d: want NAME ARITY [ALIAS...], got %q", i+1, line)
		}
		lf := launchFlag{name: f[0], arity: launchArity(f[1]), aliases: f[2:]}
		switch lf.arity {
		case arSwitch, arNegatable, arValue, arOptional, arValues, arAnyValues, arRemoved:
		default:
			return nil, fmt.Errorf("launchflags.txt:%d: unknown arity %q", i+1, f[1])
		}
		for _, n := range f[2:] {
			if !launchFlagName.MatchString(n) {
				return nil, fmt.Errorf("launchflags.txt:%d: %q is not a flag name", i+1, n)
			}
		}
		for _, n := range append([]string{lf.name}, lf.aliases...) {
			if !launchFlagName.MatchString(n) {
				return nil, fmt.Errorf("launchflags.txt:%d: %q is not a flag name", i+1, n)
			}
			if seen[n] {
				return nil, fmt.Errorf("launchflags.txt:%d: --%s is listed twice", i+1, n)
			}
			seen[n] = true
		}
		out = append(out, lf)
	}
	return out, nil
}

// launchArgs are serve's arguments sorted out: those for its own flag set,
// with SGLang's aliases and abbreviations spelled out, and the SGLang
// flags it does not model, by their names.
type launchArgs struct {
	own     []string
	ignored []string
}

// splitLaunchArgs reads args as SGLang's argparse does, against serve's
// own flag set fs and SGLang's table: a flag is an exact name, an alias,
// or, as argparse allows, an unambiguous prefix of one ("--tp" for
// "--tp-size"); a value may follow the name or come after "=". A flag fs
// defines goes to own, as fs spells it; an SGLang flag fs does not define
// is consumed with its values and named in ignored. --config FILE reads
// the flags from a YAML file first, as SGLang's does; the command line
// wins over it.
func splitLaunchArgs(fs *flag.FlagSet, args []string) (launchArgs, error) {
	table, err := launchFlags()
	if err != nil {
		return launchArgs{}, err
	}
	args, err = expandLaunchConfig(args, table)
	if err != nil {
		return launchArgs{}, err
	}
	byName := map[string]*launchFlag{}
	var names []string // every spelling, for prefixes and suggestions
	for i := range table {
		for _, n := range append([]string{table[i].name}, table[i].aliases...) {
			byName[n] = &table[i]
			names = append(names, n)
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		if byName[f.Name] == nil {
			names = append(names, f.Name)
		}
	})
	var out launchArgs
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") || a == "-" {
			// The end of the flags, or a stray argument: fs reports it.
			out.own = append(out.own, args[i:]...)
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name == "h" || name == "help" {
			out.own = append(out.own, a) // fs prints the usage
			continue
		}
		canonical, lf, err := resolveLaunchFlag(fs, name, byName, names)
		if err != nil {
			return launchArgs{}, err
		}
		if f := fs.Lookup(canonical); f != nil {
			spelled := "--" + canonical
			if hasValue {
				spelled += "=" + value
			}
			out.own = append(out.own, spelled)
			if !hasValue && !isBoolFlag(f) && i+1 < len(args) {
				i++
				out.own = append(out.own, args[i])
			}
			continue
		}
		n, err := launchValues(lf, canonical, hasValue, args[i+1:])
		if err != nil {
			return launchArgs{}, err
		}
		i += n
		if !slices.Contains(out.ignored, "--"+canonical) {
			out.ignored = append(out.ignored, "--"+canonical)
		}
	}
	return out, nil
}

// resolveLaunchFlag finds the flag a name given on the command line means:
// one of fs's, or an SGLang flag (canonical is its name then, lf its
// entry). "no-NAME" is the negation of a switch/no flag.
func resolveLaunchFlag(fs *flag.FlagSet, name string, byName map[string]*launchFlag, names []string) (canonical string, lf *launchFlag, err error) {
	if fs.Lookup(name) != nil {
		return name, byName[name], nil
	}
	if lf := byName[name]; lf != nil {
		return lf.name, lf, nil
	}
	if base, ok := strings.CutPrefix(name, "no-"); ok {
		if lf := byName[base]; lf != nil && lf.arity == arNegatable {
			return "no-" + lf.name, lf, nil
		}
	}
	var matches []string
	for _, n := range names {
		full := n
		if lf := byName[n]; lf != nil {
			full = lf.name
		}
		if strings.HasPrefix(n, name) && !slices.Contains(matches, full) {
			matches = append(matches, full)
		}
	}
	switch len(matches) {
	case 0:
		return "", nil, unknownFlagError(fs.Name(), name, names)
	case 1:
		return matches[0], byName[matches[0]], nil
	}
	slices.Sort(matches)
	if len(matches) > 4 {
		matches = append(matches[:4], "...")
	}
	return "", nil, fmt.Errorf("ambiguous flag --%s: it could be --%s (%s --help lists the flags)",
		name, strings.Join(matches, ", --"), fs.Name())
}

// isBoolFlag tells whether a flag of fs takes no value.
func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// launchValues checks the values an SGLang flag takes, as argparse reads
// them, and returns how many of the following arguments are its values.
func launchValues(lf *launchFlag, canonical string, hasValue bool, rest []string) (int, error) {
	// argparse takes an argument that starts with "-" as the next flag,
	// unless it is a negative number.
	isValue := func(i int) bool {
		return i < len(rest) && (!strings.HasPrefix(rest[i], "-") || negativeNumber(rest[i]))
	}
	count := 0
	for isValue(count) {
		count++
	}
	switch lf.arity {
	case arRemoved:
		return 0, fmt.Errorf("--%s: SGLang no longer takes this flag (its --help names what replaced it)", canonical)
	case arSwitch, arNegatable:
		if hasValue {
			return 0, fmt.Errorf("--%s takes no value", canonical)
		}
		return 0, nil
	case arValue:
		switch {
		case hasValue:
			return 0, nil
		case count == 0:
			return 0, fmt.Errorf("--%s needs a value", canonical)
		}
		return 1, nil
	case arOptional:
		if hasValue {
			return 0, nil
		}
		return min(count, 1), nil
	case arValues:
		switch {
		case hasValue:
			return 0, nil
		case count == 0:
			return 0, fmt.Errorf("--%s needs one or more values", canonical)
		}
		return count, nil
	}
	if hasValue { // arAnyValues
		return 0, nil
	}
	return count, nil
}

var negativeNumberPattern = regexp.MustCompile(`^-\d+$|^-\d*\.\d+$`)

// negativeNumber is argparse's test for an argument that looks like a
// negative number rather than a flag.
func negativeNumber(s string) bool { return negativeNumberPattern.MatchString(s) }

// expandLaunchConfig replaces --config FILE with the flags of the YAML
// file, put before the other arguments so that the command line wins, as
// SGLang's ConfigArgumentMerger does: a key is a flag's name; true sets a
// switch and false leaves it off; a list gives a flag its values; any
// other value is the flag's one value.
func expandLaunchConfig(args []string, table []launchFlag) ([]string, error) {
	at := -1
	for i, a := range args {
		if a == "--" {
			break
		}
		if a == "--config" {
			if at >= 0 {
				return nil, errors.New("--config: one config file only")
			}
			at = i
		}
	}
	if at < 0 {
		return args, nil
	}
	if at == len(args)-1 {
		return nil, errors.New("--config needs a YAML file")
	}
	file := args[at+1]
	if ext := strings.ToLower(filepath.Ext(file)); ext != ".yaml" && ext != ".yml" {
		return nil, fmt.Errorf("--config %s: the file must be YAML (.yaml or .yml)", file)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("--config %s: %w", file, err)
	}
	var fromFile []string
	if len(doc.Content) > 0 {
		root := doc.Content[0]
		if root.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("--config %s: want a mapping of flag names to values at the top", file)
		}
		switches := map[string]bool{}
		for _, lf := range table {
			if lf.arity == arSwitch || lf.arity == arNegatable {
				switches[lf.name] = true
			}
		}
		for i := 0; i+1 < len(root.Content); i += 2 {
			k, v := root.Content[i], root.Content[i+1]
			flagArgs, err := configFlag(k.Value, v, switches[k.Value])
			if err != nil {
				return nil, fmt.Errorf("--config %s:%d: %s: %w", file, k.Line, k.Value, err)
			}
			fromFile = append(fromFile, flagArgs...)
		}
	}
	out := append(fromFile, args[:at]...)
	return append(out, args[at+2:]...), nil
}

// configFlag turns one key of a config file into arguments.
func configFlag(key string, v *yaml.Node, isSwitch bool) ([]string, error) {
	switch v.Kind {
	case yaml.SequenceNode:
		if len(v.Content) == 0 {
			return nil, nil
		}
		out := []string{"--" + key}
		for _, item := range v.Content {
			if item.Kind != yaml.ScalarNode {
				return nil, errors.New("want a list of plain values")
			}
			out = append(out, item.Value)
		}
		return out, nil
	case yaml.ScalarNode:
		if v.Tag == "!!bool" {
			on, err := strconv.ParseBool(strings.ToLower(v.Value))
			if err != nil {
				return nil, err
			}
			if isSwitch {
				if on {
					return []string{"--" + key}, nil
				}
				return nil, nil
			}
			return []string{"--" + key, strconv.FormatBool(on)}, nil
		}
		return []string{"--" + key, v.Value}, nil
	}
	return nil, errors.New("want a value or a list of values")
}

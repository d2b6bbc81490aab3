package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/sglmock/sglmock/mockserver/profile"
)

// command is one subcommand of sglmock. help and version have no run:
// run dispatches them by name, and they take no flags.
type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

func commands() []command {
	return []command{
		{"demo", "reproduce a poisoned two-point benchmark on an in-process mock, then its fix, with the truth", runDemo},
		{"scenario", "list the benchmarking traps, play one and its fix against an in-process mock with checks, or print the file format", runScenario},
		{"bench", "measure a server: twopoint (naive|flush|nonce|flush+nonce) or stream, with verdicts", runBench},
		{"audit", "run a benchmark command against a fresh mock and report which requests hit the cache", runAudit},
		{"serve", "serve SGLang's HTTP API over the simulated engine (takes every flag of SGLang's launch_server)", runServe},
		{"fleet", "run N replicas on loopback for a cache-aware router (llm-d): endpoints file, router config, status", runFleet},
		{"profiles", "list the built-in cost profiles, print one as YAML, or say what each field means (--fields)", runProfiles},
		{"health", "ask a server's /health: exit 0 when it serves (the container's health check)", runHealth},
		{"calibrate", "fit a profile to measured two-point rows (the CSV that bench writes)", runCalibrate},
		{"version", "print sglmock's version and the SGLang version it follows", nil},
		{"help", "show this help", nil},
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	name := args[0]
	switch name {
	case "help", "-h", "--help", "-help":
		usage(stdout)
		return 0
	case "version", "--version", "-version":
		return runVersion(args[1:], stdout, stderr)
	}
	for _, c := range commands() {
		if c.name == name && c.run != nil {
			return c.run(args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "sglmock: unknown command %q\n\n", name)
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "sglmock: an SGLang-compatible simulated inference server and benchmark harness.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: sglmock <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
}

// The one rule for a subcommand's flags: parseFlags parses them, and
// flagExit turns what went wrong, in parsing or in checking the values,
// into the command's exit. A mistake gets one line that names it, with the
// nearest flag when there is one, and points at --help: the usage is
// printed only when asked for.

// finiteFloat is a float64 flag that refuses NaN and the infinities, which
// strconv.ParseFloat accepts and a range check such as x <= 0 lets through.
type finiteFloat struct{ p *float64 }

func (f finiteFloat) String() string {
	if f.p == nil {
		return "0"
	}
	return strconv.FormatFloat(*f.p, 'g', -1, 64)
}

func (f finiteFloat) Set(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return errors.New("want a finite number")
	}
	*f.p = v
	return nil
}

// floatFlag defines a finite float64 flag.
func floatFlag(fs *flag.FlagSet, p *float64, name string, value float64, usage string) {
	*p = value
	fs.Var(finiteFloat{p}, name, usage)
}

// parseFlags parses a subcommand's flags; unless positional, it refuses
// any argument that is not a flag. The usage is printed for --help only;
// any other mistake is an error of one line.
func parseFlags(fs *flag.FlagSet, args []string, positional bool) error {
	usage, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.Usage = usage
	fs.SetOutput(out)
	switch {
	case errors.Is(err, flag.ErrHelp):
		if usage != nil {
			usage()
		} else {
			fmt.Fprintf(out, "Usage of %s:\n", fs.Name())
			fs.PrintDefaults()
		}
		return err
	case err != nil:
		return flagParseError(fs, err)
	case !positional && fs.NArg() > 0:
		return fmt.Errorf("unexpected argument %q (flags start with --)", fs.Arg(0))
	}
	return nil
}

// flagParseError rewrites the flag package's error as one line: an
// unknown flag with its nearest match, anything else with the flag spelled
// as a user types it; both point at --help.
func flagParseError(fs *flag.FlagSet, err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		return unknownFlagError(fs.Name(), name, flagNames(fs))
	}
	for _, p := range []string{"flag -", "for -", "argument: -"} {
		msg = strings.Replace(msg, p, p+"-", 1)
	}
	return fmt.Errorf("%s (%s --help lists the flags)", msg, fs.Name())
}

// flagNames lists the flags defined on fs.
func flagNames(fs *flag.FlagSet) []string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return names
}

// unknownFlagError names an unknown flag, the nearest of the known ones
// when one is near, and the command's --help.
func unknownFlagError(cmd, name string, known []string) error {
	if near := nearestFlag(name, known); near != "" {
		return fmt.Errorf("unknown flag --%s: did you mean --%s? (%s --help lists the flags)", name, near, cmd)
	}
	return fmt.Errorf("unknown flag --%s (%s --help lists the flags)", name, cmd)
}

// nearestFlag is the known flag nearest to name: the one fewest edits
// away (a swap of two letters is one), within a third of name's length
// (a typo), else the only one that contains name (a forgotten prefix such
// as "enable-"); "" when none is near.
func nearestFlag(name string, known []string) string {
	best, bestDist := "", max(1, len(name)/3)
	for _, k := range known {
		d := editDistance(name, k)
		if d < bestDist || d == bestDist && (best == "" || k < best) {
			best, bestDist = k, d
		}
	}
	if best != "" || len(name) < 3 {
		return best
	}
	var holders []string
	for _, k := range known {
		if strings.Contains(k, name) {
			holders = append(holders, k)
		}
	}
	if len(holders) == 1 {
		return holders[0]
	}
	return ""
}

// editDistance is the optimal string alignment distance between a and b:
// insertions, deletions, substitutions and swaps of neighbours, each one
// edit.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// flagExit turns an error from parsing or checking a subcommand's flags
// into its exit: 0 after --help, 2 for anything else, with its one line;
// ok is false when there is no error and the command goes on.
func flagExit(cmd string, err error, stderr io.Writer) (code int, ok bool) {
	switch {
	case err == nil:
		return 0, false
	case errors.Is(err, flag.ErrHelp):
		return 0, true
	}
	fmt.Fprintf(stderr, "sglmock %s: %v\n", cmd, err)
	return 2, true
}

// loadProfile loads a profile and applies the launch flags over it.
func loadProfile(name string, flags *profile.Flags) (*profile.Profile, error) {
	p, err := profile.Load(name)
	if err != nil {
		return nil, fmt.Errorf("--profile: %w", err)
	}
	if err := flags.Apply(p); err != nil {
		return nil, err
	}
	return p, nil
}

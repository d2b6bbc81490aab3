package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"

	"github.com/sglmock/sglmock/mockserver/profile"
)

// command is one subcommand of sglmock.
type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

func commands() []command {
	return []command{
		{"demo", "reproduce the seed's poisoned benchmark on an in-process mock, then its fix, with the truth", runDemo},
		{"scenario", "list the benchmarking traps, or play one and its fix against an in-process mock, with checks", runScenario},
		{"bench", "measure a server: twopoint (naive|flush|nonce|flush+nonce) or stream, with verdicts", runBench},
		{"audit", "run a benchmark command against a fresh mock and report which requests hit the cache", runAudit},
		{"serve", "serve SGLang's HTTP API over the simulated engine (flags as SGLang's launch_server)", runServe},
		{"fleet", "run N replicas on loopback for a cache-aware router (llm-d): endpoints file, router config, status", runFleet},
		{"profiles", "list the built-in cost profiles, or print one as YAML", runProfiles},
		{"health", "ask a server's /health: exit 0 when it serves (the container's health check)", runHealth},
		{"calibrate", "fit a profile to measured two-point rows (the CSV that bench writes)", runCalibrate},
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
	if name == "help" || name == "-h" || name == "--help" || name == "-help" {
		usage(stdout)
		return 0
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
// into the command's exit.

// parsedError is an error the flag package has already printed, with the
// usage.
type parsedError struct{ err error }

func (e parsedError) Error() string { return e.err.Error() }
func (e parsedError) Unwrap() error { return e.err }

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
// any argument that is not a flag.
func parseFlags(fs *flag.FlagSet, args []string, positional bool) error {
	if err := fs.Parse(args); err != nil {
		return parsedError{err}
	}
	if !positional && fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (flags start with --)", fs.Arg(0))
	}
	return nil
}

// flagExit turns an error from parsing or checking a subcommand's flags
// into its exit: 0 after --help, 2 for anything else, with the message
// unless the flag package printed it; ok is false when there is no error
// and the command goes on.
func flagExit(cmd string, err error, stderr io.Writer) (code int, ok bool) {
	var parsed parsedError
	switch {
	case err == nil:
		return 0, false
	case errors.Is(err, flag.ErrHelp):
		return 0, true
	case !errors.As(err, &parsed):
		fmt.Fprintf(stderr, "sglmock %s: %v\n", cmd, err)
	}
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

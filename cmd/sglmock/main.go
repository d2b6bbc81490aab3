package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"sglmock/mockserver/profile"
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

// flagExit turns a flag parsing error into the command's exit: 0 after
// --help, 2 with the message for anything else; ok is false when there is
// no error and the command goes on.
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

// parseCommandFlags parses a subcommand's flags, which take no positional
// argument. When the command is to stop here, done is true and exit is its
// code: 0 after --help, 2 for a bad flag or a stray argument.
func parseCommandFlags(fs *flag.FlagSet, args []string, stderr io.Writer) (exit int, done bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, true
		}
		return 2, true
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q (flags start with --)\n", fs.Name(), fs.Arg(0))
		return 2, true
	}
	return 0, false
}

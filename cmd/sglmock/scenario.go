package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/scenarios"
)

const scenarioUsage = `Usage: sglmock scenario list
       sglmock scenario run NAME|FILE [--speedup S]
       sglmock scenario format

A scenario plays a benchmarking trap and its fix against a fresh mock of its
profile, then checks what must hold: verdicts, errors against the modelled
truth, flush outcomes, cached tokens. 'list' names the built-in ones; a FILE
is a scenario of your own, whose format 'format' prints.

'run' starts the mock in this process on a free loopback port, in real time
at the scenario's speedup (simulated seconds per wall second), and prints
each step's table and PASS or FAIL for each expectation. A client's jitter of
e wall seconds is S*e simulated seconds: the scenario's real_time bounds are
set for its own speedup, and a faster --speedup may break them.

Exit status: 0 when every expectation holds, 1 when one fails, 2 for a usage
error or a scenario that could not be played.

Flags of run:
`

func runScenario(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, scenarioUsage)
		return 2
	}
	switch args[0] {
	case "-h", "--help", "-help", "help":
		fmt.Fprint(stdout, scenarioUsage)
		o := scenarioFlags(stdout)
		o.fs.PrintDefaults()
		return 0
	case "list":
		if len(args) == 2 && (args[1] == "-h" || args[1] == "--help" || args[1] == "-help") {
			fmt.Fprint(stdout, scenarioUsage)
			return 0
		}
		if len(args) > 1 {
			fmt.Fprintf(stderr, "sglmock scenario list: takes no arguments, got %q\n", args[1:])
			return 2
		}
		return listScenarios(stdout, stderr)
	case "run":
		return runOneScenario(args[1:], stdout, stderr)
	case "format":
		if len(args) == 2 && (args[1] == "-h" || args[1] == "--help" || args[1] == "-help") {
			fmt.Fprint(stdout, scenarioUsage)
			return 0
		}
		if len(args) > 1 {
			fmt.Fprintf(stderr, "sglmock scenario format: takes no arguments, got %q\n", args[1:])
			return 2
		}
		fmt.Fprint(stdout, scenarios.Format)
		return 0
	}
	fmt.Fprintf(stderr, "sglmock scenario: unknown subcommand %q: want list, run or format (see sglmock scenario --help)\n", args[0])
	return 2
}

func listScenarios(stdout, stderr io.Writer) int {
	names := scenarios.Names()
	width := 0
	for _, name := range names {
		width = max(width, len(name))
	}
	for _, name := range names {
		sc, err := scenarios.Builtin(name)
		if err != nil {
			fmt.Fprintln(stderr, "sglmock scenario list:", err)
			return 2
		}
		fmt.Fprintf(stdout, "%-*s  %s\n", width, name, sc.Summary())
	}
	return 0
}

type scenarioOptions struct {
	fs      *flag.FlagSet
	speedup float64
}

func scenarioFlags(stderr io.Writer) *scenarioOptions {
	o := &scenarioOptions{fs: flag.NewFlagSet("sglmock scenario run", flag.ContinueOnError)}
	o.fs.SetOutput(stderr)
	floatFlag(o.fs, &o.speedup, "speedup", 0, "`S` simulated seconds per wall second (default: the scenario's own)")
	return o
}

func runOneScenario(args []string, stdout, stderr io.Writer) int {
	o := scenarioFlags(stderr)
	o.fs.Usage = func() {
		fmt.Fprint(stderr, scenarioUsage)
		o.fs.PrintDefaults()
	}
	// The scenario may come before or after the flags.
	var target string
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		target, args = args[0], args[1:]
	}
	if code, done := flagExit("scenario run", parseFlags(o.fs, args, true), stderr); done {
		return code
	}
	rest := o.fs.Args()
	if target == "" && len(rest) > 0 {
		target, rest = rest[0], rest[1:]
	}
	switch {
	case target == "":
		fmt.Fprintln(stderr, "sglmock scenario run: which scenario? (sglmock scenario list names them)")
		return 2
	case len(rest) > 0:
		fmt.Fprintf(stderr, "sglmock scenario run: one scenario at a time, got also %q\n", rest)
		return 2
	case o.speedup < 0 || o.speedup > 1e6:
		fmt.Fprintf(stderr, "sglmock scenario run: --speedup %v: must be in (0, 1e6]\n", o.speedup)
		return 2
	}
	sc, err := scenarios.Load(target)
	if err != nil {
		fmt.Fprintln(stderr, "sglmock scenario run:", err)
		return 2
	}
	speedup := sc.Speedup
	if o.speedup > 0 {
		speedup = o.speedup
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// A HiCache file storage tier of the run's own, which a restart step
	// keeps, as a restarted SGLang keeps its directory.
	dir, cleanup, err := privateStorageDir()
	if err != nil {
		fmt.Fprintln(stderr, "sglmock scenario run:", err)
		return 2
	}
	defer cleanup()
	cfg := api.Config{HiCacheStorageDir: dir}
	m, err := startLocalMock(sc.Profile, speedup, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "sglmock scenario run:", err)
		return 2
	}
	defer func() { m.Close() }()
	var restart func(context.Context) (scenarios.Target, error)
	restart = func(context.Context) (scenarios.Target, error) {
		m.Close()
		next, err := startLocalMock(sc.Profile, speedup, cfg)
		if err != nil {
			return scenarios.Target{}, err
		}
		m = next
		return scenarios.Target{HTTP: &http.Client{}, URL: m.URL, Restart: restart}, nil
	}
	res, err := sc.Run(ctx, scenarios.Target{HTTP: &http.Client{}, URL: m.URL, Restart: restart}, scenarios.RunOptions{Out: stdout, RealTime: true})
	if err != nil {
		if errors.Is(err, context.Canceled) {
			fmt.Fprintln(stderr, "sglmock scenario run: interrupted")
		} else {
			fmt.Fprintln(stderr, "sglmock scenario run:", err)
		}
		return 2
	}
	if res.Failed() > 0 {
		return 1
	}
	return 0
}

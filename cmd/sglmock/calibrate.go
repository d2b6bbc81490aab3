package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/sglmock/sglmock/calibrate"
	"github.com/sglmock/sglmock/mockserver/profile"
)

// runCalibrate fits a profile to measured two-point rows.
func runCalibrate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sglmock calibrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	csvPath := fs.String("csv", "", "measured rows: a CSV with the columns "+strings.Join(calibrate.Columns, ",")+" (what 'sglmock bench --csv' writes)")
	out := fs.String("o", "", "write the fitted profile to this YAML file ('-' for standard output)")
	base := fs.String("base", "default", "the profile whose limits, chunking, page size and speculative decoding describe the measured deployment")
	name := fs.String("name", "", "the fitted profile's name (default: the output file's base name)")
	profileFlags := profile.RegisterFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: sglmock calibrate --csv rows.csv -o profile.yaml [--base PROFILE] [profile flags]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Fits the prefill cost (per-chunk overhead, per token, attention) and the decode cost (per-round")
		fmt.Fprintln(stderr, "overhead, per context token) to measured rows, by least squares on both legs of every row.")
		fmt.Fprintf(stderr, "Where a formula leaves a residual above %g %%, that part becomes a table through the rows.\n", calibrate.Tolerance*100)
		fmt.Fprintln(stderr, "Everything else comes from --base and the profile flags: describe the deployment you measured.")
		fmt.Fprintln(stderr, "Rows of bench's CSV whose legs were served from the cache (a_cached, or a POISONED verdict other")
		fmt.Fprintln(stderr, "than the leg b its b_cached declares) are dropped, each named. Exit status: 2 for a usage or")
		fmt.Fprintln(stderr, "input error, 1 when no form reproduces every row within the tolerance, 0 otherwise.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if exit, done := flagExit("calibrate", parseFlags(fs, args, false), stderr); done {
		return exit
	}
	switch {
	case *csvPath == "":
		fmt.Fprintln(stderr, "sglmock calibrate: --csv is required")
		return 2
	case *out == "":
		fmt.Fprintln(stderr, "sglmock calibrate: -o is required (a YAML file, or - for standard output)")
		return 2
	}
	if *out != "-" {
		if err := checkWritable(*out); err != nil {
			fmt.Fprintf(stderr, "sglmock calibrate: -o %s: %v\n", *out, err)
			return 2
		}
	}
	p, err := profile.Load(*base)
	if err == nil {
		err = profileFlags.Apply(p)
	}
	if err != nil {
		fmt.Fprintln(stderr, "sglmock calibrate: --base:", err)
		return 2
	}
	f, err := os.Open(*csvPath)
	if err != nil {
		fmt.Fprintln(stderr, "sglmock calibrate:", err)
		return 2
	}
	all, err := calibrate.ReadCSV(f, *csvPath)
	f.Close()
	if err != nil {
		fmt.Fprintln(stderr, "sglmock calibrate:", err)
		return 2
	}
	if *name == "" {
		*name = "calibrated"
		if *out != "-" {
			*name = strings.TrimSuffix(filepath.Base(*out), filepath.Ext(*out))
		}
	}
	report := stdout
	if *out == "-" {
		report = stderr
	}
	rows, dropped := calibrate.Usable(all)
	writeScreening(report, rows, dropped)
	res, err := calibrate.Fit(rows, p, *name)
	if err != nil {
		fmt.Fprintf(stderr, "sglmock calibrate: %s: %v\n", *csvPath, err)
		if errors.Is(err, calibrate.ErrBadInput) {
			return 2
		}
		return 1
	}
	res.WriteReport(report)
	header := fmt.Sprintf("# Fitted by sglmock calibrate from %s (%d rows", filepath.Base(*csvPath), len(rows))
	if len(dropped) > 0 {
		header += fmt.Sprintf("; %d dropped, served from the cache", len(dropped))
	}
	header += fmt.Sprintf("), base profile %s.\n# Largest residual over both legs of every row: %.2f %%.\n", p.Name, 100*res.MaxError)
	if res.Exact() {
		header += "# That checks nothing: " + res.ExactNote()
	}
	yaml := append([]byte(header), res.Profile.YAML()...)
	err = writeOutput(*out, func(w io.Writer) error {
		_, err := w.Write(yaml)
		return err
	}, stdout)
	switch {
	case err != nil:
		fmt.Fprintln(stderr, "sglmock calibrate:", err)
		return 1
	case *out != "-":
		fmt.Fprintf(report, "wrote %s; use it with --profile %s\n", *out, *out)
	}
	if res.MaxError > calibrate.Tolerance {
		fmt.Fprintf(stderr, "sglmock calibrate: no form reproduces every row within %g %%; the profile was written anyway\n", calibrate.Tolerance*100)
		return 1
	}
	return 0
}

// writeScreening says which rows the fit leaves out, and which it fits
// although bench found them SUSPECT.
func writeScreening(w io.Writer, kept []calibrate.Row, dropped []calibrate.Dropped) {
	for _, d := range dropped {
		fmt.Fprintf(w, "dropped line %d (ctx %d, %d tokens): %s\n", d.Line, d.CtxReq, d.PromptTokens, d.Reason)
	}
	for _, r := range kept {
		if r.Verdict == "SUSPECT" {
			fmt.Fprintf(w, "fitted anyway: line %d (ctx %d) is SUSPECT: %s\n", r.Line, r.CtxReq, r.Cause)
		}
	}
}

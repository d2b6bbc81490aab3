package main

import (
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
	rows, err := calibrate.ReadCSV(f, *csvPath)
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
	res, err := calibrate.Fit(rows, p, *name)
	if err != nil {
		fmt.Fprintf(stderr, "sglmock calibrate: %s: %v\n", *csvPath, err)
		return 1
	}
	report := stdout
	if *out == "-" {
		report = stderr
	}
	res.WriteReport(report)
	header := fmt.Sprintf("# Fitted by sglmock calibrate from %s (%d rows), base profile %s.\n"+
		"# Largest residual over both legs of every row: %.2f %%.\n", filepath.Base(*csvPath), len(rows), p.Name, 100*res.MaxError)
	yaml := append([]byte(header), res.Profile.YAML()...)
	if *out == "-" {
		stdout.Write(yaml)
	} else if err := os.WriteFile(*out, yaml, 0o644); err != nil {
		fmt.Fprintln(stderr, "sglmock calibrate:", err)
		return 1
	} else {
		fmt.Fprintf(report, "wrote %s; use it with --profile %s\n", *out, *out)
	}
	if res.MaxError > calibrate.Tolerance {
		fmt.Fprintf(stderr, "sglmock calibrate: no form reproduces every row within %g %%; the profile was written anyway\n", calibrate.Tolerance*100)
		return 1
	}
	return 0
}

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sglmock/sglmock/calibrate"
	"github.com/sglmock/sglmock/mockserver/profile"
)

// runCalibrate fits a profile to measured two-point rows.
func runCalibrate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sglmock calibrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	csvPath := fs.String("csv", "", "measured rows: a CSV with the columns "+strings.Join(calibrate.Columns, ",")+" (what 'sglmock bench --csv' writes)")
	jsonPath := fs.String("json", "", "measured rows: the report 'sglmock bench twopoint --json' writes, whose runs give every leg's own time, reuse and spread")
	out := fs.String("o", "", "write the fitted profile to this YAML file ('-' for standard output)")
	base := fs.String("base", "default", "the profile whose limits, chunking, page size and speculative decoding describe the measured deployment")
	name := fs.String("name", "", "the fitted profile's name (default: the output file's base name)")
	fit := calibrateFlags(fs)
	profileFlags := profile.RegisterFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: sglmock calibrate --csv rows.csv -o profile.yaml [--base PROFILE] [profile flags]")
		fmt.Fprintln(stderr, "       sglmock calibrate --json report.json -o profile.yaml [--base PROFILE] [profile flags]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Fits the prefill cost (per-chunk overhead, per token, attention) and the decode cost (per-round")
		fmt.Fprintln(stderr, "overhead, per context token) to measured rows, every leg weighed by its own noise (its runs' spread,")
		fmt.Fprintln(stderr, "pooled with the sweep's). The formulas are kept unless their residuals are more than that noise")
		fmt.Fprintf(stderr, "explains (χ² past its %g %% quantile); then the part that misfits becomes a table through the rows, if\n", 100*calibrate.Confidence)
		fmt.Fprintln(stderr, "the rows have more legs than the table would have points. Each leg is used for what it measured: a")
		fmt.Fprintln(stderr, "leg served from the cache measures the prefill of what it did not reuse. The report gives every")
		fmt.Fprintln(stderr, "leg's residual and its leave-one-out error (predicted by a fit without its prompt size), whose")
		fmt.Fprintln(stderr, "largest is the profile's stated accuracy, the predictions at --predict, and what to measure next.")
		fmt.Fprintln(stderr, "Everything else comes from --base and the profile flags: describe the deployment you measured.")
		fmt.Fprintln(stderr, "Exit status: 2 for a usage or input error, 1 when no form is within the rows' noise (the profile")
		fmt.Fprintln(stderr, "is written anyway), 0 otherwise.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if exit, done := flagExit("calibrate", parseFlags(fs, args, false), stderr); done {
		return exit
	}
	source := *csvPath
	switch {
	case *csvPath == "" && *jsonPath == "":
		fmt.Fprintln(stderr, "sglmock calibrate: --csv or --json is required")
		return 2
	case *csvPath != "" && *jsonPath != "":
		fmt.Fprintln(stderr, "sglmock calibrate: --csv and --json: give one of them")
		return 2
	case *out == "":
		fmt.Fprintln(stderr, "sglmock calibrate: -o is required (a YAML file, or - for standard output)")
		return 2
	case *jsonPath != "":
		source = *jsonPath
	}
	opt, err := fit.options()
	if err != nil {
		fmt.Fprintln(stderr, "sglmock calibrate:", err)
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
	f, err := os.Open(source)
	if err != nil {
		fmt.Fprintln(stderr, "sglmock calibrate:", err)
		return 2
	}
	read := calibrate.ReadCSV
	if *jsonPath != "" {
		read = calibrate.ReadJSON
	}
	rows, err := read(f, source)
	f.Close()
	if err != nil {
		fmt.Fprintln(stderr, "sglmock calibrate:", err)
		return 2
	}
	opt.Name = *name
	if opt.Name == "" {
		opt.Name = "calibrated"
		if *out != "-" {
			opt.Name = strings.TrimSuffix(filepath.Base(*out), filepath.Ext(*out))
		}
	}
	report := stdout
	if *out == "-" {
		report = stderr
	}
	return fitAndWrite(rows, p, opt, filepath.Base(source), *out, report, stdout, stderr, "sglmock calibrate")
}

// fitOptions are the flags of a fit that calibrate and bench's
// --calibrate-after share.
type fitOptions struct {
	table   *bool
	predict *string
}

func calibrateFlags(fs *flag.FlagSet) fitOptions {
	return fitOptions{
		table: fs.Bool("table", false, "fit both costs as tables through the rows even where the formulas are within the noise, "+
			"and even with as many parameters as legs (a profile that passes through every row: only its leave-one-out errors say how it predicts)"),
		predict: fs.String("predict", "", "prompt sizes the profile is to predict, comma-separated: the report gives each one's times, "+
			"how sure they are and whether they extrapolate (default: the longest prompt the base profile takes)"),
	}
}

// options reads the fit's flags.
func (f fitOptions) options() (calibrate.Options, error) {
	opt := calibrate.Options{Table: *f.table}
	if *f.predict == "" {
		return opt, nil
	}
	for _, s := range strings.Split(*f.predict, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 2 {
			return opt, fmt.Errorf("--predict %q: %q is not a prompt size (a whole number of tokens, at least 2)", *f.predict, s)
		}
		opt.Predict = append(opt.Predict, n)
	}
	return opt, nil
}

// fitAndWrite fits rows, prints the report to report and writes the
// profile to out ("-": stdout), its comment naming source. The exit status
// is 2 for rows that do not fit at all, 1 when no form is within their
// noise (the profile is written anyway), 0 otherwise.
func fitAndWrite(rows []calibrate.Row, base *profile.Profile, opt calibrate.Options, source, out string, report, stdout, stderr io.Writer, cmd string) int {
	res, err := calibrate.Fit(rows, base, opt)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %s: %v\n", cmd, source, err)
		if errors.Is(err, calibrate.ErrBadInput) {
			return 2
		}
		return 1
	}
	if err := res.WriteReport(report); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
		return 1
	}
	yaml := append([]byte(res.Comment(source, base.Name)), res.Profile.YAML()...)
	if out == "-" {
		stdout.Write(yaml)
	} else if err := writeOutput(out, func(w io.Writer) error { _, err := w.Write(yaml); return err }, stdout); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
		return 1
	} else {
		fmt.Fprintf(report, "wrote %s; use it with --profile %s\n", out, out)
	}
	if !res.Within() {
		fmt.Fprintf(stderr, "%s: no form the rows allow is within their noise (χ² %.1f, its %g %% quantile %.1f); the profile was written anyway\n",
			cmd, res.ChiSquare, 100*calibrate.Confidence, res.Limit)
		return 1
	}
	return 0
}

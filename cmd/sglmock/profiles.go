package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/sglmock/sglmock/mockserver/profile"
)

const profilesUsage = `Usage: sglmock profiles              list the built-in profiles
       sglmock profiles NAME|FILE    print one as YAML (a file as sglmock reads it, checked)
       sglmock profiles --fields     what every field of a profile file means

A profile is a deployment: a model on given hardware, its limits and what each
scheduler iteration costs. Every command that takes --profile takes a built-in's
name or a YAML file; start one of your own from a built-in:
sglmock profiles kimi-k2.6-rtx6000 > mine.yaml. Fit one to measurements with
sglmock calibrate.
`

// runProfiles lists the built-in profiles, prints one (built-in name or
// file path) as YAML, or documents the fields of a profile file.
func runProfiles(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0:
		fmt.Fprintln(stdout, "Built-in profiles (sglmock profiles NAME prints one; a YAML file path works wherever a profile is taken):")
		builtins := profile.Builtins()
		width := 0
		for _, b := range builtins {
			width = max(width, len(b.Name))
		}
		for _, b := range builtins {
			fmt.Fprintf(stdout, "  %-*s  %s\n", width, b.Name, b.Description)
		}
		return 0
	case len(args) > 1:
		fmt.Fprintf(stderr, "sglmock profiles: takes at most one profile, got %d arguments (sglmock profiles --help)\n", len(args))
		return 2
	}
	switch args[0] {
	case "-h", "--help", "-help":
		fmt.Fprint(stdout, profilesUsage)
		return 0
	case "--fields", "-fields":
		writeProfileFields(stdout)
		return 0
	}
	if strings.HasPrefix(args[0], "-") {
		fmt.Fprintln(stderr, "sglmock profiles:", unknownFlagError("sglmock profiles", strings.TrimLeft(args[0], "-"), []string{"fields", "help"}))
		return 2
	}
	if y, err := profile.BuiltinYAML(args[0]); err == nil {
		stdout.Write(y)
		return 0
	}
	p, err := profile.Load(args[0])
	if err != nil {
		fmt.Fprintln(stderr, "sglmock profiles:", err)
		return 1
	}
	stdout.Write(p.YAML())
	return 0
}

// writeProfileFields documents every field of a profile file: its YAML
// path, what its value is, and what it means, wrapped under it.
func writeProfileFields(w io.Writer) {
	fmt.Fprintln(w, "The fields of a profile file (YAML; a nested field is written under its mapping,")
	fmt.Fprintln(w, "decode: {per_seq_s: 2.0e-5}). Unknown keys and impossible values are errors that")
	fmt.Fprintln(w, "name the line. sglmock profiles NAME prints a built-in to start from.")
	for _, f := range profile.Fields() {
		indent := strings.Repeat("  ", strings.Count(f.Path, "."))
		fmt.Fprintf(w, "\n%s%s (%s)\n", indent, f.Path, f.Type)
		for _, line := range wrapWords(f.Doc, 96-len(indent)) {
			fmt.Fprintf(w, "%s    %s\n", indent, line)
		}
	}
}

// wrapWords breaks text into lines of at most width characters, between
// words.
func wrapWords(text string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(text) {
		switch {
		case line == "":
			line = word
		case len(line)+1+len(word) > width:
			lines = append(lines, line)
			line = word
		default:
			line += " " + word
		}
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}

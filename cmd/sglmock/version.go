package main

import (
	"fmt"
	"io"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/sglmock/sglmock/compat"
	"github.com/sglmock/sglmock/mockserver/api"
)

// version is sglmock's version when the build sets one:
// go build -ldflags "-X main.version=v0.2.0". Without it, a binary built by
// go install MODULE@VERSION reports that module version, and any other
// build the simulator's own (api.SimVersion).
var version string

// sglmockVersion is the version sglmock reports: the one the build set,
// else the module's from the build info, else api.SimVersion.
func sglmockVersion(set string, bi *debug.BuildInfo) string {
	switch {
	case set != "":
		return set
	case bi != nil && bi.Main.Version != "" && bi.Main.Version != "(devel)":
		return bi.Main.Version
	}
	return api.SimVersion
}

// buildSummary says what the binary was built from: the module and its
// version, the commit (and whether the checkout had changes) when the Go
// toolchain recorded one, and the toolchain.
func buildSummary(bi *debug.BuildInfo) string {
	if bi == nil {
		return "no build information"
	}
	parts := []string{bi.Main.Path + " " + cmpOr(bi.Main.Version, "(devel)")}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if rev := settings["vcs.revision"]; rev != "" {
		commit := "commit " + rev[:min(len(rev), 12)]
		if settings["vcs.modified"] == "true" {
			commit += " (modified)"
		}
		parts = append(parts, commit)
	}
	parts = append(parts, bi.GoVersion+" "+settings["GOOS"]+"/"+settings["GOARCH"])
	return strings.Join(parts, ", ")
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

const versionUsage = `Usage: sglmock version (or sglmock --version)

Prints sglmock's version, the SGLang releases whose rules it can follow
(serve --sglang-version; the one chosen is the "version" that /server_info
and /v1/loads report), the rules in which they differ, and what the binary
was built from.
`

// runVersion prints the versions.
func runVersion(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 1 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help"):
		fmt.Fprint(stdout, versionUsage)
		return 0
	case len(args) > 0:
		fmt.Fprintf(stderr, "sglmock version: takes no arguments, got %q\n", args)
		return 2
	}
	bi, _ := debug.ReadBuildInfo()
	fmt.Fprintf(stdout, "sglmock %s\n", sglmockVersion(version, bi))
	writeReleases(stdout)
	fmt.Fprintf(stdout, "  built from %s\n", buildSummary(bi))
	return 0
}

// writeReleases lists the SGLang releases the mock follows, grouped by
// their rules, and the rules that tell them apart.
func writeReleases(w io.Writer) {
	fmt.Fprintf(w, "  follows SGLang %s by default (the version /server_info and /v1/loads report); --sglang-version picks another:\n",
		compat.Default)
	rows := [][]string{}
	for _, g := range compat.Groups() {
		names := slices.Clone(g.Releases)
		if i := slices.Index(names, compat.Default); i >= 0 {
			names[i] += " (default)"
		}
		rows = append(rows, []string{strings.Join(names, ", "), g.Rules.Summary() + " below"})
	}
	writeColumns(w, "    ", rows)
	fmt.Fprintln(w, "  rules that differ (docs/model.md has each one's old and new behaviour and its SGLang function):")
	rows = rows[:0]
	for _, r := range compat.Table() {
		rows = append(rows, []string{r.Name, r.PRList(), "from " + r.Since, r.Title})
	}
	writeColumns(w, "    ", rows)
}

// writeColumns writes rows with their columns aligned, the last one as it
// is.
func writeColumns(w io.Writer, indent string, rows [][]string) {
	var widths []int
	for _, row := range rows {
		for i, cell := range row[:len(row)-1] {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], len(cell))
		}
	}
	for _, row := range rows {
		line := indent
		for i, cell := range row[:len(row)-1] {
			line += cell + strings.Repeat(" ", widths[i]-len(cell)+2)
		}
		fmt.Fprintln(w, line+row[len(row)-1])
	}
}

package main

import (
	"fmt"
	"io"
	"runtime/debug"
	"strings"

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

Prints sglmock's version, the SGLang version whose API it follows (the
"version" that /server_info and /v1/loads report), and what the binary was
built from.
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
	fmt.Fprintf(stdout, "  follows SGLang %s (the version /server_info and /v1/loads report)\n", api.SGLangVersion)
	fmt.Fprintf(stdout, "  built from %s\n", buildSummary(bi))
	return 0
}

package main

import (
	"fmt"
	"io"

	"github.com/sglmock/sglmock/mockserver/profile"
)

// runProfiles lists the built-in profiles, or prints one (built-in name or
// file path) as YAML.
func runProfiles(args []string, stdout, stderr io.Writer) int {
	switch len(args) {
	case 0:
		fmt.Fprintln(stdout, "Built-in profiles (sglmock profiles NAME prints one; a YAML file path works wherever a profile is taken):")
		for _, b := range profile.Builtins() {
			fmt.Fprintf(stdout, "  %-22s %s\n", b.Name, b.Description)
		}
		return 0
	case 1:
		if args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
			fmt.Fprintln(stdout, "Usage: sglmock profiles [NAME|FILE]")
			return 0
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
	default:
		fmt.Fprintf(stderr, "sglmock profiles: takes at most one profile, got %d arguments\n", len(args))
		return 2
	}
}

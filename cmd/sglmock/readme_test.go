package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var updateREADME = flag.Bool("update-readme", false, "rewrite README.md's flag reference from the commands' --help")

// readmePath is the repository's README, two directories up.
var readmePath = filepath.Join("..", "..", "README.md")

// A command in a ```sh block of the README: a user copies it as written.
type readmeCommand struct {
	line int
	text string
	args []string // after "sglmock" (or "go run ./cmd/sglmock")
}

// readmeCommands returns every sglmock command in the README's ```sh
// blocks, with continuation lines joined and comments dropped.
func readmeCommands(t *testing.T, readme string) []readmeCommand {
	t.Helper()
	var out []readmeCommand
	inSh := false
	var cont string
	contLine := 0
	for i, line := range strings.Split(readme, "\n") {
		switch {
		case strings.HasPrefix(line, "```sh"):
			inSh = true
			continue
		case strings.HasPrefix(line, "```"):
			inSh = false
			continue
		case !inSh:
			continue
		}
		if cont != "" {
			line = cont + " " + strings.TrimSpace(line)
		} else {
			contLine = i + 1
		}
		if strings.HasSuffix(line, "\\") {
			cont = strings.TrimSuffix(line, "\\")
			continue
		}
		cont = ""
		words, err := shellWords(line)
		if err != nil {
			t.Fatalf("README.md:%d: %v", contLine, err)
		}
		switch {
		case len(words) > 0 && words[0] == "sglmock":
			out = append(out, readmeCommand{contLine, line, words[1:]})
		case len(words) > 2 && words[0] == "go" && words[1] == "run" && words[2] == "./cmd/sglmock":
			out = append(out, readmeCommand{contLine, line, words[3:]})
		}
	}
	return out
}

// shellWords splits a command line as a POSIX shell would for the simple
// lines a README has: quotes, and a comment from an unquoted #.
func shellWords(line string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	for _, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == '#' && !inWord:
			return words, nil
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated quote in %q", line)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// subcommands names the commands whose first argument picks a subcommand.
var subcommands = map[string][]string{
	"bench":    {"twopoint", "stream"},
	"scenario": {"list", "run", "format"},
}

// helpOf runs "sglmock CMD [SUB] --help" and returns what it printed.
func helpOf(t *testing.T, words ...string) string {
	t.Helper()
	var out bytes.Buffer
	if code := run(append(slices.Clone(words), "--help"), &out, &out); code != 0 {
		t.Fatalf("sglmock %s --help: exit %d\n%s", strings.Join(words, " "), code, out.String())
	}
	return out.String()
}

// quick says whether a README command runs in a moment, offline: those the
// test runs as written.
func quick(args []string) bool {
	switch {
	case len(args) == 0:
		return false
	case args[0] == "profiles" || args[0] == "help":
		return true
	case args[0] == "scenario" && len(args) > 1 && (args[1] == "list" || args[1] == "format"):
		return true
	case args[0] == "bench" && slices.Contains(args, "--dry-run"):
		return true
	case args[0] == "calibrate" && slices.Contains(args, "-"):
		return true
	}
	return false
}

// Every sglmock command in the README exists with every flag it uses, and
// the quick ones run as written and exit 0.
func TestREADMECommands(t *testing.T) {
	b, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	cmds := readmeCommands(t, string(b))
	t.Chdir(filepath.Dir(readmePath)) // a user runs them from the repository's root
	if len(cmds) < 10 {
		t.Fatalf("found %d sglmock commands in README.md's sh blocks; the parser must be broken", len(cmds))
	}
	names := map[string]bool{}
	for _, c := range commands() {
		names[c.name] = true
	}
	ran := 0
	for _, c := range cmds {
		if len(c.args) == 0 || !names[c.args[0]] {
			t.Errorf("README.md:%d: %q: no such command", c.line, c.text)
			continue
		}
		words := c.args[:1]
		if subs, ok := subcommands[c.args[0]]; ok {
			if len(c.args) < 2 || !slices.Contains(subs, c.args[1]) {
				t.Errorf("README.md:%d: %q: %s needs one of %v", c.line, c.text, c.args[0], subs)
				continue
			}
			words = c.args[:2]
		}
		help := helpOf(t, words...)
		for _, a := range c.args[len(words):] {
			if a == "--" {
				break // the rest is the audited command's
			}
			if !strings.HasPrefix(a, "-") || a == "-" {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if !regexp.MustCompile(`(?m)^  -` + regexp.QuoteMeta(name) + `\b`).MatchString(help) {
				t.Errorf("README.md:%d: %q: sglmock %s has no flag -%s", c.line, c.text, strings.Join(words, " "), name)
			}
		}
		if quick(c.args) {
			ran++
			var out bytes.Buffer
			if code := run(c.args, &out, &out); code != 0 {
				t.Errorf("README.md:%d: %q: exit %d\n%s", c.line, c.text, code, out.String())
			}
		}
	}
	if ran == 0 {
		t.Fatal("no README command ran; the quick ones must")
	}
}

// flagBlock is the README's reference of one command's flags: a marker
// comment naming the command, then a text block with its --help.
var flagBlock = regexp.MustCompile("(?s)<!-- help: sglmock ([a-z ]+) -->\n```text\n(.*?)```\n")

// The README's flag reference is every command's --help, exactly.
func TestREADMEFlagReference(t *testing.T) {
	b, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	seen := map[string]bool{}
	var stale []string
	updated := flagBlock.ReplaceAllStringFunc(readme, func(block string) string {
		m := flagBlock.FindStringSubmatch(block)
		words := strings.Fields(m[1])
		seen[words[0]] = true
		help := helpOf(t, words...)
		if m[2] != help {
			stale = append(stale, m[1])
		}
		return fmt.Sprintf("<!-- help: sglmock %s -->\n```text\n%s```\n", m[1], help)
	})
	for _, c := range commands() {
		if c.run != nil && !seen[c.name] {
			t.Errorf("README.md has no flag reference for sglmock %s (add a <!-- help: sglmock %s --> block)", c.name, c.name)
		}
	}
	if *updateREADME {
		if err := os.WriteFile(readmePath, []byte(updated), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if len(stale) > 0 {
		t.Fatalf("README.md's flag reference differs from --help for sglmock %s: run go test ./cmd/sglmock -run TestREADMEFlagReference -update-readme",
			strings.Join(stale, ", "))
	}
}

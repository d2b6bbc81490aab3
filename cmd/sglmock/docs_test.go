package main

import (
	"bytes"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sglmock/sglmock/mockserver/mocktest"
)

// repoRoot is the repository's root, two directories up: a user runs the
// documented commands from there.
var repoRoot = filepath.Join("..", "..")

// flagsPath is the flag reference: every command's --help, generated.
var flagsPath = filepath.Join(repoRoot, "docs", "flags.md")

// placeholderHost stands, in a documented command, for a machine the reader
// has and the test does not: a GPU host running SGLang or vLLM. A command
// that names it is checked but never run.
const placeholderHost = "gpu-host"

// A command in a ```sh block of the README or of a page under docs/: a
// user copies it as written.
type docCommand struct {
	where string // file:line
	text  string
	args  []string // after "sglmock" (or "go run ./cmd/sglmock")
}

// documentedFiles are the files whose sh blocks hold commands a user runs:
// the README and every page under docs/.
func documentedFiles(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{filepath.Join(repoRoot, "README.md")}, pages...)
}

// docCommands returns every sglmock command in a Markdown file's ```sh
// blocks, with continuation lines joined, comments dropped and the words
// after a shell operator (a pipe, a redirection, &&) left out.
func docCommands(t *testing.T, name, text string) []docCommand {
	t.Helper()
	var out []docCommand
	inSh := false
	var cont string
	contLine := 0
	for i, line := range strings.Split(text, "\n") {
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
		where := fmt.Sprintf("%s:%d", name, contLine)
		words, err := shellWords(line)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		switch {
		case len(words) > 0 && words[0] == "sglmock":
			out = append(out, docCommand{where, line, words[1:]})
		case len(words) > 2 && words[0] == "go" && words[1] == "run" && words[2] == "./cmd/sglmock":
			out = append(out, docCommand{where, line, words[3:]})
		}
	}
	return out
}

// shellWords splits a command line as a POSIX shell would for the simple
// lines documentation has: quotes, a comment from an unquoted #, and the
// command's own words up to the first unquoted operator (| > < ; &).
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
		case strings.ContainsRune("|><;&", r):
			if inWord && strings.Trim(cur.String(), "0123456789") != "" {
				words = append(words, cur.String()) // not a descriptor, as in 2>
			}
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

// quick says whether a documented command runs in a moment, offline: those
// the test runs as written.
func quick(args []string) bool {
	switch {
	case len(args) == 0:
		return false
	case args[0] == "profiles" || args[0] == "help" || args[0] == "version":
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

// unknownFlags names the flags in args that sglmock WORDS does not take:
// serve reads them as SGLang's launch_server does (its own flags, SGLang's,
// unambiguous prefixes), every other command has the flags its --help
// lists, under Flags or in its usage lines. "" when all are known.
func unknownFlags(t *testing.T, words, args []string) string {
	t.Helper()
	if slices.Equal(words, []string{"serve"}) {
		fs, _, _ := serveFlags(io.Discard)
		if _, err := splitLaunchArgs(fs, args); err != nil {
			return err.Error()
		}
		return ""
	}
	help := helpOf(t, words...)
	var unknown []string
	for _, a := range args {
		if a == "--" {
			break // the rest is the audited command's
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		q := regexp.QuoteMeta(name)
		listed := regexp.MustCompile(`(?m)^  -` + q + `\b`).MatchString(help)
		inUsage := regexp.MustCompile(`(?m)^(Usage: +| +)sglmock [^\n]*--` + q + `\b`).MatchString(help)
		if !listed && !inUsage {
			unknown = append(unknown, "--"+name)
		}
	}
	if len(unknown) > 0 {
		return fmt.Sprintf("sglmock %s has no flag %s", strings.Join(words, " "), strings.Join(unknown, ", "))
	}
	return ""
}

// serverURLProblem says what is wrong with a documented command's server
// URL (--url, --upstream): one the reader has locally, or the placeholder
// host; "" when it is fine.
func serverURLProblem(args []string) string {
	for i, a := range args {
		if a == "--" {
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "url" && name != "upstream" {
			continue
		}
		if !hasValue {
			if i+1 == len(args) {
				return "--" + name + " without a value"
			}
			value = args[i+1]
		}
		u, err := url.Parse(value)
		if err != nil || u.Scheme == "" || u.Hostname() == "" {
			return fmt.Sprintf("--%s %q is not a URL", name, value)
		}
		switch u.Hostname() {
		case "127.0.0.1", "localhost", placeholderHost:
		default:
			return fmt.Sprintf("--%s names host %q: use 127.0.0.1 or the placeholder %s", name, u.Hostname(), placeholderHost)
		}
	}
	return ""
}

// Every sglmock command in the README's and docs/'s sh blocks exists with
// every flag it uses, names only local servers or the placeholder host,
// and the quick ones run as written and exit 0.
func TestDocumentedCommands(t *testing.T) {
	type file struct {
		name string
		cmds []docCommand
	}
	var files []file
	for _, path := range documentedFiles(t) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(repoRoot, path)
		files = append(files, file{rel, docCommands(t, rel, string(b))})
	}
	if n := len(files[0].cmds); n < 10 {
		t.Fatalf("found %d sglmock commands in README.md's sh blocks; the parser must be broken", n)
	}
	t.Chdir(repoRoot) // a user runs them from the repository's root
	names := map[string]bool{}
	for _, c := range commands() {
		names[c.name] = true
	}
	ran := 0
	for _, f := range files {
		for _, c := range f.cmds {
			if len(c.args) == 0 || !names[c.args[0]] {
				t.Errorf("%s: %q: no such command", c.where, c.text)
				continue
			}
			words := c.args[:1]
			if subs, ok := subcommands[c.args[0]]; ok {
				if len(c.args) < 2 || !slices.Contains(subs, c.args[1]) {
					t.Errorf("%s: %q: %s needs one of %v", c.where, c.text, c.args[0], subs)
					continue
				}
				words = c.args[:2]
			}
			if c.args[0] == "fleet" && len(c.args) > 1 && c.args[1] == "status" {
				words = c.args[:2]
			}
			if p := unknownFlags(t, words, c.args[len(words):]); p != "" {
				t.Errorf("%s: %q: %s", c.where, c.text, p)
			}
			if p := serverURLProblem(c.args); p != "" {
				t.Errorf("%s: %q: %s", c.where, c.text, p)
				continue
			}
			if quick(c.args) {
				ran++
				var out bytes.Buffer
				if code := run(c.args, &out, &out); code != 0 {
					t.Errorf("%s: %q: exit %d\n%s", c.where, c.text, code, out.String())
				}
			}
		}
	}
	if ran == 0 {
		t.Fatal("no documented command ran; the quick ones must")
	}
}

// The README is a first page: at most 300 lines, the rest in docs/.
func TestReadmeLength(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > 300 {
		t.Errorf("README.md has %d lines, want at most 300: move detail to docs/", n)
	}
}

// The parser reads what a user would run: operators end the command, a
// descriptor before a redirection is not an argument, quotes hold them.
func TestShellWords(t *testing.T) {
	for _, tt := range []struct {
		line string
		want []string
	}{
		{`sglmock profiles default > profile.yaml`, []string{"sglmock", "profiles", "default"}},
		{`sglmock bench twopoint --csv - 2>/dev/null | head`, []string{"sglmock", "bench", "twopoint", "--csv", "-"}},
		{`sglmock serve & sleep 1`, []string{"sglmock", "serve"}},
		{`sglmock version && echo ok`, []string{"sglmock", "version"}},
		{`sglmock audit -- sh -c 'a > b; c'   # comment`, []string{"sglmock", "audit", "--", "sh", "-c", "a > b; c"}},
		{`sglmock x --kv-events-config '{"publisher": "zmq"}'`, []string{"sglmock", "x", "--kv-events-config", `{"publisher": "zmq"}`}},
	} {
		got, err := shellWords(tt.line)
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("shellWords(%q) = %q, %v; want %q", tt.line, got, err, tt.want)
		}
	}
	for _, tt := range []struct {
		args []string
		bad  bool
	}{
		{[]string{"bench", "twopoint", "--url", "http://gpu-host:30000"}, false},
		{[]string{"bench", "twopoint", "--url=http://127.0.0.1:30000"}, false},
		{[]string{"audit", "--upstream", "http://gpu-host:30000", "--", "x", "--url", "http://elsewhere"}, false},
		{[]string{"bench", "twopoint", "--url", "http://HOST:30000"}, true},
		{[]string{"bench", "twopoint", "--url", "gpu-host:30000"}, true},
		{[]string{"bench", "twopoint", "--url"}, true},
	} {
		if got := serverURLProblem(tt.args); (got != "") != tt.bad {
			t.Errorf("serverURLProblem(%q) = %q; want a problem: %t", tt.args, got, tt.bad)
		}
	}
}

// flagBlock is the flag reference's entry for one command: a marker
// comment naming the command, then a text block with its --help.
var flagBlock = regexp.MustCompile("(?s)<!-- help: sglmock ([a-z ]+) -->\n```text\n(.*?)```\n")

// flagReferenceCommands are the commands docs/flags.md must have: every
// command but help, and each subcommand with flags of its own.
func flagReferenceCommands() []string {
	var want []string
	for _, c := range commands() {
		switch c.name {
		case "help":
		case "bench":
			want = append(want, "bench twopoint", "bench stream")
		case "fleet":
			want = append(want, "fleet", "fleet status")
		default:
			want = append(want, c.name)
		}
	}
	return want
}

// The flag reference (docs/flags.md) is every command's --help, exactly;
// -update rewrites it.
func TestFlagReference(t *testing.T) {
	b, err := os.ReadFile(flagsPath)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var stale []string
	updated := flagBlock.ReplaceAllStringFunc(string(b), func(block string) string {
		m := flagBlock.FindStringSubmatch(block)
		seen[m[1]] = true
		help := helpOf(t, strings.Fields(m[1])...)
		if m[2] != help {
			stale = append(stale, m[1])
		}
		return fmt.Sprintf("<!-- help: sglmock %s -->\n```text\n%s```\n", m[1], help)
	})
	for _, c := range flagReferenceCommands() {
		if !seen[c] {
			t.Errorf("docs/flags.md has no entry for sglmock %s (add a <!-- help: sglmock %s --> line and an empty text block, then run with -update)", c, c)
		}
	}
	if mocktest.Updating() {
		if err := os.WriteFile(flagsPath, []byte(updated), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if len(stale) > 0 {
		t.Fatalf("docs/flags.md differs from --help for sglmock %s: run go test ./cmd/sglmock -run TestFlagReference -update",
			strings.Join(stale, ", "))
	}
}

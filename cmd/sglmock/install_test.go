package main

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/sglmock/sglmock/internal/norace"
	"github.com/sglmock/sglmock/mockserver/api"
)

// installDoc is the install guide, whose GitHub Actions recipe the test
// runs.
var installDoc = filepath.Join("..", "..", "docs", "install.md")

// sglmockCheckout is where the recipe checks sglmock out, beside the
// user's repository, and builds it.
const sglmockCheckout = ".sglmock"

// workflow is the part of a GitHub Actions workflow the recipe uses.
type workflow struct {
	Jobs map[string]struct {
		RunsOn string `yaml:"runs-on"`
		Steps  []struct {
			Name             string            `yaml:"name"`
			Uses             string            `yaml:"uses"`
			With             map[string]string `yaml:"with"`
			If               string            `yaml:"if"`
			Run              string            `yaml:"run"`
			WorkingDirectory string            `yaml:"working-directory"`
		} `yaml:"steps"`
	} `yaml:"jobs"`
}

// The GitHub Actions recipe of docs/install.md works on a fresh runner for
// a user's own repository: it checks sglmock out beside the user's code,
// builds it from that checkout, and its audit passes a benchmark that
// flushes and fails one that does not. The run steps run as written, in
// their working directory, with bash -eo pipefail as the runner does and
// $GITHUB_PATH applied between steps; the user's repository is a directory
// holding ./bench.sh, sglmock's checkout a copy of this one, and the build
// takes its modules from the local module cache. The uses steps are
// GitHub's actions: what they are given is checked, they are not run.
func TestInstallRecipe(t *testing.T) {
	if testing.Short() {
		t.Skip("builds sglmock through go install")
	}
	norace.Skip(t, "builds sglmock and runs the recipe's steps: it checks the documented commands")
	for _, tool := range []string{"bash", "curl", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s here: %v", tool, err)
		}
	}
	doc, err := os.ReadFile(installDoc)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- recipe: github-actions -->\n```yaml\n(.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/install.md has no <!-- recipe: github-actions --> yaml block")
	}
	var wf workflow
	dec := yaml.NewDecoder(bytes.NewReader(m[1]))
	if err := dec.Decode(&wf); err != nil {
		t.Fatalf("the recipe: %v", err)
	}
	if len(wf.Jobs) != 1 {
		t.Fatalf("the recipe has %d jobs, want 1", len(wf.Jobs))
	}
	goVersion := goDirective(t)
	for name, job := range wf.Jobs {
		if job.RunsOn != "ubuntu-latest" {
			t.Errorf("job %s runs on %q, want a stock runner, ubuntu-latest", name, job.RunsOn)
		}
		gopath := t.TempDir()
		work := t.TempDir()
		writeBench(t, work, true)
		ghPath := filepath.Join(t.TempDir(), "github_path")
		os.WriteFile(ghPath, nil, 0o644)
		env := recipeEnv(gopath, ghPath)
		var ran []string
		checkedOut := false
		for i, step := range job.Steps {
			switch {
			case step.Uses == "actions/checkout@v4" && step.With["repository"] == "":
				// The user's repository: work, with its ./bench.sh.
			case step.Uses == "actions/checkout@v4":
				if step.With["repository"] != "sglmock/sglmock" || step.With["path"] != sglmockCheckout {
					t.Errorf("step %d checks out %q at %q, want sglmock/sglmock at %s", i, step.With["repository"], step.With["path"], sglmockCheckout)
				}
				copyCheckout(t, filepath.Join(work, step.With["path"]))
				checkedOut = true
			case step.Uses == "actions/setup-go@v5":
				if step.With["go-version"] != goVersion {
					t.Errorf("setup-go installs Go %q; go.mod asks for %s", step.With["go-version"], goVersion)
				}
				if want := sglmockCheckout + "/go.sum"; step.With["cache-dependency-path"] != want {
					t.Errorf("setup-go keys its cache on %q, want sglmock's %s", step.With["cache-dependency-path"], want)
				}
			case step.Uses == "actions/upload-artifact@v4":
				if step.With["path"] != "audit.json" {
					t.Errorf("upload-artifact uploads %q, not the audit's report", step.With["path"])
				}
			case step.Uses != "":
				t.Errorf("step %d uses %s, which the test does not know", i, step.Uses)
			case step.Run != "":
				if strings.Contains(step.Run, "go install") && !checkedOut {
					t.Fatalf("step %d (%s) builds sglmock before any step checks it out", i, step.Name)
				}
				out, err := runStep(filepath.Join(work, step.WorkingDirectory), step.Run, env, ghPath)
				if err != nil {
					t.Fatalf("step %d (%s): %v\n%s", i, step.Name, err, out)
				}
				ran = append(ran, step.Name)
				if strings.Contains(step.Run, "sglmock version") && !strings.Contains(out, "sglmock "+api.SimVersion+"\n") {
					t.Errorf("sglmock version after go install: %q, want the checkout's version %s", out, api.SimVersion)
				}
			}
		}
		t.Logf("ran %q; checked, not run: the actions checkout, setup-go and upload-artifact", ran)
		var report struct {
			Verdict struct{ Level string } `json:"verdict"`
		}
		b, err := os.ReadFile(filepath.Join(work, "audit.json"))
		if err != nil || json.Unmarshal(b, &report) != nil {
			t.Fatalf("the audit's report: %v %s", err, b)
		}
		// The same job fails a benchmark that sends the same prompt twice
		// without a flush.
		writeBench(t, work, false)
		last := job.Steps[len(job.Steps)-1]
		for _, step := range job.Steps {
			if strings.Contains(step.Run, "sglmock audit") {
				last = step
			}
		}
		if out, err := runStep(filepath.Join(work, last.WorkingDirectory), last.Run, env, ghPath); err == nil || !strings.Contains(out, "POISONED") {
			t.Errorf("the audit step passed a poisoned benchmark: %v\n%s", err, out)
		}
	}
}

// goDirective is go.mod's go version as setup-go takes it: "1.26".
func goDirective(t *testing.T) string {
	b, err := os.ReadFile(filepath.Join("..", "..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("go.mod has no go directive")
	}
	return string(m[1])
}

// writeBench writes ./bench.sh: two requests with the same long prompt,
// with a flush and a nonce in each (clean) or neither (poisoned).
func writeBench(t *testing.T, dir string, clean bool) {
	t.Helper()
	script := `#!/usr/bin/env bash
set -euo pipefail
prompt=$(printf 'the same long prompt %.0s' $(seq 200))
for leg in a b; do
  nonce=""
  if [ "$CLEAN" = 1 ]; then
    curl -fsS -X POST "$SGLANG_URL/flush_cache" >/dev/null
    nonce="$(date +%s%N)-$leg "
  fi
  curl -fsS "$SGLANG_URL/generate" -H 'Content-Type: application/json' \
    -d "{\"text\": \"$nonce$prompt\", \"sampling_params\": {\"max_new_tokens\": 4}}" >/dev/null
done
echo "bench: done"
`
	flag := "0"
	if clean {
		flag = "1"
	}
	script = strings.Replace(script, "set -euo pipefail\n", "set -euo pipefail\nCLEAN="+flag+"\n", 1)
	if err := os.WriteFile(filepath.Join(dir, "bench.sh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

// recipeEnv is a runner's environment for the run steps: this machine's,
// with GOPATH (where go install puts the binary) in a temporary directory,
// the modules from the local module cache alone, and no toolchain download.
func recipeEnv(gopath, ghPath string) []string {
	var env []string
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "GOPATH", "GOMODCACHE", "GOPROXY", "GOFLAGS", "GOTOOLCHAIN", "GOBIN", "GITHUB_PATH", "CI":
		default:
			env = append(env, kv)
		}
	}
	return append(env, "GOPATH="+gopath, "GOMODCACHE="+goEnv("GOMODCACHE"), "GOPROXY=off",
		"GOFLAGS=-modcacherw", "GOTOOLCHAIN=local", "GITHUB_PATH="+ghPath, "CI=true")
}

func goEnv(key string) string {
	out, err := exec.Command("go", "env", key).Output()
	if err != nil {
		panic(err)
	}
	return strings.TrimSpace(string(out))
}

// runStep runs a step's script as GitHub's runner does on Linux (bash
// --noprofile --norc -eo pipefail), with the directories the steps before
// added to $GITHUB_PATH first on the PATH.
func runStep(dir, script string, env []string, ghPath string) (string, error) {
	b, err := os.ReadFile(ghPath)
	if err != nil {
		return "", err
	}
	path := os.Getenv("PATH")
	for _, p := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if p != "" {
			path = p + string(os.PathListSeparator) + path
		}
	}
	cmd := exec.Command("bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(env, "PATH="+path)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// copyCheckout copies this checkout to dir as actions/checkout lays one
// out: every file of the module, without nested modules, version control
// or files that are not regular.
func copyCheckout(t *testing.T, dir string) {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if path == root {
				return os.MkdirAll(dir, 0o755)
			}
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // a module of its own
			}
			return os.MkdirAll(filepath.Join(dir, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The README's first install command builds from the checkout the reader
// has: the module is not on the Go module proxy, where MODULE@VERSION
// fails.
func TestReadmeInstallsFromCheckout(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	first := regexp.MustCompile("(?m)go install [^ `\n]+").Find(b)
	if want := "go install ./cmd/sglmock"; string(first) != want {
		t.Errorf("the README's first go install is %q, want %q", first, want)
	}
}

package main

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// installDoc is the install guide, whose GitHub Actions recipe the test
// runs.
var installDoc = filepath.Join("..", "..", "docs", "install.md")

// recipeVersion is the version the test's module proxy serves this
// checkout as. It is the process's own, so that two test runs on one
// machine (they share its module cache) never extract or forget each
// other's copy.
var recipeVersion = fmt.Sprintf("v0.0.0-recipe.%d", os.Getpid())

// workflow is the part of a GitHub Actions workflow the recipe uses.
type workflow struct {
	Jobs map[string]struct {
		RunsOn string `yaml:"runs-on"`
		Steps  []struct {
			Name string            `yaml:"name"`
			Uses string            `yaml:"uses"`
			With map[string]string `yaml:"with"`
			If   string            `yaml:"if"`
			Run  string            `yaml:"run"`
		} `yaml:"steps"`
	} `yaml:"jobs"`
}

// The GitHub Actions recipe of docs/install.md works on a fresh runner for
// a user's own repository: its go install resolves the module path, and
// its audit passes a benchmark that flushes and fails one that does not.
// The run steps run as written, with bash -eo pipefail as the runner does
// and $GITHUB_PATH applied between steps; go install fetches
// github.com/sglmock/sglmock from a module proxy on disk that serves this
// checkout, the other modules from the local module cache. The uses steps
// are GitHub's actions: what they are given is checked, they are not run.
func TestInstallRecipe(t *testing.T) {
	if testing.Short() {
		t.Skip("builds sglmock through go install")
	}
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
		proxy, gopath := moduleProxy(t), t.TempDir()
		t.Cleanup(func() { forgetRecipeVersion(t) })
		work := t.TempDir()
		writeBench(t, work, true)
		ghPath := filepath.Join(t.TempDir(), "github_path")
		os.WriteFile(ghPath, nil, 0o644)
		env := recipeEnv(proxy, gopath, ghPath)
		var ran []string
		for i, step := range job.Steps {
			switch {
			case step.Uses == "actions/checkout@v4":
			case step.Uses == "actions/setup-go@v5":
				if step.With["go-version"] != goVersion {
					t.Errorf("setup-go installs Go %q; go.mod asks for %s", step.With["go-version"], goVersion)
				}
			case step.Uses == "actions/upload-artifact@v4":
				if step.With["path"] != "audit.json" {
					t.Errorf("upload-artifact uploads %q, not the audit's report", step.With["path"])
				}
			case step.Uses != "":
				t.Errorf("step %d uses %s, which the test does not know", i, step.Uses)
			case step.Run != "":
				out, err := runStep(work, step.Run, env, ghPath)
				if err != nil {
					t.Fatalf("step %d (%s): %v\n%s", i, step.Name, err, out)
				}
				ran = append(ran, step.Name)
				if strings.Contains(step.Run, "sglmock version") && !strings.Contains(out, "sglmock "+recipeVersion+"\n") {
					t.Errorf("sglmock version after go install: %q, want the installed module's version %s", out, recipeVersion)
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
		if out, err := runStep(work, last.Run, env, ghPath); err == nil || !strings.Contains(out, "POISONED") {
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
// the module proxy on disk first, the checksum database off (it does not
// know the proxy's version), and no toolchain download.
func recipeEnv(proxy, gopath, ghPath string) []string {
	var env []string
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "GOPATH", "GOMODCACHE", "GOPROXY", "GOSUMDB", "GOFLAGS", "GOTOOLCHAIN", "GOBIN", "GITHUB_PATH", "CI":
		default:
			env = append(env, kv)
		}
	}
	cache := goEnv("GOMODCACHE")
	return append(env, "GOPATH="+gopath, "GOMODCACHE="+cache,
		"GOPROXY=file://"+proxy+",file://"+filepath.Join(cache, "cache", "download"), "GOSUMDB=off",
		"GOFLAGS=-modcacherw", "GOTOOLCHAIN=local", "GITHUB_PATH="+ghPath, "CI=true")
}

// forgetRecipeVersion removes the proxy's version of sglmock from the
// module cache, which go install extracted it into: the build shares the
// machine's module and build caches, so that only sglmock's own packages
// compile, and leaves no version behind that no real proxy has.
func forgetRecipeVersion(t *testing.T) {
	cache := goEnv("GOMODCACHE")
	paths := []string{filepath.Join(cache, "github.com", "sglmock", "sglmock@"+recipeVersion)}
	download := filepath.Join(cache, "cache", "download", "github.com", "sglmock", "sglmock", "@v")
	for _, ext := range []string{".info", ".mod", ".zip", ".ziphash", ".lock", ".partial"} {
		paths = append(paths, filepath.Join(download, recipeVersion+ext))
	}
	for _, p := range paths {
		if err := os.RemoveAll(p); err != nil {
			t.Errorf("cleaning the module cache: %v", err)
		}
	}
	list := filepath.Join(download, "list")
	if b, err := os.ReadFile(list); err == nil {
		kept := strings.ReplaceAll(string(b), recipeVersion+"\n", "")
		if kept == "" {
			os.Remove(list)
		} else {
			os.WriteFile(list, []byte(kept), 0o644)
		}
	}
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

// moduleProxy writes a module proxy on disk (GOPROXY=file://DIR) that
// serves this checkout as github.com/sglmock/sglmock at recipeVersion, the
// module zip made as the go command makes one: every file of the module,
// without nested modules, version control or files that are not regular.
func moduleProxy(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	const module = "github.com/sglmock/sglmock"
	proxy := t.TempDir()
	dir := filepath.Join(proxy, module, "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var zbuf bytes.Buffer
	zw := zip.NewWriter(&zbuf)
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if path == root {
				return nil
			}
			if d.Name() == ".git" || d.Name() == "vendor" {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // a module of its own
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		w, err := zw.Create(module + "@" + recipeVersion + "/" + filepath.ToSlash(rel))
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	})
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	goMod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string][]byte{
		"list":                  []byte(recipeVersion + "\n"),
		recipeVersion + ".info": fmt.Appendf(nil, `{"Version":%q,"Time":"2026-12-02T00:00:00Z"}`, recipeVersion),
		recipeVersion + ".mod":  goMod,
		recipeVersion + ".zip":  zbuf.Bytes(),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return proxy
}

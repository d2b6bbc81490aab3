package chartcheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
)

// The image the chart pulls by default is the one the docs build: the
// chart's appVersion is the tag of every image build command in the
// README, docs/install.md and the Dockerfile's header, values.yaml leaves
// the tag to it, and the binary reports that version (sglmock version).
func TestImageTagAgreesWithTheDocs(t *testing.T) {
	chart, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	appVersion := chart.Metadata.AppVersion
	image, _ := chart.Values["image"].(map[string]any)
	repository, _ := image["repository"].(string)
	if tag, _ := image["tag"].(string); appVersion == "" || tag != "" || repository == "" {
		t.Fatalf("appVersion %q, image %v: want an appVersion, a repository and no tag of values.yaml's own", appVersion, image)
	}
	build := regexp.MustCompile(`(?:podman|docker) build [^\n]*?-t (\S+)`)
	for _, file := range []string{filepath.Join("..", "..", "README.md"), filepath.Join("..", "..", "docs", "install.md"), filepath.Join("..", "..", "Dockerfile")} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		builds := build.FindAllStringSubmatch(string(b), -1)
		if len(builds) == 0 {
			t.Errorf("%s: no image build command", file)
		}
		for _, m := range builds {
			if want := repository + ":" + appVersion; m[1] != want {
				t.Errorf("%s builds %s; the chart pulls %s", file, m[1], want)
			}
		}
	}
	out, err := exec.Command(sglmockBinary(t), "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if first, _, _ := strings.Cut(string(out), "\n"); first != "sglmock "+appVersion {
		t.Errorf("sglmock version says %q; the chart's appVersion is %s", first, appVersion)
	}
}

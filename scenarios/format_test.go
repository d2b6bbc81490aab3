package scenarios

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Format names every key the decoder takes, every kind of step and every
// figure each kind has: it is what `sglmock scenario format` prints, so it
// must not fall behind the decoder.
func TestFormatNamesEveryKey(t *testing.T) {
	files := []string{filepath.Join("testdata", "every-key.yaml")}
	builtins, err := filepath.Glob(filepath.Join("builtin", "*.yaml"))
	if err != nil || len(builtins) == 0 {
		t.Fatalf("built-ins: %v %v", builtins, err)
	}
	files = append(files, builtins...)
	index := regexp.MustCompile(`\[\d+\]`)
	keys := map[string][]string{} // by path, indices dropped
	kinds := map[string]action{}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		d := &decoder{file: file, keys: func(path string, allowed []string) {
			keys[index.ReplaceAllString(path, "[]")] = allowed
		}}
		sc, err := parse(data, d)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range sc.Steps {
			kinds[st.action.kind()] = st.action
		}
	}
	for _, path := range []string{"", "steps[]", "steps[].twopoint", "steps[].twopoint.flush", "steps[].stream",
		"steps[].stream.flush", "steps[].flush", "steps[].start_load", "steps[].stop_load", "steps[].raw", "steps[].wait",
		"steps[].expect[]", "steps[].expect[].real_time"} {
		if _, ok := keys[path]; !ok {
			t.Errorf("no file reached the mapping at %q: testdata/every-key.yaml must use it", path)
		}
	}
	for path, allowed := range keys {
		for _, k := range allowed {
			if !regexp.MustCompile(`\b` + regexp.QuoteMeta(k) + `\b`).MatchString(Format) {
				t.Errorf("Format does not name %s, a key of %q", k, path)
			}
		}
	}
	for _, kind := range stepKinds {
		a, ok := kinds[kind]
		if !ok {
			t.Errorf("no file has a %s step: testdata/every-key.yaml must", kind)
			continue
		}
		figures := figuresOf(kind)
		if strings.HasSuffix(figures, "the truth's") {
			figures += " " + figuresOf("truth")
		}
		for _, fig := range a.figures() {
			if !slices.Contains(strings.Fields(strings.NewReplacer(",", " ", ":", " ", "(", " ", ")", " ").Replace(figures)), fig) {
				t.Errorf("Format's figures of a %s step lack %s (it has %s)", kind, fig, strings.Join(a.figures(), " "))
			}
		}
	}
}

// figuresOf is the entry of a kind of step in Format's list of figures:
// its line and the indented lines under it.
func figuresOf(kind string) string {
	list := Format[strings.Index(Format, "The figures of each kind"):]
	return strings.TrimSpace(regexp.MustCompile(`(?m)^` + kind + ` .*(\n {11}.*)*`).FindString(list))
}

package mocktest

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/ with what the tests produce")

// Updating says whether the tests run with -update: a test that keeps a
// generated file other than a golden one (a reference page built from the
// binary's own output) rewrites it then.
func Updating() bool { return *update }

// Golden compares got with the golden file testdata/name and fails the test
// with both when they differ. With -update it writes got to the file
// instead.
func Golden(t testing.TB, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from the golden file (run with -update to accept the change):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// DecodeStrict decodes JSON into v and fails on keys v does not have.
func DecodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Outputs are renamed into place only over a regular file or a new path;
// a FIFO, a device or a symbolic link is written in place and stays what
// it was (a link's target gets the bytes), a link to nothing is refused,
// and the checks before a run take them all without opening them.
func TestOutputsWrittenInPlace(t *testing.T) {
	dir := t.TempDir()
	regular := filepath.Join(dir, "regular.csv")
	target := filepath.Join(dir, "target.csv")
	link := filepath.Join(dir, "link.csv")
	dangling := filepath.Join(dir, "dangling.csv")
	fifo := filepath.Join(dir, "fifo")
	devLink := filepath.Join(dir, "null")
	for _, f := range []string{regular, target} {
		if err := os.WriteFile(f, []byte("keep"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	mustDo(t, os.Symlink(target, link))
	mustDo(t, os.Symlink(filepath.Join(dir, "nothing"), dangling))
	mustDo(t, syscall.Mkfifo(fifo, 0o600))
	mustDo(t, os.Symlink(os.DevNull, devLink)) // what /dev/stdout is: a link to a non-regular file
	write := func(w io.Writer) error { _, err := io.WriteString(w, "rows\n"); return err }

	before, _ := os.Stat(regular)
	for _, path := range []string{regular, filepath.Join(dir, "new.csv"), link, os.DevNull, devLink} {
		if err := checkWritable(path); err != nil {
			t.Fatalf("checkWritable(%s): %v", path, err)
		}
		if err := writeOutput(path, write, nil); err != nil {
			t.Fatalf("writeOutput(%s): %v", path, err)
		}
	}
	after, _ := os.Stat(regular)
	if os.SameFile(before, after) || readFile(t, regular) != "rows\n" || readFile(t, filepath.Join(dir, "new.csv")) != "rows\n" {
		t.Error("a regular file and a new one: want each renamed into place with the rows")
	}
	if got := after.Mode().Perm(); got != 0o600 {
		t.Errorf("the replaced regular file's permissions are %v, want its own 0600 kept", got)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "new.csv")); fi.Mode().Perm() != 0o644 {
		t.Errorf("the new file's permissions are %v, want 0644", fi.Mode().Perm())
	}
	if fi, _ := os.Lstat(link); fi.Mode()&os.ModeSymlink == 0 || readFile(t, target) != "rows\n" {
		t.Errorf("a link: mode %v, its target says %q; want the link kept and its target written", fi.Mode(), readFile(t, target))
	}
	for _, dev := range []string{os.DevNull, devLink} {
		if fi, _ := os.Stat(dev); fi.Mode()&os.ModeCharDevice == 0 {
			t.Errorf("%s: mode %v after the write, want a character device still", dev, fi.Mode())
		}
	}

	// A FIFO passes the check with no reader yet, and its reader gets the
	// rows.
	if err := checkWritable(fifo); err != nil {
		t.Fatalf("checkWritable(fifo): %v", err)
	}
	got := make(chan string)
	go func() {
		f, err := os.Open(fifo)
		if err != nil {
			got <- err.Error()
			return
		}
		defer f.Close()
		b, _ := io.ReadAll(f)
		got <- string(b)
	}()
	if err := writeOutput(fifo, write, nil); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != "rows\n" {
		t.Errorf("the FIFO's reader got %q, want the rows", s)
	}
	if fi, _ := os.Lstat(fifo); fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the FIFO's mode is %v after the write, want a FIFO still", fi.Mode())
	}

	for _, err := range []error{checkWritable(dangling), writeOutput(dangling, write, nil)} {
		if err == nil || !strings.Contains(err.Error(), "no such file") {
			t.Errorf("a link to nothing: got %v, want it refused", err)
		}
	}
	if fi, _ := os.Lstat(dangling); fi.Mode()&os.ModeSymlink == 0 {
		t.Error("the link to nothing was replaced")
	}
	var stdout bytes.Buffer
	if err := writeOutput("-", write, &stdout); err != nil || stdout.String() != "rows\n" {
		t.Errorf(`"-": got %q, %v; want the rows on standard output`, stdout.String(), err)
	}
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

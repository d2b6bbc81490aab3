package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Output files. A regular file (or a path that does not exist yet) is
// written through a temporary file beside it, renamed over it once
// complete, so that a failed write leaves no half file behind. Anything
// else is written in place and never replaced: a device or a FIFO
// (/dev/null, a pipe a reader waits on), /dev/stdout, or a symbolic link,
// whose target gets the bytes (renaming over a link would replace the link,
// not its target, and renaming over a device node would turn it into a
// regular file). "-" is standard output.

// writeOutput writes what write gives to path (see above).
func writeOutput(path string, write func(io.Writer) error, stdout io.Writer) error {
	if path == "-" {
		return write(stdout)
	}
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist), err == nil && fi.Mode().IsRegular():
		return writeRenamed(path, write)
	case err != nil:
		return err
	}
	// O_TRUNC empties a regular file a link names, and does nothing to a
	// device or a FIFO; a link to nothing is refused, not created through.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// writeRenamed writes a regular file through a temporary one beside it,
// renamed over it once complete. A file it replaces keeps its permissions
// (a private profile stays private); a new one is 0644.
func writeRenamed(path string, write func(io.Writer) error) error {
	perm := fs.FileMode(0o644)
	if fi, err := os.Stat(path); err == nil {
		perm = fi.Mode().Perm()
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // gone by then when the rename succeeded
	if err := write(tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.Rename(tmp.Name(), path)
}

// checkWritable tells whether an output can be written at path before a
// run starts: a regular file's (or a new file's) directory exists and takes
// a new file, and path is not a directory; anything else written in place
// must exist and be writable (a link must name something).
func checkWritable(path string) error {
	fi, err := os.Lstat(path)
	switch {
	case err == nil && fi.IsDir():
		return errors.New("is a directory")
	case err == nil && !fi.Mode().IsRegular():
		target, err := os.Stat(path)
		switch {
		case err != nil:
			return fmt.Errorf("a link to nothing: %w", errors.Unwrap(err))
		case target.IsDir():
			return errors.New("is a directory")
		}
		return writableInPlace(path)
	}
	dir := filepath.Dir(path)
	fi, err = os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("no directory %s", dir)
	case err != nil:
		return err
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	}
	f, err := os.CreateTemp(dir, ".sglmock-check-*")
	if err != nil {
		return fmt.Errorf("cannot write in %s: %w", dir, errors.Unwrap(err))
	}
	f.Close()
	return os.Remove(f.Name())
}

// writableInPlace asks the system whether path may be opened for writing,
// without opening it: opening a FIFO for writing waits for its reader,
// which may start after the check.
func writableInPlace(path string) error {
	if err := unix.Access(path, unix.W_OK); err != nil {
		return fmt.Errorf("cannot write it: %w", err)
	}
	return nil
}

//go:build unix

// Package cputime reads the CPU time the process has used, for the
// benchmarks that report CPU alongside wall time.
package cputime

import (
	"syscall"
	"testing"
	"time"
)

// Process returns the CPU time, user and system, the process has used.
func Process() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// Of is Process for a benchmark, which it fails on an error.
func Of(tb testing.TB) time.Duration {
	tb.Helper()
	cpu, err := Process()
	if err != nil {
		tb.Fatal(err)
	}
	return cpu
}

//go:build unix

// Package cputime reads the CPU time the process has used, for the
// benchmarks that report CPU alongside wall time.
package cputime

import (
	"syscall"
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

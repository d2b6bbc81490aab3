// Package gctune sets the garbage collector of a server: sglmock serve,
// and the benchmarks that measure the server as it runs.
//
// A mock serving at a benchmark's pace allocates fast (every request's
// body, prompt tokens and answer) while what it keeps live is small: a few
// MB of truth records and open requests. At Go's default (GOGC=100) the
// heap is collected each time it doubles from that small base, dozens of
// times a second, and marking costs a fifth of a short request's CPU. A
// server collects at five times the live heap instead (GOGC=400), under a
// soft memory limit of its own byte budgets plus headroom: one whose
// budgets fill collects as often as it must to stay near them (the runtime
// gives the collector at most half the CPU), instead of growing to twice
// what they hold as at GOGC=100. GOGC and GOMEMLIMIT set in the
// environment win. Beyond 400 the run is no faster here: a larger heap
// loses in cache misses what fewer collections save.
package gctune

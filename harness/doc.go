// Package harness measures an SGLang-compatible server the way benchmark
// scripts do (TTFT, prefill and decode throughput by the two-point method and
// its fixed forms, and by streaming), checks every measurement for the traps
// that poison it (a warm prefix cache on a leg meant to be cold, t_b <= t_a,
// a flush that did not happen), and against sglmock reports each figure's
// error against the modelled truth.
//
// It talks HTTP only and never imports mockserver outside tests: the same
// harness runs unchanged against a real SGLang server.
package harness

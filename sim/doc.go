// Package sim is the JSON contract of sglmock's /sim/ endpoints, which real
// SGLang does not have: the mock serves these types and the harness reads
// them. Keys are snake_case; times are simulated seconds since the engine
// started (divide by the speedup for wall seconds).
//
//	GET /sim/profile          Profile: the active profile and the speedup
//	GET /sim/expect?...       Expectation: the model's prediction for a lone request
//	GET /sim/requests         []RequestSummary: finished requests, in arrival order
//	GET /sim/requests/{rid}   Truth: one finished request's modelled timeline
//	GET /sim/flushes          []Flush: every /flush_cache call and its outcome
//	GET /sim/stats            Stats: the load, the prefix cache and its hit rate now
//
// The mock keeps a bounded number of ground truths, within a bounded
// memory (serve's --sim-truth-bytes), the oldest going first, so an old
// rid may be gone. A truth's decode rounds come as runs (Round): one record
// for each stretch of back-to-back rounds in the same batch size with the
// same gain, its duration the stretch's total, so every sum is exact.
//
// The package has no dependencies, so a client can import it without
// importing the mock.
package sim

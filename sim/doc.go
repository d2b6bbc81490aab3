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
//
// The package has no dependencies, so a client can import it without
// importing the mock.
package sim

// Package scenarios plays benchmarking traps and their fixes against
// sglmock and checks what must hold. A scenario is a YAML file: what trap
// it shows and why it matters on real hardware, the profile of the mock it
// runs against, and steps, each a harness method or a request, with the
// expectations its result must meet. The built-in scenarios are embedded
// from builtin/*.yaml; Load also reads a file.
//
// # Model
//
// Each run gets a fresh mock of the scenario's profile, with an empty
// cache, and plays the steps in order against it, so that a step finds the
// cache and the load the steps before it left. The runner talks HTTP only,
// through the harness, the way a benchmark does; the caller starts the mock
// (`sglmock scenario run` on a loopback port in real time, the tests with
// mocktest on virtual time), and restarts it for a restart step
// (Target.Restart: a new server on the same profile and HiCache page
// directory, as a restarted process finds its file storage tier). Nonces and rids are a counter per run
// ("NAME-1", "NAME-2", ...): unique on a fresh server, and the same from
// run to run, so the speculative draws, which the mock seeds by rid, are
// too. On virtual time every figure is exact and every measurement error
// is 0; in real time a client's jitter of e wall seconds is speedup*e
// simulated seconds, which is what real_time bounds allow for.
//
// # Format
//
// Format describes a scenario file: its keys, the actions, the
// expectations and the figures each kind of step has (`sglmock scenario
// format` prints it; a test checks it names every key the decoder takes
// and every figure).
//
// Decoding is strict: an unknown key, a value of the wrong kind or out of
// range, an expectation its step cannot meet, an inline profile key or value
// the profile refuses are errors (*FileError) that name the file, the line
// and the field: "x.yaml:12: steps[1].twopoint.method: ...".
//
// # Output
//
// Run prints the description, then for each step its heading, the
// harness's table for it, and PASS or FAIL for each expectation with what
// each row had (a FAIL names the file and line). Result counts the
// failures; the command exits 1 when there is one. In real time, a step
// that failed while the client measured its own requests more than 3 %
// off their modelled times gets a note: the host was too busy for its wall
// clock at that speedup, and a rerun, or a lower speedup, tells.
//
// # Built-ins and their speedups
//
// The built-in scenarios pass on virtual time with exact figures (their
// golden outputs are in testdata/), and in real time at their own speedup
// on a shared 2-core host. A scenario on the small default profile runs
// slower than real time (x0.5): its 16 decode rounds take 64 ms, and a few
// milliseconds of a busy host's jitter would be a large part of them.
package scenarios

// Command sglmock is an SGLang-compatible simulated inference server and a
// benchmark harness that tells whether an LLM-serving benchmark tells the
// truth. The command is thin: it parses flags and hands them to the
// packages.
//
//	serve     the mock server (mockserver/api over the simulated engine)
//	fleet     N serve replicas on loopback for a cache-aware router (package
//	          fleet): the llm-d endpoints file, a router config, status
//	bench     twopoint and stream measurements of any server (harness)
//	audit     a benchmark command run against a fresh loopback mock, then
//	          the mock's records: which requests hit the cache, which
//	          flushes failed
//	demo      the original poisoned benchmark and its fix, with the truth
//	scenario  the benchmarking traps and their fixes (scenarios), each
//	          played against a fresh loopback mock with PASS or FAIL
//	profiles  the built-in cost profiles
//	calibrate a profile fitted to measured two-point rows (calibrate)
//	health    asks a server's /health: the container image's health check
//
// demo, scenario and audit start the mock in this process on a free loopback port,
// with no warmup request, so the prefix cache starts empty. Run "sglmock
// help" for the commands and "sglmock COMMAND --help" for their flags.
package main

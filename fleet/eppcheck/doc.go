// Command eppcheck plays Envoy in front of the llm-d router's endpoint
// picker (EPP) over a running sglmock fleet, and reports how the picker
// routes.
//
// It is a Go module of its own (grpc and Envoy's API, go-control-plane's
// envoy module, at the versions the router v0.10.0 uses) so that sglmock's
// module and binary do not grow: `go test ./...` at the repository's root
// does not descend into it. CI vets and tests it (.ci/run).
//
// # One request, as Envoy sends it
//
// Exchange opens an ext_proc stream and sends what Envoy sends with the
// processing mode the picker needs (headers SEND, bodies
// FULL_DUPLEX_STREAMED, trailers SEND; the Envoy configuration in
// docs/fleet.md): the request headers without end of stream, then the body
// with it. The picker answers, once it has the whole body, with the header
// x-gateway-destination-endpoint (the endpoint Envoy's ORIGINAL_DST cluster
// routes to; the envoy.lb metadata carries it too, and each endpoint's
// score under --emit-endpoint-scores), then streams the body back in
// chunks; the body Envoy forwards is the one streamed back. eppcheck then
// sends the request to that replica itself and returns the response
// headers and body through the stream, so the picker's response hooks run,
// as they do behind Envoy. An ImmediateResponse is an error (ErrImmediate).
//
// # The experiments
//
//   - route: distinct prompts of some 2,000 tokens, each sent several times
//     in a shuffled order; a repeat is a hit when it goes to a replica that
//     served the prompt before, and the cached share is what the replicas
//     report in usage.prompt_tokens_details.cached_tokens (the fleet needs
//     --enable-cache-report).
//   - flush: every prompt placed on two replicas (through the picker, then
//     directly on the other of the pair), probed, then the fleet's first
//     replica flushed (POST /flush_cache, so it announces AllBlocksCleared)
//     and every prompt probed again: all probes must go to the surviving
//     holder.
//   - chat: one system-and-user conversation sent several times: the picker
//     renders it through a replica's chat render endpoint, and the repeats
//     must stay on one replica with their prompt cached.
//
// After each request it waits --settle (300 ms) for the KV events to reach
// the picker's index. It reads the picker's metrics (endpoints ready,
// extract errors, events received, index lookups), prints PASS or FAIL for
// each figure against its bar, and exits 1 when one fails.
//
// run-router.sh runs a fleet, the picker (EPP_BIN, built from the router's
// source: this repository does not build it) and eppcheck in a private
// network namespace and searches the picker's log for deprecation
// warnings and event errors.
package main

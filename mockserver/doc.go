// Package mockserver is the simulated SGLang server. Its sub-packages, in
// dependency order:
//
//   - profile: a deployment as YAML (limits, the cost of each scheduler
//     iteration, speculative decoding) and the pure cost model and evaluator.
//   - tokenizer: a deterministic, prefix-stable tokenizer, the chat
//     template, and the mock's output words.
//   - engine: SGLang's scheduler on a modelled clock — batching, chunked
//     prefill, the KV pool and radix cache (radixcache), flush, speculative
//     rounds — with per-request ground truth.
//   - kvevents: the radix cache's KV events over ZMQ, as SGLang's
//     --kv-events-config publishes them.
//   - api: SGLang's HTTP endpoints over the engine (the only user of gin).
//
// The engine owns a radixcache.Tree as SGLang's scheduler owns its radix
// cache: prompts reuse cached prefixes by SGLang's rules, each prefill costs
// what the profile says for the tokens actually computed, and /flush_cache
// only succeeds when nothing is queued or running and the last finishing
// batch has settled (the profile's flush_busy_after_finish_s). Every
// modelled duration is
// a pure function of token counts and batch state, so under testing/synctest
// the server's timings are exact.
package mockserver

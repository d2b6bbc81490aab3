// Package mockserver is the simulated SGLang server: an engine that
// schedules requests on an exact, seeded cost model, and (in later work) the
// HTTP layer that speaks SGLang's API over it.
//
// The engine owns a radixcache.Tree as SGLang's scheduler owns its radix
// cache: prompts reuse cached prefixes by SGLang's rules, each prefill costs
// what the profile says for the tokens actually computed, and /flush_cache
// only succeeds when nothing is queued or running. Every modelled duration is
// a pure function of token counts and batch state, so under testing/synctest
// the server's timings are exact.
package mockserver

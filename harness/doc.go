// Package harness measures an SGLang-compatible server the way benchmark
// scripts do, checks every measurement for the traps that poison it, and,
// against sglmock, reports each figure's error against the modelled truth.
//
// It talks HTTP only and imports nothing of the mock (only github.com/sglmock/sglmock/sim, the
// JSON contract of /sim/): the same harness runs unchanged against a real
// SGLang server, where the truth columns are simply absent.
//
// # Methods
//
// TwoPoint sends, per context, a leg with max_new_tokens a and a leg with b
// on the same prompt: decode tok/s = (b-a)/(t_b-t_a), TTFT ~ t_a, prefill
// tok/s = prompt_tok/t_a. Its variants keep the legs cold, or not: naive
// (the same prompt twice: the seed's bug), flush (/flush_cache before each
// leg), nonce (a fresh nonce in each prompt, at its start or, to show why
// not, its end) and flush+nonce (the seed's fix). Stream sends one
// streaming request per context: TTFT from the first event, the decode
// rate token-weighted from the cumulative completion tokens, and the
// per-event ITL a script counting one token per event would report.
//
// Prompts are deterministic filler sized in server tokens: with /tokenize
// when the server has it (SGLang and vLLM serve it, also beside their
// OpenAI routes), exactly (words, then one-token pads, as a word may be two
// tokens), else from the prompt_tokens two probe requests report; or token
// ids (Client.InputIDs). A nonce is a UUID rendered as
// four capitalised words, so its first token is as unique as the UUID.
// Each request's rid is set by the harness, so its truth can be fetched.
//
// # Checks and verdicts
//
// Every run is checked: a leg meant to be cold that reused cached tokens
// beyond the shared floor; t_b <= t_a; a flush refused (400, e.g. SGLang's
// "Flush cache failed." right after a response) or failing, or accepted
// but followed by a cache hit; a leg that generated fewer tokens than
// asked; legs whose prompts differ in size; a server that reports no cached
// tokens; counts no server can report (cached_tokens below 0 or above the
// prompt, a prompt of no tokens, a number that is not a whole one), which
// leave the count unknown and no rate negative; a /tokenize count the
// answer contradicts; stream events carrying several tokens. The verdict
// is "ok", "SUSPECT: causes" or "POISONED: causes", with the numbers in
// each cause.
//
// Then the row's figures are checked against the truth and the method,
// each against Tolerance (5 %, calibrate's own; see its doc for how each
// check turns it into a bound), and a SUSPECT cause names the fix, which
// Row.Suggested carries for programs:
//
//   - ttft_err or decode_err beyond it: the client's lateness, which the
//     speedup multiplies; the cause gives the lateness in wall
//     milliseconds and the speedup that would keep it within half the
//     tolerance (Report.SuggestedSpeedup is the lowest a report's rows
//     name). On virtual time both errors are exactly 0.
//   - b-a over fewer than 20 speculative rounds (spec_verify_ct, which
//     SGLang reports, or the mean accept length /sim/ gives): decode moves
//     by a whole round from run to run; the cause names the b that spans
//     40.
//   - over repeats, the median decode rate's 95 % interval from the runs'
//     spread wider than ±5 %; the cause names the runs that would narrow
//     it to ±2.5 %.
//   - t_b <= t_a in some of the runs: said of those runs, with their
//     times; the median ranks them as the fastest, so the row's decode
//     stands while they are fewer than half.
//
// The shared floor is measured once per run with two prompts that are
// nothing but two unrelated nonces: a Llama tokenizer's BOS, or a chat
// template's head, is shared by every prompt and is no poison. A third
// request repeats the first nonce to learn whether the server reports
// cached tokens at all (SGLang's OpenAI routes give null for 0).
//
// A refused flush is retried (FlushPolicy: Retries, RetryWait) or waited
// for by the server (Timeout, /flush_cache?timeout=); a leg whose flush
// was never accepted is still sent and its row carries the server's text.
//
// # A server is not trusted
//
// Every answer is read within a bound set by the request (ErrTooLarge
// beyond it): an answer of N tokens within 1 MiB + 256 bytes a token, a
// stream's events the same each and at most 2N+16 of them, a /tokenize
// answer within 12 bytes a byte of the text sent, a flush's text or an
// error within 1 MiB (quoted cut), /sim/'s records within 16 MiB. Sizing a
// prompt takes at most 32 /tokenize calls and never more words than
// tokens, whatever the counts; bench gives up on a request after
// DefaultRequestTimeout.
//
// # Time and truth
//
// The harness times each request on the wall clock, from the moment its
// body is written to its last byte. Against sglmock it multiplies by the
// speedup /sim/profile reports, so the figures are in the server's
// simulated seconds. Then, per row:
//
//   - measurement error (ttft_err, decode_err): against the modelled times
//     of the very requests sent (GET /sim/requests/{rid}); only the
//     client's clock and the transport are in it;
//   - method bias (ttft_bias, decode_bias): against the cold TTFT and the
//     steady-state decode rate at that context (GET /sim/expect); this is
//     what the method itself gets wrong.
//
// With --repeat, the figures are medians over the runs and each error is
// the median of the runs' errors.
//
// # Output
//
// Report writes an aligned table (the seed's columns, cached_a, cached_b,
// the truth columns, the verdict last since it is the one of free width),
// CSV (starting with the calibration columns ctx_req, prompt_tok, t_a,
// t_b, a, b, b_cached), JSON (every leg, its flushes and its truth) and a
// PNG plot. Progress is reported through the Progress interface. Audit
// reads a mock's records after a benchmark command ran against it.
package harness

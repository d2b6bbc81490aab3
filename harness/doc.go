// Package harness measures an SGLang-compatible server the way benchmark
// scripts do, checks every measurement for the traps that poison it, and,
// against sglmock, reports each figure's error against the modelled truth.
//
// It talks HTTP only and imports nothing of the mock (only github.com/sglmock/sglmock/sim, the
// JSON contract of /sim/, and github.com/sglmock/sglmock/compat, SGLang's
// releases and their rules): the same harness runs unchanged against a real
// SGLang server, where the truth columns are simply absent.
//
// # Methods
//
// TwoPoint sends, per context, a leg with max_new_tokens a and a leg with b
// on the same prompt: decode tok/s = (b-a)/(t_b-t_a), TTFT ~ t_a, prefill
// tok/s = prompt_tok/t_a. Its variants keep the legs cold, or not: naive
// (the same prompt twice: the original benchmark's bug), flush
// (/flush_cache before each leg), nonce (a fresh nonce in each prompt, at
// its start or, to show why not, its end), flush+nonce (the original
// benchmark's fix) and salt (the same prompt with a fresh cache_salt on
// each leg). Stream sends one
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
// prompt, a prompt of no tokens, a number that is not a whole one, a
// histogram of accepted drafts with a negative count or other rounds than
// spec_verify_ct), which
// leave the count unknown and no rate negative; a /tokenize count the
// answer contradicts; stream events carrying several tokens, or none
// (their count is then checked against the final usage: one token an
// event when they agree). The verdict is "ok", "SUSPECT: causes" or
// "POISONED: causes", with the numbers in each cause.
//
// Each figure of a row (TTFT, the prefill rate, the decode rate) has a
// verdict of its own (Row.FigureVerdicts): a cause names the figures it
// concerns (Cause.Figures), as a finding about leg a concerns all three
// and one about leg b the decode rate alone. Reuse is judged by what it
// moves: leg a's moves TTFT and the prefill rate, and decode unless leg b
// reused as much (the two prefills then match: a naive rerun is POISONED
// for its TTFT, ok for its decode); a stream's moves TTFT and prefill.
// Each figure also has an error budget: what is known of its error added
// up as a bound (the lateness against the truth, the wider of the
// acceptance scatter and the spread over repeats, the context the figure
// was decoded over, whole rounds, and the reuse --allow-shared-prefix
// tolerates: k of P prompt tokens cached save at most k/P of the prefill). A figure is ok only when its bound is
// within Tolerance; one past it that no finding made SUSPECT gets a
// SUSPECT cause naming its parts and the fix of the largest (kimi at 32k,
// b = 1025: the scatter's ±4.4 % and the growth's -1.0 %, ±5.4 % in all:
// --repeat 5; TTFT over repeats whose prefills scatter by ±36 %), and the
// row's suggestion is the one that fixes every figure (the most runs).
// The row's level is its worst figure's.
//
// Under SGLang's HiCache a reuse names its tier, from the answer's
// cached_tokens_details (meta_info, or sglext on the OpenAI routes; the
// mock's /sim/requests for audit): "..., all from the storage tier:
// /flush_cache does not clear it; call /clear_hicache_storage_backend or
// keep the nonce", or from the host tier, which a GPU-only reasoning calls
// cold. The flush method asks /server_info for hicache_storage_backend:
// on a server with a storage tier its rows are SUSPECT for that, whatever
// they measured, since a flush leaves that tier (tiers.go).
//
// A method can rely on a rule of one SGLang release and not of another.
// Against SGLang the harness reads the release /server_info reports and
// asks package compat, SGLang's table of releases, whether it has the
// rule: the salt method's row is SUSPECT when the server reports a release
// before PR #30827 (its /generate ignores cache_salt, and leg b reuses leg
// a), one the table cannot place, or none.
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
//     40, or, against sglmock, the larger b the model's acceptance scatter
//     needs (below), so that one fix does for both.
//   - acceptance scatter: each round accepts a random number of tokens
//     (mean μ, standard deviation σ), so decode over the R rounds b-a spans
//     is known to ±1.96 (σ/μ)/√R (95 %) from one run, ±1.96 × 1.2533
//     (σ/μ)/√(Rn) as the median of n (with a > 1, leg a's own R_a rounds
//     scatter too: √(R + 2 R_a)/R in place of 1/√R); wider than ±5 % is
//     SUSPECT, and the
//     cause names the b, or the runs, that would narrow it to ±2.5 %. σ/μ
//     comes from the histograms of accepted drafts the legs report
//     (meta_info.spec_correct_drafts_histogram, or spec_accept_histogram),
//     else from /sim/profile's accept_dist; over fewer than 20 rounds
//     (above) nothing more is said, and without either an ok row says the
//     scatter is not checked (over repeats the spread check measures it).
//   - against sglmock, the context leg b grows through: its tokens after
//     leg a's are decoded from prompt+a to prompt+b tokens of context, so
//     the figure is that span's mean rate; when the model's steady rates
//     over the span (/sim/expect at its start, middle and end, Simpson's
//     rule) put that mean more than 5 % from the rate at the prompt, the
//     row is SUSPECT with the span and its rates (decode_bias by
//     construction; no b fixes both it and the scatter).
//   - over repeats, the median decode rate's 95 % interval from the runs'
//     spread wider than ±5 %; the cause names the runs that would narrow
//     it to ±2.5 %. A row says the wider of this interval and the
//     scatter's, once.
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
// # DP ranks
//
// A server of several DP ranks (/server_info's dp_size) has a prefix cache
// a rank, and its controller places each request (placement.go). A leg is
// cold when the request it repeats ran on another rank: by placement, not
// by method, and one more request from anyone puts both on one rank. So a
// naive row whose leg b was cold is SUSPECT unless both legs ran on one
// rank (meta_info.dp_rank, or the mock's /sim/); an audited repeat cold
// only by placement is SUSPECT too, and so is one whose rank, or its
// source's, the server does not say. SGLang answers /flush_cache with the
// first rank's answer, so against sglmock a flush answered 200 counts only
// when /sim/flushes says every rank took it, and is retried otherwise. The
// floor probes are pinned to rank 0 (routed_dp_rank), which leaves the
// round robin where it was.
//
// # A server is not trusted
//
// Every answer is read within a bound set by the request (ErrTooLarge
// beyond it): an answer of N tokens within 1 MiB + 256 bytes a token, a
// stream's events the same each and at most 2N+16 of them, a /tokenize
// answer within 12 bytes a byte of the text sent, a flush's text or an
// error within 1 MiB (quoted cut; a flush answered with more is refused,
// whatever its status), /sim/'s records within 16 MiB. Sizing a
// prompt takes at most 32 /tokenize calls and never more words than
// tokens, whatever the counts; bench gives up on a request after
// DefaultRequestTimeout.
//
// # Time and truth
//
// The harness times each request on the wall clock, from the moment the
// transport has its connection (before the request is written) to the
// answer's last byte. Against sglmock it multiplies by the
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
// A TableWriter prints a report's rows as they arrive (Progress.Row tells
// the command when one finished): one table per method, compact by default
// (the original benchmark's figures, t_b, cached_a/b and, against
// sglmock, the errors and biases) or wide with every column. The verdict column gives the level,
// the figures whose own verdict is better, and note numbers, "POISONED
// (TTFT ok) [1,2]"; each cause is written once, as a numbered
// note under its method's table: one note for both legs ("legs a and b")
// and, in the compact table, for every row whatever its figures (the note
// gives the first row's). CSV (starting with the calibration columns
// ctx_req, prompt_tok, t_a, t_b, a, b, b_cached, and with each figure's
// verdict and bound) and JSON (every leg, its flushes, its truth and its
// figure verdicts with their parts) keep each row's full causes.
//
// The plot (PNG, SVG, PDF, JPEG, TIFF or EPS) draws TTFT, prefill and
// decode tok/s against context, and for stream the ITL, token-weighted
// against per event, each panel by its own figure's verdict. Every y axis
// runs from 0 to a round number above the points that are not poisoned: a
// poisoned point is drawn apart, a cross in a red ring beside its context
// with a leader to it and its method's name (on a good point of the same
// value it would pass for one), and, when beyond the scale, as a red
// triangle on the top edge with its value, so a naive 225,741 tok/s cannot
// flatten a 2,700 tok/s line; the subtitle names in red the method and
// figures poisoned. SUSPECT points are boxed in orange; against sglmock a
// grey line is the model's cold TTFT and steady decode.
//
// Progress is told each leg before it is sent, with the time the run is
// predicted to take from then: from the server's cost model (the dry run's,
// read from /sim/profile through Options.CostModel) plus the mean overhead
// of the legs done, or, against a server without /sim/, from a cost fitted
// to the legs done. Audit reads a mock's records after a benchmark command
// ran against it.
//
// # Audit
//
// Audit reads a mock's records after someone else's benchmark command ran
// against it; AuditUpstream reads what the recording proxy (Recorder) saw
// the command send to a real server. Both judge each request the same way:
//
//   - its floor is what two unrelated nonce prompts share on its route
//     (/generate text or input_ids, completions, chat), measured after
//     the run: a BOS token, a chat template's head;
//   - its impact is the TTFT its reuse beyond the floor saved, against its
//     TTFT with only the floor cached at the same moment: on the mock from
//     the model (the request's own prefill cost as run, and the profile's
//     cost of the prompt after the floor, /sim/expect); through the proxy
//     from a prefill cost per token fitted by least squares to the
//     server's own prefill times when it reports them (SGLang's meta_info
//     under --enable-metrics: one point a prefill batch), else to the TTFTs
//     it saw of the requests that met an idle server (a queued TTFT would
//     put its wait on the prompt's tokens), or, with no timing to fit, the
//     share of the prompt the cache served, which bounds the impact;
//   - reuse poisons only when it cut the TTFT by MinImpact percent or more;
//     the rest is counted as chance, and a reuse whose impact the fit's
//     95 % interval puts on both sides of MinImpact is uncertain (SUSPECT,
//     the run unchecked);
//   - its pattern: a repeat (the same prompt as an earlier one, by hash),
//     one of several identical copies in flight together (whichever the
//     server served first: it may be the later arrival), a near-repeat
//     (all but a tail of at most 32 tokens beyond a page and 5 % of the
//     prompt), else a shared prefix; requests linked by shared prefixes
//     form groups, and under --allow-shared-prefix auto a group of 3 or
//     more is the workload's;
//   - whether the tool measured it: the requests before the last ones its
//     result file counts are its warm-up, or, without the file, the load
//     tools' shape (copies of the first prompt sent together, or before a
//     flush, and sent again after); a warm-up's reuse is a finding, never
//     a poison;
//   - a poisoned request that sent cache_salt to /generate, on a server
//     whose reported release is not known to take it there (compat's
//     generate-cache-salt rule, as the salt method asks), is told so
//     (audit_salt.go).
//
// The run is POISONED when the poisoned requests move a figure it reports
// (the mean, median or p99 of TTFT or E2E over the measured requests, each
// with their saved time added back) by MinRunImpact or more, or at all
// under Strict; below, the finding and the fix (the tool's own flags when
// the command names it) leave it ok. The run's cache effect puts every
// request's TTFT and E2E beside the same with nothing cached (each request
// on its own), and CompareTool puts a load tool's own result file (Python's
// JSON, NaN and Infinity included) beside the truth of the requests it
// measured, each figure counted the tool's way (ITL per token or per
// event, as its backend counts it). What the audit could not check (no
// request, records let go, no cached tokens reported, answers it could not
// read) leaves the report and those requests unchecked, never ok.
package harness

// Package profile describes a simulated deployment — a model on given
// hardware — as a YAML file: its limits (context length, KV pool, page size,
// chunked prefill, batch bounds), what each scheduler iteration costs, and how
// speculative decoding accepts drafts. Every cost is a pure function of token
// counts and batch state, so the engine's timings are exact and a test can
// predict them.
//
// # Cost model
//
// One prefill chunk of m new tokens for a request whose KV already holds p
// tokens costs
//
//	overhead + per_token*m + attention*m*(p + m/2)
//
// (the last term is attention over the prefix and causally within the
// chunk; summed over the chunks of one prompt it is attention*n²/2 whatever
// the chunking, while each chunk pays one overhead). A prefill batch costs the
// sum of its chunks. One decode round over B running requests with contexts
// summing to C costs
//
//	step_overhead + per_seq*B + per_ctx_token*C
//
// and under speculative decoding one draft+verify round costs
// round_cost_factor times that, while each request gains k tokens,
// 1 <= k <= num_steps+1, with P(draft i accepted | drafts before it
// accepted) = accept_probs[i]. Measured tables (tokens -> seconds,
// interpolated piecewise-linearly and monotonically) may replace the
// per-token prefill terms or the per-context decode term; the built-in
// kimi-k2.6-rtx6000 needs one, since its measured decode rounds are not
// linear in context.
//
// # HiCache
//
// The hicache section is SGLang's hierarchical cache: its launch flags
// (enable, ratio, size_gb, write_policy, io_backend, mem_layout,
// storage_backend, storage_prefetch_policy, storage_backend_extra_config;
// RegisterFlags adds the --enable-hierarchical-cache and --hicache-* flags,
// and SGLang's normalization of the layout and I/O backend applies) and
// what its transfers cost: the model's KV bytes a token (kv), the
// device-host link (host_gbps, transfer_overhead_s) and the storage
// backend (storage_read_gbps, storage_write_gbps, storage_page_overhead_s).
// HostPoolTokens sizes the host pool as HostKVCache does, LoadBackSeconds
// overlaps a load back with a batch's compute layer by layer, and
// ParseStorageExtra reads the extra config's prefetch threshold and
// timeout as the release's HiRadixCache does (the prefetch-timeout rule
// sets the timeout's defaults and cap, and the policy's default). Every
// built-in profile carries the costs, from the datasheet figures its
// comments state; kimi-k2.6-rtx6000-hicache turns HiCache on.
//
// # Server behaviour
//
// add_bos_token makes every text prompt (/generate text, completion prompt
// strings, chat) begin with a BOS token, as a Llama tokenizer does
// (llama-8b-eagle3-h100 sets it): two prompts that differ from their first
// character still share that token in the cache. Prompts sent as input_ids
// are taken as they are.
//
// flush_busy_after_finish_s is how long the server stays busy for
// /flush_cache after an iteration that finished a request: SGLang's overlap
// scheduler, on by default, runs one more decode step with the finished
// request before it is idle. Each built-in profile sets one decode round of
// a lone short request of its model (default 4 ms, llama-8b-eagle3-h100
// 7.5 ms, kimi-k2.6-rtx6000 33 ms); --disable-overlap-schedule sets 0, as
// SGLang's flag removes the window; so does a release before the
// speculative-overlap rule (compat) for the algorithms it ran without the
// overlap scheduler: DFLASH, NGRAM, FROZEN_KV_MTP, and the EAGLE family with
// eagle_topk > 1 (OverlapOff). /server_info reports
// disable_overlap_schedule true when the overlap scheduler is off.
//
// # SGLang release
//
// sglang_version (or --sglang-version) names the SGLang release the
// deployment runs, one of compat.Known (compat.Default when absent); its
// compat.Rules decide the behaviours that changed between releases, and
// /server_info reports it. Under any speculative algorithm SGLang runs 48
// requests at once unless the launch gives a bound
// (SpeculativeMaxRunningRequests): a speculative profile without
// max_running_requests gets 48, and --speculative-algorithm on a profile
// without speculative decoding replaces the profile's bound (what SGLang
// derives without it) by 48 unless --max-running-requests is given.
//
// # Scheduling
//
// schedule_policy is SGLang's --schedule-policy, with its choices (fcfs,
// the default; lpm, dfs-weight, lof, random, routing-key; "priority" is
// refused as SGLang's scheduler refuses it), and the priority scheduling
// keys are its flags of those names (schedule.go); the engine applies
// them. The in-batch prefix caching thresholds are SGLang's environment
// variables IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD and
// IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD, 32 each when absent.
//
// # Output without max_tokens
//
// SGLang gives a chat completion without max_tokens the whole context
// budget (ctx - 2 - prompt tokens) and the model stops when it samples EOS.
// The mock never samples EOS, so max_output_tokens caps such a completion,
// standing in for where a real model stops; it defaults to
// DefaultMaxOutputTokens (4096). /v1/completions defaults to 16 and
// /generate to 128, as SGLang's do.
//
// # Files
//
// Built-in profiles are embedded from builtin/*.yaml. Unknown keys are
// errors that name the line and the keys the field could have been
// (CheckKeys, which scenarios' inline profiles use too); impossible values
// are errors that name the field and the value: a fraction for an integer
// field (context_length: 32768.5) is refused, not truncated, and so are
// costs whose largest iteration at the profile's limits would pass
// MaxIterationSeconds (a day), which keeps every modelled time far inside
// a time.Duration. Fields documents every field of a file, walking the
// Profile type, so the list is what Parse reads; `sglmock profiles
// --fields` prints it. The
// evaluator (Profile.Expect) predicts a lone request's TTFT, decode time and
// steady-state decode rate from the same functions the engine charges.
package profile

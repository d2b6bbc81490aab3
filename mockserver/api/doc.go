// Package api is sglmock's HTTP layer: SGLang's endpoints, JSON and
// Server-Sent Events, served with net/http over a simulated engine. Benchmark
// scripts written for real SGLang run against it unmodified.
//
// # Surface
//
// Native: /generate (text or input_ids, single or batch, stream or not),
// /flush_cache (GET/POST, ?timeout=), /health, /health_generate,
// /model_info and /get_model_info, /server_info and /get_server_info,
// /get_load and /v1/loads, /abort_request, /start_profile and
// /stop_profile, /tokenize and /detokenize (also under /v1), /ping, and
// /metrics with --enable-metrics. OpenAI: /v1/models, /v1/models/{model},
// /v1/completions, /v1/chat/completions. Old and new endpoint names both
// work, so clients of every SGLang era do.
//
// vLLM's render endpoints, which SGLang does not have:
// /v1/completions/render and /v1/chat/completions/render answer the token
// ids the server would prefill for a request (BOS and chat template
// included) in vLLM's GenerateRequest shape, without generating, so a
// router that tokenizes through them (the llm-d router's token-producer)
// hashes the blocks the replica's KV events announce. And vLLM's
// POST /reset_prefix_cache (dev mode's), so that `sglmock bench --backend
// vllm` can be rehearsed against the mock: 200 {"success": bool}, false
// while a request runs (see resetPrefixCache).
// The render body is parsed once and its sampling fields, repeated for
// every prompt, are bounded (64 KiB), so a render costs time and memory
// linear in its body; it stops when its client leaves. max_tokens is
// vLLM's get_max_tokens: at most the context left after the prompt,
// refused below 1 with vLLM's "max_tokens must be at least 1, got N." in
// vLLM's error envelope.
//
// Simulation: /sim/profile (active profile, speedup, and the tokens a
// decode round gives: their mean and distribution), /sim/expect (the
// model evaluator; its counts are bounded by the context length), /sim/requests (finished requests,
// each with its route, prompt hash, modelled TTFT and E2E, and its prefill
// cost as run beside the cost with nothing cached: audit's impact), /sim/requests/{rid}
// (a request's ground truth), /sim/flushes (flush history) and /sim/stats
// (load, cache size and lifetime hit rate), with the
// JSON of package sim. SGLang has none of these; the harness uses
// them when present. /server_info carries the profile and speedup under
// "sim"; the SGLang release the mock follows as "version" (as /v1/loads
// does); the launch arguments as SGLang's ServerArgs holds them
// (context_length, max_total_tokens and max_running_requests null unless
// given, max_running_requests 48 under speculative decoding);
// SGLang's "status" ("ready"); kv_events_config, the
// --kv-events-config JSON as given (null without KV events), as SGLang's
// server args do; and SGLang's kv_events descriptor (publisher,
// endpoint_host, endpoint_port_base, topic, block_size, dp_size), null
// unless a zmq publisher runs on a TCP port a router can dial.
//
// # Behaviour, as SGLang's
//
//   - Streams are "data: {json}\n\n" events ending with "data: [DONE]\n\n";
//     the first event comes out of prefill with the first token; native
//     events carry cumulative text and output_ids and meta_info in every
//     event; under speculative decoding one event carries several tokens.
//     stream_interval counts tokens: an event goes when the output's length
//     is 1 modulo the interval, and at the finish; an event whose tail could
//     start a stop string is held back, so streamed text never shrinks.
//     One stream loop serves both kinds (sse.go): events the engine
//     delivered together leave in one write, and the output's text is
//     decoded once, as its tokens come, so an OpenAI stream costs time
//     linear in its length.
//     meta_info carries reasoning_tokens (0: no reasoning parser) and
//     cached_tokens_details ({"device": N, "host": 0}, or null; under
//     HiCache the tiers, with "storage" and the backend's class when a
//     storage tier is on: hicache.go); the first
//     output a client gets (a stream's first event) has
//     response_sent_to_client_ts. Under --enable-metrics every event has
//     queue_time, forward_entry_time and prefill_finished_time, and the
//     last one request_received_ts, api_server_dispatch_finish_ts,
//     request_finished_ts and decode_throughput, as SGLang's time stats
//     give them: durations and rates in simulated seconds, timestamps the
//     wall times (seconds since the epoch) of the modelled moments. Under
//     speculative decoding the last event has SGLang's spec_* fields with
//     the aliases it keeps (spec_accepted_drafts, spec_proposed_drafts,
//     spec_accept_histogram); spec_correct_drafts_histogram grows to the
//     largest count of accepted drafts seen.
//     A streaming /generate sends its status line and headers at once,
//     before prefill, as SGLang returns its StreamingResponse first.
//     OpenAI streams carry text deltas and, as SGLang kick-starts their
//     generators, send nothing (not even the status line) before the first
//     output; a chat choice's role delta goes out with its first content,
//     and the empty deltas carrying finish_reason follow the last output.
//     An aborted request ends its stream with finish_reason "abort" when
//     the abort has no HTTP status (a user's, a disconnect's, shutdown's).
//     The scheduler's aborts carry one, and SGLang's tokenizer manager
//     answers them as errors (_handle_abort_finish_reason): the last
//     request of a decode batch that runs out of memory even alone (500)
//     gets 500 {"detail": ...} when it waits for one answer, a
//     finish_reason with status_code 500 in a /generate stream, and in an
//     OpenAI stream a data: {"error": {...}} event (type
//     INTERNAL_SERVER_ERROR, written as json.dumps writes it) that ends
//     the choices; a prompt of max_req_input_len tokens or more, which the
//     scheduler queues already aborted (400), gets in an OpenAI stream HTTP
//     200, that error event (type BAD_REQUEST), the usage chunk if asked
//     for (one prompt token) and [DONE]. Chat deltas
//     carry "reasoning_content": null; completions chunks carry "usage":
//     null, and their final usage chunk drops a null prompt_tokens_details
//     (exclude_none), while chat's keeps it. return_cached_tokens_details
//     adds SGLang's "sglext": {"cached_tokens_details": {...}} (the first
//     sequence's, when it has cached tokens, with or without
//     --enable-cache-report) to a response, and to a stream as a chunk of
//     its own with no choices, before the usage chunk.
//   - A request refused before scheduling gets 400: the validation envelope
//     {"object":"error",...,"code":400} for malformed bodies, {"error":
//     {"message"}} from /generate, the ErrorResponse with type
//     "BadRequestError" from /v1, streaming or not. A streaming /generate
//     refused inside its generator gets 200 with one error event and
//     [DONE], as SGLang's does.
//   - 401 {"error":"Unauthorized"} without the --api-key bearer token
//     (health checks and metrics are open); 404 {"detail":"Not Found"};
//     413 past the body limit; 408 for a body that stops arriving for
//     --body-timeout or, after it, comes slower than 1 MiB/s; 503 while
//     starting (until the warmup request finishes) and while shutting
//     down. An error repeats at most 256 bytes of a client's value (a
//     model name, a rid) and says how long it was. A body holding a NUL
//     byte is malformed JSON, as Python's parser says.
//   - /flush_cache, /reset_prefix_cache and /abort_request refuse, with
//     403, requests a browser sends for another site (Origin,
//     Sec-Fetch-Site), and browser requests whose Host is a name other
//     than a loopback name (localhost, *.localhost), the configured --host
//     or the machine's host name: a page that rebinds its own domain to
//     the server (DNS rebinding) cannot flush or abort. IP addresses are
//     always accepted, and so is any name from a client that is no browser
//     (a Kubernetes service). SGLang has no such guard.
//   - The prefix cache is partitioned by the pair (extra_key, cache_salt)
//     on every route, as SGLang's RadixKey since PR #30827: extra_key with
//     the LoRA adapter appended, as SGLang's Req builds it, and the salt
//     beside it, never concatenated; /generate takes cache_salt as a value
//     or a list per prompt. An empty salt is no salt; an empty extra_key is
//     a namespace of its own on /generate and none on the OpenAI routes.
//   - Parallel sampling (n > 1) is SGLang's: every copy is checked first,
//     then each prompt is prefilled by a request with max_new_tokens 0 and
//     a fresh rid (counted like any other), waited for, and only then are
//     the n copies sent, each under a fresh rid, each finding the prompt
//     cached. A client's rid names a sequence only when n is 1.
//   - Logprobs: return_logprob (with logprob_start_len, top_logprobs_num,
//     return_text_in_logprobs) fills meta_info's input_token_logprobs,
//     output_token_logprobs and, with alternatives, input_top_logprobs and
//     output_top_logprobs as SGLang's [logprob, id, text] tuples;
//     /v1/completions' logprobs and chat's logprobs and top_logprobs map
//     to them as serving_completions.py and serving_chat.py do, so echo
//     with logprobs starts them at the prompt's first token and reuses no
//     cache. The values are deterministic (see logprob.go); at most 20
//     alternatives per position.
//   - Output defaults: /generate 128 tokens, /v1/completions 16; a chat
//     without max_tokens (or max_completion_tokens) generates to the context
//     budget, context length - 2 - prompt tokens, as SGLang does, capped by
//     the profile's max_output_tokens (default 4096): SGLang's model stops
//     at EOS, which the mock never samples. max_completion_tokens past the
//     context length is refused with SGLang's message.
//   - Chat prompts (chat_template.go) are what SGLang's
//     _apply_jinja_template renders: each message as its model_dump (a
//     user message role and content only, null content ""), content parts
//     joined with a space for a "string" template and kept as a list for
//     an "openai" one, an assistant's tool-call arguments parsed, the tools
//     unless tool_choice is "none" (a named one alone; retried as bare
//     functions when the template fails), reasoning_effort then
//     chat_template_kwargs; a last assistant message is continued with
//     continue_final_message (its text after the rendered prompt), else
//     turned into a user message. The same prompt reaches /tokenize and the
//     render route.
//   - Limits: a prompt of max_req_input_len = context length - 6 tokens or
//     more is refused with the scheduler's message (400, or an OpenAI
//     stream's error event, above; /server_info reports that
//     max_req_input_len); ids past the vocabulary and a rid
//     already running get SGLang's messages. A length that, with the
//     prompt, passes the context length is refused with SGLang's total,
//     exact even near 2^63. Integer fields decode exactly: a literal
//     outside int64, which Python would hold, is refused with "<field>
//     must be at most 9223372036854775807, got <literal>." The mock's
//     own bounds, which SGLang does not have, keep one request from
//     sizing unbounded work:
//     at most 2048 sequences (prompts x n, n at most 128) that together may
//     generate at most 1,048,576 tokens (each sequence counted at its
//     max_new_tokens, at most the context length) and return at most
//     2,097,152 logprob entries (positions x (1 + top_logprobs_num)), so
//     one request holds at most some 100 MiB of output and 270 MiB of
//     logprobs (measured); past them it is refused before anything runs,
//     with the numbers; 32 stop strings
//     of at most 256 bytes, 1024 stop_token_ids, a rid of 512 bytes and a
//     cache namespace (extra_key, cache_salt and lora_path) of 1024; a
//     text prompt is tokenized no further than the context length, then
//     only counted, before it is refused.
//   - Loads: /get_load is SGLang's list (num_tokens = used + waiting
//     tokens, num_pending_tokens, ts_tic in simulated seconds); /v1/loads
//     is its object, honours ?include= and ?dp_rank=, and
//     ?format=prometheus gives the same as gauges. The request prefilled
//     in chunks is outside the running batch, as in SGLang. Each has one
//     entry a DP rank; ?dp_rank= keeps the entry with that dp_rank, none
//     for a rank the server lacks. With the load-snapshot rule (PR #26348)
//     the object is timestamp, version and the loads (LoadSnapshot.to_dict:
//     dp_rank 0 on a server of one rank; memory, speculative,
//     disaggregation and queues sections); before it a one-rank load has
//     no dp_rank (None: ?dp_rank=0 keeps nothing, the gauges' label is
//     "None", /get_load says null), and the object adds dp_rank_count and
//     the aggregate, each load num_total_reqs.
//   - DP ranks (dp.go): routed_dp_rank and data_parallel_rank, its
//     deprecated name, on every route, the OpenAI routes'
//     X-Data-Parallel-Rank header over them; meta_info.dp_rank (null on a
//     deployment of one rank, whose scheduler has none), and /sim/'s
//     dp_rank, on a deployment of several ranks; internal_states one a
//     rank; each rank's scheduler metrics labelled with its dp_rank.
//   - /abort_request aborts every active request whose rid starts with
//     the given one (which must itself be active), as SGLang: a request in
//     a batch ends with {"type":"abort","message":"Aborted",
//     "status_code":null,"err_type":null}, a queued one with {"type":
//     "abort","message":"Abort in waiting queue"} and a meta_info of id,
//     finish_reason, weight_version, e2e_latency and completion_tokens.
//   - /flush_cache answers SGLang's plain-text bodies without a
//     Content-Type: "Flush cache failed.\n" for a busy server,
//     "Timed out waiting for idle state." and "Another flush_cache is
//     already in progress." (no newline) for a waiting flush. A waiting
//     flush whose client leaves still runs once the server is idle, as
//     SGLang's scheduler keeps it: /sim/flushes lists it as pending, with
//     the client's address and when it left, and the log says when it
//     runs. A timeout past a Duration's range (about 9.2e9 s) waits for
//     idle. With several DP ranks the answer is the first rank's, once
//     every rank answered (engine.Flush); /sim/flushes has each rank's.
//   - A client that disconnects has its requests aborted as SGLang's
//     tokenizer manager does it: a stream's 2 s later (simulated), a
//     waiting client's when its 4 s wait on the request times out or its
//     next 50-token output goes out; until then they run, hold their KV
//     and batch slot, and keep the server busy.
//   - /metrics (--enable-metrics) has SGLang's names, labels and buckets
//     (metrics_collector.py): the tokenizer manager's counters and
//     histograms (the latencies; prompt, uncached prompt and generation
//     tokens per request; spec_verify_calls_total) carry model_name and
//     engine_type ("unified"), cached_tokens_total its cache_source
//     ("device"); the scheduler's gauges, counters (realtime tokens,
//     retractions) and queue time carry engine_type, model_name,
//     moe_ep_rank, pp_rank and tp_rank (and dp_rank, one series a rank,
//     with several DP ranks); the radix cache's evicted_tokens_total and
//     eviction_duration_seconds, and under HiCache load_back_tokens_total
//     and load_back_duration_seconds, carry cache_type, the tree cache's
//     class ("RadixCache", "HiRadixCache"), one series for every rank (the
//     sum, as SGLang's multiprocess registry adds them), each eviction and
//     load back observed as 0 s (SGLang times the host's work, not the
//     transfer); HiCache's host pool gauges are the scheduler's, and the
//     storage counters and histograms (prefetch_pgs, backup_pgs,
//     prefetch_bandwidth, backup_bandwidth: one observation a storage
//     batch, for the backends that report them, engine.StorageMetrics)
//     carry StorageMetricsCollector's labels, one series an attention-DP
//     rank. The scheduler's gauges are what its metrics
//     reporter last logged (each prefill batch, every decode-log interval),
//     token_usage rounded to two decimals; a counter SGLang increments only
//     by a positive amount has no series before its first increment. The warmup
//     request counts, an ordinary request on SGLang; /health_generate's
//     does not (log_metrics=false). Neither is listed under /sim/requests.
//   - A client that stops reading its answer or stream is cut off once a
//     write makes no progress for --stall-timeout (30 s, wall time), its
//     requests aborted at once (a long answer goes out 64 KiB a write, so
//     one read slowly but steadily is not cut), and at most 64 writes may
//     stay blocked past a second (the longest-blocked is cut first):
//     stall.go. Each is counted (stalled_streams_aborted in /sim/stats,
//     sglmock:stalled_streams_aborted_total in /metrics, with the KV
//     event publisher's drops). SGLang waits forever.
//   - The server as a whole has budgets, in bytes, for what its clients
//     can make it hold (budget.go), besides each request's own bounds:
//     request bodies in flight (--body-budget-bytes, 512 MiB; a render's
//     token ids count with its body), charged from the declared
//     Content-Length before a byte is read, the buffer grown to it once,
//     and past the budget 503 with Retry-After before more of the body is
//     read (the rest is thrown away as it arrives); and what
//     generation requests hold until their answers are written
//     (--answer-budget-bytes, 512 MiB: 128 bytes an output token, 4 bytes
//     a prompt token per sequence, the write buffer), past which a request
//     waits its turn, first come first served, as SGLang's requests queue
//     behind a full batch (the wait is its queue time). A long answer is
//     encoded as it is written, 64 KiB at a time from the request's own
//     outputs, its logprobs computed as they go out (answer.go), so a
//     reader that reads slowly but steadily holds one write buffer and its
//     request's charge; while a request waits for room, the reader whose
//     complete answer has pinned the most bytes for the longest (10 s or
//     more) is cut off. /sim/stats' memory and /metrics' sglmock:*_budget_*
//     series count it all. SGLang has no such budgets.
//   - Tokenizing stops when the client leaves, on every route that
//     tokenizes a text (the tokenizer looks at the request's context every
//     64 KiB of text).
//   - Long CPU work (encoding a long answer, tokenizing, decoding a body)
//     runs in GOMAXPROCS-1 slots, taken in turn every 64 KiB of work and
//     given back while a client is slow to read (cpu.go): however many
//     clients ask for long work, one core stays free for health checks,
//     new connections and short requests.
//   - Times in responses (e2e_latency, /sim/) are simulated seconds.
//
// # Layout
//
// server.go holds the server, its routes and the JSON helpers; errors.go
// every error's way to the wire (writeRefusal, flushMessage); budget.go the
// server-wide budgets; answer.go the answers encoded as they are written;
// cpu.go the slots long work shares the cores in. A generation
// request is parsed into a plan (generate_request.go, openai_request.go;
// plan.go submits it and collects its outputs), each sequence's output
// accumulates in an output (render.go), and the answers are rendered by
// generate_response.go and openai_response.go, stream chunks by chunk.go.
// sse.go writes events and runs the one stream loop both kinds of stream
// use; generate.go and openai.go are the handlers. router.go dispatches
// to them: exact paths and two parameter routes (/sim/requests/:rid,
// /v1/models/*model), the middleware (state gate, API key, body limits)
// before every answer, 405 with Allow, FastAPI's 307 for a toggled
// trailing slash. It is this package's own rather than gin: gin compiles
// its codecs (msgpack, BSON, TOML, YAML) and HTTP/3 into every build
// whether a route uses them or not: some 55 of the 200 CPU-seconds a
// fresh build of sglmock took, for a routing table this small.
package api

// Package engine is the simulated SGLang scheduler: it admits requests,
// batches them, charges each iteration what the profile's cost model says,
// and waits for that long on a clock that runs at a chosen speedup. Given a
// profile and a seed, its outputs and timings are exact.
//
// # Shape
//
// An unsynchronized core (scheduler) holds the state: the waiting queue
// and its schedule policy, the request being prefilled in chunks, the running (decoding)
// batch, the KV pool and the radix cache; a deployment of several DP
// ranks has one a rank (see DP ranks). A thin shell (Engine) owns one
// goroutine that plans an iteration, waits until its modelled end on an
// absolute deadline, and applies it; calls from other goroutines run on that
// goroutine between steps, stamped with the time they were made (the core
// never reads a clock), so a request submitted during an iteration joins
// the next one, as on a GPU.
//
// # DP ranks
//
// A profile's dp_size makes the engine a deployment of that many DP
// ranks, each a scheduler of its own (its queue, running batch, KV pool
// and radix cache), in the one shell, on the one goroutine and clock. The
// KV pool is not divided: SGLang sizes each rank's pool from its own GPU,
// capped by --max-total-tokens, so each rank has max_total_tokens. A
// dispatcher (dispatch.go) puts each request on a rank as SGLang's
// DataParallelController does: a routed_dp_rank pins it (without moving
// the round-robin counter); otherwise round_robin takes turns, and
// total_requests and total_tokens take the least loaded rank by their
// budget, which counts each dispatch (one request, its prompt tokens) and
// takes each rank's own load after every batch it runs. The server's
// warmup, its prompt once a rank, goes through it like any other request.
//
// The ranks run in groups (group.go). Under DP attention all are one
// group: SGLang gathers every rank's batch before each forward pass
// (prepare_mlp_sync_batch), a rank with nothing runs an idle batch, and
// the MoE layers join their passes, so an iteration lasts as long as the
// slowest rank's batch, and a request reaching an idle rank waits for the
// iteration's end; under speculative decoding a prefill on any rank keeps
// the others from decoding (get_next_batch_to_run). Each rank then runs
// chunked_prefill_size / dp_size tokens a batch, max_running_requests /
// dp_size requests, and a token ratio scaled by 0.3, as SGLang's server
// args and model runner set them. Without DP attention each rank is a
// group of its own, a replica on its own timeline: the loop waits for the
// earliest iteration to end, and a call that gives an idle rank work
// starts it at once.
//
// Flush asks every rank, each answering as below, and returns the first
// answer once all have come, as SGLang's tokenizer manager returns the
// first of its FanOutCommunicator's results; ranks answering at the same
// moment come in rank order (rank 0 gets the request first and broadcasts
// it). FlushRecord.Ranks keeps every rank's answer: a 200 can hide a busy
// rank that refused. Under DP attention with the overlap scheduler on, a
// rank with nothing of its own is not idle for a flush while another rank
// runs: its idle batch sits in its result queue (is_fully_idle).
//
// The engine's surfaces stand for the whole deployment: Stats adds the
// ranks up (RankStats has each), a truth and each event carry the rank
// that ran the request, and each rank reports its cache to its own
// CacheEvents (Config.RankCacheEvents). With one rank everything is as it
// is without DP.
//
// # Scheduling, as SGLang does it
//
//   - A text prompt is tokenized on the caller's goroutine with the
//     server's tokenizer (the built-in one, or a model's own), with the
//     special tokens it adds around a prompt (a BOS); a chat, whose
//     template writes its own, without. One that does not fit the context
//     length is only counted past it, and refused. Validation is SGLang's, with its
//     messages, then the mock's bounds on what one request may ask for
//     (rid, namespace, stop strings and ids: see MaxRIDBytes and the
//     rest), so no request sizes an unbounded loop or record.
//   - An iteration is a prefill batch when any waiting prompt can be
//     admitted, else a decode round over every running request (prefill
//     first is SGLang's default).
//   - A prefill batch takes the chunked request's next chunk, then waiting
//     requests in the order the schedule policy gives (below), up to
//     max_prefill_tokens and
//     chunked_prefill_size tokens and max_running_requests requests. A prompt
//     that does not fit the rest of the budget is cut into a chunk and
//     finished in later iterations; with chunking off a prompt runs whole.
//   - Admission matches the prompt's reusable prefix (all but its last
//     token, page-floored, capped by logprob_start_len; one token less
//     under EAGLE-family speculative decoding, whose cache SGLang keys on
//     bigrams) and locks it; the cached tokens are counted once, here.
//     After every chunk the prompt so far is inserted and the lock moves to
//     the new end, so later requests reuse it at once; chunk self-hits are
//     never counted.
//   - The KV pool holds the cache's tokens and every request's private
//     tokens. An allocation that does not fit the free slots evicts
//     unlocked cache leaves, least recently used first, for the shortfall
//     only (SGLang's evict_from_tree_cache).
//   - Admission is SGLang's PrefillAdder: max_new_tokens is first clipped
//     to the context and the pool (init_req_max_new_tokens). A running
//     request is expected to need min(remaining output, 4096) x a token
//     ratio that starts at 0.7, decays by (0.7-0.098)/600 every decode
//     batch to 0.098 and resets when the server is idle; a new request
//     needs its extend, min(max_new_tokens, 4096) and one page strictly
//     below the free and evictable KV less those expectations and what the
//     batch already reserved. A request that does not fit waits at the
//     head of the queue, and no prefill is tried again until a request
//     finishes or is retracted.
//   - Without the radix cache an ignore_eos request is admitted as
//     SGLang's add_one_req_ignore_eos does: its page-ceiled extend must
//     fit, and the batch (running and admitted requests and this one),
//     sorted by the tokens each may still generate (all of max_new_tokens
//     under ignore_eos, else times the ratio), must be able to run to its
//     end: for every suffix of k requests, the free KV plus what the ones
//     before it release must exceed k x (its tokens left + 1). Such a
//     batch never needs a retraction.
//   - Running requests can therefore outgrow the pool. When a decode step
//     does not fit (one token a request, or under speculative decoding
//     SGLang's reserve of 2 x max(num_steps x topk, num_draft_tokens); the
//     mock holds no over-allocated draft slots between rounds), SGLang's
//     retract_decode frees requests, the fewest
//     outputs (then the longest prompt) first, or under speculative
//     decoding the back of the batch first (SGLang sorts only without it),
//     until it fits or one is left: their KV is freed without caching
//     their output, they go to the back of the queue with their output
//     kept, and are prefilled again, prompt and output, when readmitted
//     (counted in num_retractions; hits then are not cached tokens). The
//     ratio becomes the remaining requests' (output + 20 each) /
//     (max_new_tokens + 1). A last request that still does not fit is
//     aborted with status 500 and SGLang's "Out of memory even after
//     retracting all other requests..." (OutOfMemoryMessage), its KV freed
//     as a retracted request's, without caching its output.
//   - The first output token comes out of prefill. Each decode round gives
//     every running request one token, or k tokens (1 <= k <= num_steps+1)
//     under speculative decoding, drawn from the request's own RNG seeded by
//     (profile seed, rid), so concurrency never changes a request's draws.
//   - A request finishes on max_new_tokens, a stop token id or a stop
//     string (SGLang's order). Its prompt and output, but the last token,
//     go into the cache; its lock and private KV are released. An abort
//     does the same when the step in flight ends, whose tokens come with
//     it, with SGLang's "Aborted"; a request only queued ends at once,
//     "Abort in waiting queue". A prompt aborted while a chunk other than
//     its last is in flight runs no later chunk, and that chunk is freed
//     without being cached: only the chunks before it stay in the cache
//     (SGLang's process_pending_chunked_abort, PR #28086). Abort(rid) takes every request whose rid starts
//     with an active rid, as SGLang's scheduler matches them.
//   - A client that leaves (Stream.Disconnect) has its request aborted
//     when SGLang's tokenizer manager would: a stream's 2 s later, a
//     waiting client's when its 4 s wait on the request times out or its
//     next 50-token output is sent. Until then it runs.
//   - A flush succeeds only when nothing is queued, running or in flight
//     and the last iteration that finished a request has settled (the
//     profile's flush_busy_after_finish_s: SGLang's overlap scheduler still
//     holds that batch). SGLang's precedence: a waiting flush refuses every
//     new one; a flush without timeout flushes or fails at once; with a
//     timeout it waits for idle, checked at every boundary and when the
//     server settles, until its simulated deadline.
//
// # HiCache
//
// With a profile whose hicache section is enabled, the scheduler runs
// SGLang's hierarchical cache (HiRadixCache, HiCacheController) and the
// tree gets a host tier (radixcache.EnableHost): which tier holds each node
// and the hit counts and write policy are the tree's; what each transfer
// costs, and when it ends, is the scheduler's (hicache.go), on the
// engine's one clock:
//
//   - A write-through the tree starts goes on the write stream, one after
//     another, each hicache.HostTransferSeconds long; it ends, releasing its
//     node's lock and announcing its host copy, at the first boundary at or
//     after that, as check_hicache_events acks it. A write-back is done
//     while the device evicts, and the iteration being planned waits for it.
//   - At admission a host hit of at least 10 tokens is loaded back: the
//     device evicts for all of it if it must (load_back's rule), and the
//     prefill batch's duration overlaps the transfer with its compute layer
//     by layer (LoadBackSeconds). Without chunked prefill a request whose
//     extend less its host hit does not fit what max_prefill_tokens leaves
//     is refused first (add_one_req's order), its hit left on the host.
//   - With a storage tier (mockserver/hicache: a directory of page files,
//     or an in-process store standing in for the distributed backends), a
//     node whose write-through ended is backed up on the backup thread, one
//     backup at a time, each page reaching the store when its write ends;
//     a request is looked up in storage when it arrives and the pages found
//     in a row are read on the prefetch thread; the scheduler skips a
//     waiting request (SGLang's continue) until its policy lets its
//     prefetch stop, then inserts what was read as host-only nodes.
//     Storage I/O goes in batches of 128 pages (storage_batch_size): a
//     zero-copy backend's batch reaches the store, or the host, whole, and
//     a backup's batch puts only the pages the store lacked when the backup
//     began. Each batch is an observation of SGLang's storage histograms
//     (HiCacheStats.Storage: pages, and bandwidth over its modelled I/O
//     time) for the backends whose get_stats reports them (Mooncake, 3FS
//     and the memory store, hicache.Metrics), shown as its I/O ends, as
//     SGLang's scheduler logs them on every pass of its loop.
//   - A flush waits for no write-through, backup or prefetch to be in
//     flight, and empties the device and host tiers, never storage
//     (ClearStorage does). The loop wakes at each transfer's end.
//   - Each DP rank has its own host pool, transfers and prefetches; the
//     ranks share one storage tier, as SGLang's ranks share a backend:
//     a rank's lookup finds every page any rank's backup has written by
//     then, and ClearStorage clears it once.
//   - Where SGLang's code does something odd, the mock does too: a node
//     split while it is written through keeps the write in its lower part,
//     so the upper part's host copy is never announced nor backed up to
//     storage; a node an insertion brings back to the device is not
//     announced; a host hit too short to load back still counts as host in
//     the tiers. Where SGLang would crash or use memory it freed, the mock
//     does something safe instead and says so (radixcache's deleteSubtree;
//     a load back protects the host copies it reads while the device
//     evicts for it; a prefetch that had to shrink to the host pool's room
//     looks up no more pages than it has room for).
//
// # Schedule policy
//
// Before each prefill batch a rank orders its own waiting queue, as
// SGLang's SchedulePolicy.calc_priority does (policy.go), in place, so a
// stable sort starts from the last order; only requests that have arrived
// on the modelled clock take part, ahead of the rest. It runs only when
// SGLang's get_new_batch_prefill gets that far: not while the batch is
// full, unless priority preemption may make room.
//
//   - fcfs keeps the order of arrival; with priority scheduling, the
//     priority (higher values first, or lower with
//     schedule_low_priority_values_first), then the order the requests
//     entered the queue (a retracted or preempted request enters again).
//   - lpm matches every waiting request's whole sequence in the radix
//     cache (a match like any other: it splits nodes and makes them
//     recently used) and takes the longest match first, capped at what the
//     request may reuse (num_matched_prefix_tokens; under HiCache the
//     device and host hits together, loading nothing back). A request
//     whose device match is at most in_batch_prefix_caching_check_threshold
//     (32) tokens is checked against the waiting requests checked before
//     it: if it shares
//     in_batch_prefix_caching_deprioritize_threshold (32) tokens or more
//     with one, which is about to compute them, it goes to the back, so
//     that a later batch finds them cached (in-batch prefix caching).
//     Above 128 waiting requests lpm neither matches nor sorts. Without
//     the radix cache lpm and dfs-weight are fcfs.
//   - dfs-weight orders by the same matches: a depth-first walk of the
//     cache, the subtree that more waiting requests end in first, ties in
//     the order the subtrees were added (radixcache.DFSWeightOrder).
//   - lof takes the largest max_new_tokens first (after the priority, under
//     priority scheduling); random shuffles the queue as Python's
//     random.shuffle does, from a generator seeded with the profile's seed
//     and the rank; routing-key takes first the requests whose routing key
//     the running batch holds most.
//   - Under priority scheduling a request without a priority is the least
//     preferred (or has default_priority_value); without it, a priority is
//     ignored, or aborted with 503 under abort_on_priority_when_disabled.
//     When the running batch is full, a waiting request may preempt running
//     ones (PrefillAdder.preempt_to_schedule): least preferred first, the
//     last into the queue on a tie, each more than
//     priority_scheduling_preemption_threshold (10) below it, until their
//     expected output covers what it needs beyond the free KV; they are
//     released as a retraction releases a request and queued again when
//     the batch is formed (SGLang forgets them when the batch ends up
//     empty; the mock queues them). A request whose prefetch from storage
//     goes on preempts nobody: SGLang's loop tries the preemption before
//     it checks the prefetch, then passes the request over, so its victims
//     make room for another or, in an empty batch, are lost.
//
// # Time
//
// The engine's clock (Config.Clock, the system clock by default) times the
// speedup gives the simulated time at which a request arrives or a call is
// made; the modelled timeline is the model's alone. While the engine is
// busy, each iteration starts exactly where the last one ended; only an
// idle engine takes its start from a request's arrival or a call, and a
// request that reaches a busy engine is admitted at the first boundary at
// or after its arrival. The loop waits on the wall clock for each modelled
// end, so a host stall or a late timer delays delivery, which is the
// client's measurement error, and never moves the ground truth. Costs are
// rounded to whole nanoseconds once per iteration and added, so under
// testing/synctest (speedup 1) a request's TTFT is exactly its modelled
// prefill. In real time, SpinWindow makes wake-ups precise: the loop polls
// the clock for the last stretch of a wait, but for at most a quarter of
// the wall time (maxSpinShare), so at a high speedup, where every wait is
// that short, it sleeps through the rest instead of taking a core.
//
// # Reporting
//
// What the engine logs and reports follows SGLang's metrics reporter: a
// "Prefill batch, ..." line per prefill batch (which sets the cache hit
// rate) and a "Decode batch, ..." line every decode-log interval, which
// takes the decode throughput since the last one, folds the interval's
// speculative acceptance into the totals /server_info averages, and zeroes
// the hit rate. Recording a figure and logging it are separate steps: the
// decode line is written at most once per 50 ms of wall time at the
// engine's speedup, so a profile that costs nothing does not write one
// every few microseconds (SGLang's GPU never runs 40 batches that fast). A
// flush resets the decode-batch count and the speculative totals, not the
// throughput or the hit rate.
//
// # KV events
//
// With Config.CacheEvents the radix cache reports every page it stores,
// evicts or clears (radixcache.Observer), and the engine asks for the
// gathered events to be published where SGLang's scheduler publishes them:
// after each prefill batch, at each decode-log interval and when it goes
// idle, stamped with the wall time of that modelled moment. CachePages
// lists the pages with their block hashes. Under HiCache the events name
// the tier (radixcache.TierObserver) from release 0.5.11 on (the
// host-kv-events rule, SGLang PR #22894); before it the host tier is
// silent and a node leaving the tree from the host is removed from the
// device (radixcache.HostTier.UntieredEvents).
//
// # Ground truth
//
// Every request records its timeline — arrival, admission, each prefill
// chunk, each decode round, finish — with the modelled durations, the cached
// tokens and the request whose prefix it reused. The last event and
// Config.OnFinish carry it with every round. The engine then stores a
// compact copy for Truth and Truths: back-to-back rounds in the same batch
// size with the same gain become one run (RoundRecord.Count), whose
// duration is their sum, so every sum stays exact and a long request takes
// a few records. The store is bounded by count and by the bytes its truths
// hold (Truth.Bytes; Config.TruthBytes, 256 MiB by default), the oldest
// going first; a truth keeps no cache namespace.
package engine

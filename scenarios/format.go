package scenarios

// Format describes a scenario file, for people: the keys, the actions, the
// expectations, and the figures each kind of step has. "sglmock scenario
// format" prints it; a test checks that it names every key the decoder
// takes and every figure a step has.
const Format = `A scenario file is YAML: a trap, the profile of the mock it runs against, and
steps, each one action and what its result must meet.

name: cache-poisoning      # lower-case, digits, dashes; default: the file's name
description: |             # the trap, and why it matters on real hardware
  ...
profile: kimi-k2.6-rtx6000 # a built-in profile, or a mapping of profile keys:
#   profile: {base: default, max_total_tokens: 40000, decode: {per_seq_s: 0.001}}
#   merged key by key over base ("default" when absent)
speedup: 20                # what sglmock scenario run serves the mock at
steps:
  - name: naive            # unique in the file
    note: ...              # optional: what the step shows
    twopoint: {...}        # one action, see below
    expect: [...]          # optional: what its result must meet

The actions, one a step:

twopoint:    a two-point measurement (as sglmock bench twopoint), one method
  ctx: [1024:1407, 8192]   # TOKENS or REQ:TOKENS (the row's label)
  method: naive            # naive, flush, nonce, flush+nonce, salt
  a: 1, b: 17, repeat: 1, nonce_position: start, allow_shared_prefix: 0
  flush_only_between_legs: false   # a flush before leg b only
  flush: {retries: 3, retry_wait_s: 0.1, timeout_s: 0}   # the server's seconds
stream:      a streaming measurement (as sglmock bench stream)
  ctx, max_new_tokens, no_flush, allow_shared_prefix, flush
flush:       one POST /flush_cache: {timeout_s: 0}
start_load:  background streams: {name, streams, prompt_tokens, max_new_tokens,
  delay_s: 0} (each its own prompt; started one after the other, so in a fixed
  order; with delay_s, that many simulated seconds later, while the next steps run)
stop_load:   {name, abort: false}: wait for them to finish, or disconnect
  them (the server aborts each 2 s later, as SGLang does)
raw:         one request where no method does it (n > 1, say):
  {method: POST, path: /generate, prompt_tokens: 4000, body: {...}}
  (prompt_tokens puts a fresh prompt of that many ids in input_ids)
  prompts: [{tokens: 1024}, {tokens: 1024, shared: 600}]: a batch to
  /generate, fresh for the run, the first shared ids of each the same
wait:        {seconds: 0.5}, simulated
restart:     {}: stop the server and start it again on the same profile, as a
  restart of its process would: HiCache's file storage tier stays, every other
  cache is empty (no load may be running)

The expectations, one a list item:

expect:
  - verdict: POISONED      # ok, SUSPECT or POISONED
    cause: leg b reused    # optional: text one of the causes contains
    figures: [decode]      # optional: the verdict of these figures only
                           # (ttft, prefill, decode), and a cause of theirs
  - figure: decode_err     # a figure of the row, a ratio "X / Y", an absolute value "|X|"
    min: -0.01             # min and/or max, or equals, or defined: true|false
    max: 0.01
    real_time: {min: -0.05, max: 0.05}   # the bounds in real time, if wider
  - flush: b               # a, b or stream: the flush before that leg
    status: 400            # its last answer; body: exact text; tries: N (0: none)
  - status: 400            # a flush or raw step's answer
  - body: "Flush cache failed.\n"        # exact; body_contains: a part

verdict, figure and flush take ctx: [1024] to check some rows only, and a
figure of a raw batch prompt: [2, 3]; by default an expectation must hold
for every row of its step (every context, every copy or prompt of a raw
request). The figures of each kind of step:

twopoint   prompt_tok ttft_s prefill_tok_s decode_tok_s s_per_out_tok t_a t_b
           cached_a cached_b runs spread rank_a rank_b (the legs' DP ranks),
           cached_a_host cached_a_storage cached_b_host cached_b_storage
           (HiCache's cached_tokens_details) load_back_b_s (leg b's batch
           beyond its compute: the load back from the host), and the truth's
stream     prompt_tok ttft_s prefill_tok_s decode_tok_s s_per_out_tok events
           tokens_per_event event_itl_s event_itl_err cached, and the truth's
flush      status seconds running queued refused_ranks (from the server's record:
           on several DP ranks the answer is the first rank's)
raw        status seconds copies prompt_tokens cached_tokens completion_tokens
           input_tok_s (the copies' prompt tokens summed, over the time)
           server_requests computed_tokens computed_tok_s (from /sim/requests);
           with prompts, ttft_s (each prompt's, from /sim/requests)
stop_load  finished aborted
truth      (the modelled truth, of twopoint and stream rows) ttft_err decode_err
           ttft_bias decode_bias ttft_true_s decode_true_tok_s ttft_cold_s
           decode_steady_tok_s

Decoding is strict: an unknown key, a value of the wrong kind or out of range,
an expectation its step cannot meet, and an inline profile key or value the
profile refuses are errors that name the file, the line and the field
("x.yaml:12: steps[1].twopoint.method: ..."). The built-in scenarios
(sglmock scenario list) are examples to start from.
`

// Package calibrate fits a profile's cost model to measured two-point rows,
// so the mock runs at the speed of a deployment someone measured.
//
// # Input
//
// A row is one context of a two-point sweep: a prompt of prompt_tok tokens
// sent as leg a (max_new_tokens a) and leg b (max_new_tokens b), taking
// t_a and t_b seconds end to end. Leg a is cold. Leg b is cold too, unless
// b_cached says the server served its prompt from the prefix cache (the
// original benchmark's naive run): then it computed only what it did not
// reuse, which an optional cached_b column gives in tokens (else the
// prompt's reusable prefix, all but its last page). The CSV that `sglmock bench --csv` writes
// has these columns, and cached_b among the others:
//
//	ctx_req,prompt_tok,t_a,t_b,a,b,b_cached
//
// bench's CSV also says what it found of each row, and Usable drops the
// rows whose legs were served from the cache other than as the row says:
// a_cached true (leg a reused more than every prompt shares: cached_a gives
// the count), or a POISONED verdict for any other reason than the leg b
// its b_cached declares. The original benchmark's naive rows (leg b
// cached, b_cached true, leg a cold) are the one legitimate case. Rows
// bench found SUSPECT are fitted, and the command names them.
//
// Input is bounded: at most 100,000 rows of at most 64 KiB a line, every
// count compared without sums that could overflow. Every error about the
// rows is ErrBadInput (the command exits 2 on it). The fit's cost is
// linear in the rows: the least squares are reduced once to their
// triangular factor, and the tables are fitted through at most 1,024
// pooled legs and keep at most 64 points.
//
// # Model
//
// Both legs are predicted by the profile's own evaluator (Profile.Expect):
// the prefill chunks of the computed tokens, then the expected decode rounds
// of the remaining output under the base profile's speculative acceptance.
// Every prediction is linear in five coefficients,
//
//	prefill: overhead_s (per chunk), per_token_s, attention_s
//	decode:  step_overhead_s (per round, per_seq_s of the base included),
//	         per_ctx_token_s
//
// so the fit is a least-squares problem over both legs of every row,
// weighted by 1/t so that each time counts by its relative error, with the
// coefficients held >= 0. When the formulas leave a residual above 5 % the
// fit switches that part to a measured table (prefill.table,
// decode.ctx_table) through the rows' points, made monotone. A fit with as
// many parameters as distinct legs (three rows: three prefill coefficients
// and a table of three points) passes through every row: its residual is 0
// by construction, and the report says that it checks nothing. Everything else
// (limits, page size, chunking, speculative decoding) comes from the base
// profile, which must describe the deployment measured.
package calibrate

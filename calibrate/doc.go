// Package calibrate fits a profile's cost model to measured two-point rows,
// so the mock runs at the speed of a deployment someone measured, and says
// how well the fitted profile predicts what it was not fitted to.
//
// # Input
//
// A row is one context of a two-point sweep: a prompt of prompt_tok tokens
// sent as leg a (max_new_tokens a) and leg b (max_new_tokens b), taking
// t_a and t_b seconds end to end. The CSV that `sglmock bench --csv`
// writes has these columns first,
//
//	ctx_req,prompt_tok,t_a,t_b,a,b,b_cached
//
// and then what bench found of each row: cached_a and cached_b (what the
// legs reused), a_cached, method, runs and spread (the row's times are the
// medians of runs runs; spread is (max-min)/median of their decode rate,
// or of t_a when the row has no decode rate), verdict and cause. The JSON
// report of `bench twopoint --json` has every run's legs, each with its
// own time and reuse (ReadJSON, FromReport); `bench --calibrate-after`
// hands its report over in memory.
//
// # What each leg measured
//
// A leg is a prefill of the tokens it did not reuse after those it did,
// then its decode, and the fit uses every leg for what it measured:
// a cold leg a the prefill of its prompt, a leg b that reused all but one
// token (a naive row's) the cost of prefilling that one token after the
// cached rest (about one chunk's overhead) before its decode, a leg a
// served from the cache in its one run likewise. From the JSON each run's
// leg is taken apart by what it reused, so a naive row's first run (cold)
// and second (cached) are two measurements. What cannot be told apart is
// left out, and the report says why: a CSV median over runs whose leg a
// was cold in some and cached in others, and a POISONED row whose server
// did not say what its legs reused. The report names what each row's legs
// measured and, for the formulas, the coefficient each row determines
// most (how much its uncertainty grows without the row).
//
// # Noise
//
// Each leg is weighed, and its residual judged, by its standard error:
// how far the median of its runs may be from that of many. A leg's own
// runs give the relative variance of one run: its runs' sample variance
// (JSON), or, from the CSV, the spread of the decode rate for leg b (the
// spread of t_b - t_a, so not when leg a was cached in some run) and the
// spread of t_a for leg a of a row without a decode rate; two runs give
// their standard deviation exactly (the range over √2), more the range
// over d2(n), the expected range of n normal draws. Two runs are one degree
// of freedom, so each leg's variance is pooled with its kind's (legs of
// one token, a prefill alone; legs that decode), the kind's counting for
// priorDoF degrees of freedom; the standard error of a median of n runs is
// 1.2533 times that over √n, as bench reckons it; a kind that no row
// measured is taken as known to ±Tolerance (95 %); no leg is taken as known
// better than minNoise.
//
// # Model and fit
//
// Both legs are predicted by the profile's own evaluator (Profile.Expect):
// the prefill chunks of the computed tokens, then the expected decode
// rounds of the remaining output under the base profile's speculative
// acceptance. Every prediction is linear in five coefficients,
//
//	prefill: overhead_s (per chunk), per_token_s, attention_s
//	decode:  step_overhead_s + per_seq_s (per round), per_ctx_token_s
//
// fitted by least squares weighted by each leg's standard error, with the
// coefficients held >= 0, through the normal equations (gram): every step
// is linear in the rows. The five must be told apart by the legs (cold prefills at three
// prompt sizes or more, legs that decode), or the fit refuses the rows.
// The covariance of the coefficients (the inverse of the normal equations,
// scaled up by χ²/DoF when the residuals are larger than the noise says)
// gives each one's 95 % half-width and the uncertainty of a prediction.
//
// # Formula or table
//
// The formulas are kept unless the χ² of the residuals (each over its
// standard error) passes the Confidence quantile of a χ² of legs -
// parameters degrees of freedom. Then the part that misfits may become a
// measured table (prefill.table, decode.ctx_table) through the rows'
// points, weighted and made monotone, if the rows have more distinct legs
// than the table's forms have parameters, and only if the table takes
// more from the χ² than its extra parameters would take from noise alone
// (a likelihood-ratio test at the same level). A table with as many
// parameters as legs passes through every row and predicts nothing between
// them; Options.Table (--table) asks for tables all the same.
//
// # How well it predicts
//
// Each prompt size is left out in turn, the same forms fitted to the
// others, and its legs predicted. Nothing of the size left out reaches
// that fit: when its legs showed a spread of their own, the noise is
// pooled again without them before the others are weighed; when they did
// not, the others' noise is unchanged and the fit is that of the normal
// equations less the size's legs. The largest error is the profile's
// stated accuracy (Result.Accuracy, the profile's calibration.accuracy and
// comment), with the largest inside the measured range beside it. With
// three prompt sizes there is none to leave out, and the report says how
// many more are needed and which. Predictions at Options.Predict (default:
// the longest prompt the base takes) carry their uncertainty and say how
// far past the largest measured prompt they extrapolate; the profile
// records the measured range (calibration.min_prompt_tokens,
// max_prompt_tokens), so `bench --dry-run` says it too.
//
// # What to measure next
//
// The report names the rows that would determine what the rows leave
// uncertain: the largest context to predict when its prediction is less
// certain than ±Tolerance (a quadratic term extrapolated past the measured
// range magnifies its error), the prompt sizes leave-one-out needs, a
// cached prefill (a naive sweep's second run, in bench's JSON) when the
// per-chunk overhead is uncertain, the repeats that would know a noisy
// row's decode to ±Tolerance/2 (as bench's spread check counts them), and
// the legs furthest outside their noise when the fit is.
//
// Everything else (limits, page size, chunking, speculative decoding)
// comes from the base profile, which must describe the deployment measured.
// Input is bounded: at most 100,000 rows of at most 64 KiB a line (a JSON
// report of at most 64 MiB), every count compared without sums that could
// overflow. Every error about the rows is ErrBadInput (the command exits 2
// on it). The tables are fitted through at most 1,024 pooled legs and keep
// at most 64 points, a table is refitted for leave-one-out at 64 prompt
// sizes at most, and leave-one-out weighs at most 2^24 legs over all its
// refits (past that the accuracy is not known, and the report says why).
package calibrate

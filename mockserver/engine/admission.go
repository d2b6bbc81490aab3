package engine

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/sglmock/sglmock/mockserver/profile"
)

// SGLang's scheduler constants (environ.py) for admission and retraction.
const (
	// clipMaxNewTokens caps the output a request is expected to still
	// generate when admission estimates memory
	// (SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION); it never changes when the
	// request stops.
	clipMaxNewTokens = 4096
	// initNewTokenRatio (SGLANG_INIT_NEW_TOKEN_RATIO, times
	// --schedule-conservativeness 1.0) is the share of that output a
	// running request is expected to need, minNewTokenRatioFactor
	// (SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR) the floor the share decays to, as
	// a fraction of the start, over newTokenRatioDecaySteps decode batches
	// (SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS).
	initNewTokenRatio       = 0.7
	minNewTokenRatioFactor  = 0.14
	newTokenRatioDecaySteps = 600
	// retractDecodeSteps (SGLANG_RETRACT_DECODE_STEPS) is how many decode
	// steps a retraction leaves room for per remaining request.
	retractDecodeSteps = 20
	// ignoreEOSReserveTokens (schedule_policy.py's
	// IGNORE_EOS_RESERVE_TOKENS) is the slack add_one_req_ignore_eos keeps
	// per request for corner cases.
	ignoreEOSReserveTokens = 1
)

// tokenRatio is SGLang's NewTokenRatioTracker: the expected share of a
// running request's remaining output that admission keeps room for. It
// starts at initNewTokenRatio times the schedule_conservativeness (0.3
// under DP attention), decays with every decode batch to
// minNewTokenRatioFactor of its start, jumps after a retraction, and resets
// when the server is idle.
type tokenRatio struct{ init, min, decay, current float64 }

// newTokenRatio is NewTokenRatioTracker.from_server_args, computed as
// Python computes it, one float operation at a time.
func newTokenRatio(conservativeness float64) tokenRatio {
	init := min(initNewTokenRatio*conservativeness, 1)
	lo := min(init*minNewTokenRatioFactor, 1)
	return tokenRatio{init: init, min: lo, decay: (init - lo) / newTokenRatioDecaySteps, current: init}
}

func (t *tokenRatio) reset()      { t.current = t.init }
func (t *tokenRatio) decayStep()  { t.current = max(t.current-t.decay, t.min) }
func (r *req) expectedNew() int   { return min(max(r.maxNew-len(r.outputs), 0), clipMaxNewTokens) }
func (r *req) remainingFill() int { return len(r.fill()) - r.kvLen }

// fill is what the request's prefill computes: its prompt, or after a
// retraction its prompt and every output so far.
func (r *req) fill() []int32 {
	if r.refill != nil {
		return r.refill
	}
	return r.tokens
}

// prefillBudget is SGLang's PrefillAdder memory budget for one prefill
// batch. Running requests are expected to need min(remaining output, 4096)
// x the token ratio; every request this batch admits reserves its
// page-ceiled extend plus one page, and, unless it is cut into a chunk,
// its clipped output.
type prefillBudget struct {
	page          int
	totalOffset   float64 // expected output of the running batch, and what this batch reserves
	currentOffset int     // what this batch allocates at once
	// eos is add_one_req_ignore_eos's req_states, built at its first call
	// for this batch (nil until then).
	eos []eosState
}

func (s *scheduler) newPrefillBudget() prefillBudget {
	b := prefillBudget{page: s.prof.PageSize}
	for _, r := range s.running {
		b.totalOffset += float64(r.expectedNew()) * s.ratio.current
	}
	return b
}

func (b *prefillBudget) ceilPage(n int) int { return (n + b.page - 1) / b.page * b.page }

// availableAndEvictable is the KV a batch may claim: free slots and the
// cache no request holds.
func (s *scheduler) availableAndEvictable() int {
	return s.free() + s.treeStats().Evictable
}

func (b *prefillBudget) remainingTotal(s *scheduler) float64 {
	return float64(s.availableAndEvictable()) - b.totalOffset
}

// hasCapacity is the memory half of PrefillAdder.budget_state.
func (b *prefillBudget) hasCapacity(s *scheduler) bool {
	return b.remainingTotal(s) > 0 && s.availableAndEvictable()-b.currentOffset > 0
}

// fits is add_one_req's admission test: the request's extend, clipped
// output and one page of alignment must fit strictly inside what remains.
func (b *prefillBudget) fits(s *scheduler, extend, expectedNew int) bool {
	return float64(extend+expectedNew+b.page) < b.remainingTotal(s)
}

// eosState is one request's entry in add_one_req_ignore_eos's list: the
// tokens it may still generate (all of max_new_tokens under ignore_eos,
// else that times the token ratio) and the tokens its KV holds.
type eosState struct {
	left     float64
	occupied int
}

// fitsIgnoringEOS is SGLang's add_one_req_ignore_eos, the admission of an
// ignore_eos request without the radix cache (ChunkCache). The request's
// page-ceiled extend must fit what remains; then, with every request of
// the batch and of the running batch sorted by the tokens it may still
// generate, each suffix of that list must be able to run to its end on the
// KV free now plus what the requests before it release when they finish.
// The list persists for the batch: a later candidate is inserted into it.
func (b *prefillBudget) fitsIgnoringEOS(s *scheduler, it *iteration, r *req, extend int) bool {
	paged := b.ceilPage(extend)
	curRem := s.availableAndEvictable() - b.currentOffset
	if float64(paged) > min(float64(curRem), b.remainingTotal(s)) {
		return false
	}
	state := func(q *req) (eosState, bool) {
		ratio := s.ratio.current
		if q.ignoreEOS {
			ratio = 1
		}
		st := eosState{left: float64(q.maxNew)*ratio - float64(len(q.outputs)), occupied: len(q.tokens) + len(q.outputs)}
		return st, st.left > 0
	}
	if b.eos == nil {
		b.eos = []eosState{}
		for _, q := range append(append([]*req{r}, s.running...), prefillReqs(it)...) {
			if st, ok := state(q); ok {
				b.eos = append(b.eos, st)
			}
		}
		slices.SortStableFunc(b.eos, func(x, y eosState) int { return cmp.Compare(x.left, y.left) })
	} else if st, ok := state(r); ok {
		// Python's insertion: the first entry with at least as many
		// tokens left, or, when there is none, before the last entry.
		i := 0
		for i = range b.eos {
			if st.left <= b.eos[i].left {
				break
			}
		}
		b.eos = slices.Insert(b.eos, i, st)
	}
	cur, freed := curRem-paged, 0
	for i, st := range b.eos {
		bs := len(b.eos) - i
		if float64(cur+freed)-st.left*float64(bs) <= float64(ignoreEOSReserveTokens*bs) {
			return false
		}
		freed += st.occupied
	}
	return true
}

// prefillReqs is the requests a prefill batch holds so far (SGLang's
// can_run_list).
func prefillReqs(it *iteration) []*req {
	reqs := make([]*req, len(it.prefill))
	for i, c := range it.prefill {
		reqs[i] = c.r
	}
	return reqs
}

func (b *prefillBudget) reserve(extend, expectedNew int) {
	now := b.ceilPage(extend) + b.page
	b.totalOffset += float64(now + expectedNew)
	b.currentOffset += now
}

// clipMaxNew is SGLang's init_req_max_new_tokens: max_new_tokens is clipped
// so the request fits the context (max_req_len = context_length-1, or the
// pool's size-1 if smaller) and, page-ceiled with a page of alignment, the
// KV pool.
func clipMaxNew(p *profile.Profile, inputLen, maxNew int) int {
	maxReqLen := min(p.ContextLength, p.MaxTotalTokens) - 1
	pagedInput := (inputLen + p.PageSize - 1) / p.PageSize * p.PageSize
	return max(0, min(maxNew, maxReqLen-inputLen-1, p.MaxTotalTokens-pagedInput-p.PageSize-1))
}

// decodeNeed is the KV one decode step must find free for r: one token, or
// under speculative decoding SGLang's per-request reserve of two windows of
// max(num_steps x topk, num_draft_tokens). The mock holds no over-allocated
// draft slots between rounds, so it asks for the whole reserve each round.
func (s *scheduler) decodeNeed(r *req) int {
	spec := s.prof.Speculative
	if spec == nil {
		return 1
	}
	return 2 * max(spec.NumSteps*spec.EagleTopK, spec.NumDraftTokens)
}

// decodeFits is check_decode_mem: it evicts the shortfall and reports
// whether the next decode step of reqs fits.
func (s *scheduler) decodeFits(reqs []*req) bool {
	need := 0
	for _, r := range reqs {
		need += s.decodeNeed(r)
	}
	s.ensureFree(need)
	return s.free() >= need
}

// retractDecode is SGLang's retract_decode, run when the next decode step
// does not fit. It keeps the requests with the most output (the shortest
// prompt on a tie, batch order after that) and retracts the others one at a
// time, least preferred first, until the step fits or one request is left.
// Under speculative decoding SGLang does not sort: it retracts from the back
// of the batch, the request that joined it last first. A retracted
// request's KV is freed without inserting its output into the cache; it
// goes to the back of the waiting queue, as SGLang's _add_request_to_queue
// appends it, and is prefilled again, prompt and output, when admitted. The
// token ratio becomes the remaining requests' (output so far + 20 steps
// each) / (max_new_tokens + 1). If the one request left still does not
// fit, SGLang aborts it with status 500 (abortOutOfMemory).
func (s *scheduler) retractDecode() {
	keep := slices.Clone(s.running)
	if s.prof.Speculative == nil {
		slices.SortStableFunc(keep, func(a, b *req) int {
			if c := cmp.Compare(len(b.outputs), len(a.outputs)); c != 0 {
				return c
			}
			return cmp.Compare(len(a.tokens), len(b.tokens))
		})
	}
	before := s.free()
	oldRatio := s.ratio.current
	var retracted []*req
	for first := true; first || !s.decodeFits(keep); first = false {
		if len(keep) == 1 {
			break
		}
		r := keep[len(keep)-1]
		keep = keep[:len(keep)-1]
		s.release(r)
		s.ensureFree(len(keep) * retractDecodeSteps)
		retracted = append(retracted, r)
	}
	s.running = slices.DeleteFunc(s.running, func(r *req) bool { return slices.Contains(retracted, r) })
	decoded, maxNew := 0, 0
	for _, r := range s.running {
		decoded += len(r.outputs)
		maxNew += r.maxNew
	}
	s.ratio.current = min(1, float64(decoded+retractDecodeSteps*len(s.running))/float64(maxNew+1))
	// SGLang's update_running_batch: the counters grow by the retracted
	// requests, their prompts and their outputs; the reporter keeps how
	// many this retraction freed for its next log point.
	s.report.retracted = len(retracted)
	for _, r := range retracted {
		r.truth.Retractions++
		s.queue(r) // queue prefetches it again, as _add_request_to_queue does
		s.counters.RetractedRequests++
		s.counters.RetractedInputTokens += int64(len(r.tokens))
		s.counters.RetractedOutputTokens += int64(len(r.outputs))
	}
	s.log.Warn(fmt.Sprintf("KV cache pool is full. Retract requests. #retracted_reqs: %d, #new_tokens_gained: %d, #new_token_ratio: %.4f -> %.4f",
		len(retracted), s.free()-before, oldRatio, s.ratio.current))
	if len(keep) == 1 && !s.decodeFits(keep) {
		s.abortOutOfMemory(keep[0])
	}
}

// OutOfMemoryMessage is SGLang's abort message for the last request of a
// decode batch that does not fit even alone (retract_decode).
const OutOfMemoryMessage = "Out of memory even after retracting all other requests in the decode batch. Aborting the last request."

// abortOutOfMemory ends r, the one request left after retract_decode, which
// still lacks its decode KV (under speculative decoding, the draft
// reserve): SGLang aborts it with status 500 rather than run out of
// memory, and releases it as a retracted request (release_req:
// release_kv_cache with is_insert=False): the prompt its prefill inserted
// stays in the cache, unlocked, and its outputs are not cached.
func (s *scheduler) abortOutOfMemory(r *req) {
	s.log.Warn(OutOfMemoryMessage)
	if r.node != nil {
		s.unlock(r)
	}
	s.finish(r, Finish{Reason: FinishAbort, Message: OutOfMemoryMessage, StatusCode: 500}, nil, s.now)
	s.running = slices.DeleteFunc(s.running, func(x *req) bool { return x.done })
}

// release frees a retracted or preempted request's KV without caching
// its output (SGLang's release_kv_cache with is_insert=False): the prompt chunks
// already inserted stay in the cache, unlocked. The request keeps its
// output and is prefilled again, prompt and output, when readmitted.
func (s *scheduler) release(r *req) {
	if r.node != nil {
		s.unlock(r)
	}
	s.setPrivate(r, 0)
	r.refill = append(slices.Clip(r.tokens), r.outputs...)
	r.kvLen, r.prefixLen = 0, 0
}

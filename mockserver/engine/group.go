package engine

import "time"

// group is DP ranks whose iterations run together, on one clock. Under DP
// attention every rank is in one group: SGLang's ranks gather their batch
// sizes before every forward pass (prepare_mlp_sync_batch), a rank with
// nothing to run takes an idle batch while any other runs, and their
// forward passes share the MoE layers, so an iteration lasts as long as the
// slowest rank's batch. Without it each rank is a group of its own, a
// replica on its own timeline. With one rank the group is the engine's one
// scheduler.
type group struct {
	ranks []*scheduler
	// noMix is SGLang's rule under speculative decoding with DP
	// attention: a prefill batch on any rank makes every other rank run
	// an idle batch, not a decode round (get_next_batch_to_run).
	noMix bool
	// busy says an iteration is in flight, ending at end; each rank's
	// share of it is its inflight (nil for a rank that idles through it).
	busy bool
	end  time.Duration
}

// plan plans the group's next iteration at its clock, each rank as
// SGLang's scheduler does: aborts and a parked flush first, then a prefill
// batch if a prompt can be admitted, else a decode round. It reports
// whether any rank has work; with none, it moves the clock to a queued
// request that has not arrived yet on the modelled clock (the host ran
// late), or resets an idle rank's token ratio (SGLang's on_idle).
func (g *group) plan() bool {
	for {
		for _, s := range g.ranks {
			s.prepare()
		}
		prefill := false
		for _, s := range g.ranks {
			s.inflight = s.planPrefill()
			prefill = prefill || s.inflight != nil
		}
		work := prefill
		for _, s := range g.ranks {
			if s.inflight == nil && !(g.noMix && prefill) {
				s.inflight = s.planDecode()
			}
			work = work || s.inflight != nil
		}
		if work {
			g.sync()
			return true
		}
		if next, ok := g.nextArrival(); ok {
			for _, s := range g.ranks {
				s.now = next
			}
			continue
		}
		for _, s := range g.ranks {
			if s.idle() {
				s.ratio.reset()
			}
		}
		return false
	}
}

// sync makes the ranks' batches one iteration: it lasts as long as the
// longest, and each rank's records say so (a chunk keeps its own cost).
func (g *group) sync() {
	var start, dur time.Duration
	for _, s := range g.ranks {
		if it := s.inflight; it != nil {
			start, dur = it.start, max(dur, it.dur)
		}
	}
	for _, s := range g.ranks {
		if it := s.inflight; it != nil {
			it.dur = dur
		}
	}
	g.busy, g.end = true, start+dur
}

// complete applies the iteration in flight at its end: each rank's batch,
// after the aborts that came due while it ran; a rank that idled through
// it moves its clock to the end.
func (g *group) complete() {
	g.busy = false
	for _, s := range g.ranks {
		s.abortDeparted(g.end)
		if it := s.inflight; it != nil {
			s.complete(it)
		} else {
			s.now = max(s.now, g.end)
		}
	}
}

// nextArrival is the earliest arrival ahead of the clock among the ranks'
// waiting requests.
func (g *group) nextArrival() (time.Duration, bool) { return g.earliest((*scheduler).nextArrival) }

// earliest is the earliest of the times each rank's at gives, if any does.
func (g *group) earliest(at func(*scheduler) (time.Duration, bool)) (time.Duration, bool) {
	var next time.Duration
	found := false
	for _, s := range g.ranks {
		if t, ok := at(s); ok && (!found || t < next) {
			next, found = t, true
		}
	}
	return next, found
}

// advance moves an idle group's clock to at, never back.
func (g *group) advance(at time.Duration) {
	for _, s := range g.ranks {
		s.advance(at)
	}
}

// wake is when an idle group must look again: the earliest of its ranks'.
func (g *group) wake() (time.Duration, bool) { return g.earliest((*scheduler).wake) }

// idle reports whether no rank of the group has anything queued, running
// or in flight.
func (g *group) idle() bool {
	for _, s := range g.ranks {
		if !s.idle() {
			return false
		}
	}
	return true
}

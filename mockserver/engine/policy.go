package engine

import (
	"cmp"
	"encoding/binary"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"

	"github.com/sglmock/sglmock/mockserver/profile"
	"github.com/sglmock/sglmock/radixcache"
)

// lpmQueueLimit is the waiting queue length above which SGLang's lpm stops
// matching and sorting (_determine_active_policy): the queue keeps the
// order it has, as under fcfs.
const lpmQueueLimit = 128

// policyStream picks the random policy's PCG stream, seeded with the
// profile's seed; each DP rank has its own.
const policyStream = 0xbb67ae8584caa73b

// schedPolicy is SGLang's SchedulePolicy for one DP rank
// (managers/schedule_policy.py): before each prefill batch it orders the
// rank's waiting queue (calc_priority). It is an unsynchronized core; the
// rank's scheduler owns it.
type schedPolicy struct {
	// name is the policy the rank runs: the profile's, or fcfs for lpm and
	// dfs-weight without a radix cache (_validate_and_adjust_policy).
	name string
	// priority is enable_priority_scheduling; sign orders priorities, 1
	// when low values go first, -1 when high ones do (priority_sign).
	priority bool
	sign     int
	// preempt is enable_priority_preemption, threshold the priority gap a
	// preemption must exceed.
	preempt   bool
	threshold int
	// checkLen and deprioritizeLen are the in-batch prefix caching
	// thresholds.
	checkLen, deprioritizeLen int
	rng                       *rand.Rand // the random policy's shuffles
	// nextEntry is the entry of the next request into the waiting queue.
	nextEntry uint64
	// Reused by calcPriority: the waiting requests' sort entries, their
	// cache nodes for dfs-weight, and the in-batch prefixes seen.
	entries []queueEntry
	nodes   []*radixcache.Node[string]
	seen    map[string]struct{}
	keyBuf  []byte
}

// queueEntry is a waiting request and what the policy sorts it by.
type queueEntry struct {
	r *req
	// matched is its num_matched_prefix_tokens: the cached prefix of its
	// whole sequence, on the device and the host, capped at what it may
	// reuse.
	matched int
	// held marks a request in-batch prefix caching holds back.
	held bool
}

func newSchedPolicy(p *profile.Profile, cached bool, rank int) *schedPolicy {
	pol := &schedPolicy{
		name:            p.Policy(),
		priority:        p.EnablePriorityScheduling,
		sign:            -1,
		preempt:         p.PriorityPreemption(),
		threshold:       p.PreemptionThreshold(),
		checkLen:        p.InBatchCheckThreshold(),
		deprioritizeLen: p.InBatchDeprioritizeLen(),
		rng:             rand.New(rand.NewPCG(p.Seed, policyStream+uint64(rank))),
	}
	if p.ScheduleLowPriorityValuesFirst {
		pol.sign = 1
	}
	if !cached && (pol.name == profile.LPM || pol.name == profile.DFSWeight) {
		pol.name = profile.FCFS
	}
	return pol
}

// morePreferred compares two priorities: negative when a is scheduled
// before b (priority * priority_sign, ascending). Python's ints never
// overflow; comparing, not multiplying, keeps that true here.
func (p *schedPolicy) morePreferred(a, b int) int { return p.sign * cmp.Compare(a, b) }

// calcPriority orders the waiting requests that have arrived, as
// SchedulePolicy.calc_priority does, in place: the order stays for the
// next call, whose stable sorts start from it.
func (p *schedPolicy) calcPriority(s *scheduler) {
	if p.name == profile.FCFS && !p.priority {
		return
	}
	q := s.arrivedFirst()
	switch {
	case p.name == profile.FCFS:
		// _sort_by_priority_and_fcfs: priority, then the time the request
		// entered the queue.
		slices.SortStableFunc(q, func(a, b *req) int {
			if c := p.morePreferred(a.priority, b.priority); c != 0 {
				return c
			}
			return cmp.Compare(a.entry, b.entry)
		})
	case p.name == profile.LPM && len(q) > lpmQueueLimit:
		// Too many to match: fcfs, which leaves the order as it is.
	case p.name == profile.LPM:
		p.matchPrefixes(s, q, true)
		slices.SortStableFunc(p.entries, func(a, b queueEntry) int {
			// _sort_by_longest_prefix: the longest match first, those held
			// back last (key +inf).
			if a.held != b.held {
				if a.held {
					return 1
				}
				return -1
			}
			if a.held {
				return 0
			}
			return cmp.Compare(b.matched, a.matched)
		})
		for i := range q {
			q[i] = p.entries[i].r
		}
	case p.name == profile.DFSWeight:
		// _sort_by_dfs_weight: the in-batch check's verdicts go unused.
		p.matchPrefixes(s, q, false)
		for i, j := range s.tree.DFSWeightOrder(p.nodes) {
			q[i] = p.entries[j].r
		}
	case p.name == profile.LOF:
		// _sort_by_longest_output: priority first when it is on, then the
		// most max_new_tokens.
		slices.SortStableFunc(q, func(a, b *req) int {
			if p.priority {
				if c := p.morePreferred(a.priority, b.priority); c != 0 {
					return c
				}
			}
			return cmp.Compare(b.maxNew, a.maxNew)
		})
	case p.name == profile.Random:
		p.shuffle(q)
	case p.name == profile.RoutingKey:
		sortByRoutingKey(q, s.running)
	}
	clear(p.entries)
	clear(p.nodes)
}

// matchPrefixes is _compute_prefix_matches: each waiting request's whole
// sequence (prompt, and output after a retraction) is matched in the radix
// cache, a match that splits and touches nodes as any does, in queue
// order; its key is the device and host match together, capped
// (match_prefix_for_req's num_matched_prefix_tokens). One whose cached prefix is at most checkLen tokens is then
// checked against the waiting requests checked before it: if it shares at
// least deprioritizeLen tokens with one of them, which is about to compute
// them, it is held back; otherwise its sequence joins them. SGLang keeps
// those sequences in a radix tree of their own and compares the match
// with deprioritizeLen; only whether the match reaches it matters, so the
// first deprioritizeLen tokens of each sequence tell the same, and a set
// of them is what is kept here.
func (p *schedPolicy) matchPrefixes(s *scheduler, q []*req, inBatch bool) {
	p.entries, p.nodes = p.entries[:0], p.nodes[:0]
	if p.seen == nil {
		p.seen = make(map[string]struct{})
	}
	clear(p.seen)
	for _, r := range q {
		fill := r.fill()
		// Under HiCache the key counts the host hit too; the in-batch
		// check and dfs-weight read the device part (prefix_indices,
		// last_node). Matching loads nothing back.
		m := s.tree.MatchTiers(r.ns, fill)
		n, node := m.Device, m.DeviceNode
		e := queueEntry{r: r, matched: min(n+m.Host, r.maxPrefixLen())}
		if inBatch && n <= p.checkLen {
			e.held = p.sharesPrefix(r.ns, fill)
		}
		p.entries = append(p.entries, e)
		p.nodes = append(p.nodes, node)
	}
}

// sharesPrefix tells whether a sequence checked before this one shares its
// first deprioritizeLen tokens (in namespace ns), and if none does, counts
// this one among them.
func (p *schedPolicy) sharesPrefix(ns string, fill []int32) bool {
	t := p.deprioritizeLen
	if t <= 0 {
		return true // every match reaches a threshold of 0 or less
	}
	if len(fill) < t {
		return false // nothing can share t tokens with it, and it with nothing later
	}
	b := binary.AppendUvarint(p.keyBuf[:0], uint64(len(ns)))
	b = append(b, ns...)
	for _, id := range fill[:t] {
		b = binary.LittleEndian.AppendUint32(b, uint32(id))
	}
	p.keyBuf = b
	if _, ok := p.seen[string(b)]; ok {
		return true
	}
	p.seen[string(b)] = struct{}{}
	return false
}

// shuffle is Python's random.shuffle, with the rank's own generator.
func (p *schedPolicy) shuffle(q []*req) {
	for i := len(q) - 1; i > 0; i-- {
		j := p.rng.IntN(i + 1)
		q[i], q[j] = q[j], q[i]
	}
}

// sortByRoutingKey is _sort_by_routing_key: the requests whose routing key
// the running batch holds go first, the most common key first, then by
// key; the others after them, by key (no key sorts as ""). Nothing moves
// when no running request has a key.
func sortByRoutingKey(q, running []*req) {
	counts := map[string]int{}
	for _, r := range running {
		if r.routingKey != "" {
			counts[r.routingKey]++
		}
	}
	if len(counts) == 0 {
		return
	}
	slices.SortStableFunc(q, func(a, b *req) int {
		ca, oka := counts[a.routingKey]
		cb, okb := counts[b.routingKey]
		oka, okb = oka && a.routingKey != "", okb && b.routingKey != ""
		if oka != okb {
			if oka {
				return -1
			}
			return 1
		}
		if c := cmp.Compare(cb, ca); oka && c != 0 {
			return c
		}
		return cmp.Compare(a.routingKey, b.routingKey)
	})
}

// arrivedFirst moves the waiting requests that have arrived on the
// modelled clock ahead of those that have not, each in its order, and
// returns them: SGLang's waiting queue holds only what the scheduler
// received.
func (s *scheduler) arrivedFirst() []*req {
	n := 0
	for i, r := range s.waiting {
		if r.truth.Arrival <= s.now {
			if i != n {
				copy(s.waiting[n+1:i+1], s.waiting[n:i])
				s.waiting[n] = r
			}
			n++
		}
	}
	return s.waiting[:n]
}

// maxPrefixLen is SGLang's Req._compute_max_prefix_len: all but the last
// token of its sequence, and no more than logprob_start_len.
func (r *req) maxPrefixLen() int { return max(min(len(r.fill())-1, r.maxCached), 0) }

// preemptFor is PrefillAdder.preempt_to_schedule, tried when the running
// batch is full: the running requests are taken least preferred first
// (lowest priority, then the latest into the queue) while the waiting
// request r is more than the threshold above each, until the output they
// are expected to still need covers what r needs beyond the free memory.
// Those are released as a retraction releases a request (their KV freed
// uncached, the cache evicted for 20 decode steps of each request left)
// and returned, to go back to the queue. It reports false, changing
// nothing, when none qualifies or they would not free enough.
func (s *scheduler) preemptFor(r *req, b *prefillBudget) []*req {
	p := s.policy
	cands := slices.Clone(s.running)
	slices.SortStableFunc(cands, func(x, y *req) int {
		if c := p.morePreferred(y.priority, x.priority); c != 0 {
			return c
		}
		return cmp.Compare(y.entry, x.entry)
	})
	need := float64(len(r.fill())-r.prefixLen+min(r.maxNew, clipMaxNewTokens)) - b.remainingTotal(s)
	var victims []*req
	for _, c := range cands {
		if !p.outranks(r.priority, c.priority) {
			break
		}
		victims = append(victims, c)
		need -= s.expectedOffset(c)
		if need <= 0 {
			break
		}
	}
	if len(victims) == 0 || need > 0 {
		return nil
	}
	released := 0
	for _, c := range s.running {
		if !slices.Contains(victims, c) {
			continue
		}
		b.totalOffset -= s.expectedOffset(c)
		released++
		s.release(c)
		s.ensureFree((len(s.running) - released) * retractDecodeSteps)
		c.truth.Retractions++ // reset_for_retract counts it
	}
	s.running = slices.DeleteFunc(s.running, func(x *req) bool { return slices.Contains(victims, x) })
	return victims
}

// outranks is preempt_to_schedule's test: (incoming - running) x
// -priority_sign above the threshold, in Python's unbounded integers.
func (p *schedPolicy) outranks(incoming, running int) bool {
	gap := new(big.Int).Sub(big.NewInt(int64(incoming)), big.NewInt(int64(running)))
	gap.Mul(gap, big.NewInt(int64(-p.sign)))
	return gap.Cmp(big.NewInt(int64(p.threshold))) > 0
}

// expectedOffset is what admission expects a running request to still
// need: min(remaining output, 4096) x the token ratio
// (_get_running_request_total_token_offset).
func (s *scheduler) expectedOffset(r *req) float64 {
	return float64(r.expectedNew()) * s.ratio.current
}

// defaultPriority is the priority SGLang gives a request without one under
// priority scheduling (_set_or_validate_priority): the least preferred,
// sys.maxsize when low values go first, -sys.maxsize-1 otherwise.
func defaultPriority(lowFirst bool) int {
	if lowFirst {
		return math.MaxInt64
	}
	return math.MinInt64
}

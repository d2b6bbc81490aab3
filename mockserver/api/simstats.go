package api

import (
	"net/http"

	"github.com/sglmock/sglmock/sim"
)

// memory is the budgets' state and counts, as /sim/stats gives them.
func (s *Server) memory() sim.Memory {
	b, a := s.bodies.stats(), s.answers.stats()
	return sim.Memory{
		BodyBytes: b.held, BodyBudget: b.limit, BodyPeak: b.peak, BodiesRefused: b.refused,
		AnswerBytes: a.held, AnswerBudget: a.limit, AnswerPeak: a.peak,
		AnswersWaiting: a.waiting, AnswersWaited: a.waited, ReadersCut: a.cuts,
	}
}

// simStats serves GET /sim/stats: the load and the cache, what `sglmock
// fleet status` prints for each replica.
func (s *Server) simStats(c *exchange) {
	st := s.eng.Stats()
	out := sim.Stats{
		Now: st.Now.Seconds(), Running: st.Running, Queued: st.Queued,
		KVUsed: st.KVUsed, KVCapacity: st.KVCapacity,
		CacheTokens: st.CacheTokens, CacheEvictable: st.CacheEvictable,
		Requests: st.Requests, PromptTokens: st.PromptTokens, CachedTokens: st.CachedTokens,
		StalledStreamsAborted: s.stalls.aborted.Load(),
		Memory:                s.memory(),
	}
	if s.cfg.KVEventStats != nil {
		kv := s.cfg.KVEventStats()
		out.KVEvents = &kv
	}
	if st.PromptTokens > 0 {
		out.HitRate = float64(st.CachedTokens) / float64(st.PromptTokens)
	}
	writeJSON(c, http.StatusOK, out)
}

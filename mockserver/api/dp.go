package api

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sglmock/sglmock/mockserver/engine"
	"github.com/sglmock/sglmock/mockserver/profile"
)

// A request names its DP rank with routed_dp_rank, or with
// data_parallel_rank, its deprecated name, which counts only when
// routed_dp_rank is absent (GenerateReqInput.normalize_batch_and_arguments,
// the OpenAI protocol's _migrate_deprecated_dp_rank). The engine checks the
// rank against the deployment, with the tokenizer manager's message.

// routedRank is the rank a request's fields pin it to, or nil.
func routedRank(routed, deprecated *integer) *int {
	switch {
	case routed != nil:
		r := int(*routed)
		return &r
	case deprecated != nil:
		r := int(*deprecated)
		return &r
	}
	return nil
}

// dpRankHeader is the header the OpenAI routes take a rank from, over the
// body's (serving_base.py, extract_routed_dp_rank_from_header).
const dpRankHeader = "X-Data-Parallel-Rank"

// headerRank reads X-Data-Parallel-Rank into the body's headerDPRank. A
// value that is no integer is refused with SGLang's 400 and detail, and
// false.
func headerRank(c *exchange, b *openAICommon) bool {
	raw, ok := c.Request.Header[dpRankHeader]
	if !ok || len(raw) == 0 {
		return true
	}
	r, err := pyInt(raw[0])
	if err != nil {
		writeJSON(c, http.StatusBadRequest, jsonObject{"detail": fmt.Sprintf(
			"Invalid X-Data-Parallel-Rank header: must be an integer, got '%s'", clip(raw[0]))})
		return false
	}
	b.headerDPRank = &r
	return true
}

// pyInt parses s as Python's int() does within int64: surrounding white
// space, a sign, and single underscores between digits (PEP 515).
func pyInt(s string) (int, error) {
	s = strings.TrimSpace(s)
	for i := range len(s) {
		if s[i] == '_' && (i == 0 || i+1 == len(s) || !isDigit(s[i-1]) || !isDigit(s[i+1])) {
			return 0, strconv.ErrSyntax
		}
	}
	return strconv.Atoi(strings.ReplaceAll(s, "_", ""))
}

// rankCollector reports one DP rank's scheduler metrics, as that rank's
// SchedulerMetricsCollector does: with the scheduler's labels, tp_rank its
// own, and dp_rank (registerRankCollectors adds it), which SGLang adds to
// a scheduler's labels when it has a DP rank.
type rankCollector struct {
	eng   *engine.Engine
	model string
	rank  int
}

func (c *rankCollector) Describe(ch chan<- *prometheus.Desc) { describeScheduler(ch) }

func (c *rankCollector) Collect(ch chan<- prometheus.Metric) {
	ranks := c.eng.RankStats()
	tp := strconv.Itoa(engine.RankTPRank(c.eng.Profile(), c.rank))
	collectScheduler(ch, ranks[c.rank], []string{engineType, c.model, "0", "0", tp})
}

// registerRankCollectors registers a rankCollector for each rank of a
// deployment of several, each labelled with its dp_rank.
func registerRankCollectors(reg *prometheus.Registry, eng *engine.Engine, model string) {
	if eng.Ranks() == 1 {
		return
	}
	for r := range eng.Ranks() {
		rankRegisterer(reg, eng.Profile(), r).MustRegister(&rankCollector{eng: eng, model: model, rank: r})
	}
}

// rankRegisterer is where DP rank r's scheduler metrics register: with
// its dp_rank label in a deployment of several ranks.
func rankRegisterer(reg prometheus.Registerer, p *profile.Profile, r int) prometheus.Registerer {
	if p.Ranks() == 1 {
		return reg
	}
	return prometheus.WrapRegistererWith(prometheus.Labels{"dp_rank": strconv.Itoa(r)}, reg)
}

// internalStates are /server_info's internal_states: one a DP rank, each
// its scheduler's get_internal_state (the server args, its last decode
// throughput, its pool, the requests it may run, and its speculative
// average once it has one).
func (s *Server) internalStates() []map[string]any {
	var out []map[string]any
	for _, st := range s.eng.RankStats() {
		state := s.flatArgs()
		state["last_gen_throughput"] = st.LastGenThroughput
		if st.SpecRounds > 0 {
			state["avg_spec_accept_length"] = st.AvgSpecAcceptLength
		}
		state["memory_usage"] = jsonObject{"weight": 0.0, "kvcache": 0.0, "token_capacity": st.KVCapacity, "graph": 0.0}
		state["effective_max_running_requests_per_dp"] = s.cfg.Profile.RankMaxRunningRequests()
		out = append(out, state)
	}
	return out
}

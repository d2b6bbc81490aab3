package api

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sglmock/sglmock/mockserver/engine"
)

// The load endpoints, as SGLang's schedulers fill them: one entry a DP
// rank, in rank order. Used tokens are the rank's KVUsed; the waiting
// requests' tokens are their seqlen (prompt and output so far), and the
// request being prefilled in chunks is outside the running batch.
//
// A load's dp_rank is the scheduler's: None on a server of one rank, which
// launches its scheduler without one. With the load-snapshot rule (PR
// #26348) the loads are the schedulers' snapshots, which store None as 0
// (LoadSnapshot.from_get_loads_output); before it a one-rank load has no
// dp_rank, so ?dp_rank=0 keeps none of it.

// loadRank is the dp_rank a load reports for rank r: nil (None) on a
// server of one rank before the load-snapshot rule.
func (s *Server) loadRank(r int) *int {
	if s.eng.Ranks() == 1 && !s.rules.LoadSnapshot {
		return nil
	}
	return &r
}

// loadInfo is one rank of /get_load (GetLoadReqOutput).
type loadInfo struct {
	DPRank           *int `json:"dp_rank"`
	NumReqs          int  `json:"num_reqs"`
	NumWaitingReqs   int  `json:"num_waiting_reqs"`
	NumTokens        int  `json:"num_tokens"`
	NumPendingTokens int  `json:"num_pending_tokens"`
	// TSTic is SGLang's time.perf_counter(): here simulated seconds.
	TSTic float64 `json:"ts_tic"`
}

// getLoad is /get_load: num_tokens is the used tokens plus the waiting
// requests', num_pending_tokens the tokens waiting for prefill
// (_get_num_pending_tokens: the queue's and the chunked request's rest).
func (s *Server) getLoad(c *exchange) {
	var out []loadInfo
	for r, st := range s.eng.RankStats() {
		out = append(out, loadInfo{
			DPRank:           s.loadRank(r),
			NumReqs:          st.Running - st.Prefilling + st.Queued,
			NumWaitingReqs:   st.Queued,
			NumTokens:        st.KVUsed + st.QueuedTokens,
			NumPendingTokens: st.QueuedTokens + st.ChunkedPending,
			TSTic:            st.Now.Seconds(),
		})
	}
	writeJSON(c, http.StatusOK, out)
}

// loadSections are /v1/loads' include options (GetLoadsReqInput).
var loadSections = []string{"all", "core", "disagg", "lora", "memory", "queues", "spec"}

// metric is one named value of a load, in SGLang's field order; int or
// float64, as Python would print it (dp_rank a *int: nil is None).
type metric struct {
	name  string
	value any
}

// loadSection is a nested group of a load (memory, speculative, ...).
type loadSection struct {
	key, prefix string // JSON key, and the Prometheus name prefix
	fields      []metric
	mode        *string // disaggregation's mode, a string, not a metric
}

// rankLoad is one rank of /v1/loads (GetLoadsReqOutput.to_dict).
type rankLoad struct {
	core     []metric
	sections []loadSection
}

// loadsOf builds a rank's load from its snapshot, with the sections
// include asks for (all when empty), as Scheduler.get_loads does; its core
// fields in GetLoadsReqOutput's order, or LoadSnapshot.to_dict's with the
// load-snapshot rule (max_running_requests after max_total_num_tokens).
func (s *Server) loadsOf(rank int, st engine.Stats, include []string) rankLoad {
	all := len(include) == 0 || slices.Contains(include, "all")
	want := func(section string) bool { return all || slices.Contains(include, section) }
	capacity := st.KVCapacity
	usage := 0.0
	if capacity > 0 {
		usage = float64(st.KVUsed) / float64(capacity)
	}
	running := st.Running - st.Prefilling
	maxRunning := s.cfg.Profile.RankMaxRunningRequests()
	// utilization (metrics_reporter.py): the busier of the running batch
	// against its capacity and the token usage against 90%.
	utilization := max(float64(running)/float64(maxRunning), usage/0.9)
	l := rankLoad{core: []metric{
		{"dp_rank", s.loadRank(rank)},
		{"num_running_reqs", running},
		{"num_waiting_reqs", st.Queued},
		{"num_used_tokens", st.KVUsed},
		{"num_total_tokens", st.KVUsed + st.QueuedTokens},
		{"max_total_num_tokens", capacity},
		{"token_usage", round(usage, 4)},
		{"gen_throughput", round(st.LastGenThroughput, 2)},
		{"cache_hit_rate", round(st.LastCacheHitRate, 4)},
		{"utilization", round(utilization, 4)},
		{"max_running_requests", maxRunning},
	}}
	if s.rules.LoadSnapshot {
		last := l.core[len(l.core)-1]
		l.core = slices.Insert(l.core[:len(l.core)-1], 6, last)
	}
	if want("memory") {
		l.sections = append(l.sections, loadSection{key: "memory", prefix: "memory", fields: []metric{
			{"weight_gb", 0.0}, {"kv_cache_gb", 0.0}, {"graph_gb", 0.0}, {"token_capacity", capacity},
		}})
	}
	if want("spec") && s.cfg.Profile.Speculative != nil && st.SpecRounds > 0 {
		l.sections = append(l.sections, loadSection{key: "speculative", prefix: "spec", fields: []metric{
			{"accept_length", st.SpecAcceptLength}, {"accept_rate", st.SpecAcceptRate},
		}})
	}
	if want("disagg") {
		mode := "null"
		// The snapshots' field is PR #24341's name; 0.5.10 has the old one
		// (which of 0.5.11 and 0.5.12 has which is not established).
		bootstrap := "prefill_prealloc_queue_reqs"
		if s.rules.LoadSnapshot {
			bootstrap = "prefill_bootstrap_queue_reqs"
		}
		l.sections = append(l.sections, loadSection{key: "disaggregation", prefix: "disagg", mode: &mode, fields: []metric{
			{bootstrap, 0}, {"prefill_inflight_queue_reqs", 0}, {"decode_prealloc_queue_reqs", 0},
			{"decode_transfer_queue_reqs", 0}, {"decode_retracted_queue_reqs", 0},
			{"kv_transfer_speed_gb_s", 0.0}, {"kv_transfer_latency_ms", 0.0},
		}})
	}
	if want("queues") {
		l.sections = append(l.sections, loadSection{key: "queues", prefix: "queues", fields: []metric{
			{"waiting", st.Queued}, {"grammar", 0}, {"paused", 0}, {"retracted", 0},
		}})
	}
	return l
}

// round is Python's round(x, digits): x's exact binary value rounded to
// digits decimals, half to even, as strconv formats it (round(0.00025, 4)
// is 0.0003: the float is a little above the half).
func round(x float64, digits int) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'f', digits, 64), 64)
	return v
}

// loads is /v1/loads: SGLang's object of per-rank loads and their
// aggregate, or with ?format=prometheus the same as gauges.
func (s *Server) loads(c *exchange) {
	var include []string
	if raw := c.Query("include"); raw != "" {
		var bad []string
		for part := range strings.SplitSeq(raw, ",") {
			part = strings.TrimSpace(part)
			include = append(include, part)
			if !slices.Contains(loadSections, part) {
				bad = append(bad, "'"+part+"'")
			}
		}
		if bad != nil {
			writeJSON(c, http.StatusBadRequest, jsonObject{"detail": fmt.Sprintf("Invalid include sections: {%s}. Valid options: ['%s']",
				clip(strings.Join(bad, ", ")), strings.Join(loadSections, "', '"))})
			return
		}
	}
	// ?dp_rank= keeps the load whose dp_rank it is, as the tokenizer
	// manager's filter does: none for a rank the server does not have, or
	// for a load without one. It is read as pydantic reads an int (white
	// space, a sign, underscores between digits); given empty, it is none.
	// Past int64 it is a rank no server has, as Python's int is unbounded.
	var only *int
	if raw, given := c.GetQuery("dp_rank"); given {
		rank, err := pyInt(raw)
		if errors.Is(err, strconv.ErrRange) {
			rank, err = -1, nil
		}
		if err != nil {
			writeValidationError(c, fmt.Sprintf("dp_rank: Input should be a valid integer, got %q", clip(raw)))
			return
		}
		only = &rank
	}
	now := time.Now()
	var ls []rankLoad
	for r, st := range s.eng.RankStats() {
		if rank := s.loadRank(r); only == nil || rank != nil && *rank == *only {
			ls = append(ls, s.loadsOf(r, st, include))
		}
	}
	if c.Query("format") == "prometheus" {
		// Every core gauge is named, with a line for each rank kept.
		names := s.loadsOf(0, engine.Stats{}, include).core
		c.Data(http.StatusOK, "text/plain; version=0.0.4; charset=utf-8", []byte(prometheusLoads(names, ls)))
		return
	}
	loads := make([]orderedJSON, len(ls))
	for i, l := range ls {
		loads[i] = l.json(s.rules.LoadSnapshot)
	}
	out := orderedJSON{
		{"timestamp", pyISOTime(now)},
		{"version", s.cfg.Profile.Release()},
	}
	if s.rules.LoadSnapshot {
		// The snapshots' answer: the aggregate is the client's to sum.
		writeJSON(c, http.StatusOK, append(out, kv{"loads", loads}))
		return
	}
	writeJSON(c, http.StatusOK, append(out, kv{"dp_rank_count", len(ls)}, kv{"loads", loads}, kv{"aggregate", aggregateLoads(ls)}))
}

// json renders a load: LoadSnapshot.to_dict with the load-snapshot rule;
// before it dataclasses.asdict less the None values (a one-rank
// dp_rank) and the timestamp (v1_loads.py _loads_dict_factory), plus
// num_total_reqs.
func (l rankLoad) json(snapshot bool) orderedJSON {
	var o orderedJSON
	for _, m := range l.core {
		if r, ok := m.value.(*int); ok && r == nil && !snapshot {
			continue
		}
		o = append(o, kv{m.name, m.value})
	}
	for _, sec := range l.sections {
		var inner orderedJSON
		if sec.mode != nil {
			inner = append(inner, kv{"mode", *sec.mode})
		}
		for _, m := range sec.fields {
			inner = append(inner, kv{m.name, m.value})
		}
		o = append(o, kv{sec.key, inner})
	}
	if snapshot {
		return o
	}
	return append(o, kv{"num_total_reqs", l.value("num_running_reqs").(int) + l.value("num_waiting_reqs").(int)})
}

func (l rankLoad) value(name string) any {
	for _, m := range l.core {
		if m.name == name {
			return m.value
		}
	}
	panic("api: no load metric " + name)
}

// aggregateLoads is v1_loads.py's _compute_aggregate: totals over the
// loads, and the means of their usage, throughput and utilization; zeros
// when there is none.
func aggregateLoads(ls []rankLoad) orderedJSON {
	var running, waiting, used, total int
	var usage, throughput, utilization float64
	for _, l := range ls {
		running += l.value("num_running_reqs").(int)
		waiting += l.value("num_waiting_reqs").(int)
		used += l.value("num_used_tokens").(int)
		total += l.value("num_total_tokens").(int)
		usage += l.value("token_usage").(float64)
		throughput += l.value("gen_throughput").(float64)
		utilization += l.value("utilization").(float64)
	}
	if n := float64(len(ls)); n > 0 {
		usage, throughput, utilization = usage/n, throughput/n, utilization/n
	}
	return orderedJSON{
		{"total_running_reqs", running},
		{"total_waiting_reqs", waiting},
		{"total_reqs", running + waiting},
		{"total_used_tokens", used},
		{"total_tokens", total},
		{"avg_token_usage", round(usage, 4)},
		{"avg_throughput", round(throughput, 2)},
		{"avg_utilization", round(utilization, 4)},
	}
}

// prometheusLoads is _format_loads_prometheus: every numeric field of a
// load (core, the names of the core fields), dp_rank aside, as a gauge
// with a line for each rank, labelled with its dp_rank as Python prints it
// (None on a load without one); a section's fields prefixed with its short
// name, for the ranks that have the section.
func prometheusLoads(core []metric, ls []rankLoad) string {
	var b strings.Builder
	for i, m := range core {
		if m.name == "dp_rank" {
			continue
		}
		fmt.Fprintf(&b, "# TYPE sglang_%s gauge\n", m.name)
		for _, l := range ls {
			fmt.Fprintf(&b, "sglang_%s{dp_rank=\"%s\"} %s\n", m.name, l.rankLabel(), pyNumber(l.core[i].value))
		}
	}
	for _, sec := range sectionsOf(ls) {
		for i, m := range sec.fields {
			name := sec.prefix + "_" + m.name
			fmt.Fprintf(&b, "# TYPE sglang_%s gauge\n", name)
			for _, l := range ls {
				if ls := l.section(sec.key); ls != nil {
					fmt.Fprintf(&b, "sglang_%s{dp_rank=\"%s\"} %s\n", name, l.rankLabel(), pyNumber(ls.fields[i].value))
				}
			}
		}
	}
	return b.String()
}

// rankLabel is the load's dp_rank as a label: Python's str of it.
func (l rankLoad) rankLabel() string {
	if r := l.value("dp_rank").(*int); r != nil {
		return strconv.Itoa(*r)
	}
	return "None"
}

// sectionOrder is _OPTIONAL_METRIC_SECTIONS' order.
var sectionOrder = []string{"memory", "speculative", "lora", "disaggregation", "queues"}

// sectionsOf lists the sections any load has, in SGLang's order.
func sectionsOf(ls []rankLoad) []loadSection {
	var out []loadSection
	for _, key := range sectionOrder {
		for _, l := range ls {
			if sec := l.section(key); sec != nil {
				out = append(out, *sec)
				break
			}
		}
	}
	return out
}

// section is the load's section with that key, or nil.
func (l rankLoad) section(key string) *loadSection {
	for i := range l.sections {
		if l.sections[i].key == key {
			return &l.sections[i]
		}
	}
	return nil
}

// pyNumber prints an int or a float64 as Python's str does: floats always
// with a fraction or an exponent (repr).
func pyNumber(v any) string {
	switch x := v.(type) {
	case int:
		return strconv.Itoa(x)
	case float64:
		abs := math.Abs(x)
		switch {
		case x == math.Trunc(x) && abs < 1e16:
			return strconv.FormatFloat(x, 'f', 1, 64)
		case abs >= 1e-4 && abs < 1e16:
			return strconv.FormatFloat(x, 'f', -1, 64)
		}
		return strconv.FormatFloat(x, 'e', -1, 64)
	}
	panic(fmt.Sprintf("api: not a number: %T", v))
}

// pyISOTime is Python's datetime.now(timezone.utc).isoformat().
func pyISOTime(t time.Time) string {
	t = t.UTC()
	if t.Nanosecond()/1000 == 0 {
		return t.Format("2006-01-02T15:04:05+00:00")
	}
	return t.Format("2006-01-02T15:04:05.000000+00:00")
}

// kv and orderedJSON write a JSON object with its keys in order.
type kv struct {
	key   string
	value any
}

type orderedJSON []kv

func (o orderedJSON) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	for i, e := range o {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, marshal(e.key)...)
		b = append(b, ':')
		b = append(b, marshal(e.value)...)
	}
	return append(b, '}'), nil
}

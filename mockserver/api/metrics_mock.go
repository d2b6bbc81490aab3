package api

import (
	"github.com/prometheus/client_golang/prometheus"
)

// mockCollector exposes, next to SGLang's metrics, what the mock drops or
// cuts off to keep its memory bounded: clients that stopped reading, and
// the KV event publisher's drops. SGLang has none of these; their names
// start with "sglmock:".
type mockCollector struct{ s *Server }

// mockLabels label the mock's own metrics.
var mockLabels = []string{"model_name"}

var (
	descStalled = desc(mockLabels, "sglmock:stalled_streams_aborted_total",
		"Clients cut off, their requests aborted, because they stopped reading an answer or a stream.")
	descBodyHeld    = desc(mockLabels, "sglmock:body_budget_held_bytes", "Bytes request bodies (and renders' token ids) hold now.")
	descBodyLimit   = desc(mockLabels, "sglmock:body_budget_limit_bytes", "The body budget (--body-budget-bytes).")
	descBodyRefused = desc(mockLabels, "sglmock:body_budget_refused_total",
		"Requests answered 503 because their body did not fit the body budget.")
	descAnswerHeld    = desc(mockLabels, "sglmock:answer_budget_held_bytes", "Bytes generation requests hold until their answers are written.")
	descAnswerLimit   = desc(mockLabels, "sglmock:answer_budget_limit_bytes", "The answer budget (--answer-budget-bytes).")
	descAnswerWaiting = desc(mockLabels, "sglmock:answer_budget_waiting", "Generation requests waiting for room in the answer budget.")
	descAnswerWaited  = desc(mockLabels, "sglmock:answer_budget_waited_total", "Generation requests that waited for room in the answer budget.")
	descReadersCut    = desc(mockLabels, "sglmock:answer_budget_readers_cut_total",
		"Clients cut off, while others waited for room, because they read their complete answer too slowly.")
	descKVBatches   = desc(mockLabels, "sglmock:kv_events_batches_total", "KV event batches the engine published.")
	descKVPublished = desc(mockLabels, "sglmock:kv_events_published_total", "KV event batches sent on the socket.")
	descKVDropped   = desc(mockLabels, "sglmock:kv_events_dropped_total",
		"KV event batches dropped because the publisher's queue was full (in batches or bytes).")
	descKVSubscribers    = desc(mockLabels, "sglmock:kv_events_subscribers", "KV event subscribers connected.")
	descKVSubscriberDrop = desc(mockLabels, "sglmock:kv_events_subscriber_drops_total",
		"KV event messages not sent to a subscriber whose queue was full.")
	descKVSubscribersCut = desc(mockLabels, "sglmock:kv_events_subscribers_cut_total",
		"KV event connections ended: stopped reading, subscribed past the bounds, idle in the way of a new one, or refused.")
	descKVReplayCut = desc(mockLabels, "sglmock:kv_events_replay_clients_cut_total",
		"KV event replay clients disconnected: stopped reading, idle too long or in the way of a new one, or refused.")
	descKVReplayBytes = desc(mockLabels, "sglmock:kv_events_replay_buffer_bytes", "Bytes the KV event replay buffer holds.")
)

func (c *mockCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descStalled
	for _, d := range []*prometheus.Desc{descBodyHeld, descBodyLimit, descBodyRefused,
		descAnswerHeld, descAnswerLimit, descAnswerWaiting, descAnswerWaited, descReadersCut} {
		ch <- d
	}
	if c.s.cfg.KVEventStats != nil {
		for _, d := range []*prometheus.Desc{descKVBatches, descKVPublished, descKVDropped, descKVSubscribers,
			descKVSubscriberDrop, descKVSubscribersCut, descKVReplayCut, descKVReplayBytes} {
			ch <- d
		}
	}
}

func (c *mockCollector) Collect(ch chan<- prometheus.Metric) {
	model := c.s.args.ServedModelName
	metric := func(d *prometheus.Desc, t prometheus.ValueType, v int64) {
		ch <- prometheus.MustNewConstMetric(d, t, float64(v), model)
	}
	metric(descStalled, prometheus.CounterValue, c.s.stalls.aborted.Load())
	m := c.s.memory()
	metric(descBodyHeld, prometheus.GaugeValue, m.BodyBytes)
	metric(descBodyLimit, prometheus.GaugeValue, m.BodyBudget)
	metric(descBodyRefused, prometheus.CounterValue, m.BodiesRefused)
	metric(descAnswerHeld, prometheus.GaugeValue, m.AnswerBytes)
	metric(descAnswerLimit, prometheus.GaugeValue, m.AnswerBudget)
	metric(descAnswerWaiting, prometheus.GaugeValue, int64(m.AnswersWaiting))
	metric(descAnswerWaited, prometheus.CounterValue, m.AnswersWaited)
	metric(descReadersCut, prometheus.CounterValue, m.ReadersCut)
	if c.s.cfg.KVEventStats == nil {
		return
	}
	kv := c.s.cfg.KVEventStats()
	metric(descKVBatches, prometheus.CounterValue, kv.Batches)
	metric(descKVPublished, prometheus.CounterValue, kv.Published)
	metric(descKVDropped, prometheus.CounterValue, kv.DroppedQueueFull)
	metric(descKVSubscribers, prometheus.GaugeValue, int64(kv.Subscribers))
	metric(descKVSubscriberDrop, prometheus.CounterValue, kv.SubscriberDrops)
	metric(descKVSubscribersCut, prometheus.CounterValue, kv.SubscribersCut)
	metric(descKVReplayCut, prometheus.CounterValue, kv.ReplayClientsCut)
	metric(descKVReplayBytes, prometheus.GaugeValue, kv.ReplayBufferBytes)
}

package main

import (
	"fmt"
	"log/slog"

	"github.com/sglmock/sglmock/mockserver/engine"
	"github.com/sglmock/sglmock/mockserver/kvevents"
	"github.com/sglmock/sglmock/sim"
)

// startKVEvents starts the KV event publisher --kv-events-config asks for,
// or returns nil. The default topic is SGLang's, the empty one (sglmock
// fleet gives each replica the llm-d router's explicitly).
func startKVEvents(o *serveOptions, logger *slog.Logger) (*kvevents.Publisher, error) {
	if o.kvEvents == nil {
		return nil, nil
	}
	cfg := *o.kvEvents
	topic := cfg.TopicOr("")
	pub, err := kvevents.Start(cfg, topic, o.profile.Rules(), logger)
	if err != nil {
		return nil, err
	}
	mode := "connects to"
	if cfg.Binds() {
		mode = "binds"
	}
	replay := ""
	if cfg.ReplayEndpoint != nil {
		replay = ", replay on " + *cfg.ReplayEndpoint
	}
	logger.Info(fmt.Sprintf("KV events (%s publisher): %s %s, topic %q%s", cfg.Publisher, mode, cfg.Endpoint, topic, replay))
	return pub, nil
}

// cacheEvents is pub as the engine's CacheEvents, or nil: a nil
// *Publisher in the interface would not be nil.
func cacheEvents(pub *kvevents.Publisher) engine.CacheEvents {
	if pub == nil {
		return nil
	}
	return pub
}

// kvEventStats reports pub's counts as /sim/stats and /metrics show them,
// or nil without a publisher.
func kvEventStats(pub *kvevents.Publisher) func() sim.KVEvents {
	if pub == nil {
		return nil
	}
	return func() sim.KVEvents {
		st := pub.Stats()
		return sim.KVEvents{
			Batches: st.Batches, Published: st.Published, DroppedQueueFull: st.Dropped,
			Subscribers: st.Subscribers, SubscriberDrops: st.SubscriberDrops, SubscribersCut: st.SubscribersCut,
			ReplayClientsCut: st.ReplayClientsCut, ReplayMalformed: st.ReplayMalformed, ReplayBufferBytes: st.ReplayBytes,
		}
	}
}

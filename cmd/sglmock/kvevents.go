package main

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/sglmock/sglmock/mockserver/engine"
	"github.com/sglmock/sglmock/mockserver/kvevents"
	"github.com/sglmock/sglmock/sim"
)

// publishers are the KV event publishers of a deployment: one a DP rank,
// as SGLang's schedulers each run one.
type publishers []*kvevents.Publisher

// startKVEvents starts the KV event publishers --kv-events-config asks for,
// one a DP rank on the endpoint SGLang gives the rank (kvevents'
// Config.ForRank: the port plus the attention-DP rank, which is 0 for
// every rank without DP attention, so that their binds collide as in
// SGLang), or returns nil. The default topic is SGLang's, the empty one
// (sglmock fleet gives each replica the llm-d router's explicitly).
func startKVEvents(o *serveOptions, logger *slog.Logger) (publishers, error) {
	if o.kvEvents == nil {
		return nil, nil
	}
	topic := o.kvEvents.TopicOr("")
	var pubs publishers
	for r := range o.profile.Ranks() {
		cfg, err := o.kvEvents.ForRank(o.profile.AttnDPRank(r))
		if err == nil {
			var pub *kvevents.Publisher
			if pub, err = kvevents.Start(cfg, topic, o.profile.Rules(), logger); err == nil {
				pubs = append(pubs, pub)
				logKVEvents(logger, cfg, topic, r, o.profile.Ranks())
				continue
			}
		}
		pubs.Close()
		if o.profile.Ranks() > 1 {
			err = fmt.Errorf("DP rank %d's KV event publisher: %w", r, err)
			if !o.profile.DPAttention() {
				err = fmt.Errorf("%w (without --enable-dp-attention every rank's publisher takes attention-DP rank 0 and the same endpoint, as in SGLang)", err)
			}
		}
		return nil, err
	}
	return pubs, nil
}

func logKVEvents(logger *slog.Logger, cfg kvevents.Config, topic string, rank, ranks int) {
	mode := "connects to"
	if cfg.Binds() {
		mode = "binds"
	}
	replay := ""
	if cfg.ReplayEndpoint != nil {
		replay = ", replay on " + *cfg.ReplayEndpoint
	}
	who := "KV events"
	if ranks > 1 {
		who = fmt.Sprintf("KV events of DP rank %d", rank)
	}
	logger.Info(fmt.Sprintf("%s (%s publisher): %s %s, topic %q%s", who, cfg.Publisher, mode, cfg.Endpoint, topic, replay))
}

// Close closes every publisher.
func (ps publishers) Close() error {
	var errs []error
	for _, p := range ps {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}

// sinks are the publishers as the engine's CacheEvents, one a rank, or
// nil: a nil *Publisher in the interface would not be nil.
func (ps publishers) sinks() []engine.CacheEvents {
	if ps == nil {
		return nil
	}
	out := make([]engine.CacheEvents, len(ps))
	for i, p := range ps {
		out[i] = p
	}
	return out
}

// stats reports the publishers' counts added up, as /sim/stats and
// /metrics show them, or nil without a publisher.
func (ps publishers) stats() func() sim.KVEvents {
	if ps == nil {
		return nil
	}
	return func() sim.KVEvents {
		var out sim.KVEvents
		for _, p := range ps {
			st := p.Stats()
			out.Batches += st.Batches
			out.Published += st.Published
			out.DroppedQueueFull += st.Dropped
			out.Subscribers += st.Subscribers
			out.SubscriberDrops += st.SubscriberDrops
			out.SubscribersCut += st.SubscribersCut
			out.ReplayClientsCut += st.ReplayClientsCut
			out.ReplayMalformed += st.ReplayMalformed
			out.ReplayBufferBytes += st.ReplayBytes
		}
		return out
	}
}

package kvevents

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sglmock/sglmock/compat"
	"github.com/sglmock/sglmock/mockserver/engine"
	"github.com/sglmock/sglmock/mockserver/profile"
)

// runLoad runs 64 clients at once, each sending its share of requests in
// turn (c=64), against an engine at the highest speedup, so the wall time
// is the engine's own work, and returns that wall time.
func runLoad(b *testing.B, p *profile.Profile, events engine.CacheEvents, requests int) time.Duration {
	e, err := engine.New(engine.Config{Profile: p, Speedup: 1e9, CacheEvents: events})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	r := rand.New(rand.NewPCG(1, 2))
	docs := make([][]int32, 16)
	for i := range docs {
		docs[i] = make([]int32, 512)
		for j := range docs[i] {
			docs[i][j] = 1024 + r.Int32N(50000)
		}
	}
	prompts := make([][]int32, requests)
	for i := range prompts {
		doc := docs[r.IntN(len(docs))]
		prompts[i] = append(slices.Clone(doc[:128+r.IntN(384)]), 1024+r.Int32N(50000), 1024+r.Int32N(50000))
	}
	const clients = 64
	start := time.Now()
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := c; i < requests; i += clients {
				st, err := e.Submit(engine.Request{InputIDs: prompts[i], MaxNewTokens: 16})
				if err != nil {
					b.Error(err)
					return
				}
				for {
					ev, err := st.Next(context.Background())
					if err != nil {
						b.Error(err)
						return
					}
					if ev.Finish != nil {
						break
					}
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

// BenchmarkPublisherAtC64 measures the KV event publisher under load: 64
// concurrent clients, prompts sharing long prefixes, a KV pool small
// enough that admissions evict, page size 1 (one event per token, SGLang's
// default and the most events). It runs the same load on the engine
// alone and on the engine publishing over a real ZMQ PUB socket on
// loopback, drained by a subscriber, interleaved, and reports the events
// published per wall second and the publishing engine's wall time as a
// ratio to the engine alone's (x-engine).
func BenchmarkPublisherAtC64(b *testing.B) {
	p, err := profile.Load("default")
	if err != nil {
		b.Fatal(err)
	}
	p.ContextLength = 4096
	p.MaxTotalTokens = 16384
	p.MaxRunningRequests = 64
	const requests = 3200
	var alone, with time.Duration
	var events int64
	for b.Loop() {
		alone += runLoad(b, p, nil, requests)

		ln := freePort(b)
		cfg := Config{Publisher: "zmq", Endpoint: fmt.Sprintf("tcp://*:%d", ln), BufferSteps: DefaultBufferSteps, HWM: DefaultHWM, MaxQueueSize: DefaultMaxQueueSize}
		topic := RouterTopic("127.0.0.1", ln, "bench")
		pub, err := Start(cfg, topic, compat.Rules{}, nil)
		if err != nil {
			b.Fatal(err)
		}
		sub, err := Subscribe(fmt.Sprintf("tcp://127.0.0.1:%d", ln), topic, false)
		if err != nil {
			b.Fatal(err)
		}
		waitFor(b, "the subscription", func() bool { return slices.Contains(pub.Subscriptions(), topic) })
		received := make(chan int64)
		go func() {
			var n int64
			for {
				m, err := sub.Recv()
				if err != nil {
					received <- n
					return
				}
				if bt, err := Decode(m.Payload); err == nil {
					n += int64(len(bt.Events))
				}
			}
		}()
		with += runLoad(b, p, pub, requests)
		pub.Close()
		st := pub.Stats()
		sub.Close()
		got := <-received
		if st.Dropped != 0 || st.SendErrs != 0 {
			b.Fatalf("publisher stats %+v", st)
		}
		events += st.Events
		b.Logf("%d events gathered, %d published batches, %d events decoded by the subscriber", st.Events, st.Published, got)
	}
	b.ReportMetric(float64(events)/with.Seconds(), "events/s")
	b.ReportMetric(with.Seconds()/alone.Seconds(), "x-engine")
}

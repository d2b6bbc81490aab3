package kvevents

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
	"github.com/sglmock/sglmock/mockserver/profile"
	"github.com/sglmock/sglmock/radixcache"
)

// captureTransport keeps every message sent, in order.
type captureTransport struct {
	mu   sync.Mutex
	msgs []Message
}

func (c *captureTransport) Send(topic []byte, seq uint64, payload []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs = append(c.msgs, Message{Topic: string(topic), Seq: seq, Payload: payload})
	return nil
}

func (c *captureTransport) Subscriptions() []string { return []string{""} }
func (c *captureTransport) Close() error            { return nil }

func (c *captureTransport) take() []Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.msgs
	c.msgs = nil
	return m
}

// replayer is the test's subscriber: it decodes every message and replays
// its events into a PageSet.
type replayer struct {
	set                      radixcache.PageSet
	nextSeq                  uint64
	stored, removed, cleared int
}

func (r *replayer) apply(t *testing.T, msgs []Message, topic string) {
	t.Helper()
	for _, m := range msgs {
		if m.Topic != topic || m.Seq != r.nextSeq {
			t.Fatalf("message topic %q seq %d, want %q seq %d", m.Topic, m.Seq, topic, r.nextSeq)
		}
		r.nextSeq++
		b, err := Decode(m.Payload)
		if err != nil {
			t.Fatalf("seq %d: %v", m.Seq, err)
		}
		if len(b.Events) == 0 {
			t.Fatalf("seq %d: an empty batch (SGLang publishes none)", m.Seq)
		}
		for _, e := range b.Events {
			switch e.Kind {
			case BlockStored:
				r.stored += len(e.Hashes)
				err = r.set.Stored(e.Parent, e.HasParent, e.Pages())
			case BlockRemoved:
				r.removed += len(e.Hashes)
				err = r.set.Removed(e.Hashes...)
			case AllBlocksCleared:
				r.cleared++
				r.set.Cleared()
			}
			if err != nil {
				t.Fatalf("seq %d: %v", m.Seq, err)
			}
		}
	}
}

func kvProfile(t *testing.T, name string, pageSize int) *profile.Profile {
	p := mocktest.Profile(t, name)
	p.PageSize = pageSize
	p.MaxTotalTokens = 1200 // a small pool: admissions evict
	p.ContextLength = 1024
	p.ChunkedPrefillSize = 128 // prompts are cached chunk by chunk
	p.MaxPrefillTokens = 256
	p.FlushBusyAfterFinishS = 0
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestReplayedEventsMatchTheCache runs random requests (shared prefixes,
// two cache namespaces, concurrent bursts that chunk, finish and evict)
// and flushes against an engine whose KV events go through the
// publisher, on virtual time. After each step a subscriber decodes every
// message and replays it; its view must equal the radix cache's pages, for
// token and bigram keys and several page sizes.
func TestReplayedEventsMatchTheCache(t *testing.T) {
	for _, tc := range []struct {
		profile string
		page    int
		release string
	}{{"default", 1, ""}, {"default", 4, ""}, {"llama-8b-eagle3-h100", 1, ""}, {"llama-8b-eagle3-h100", 2, ""},
		{"default", 4, "0.5.12"}, {"llama-8b-eagle3-h100", 2, "0.5.17"}} {
		t.Run(fmt.Sprintf("%s/page=%d/%s", tc.profile, tc.page, tc.release), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := Config{Publisher: "zmq", Endpoint: DefaultEndpoint, BufferSteps: 8, MaxQueueSize: DefaultMaxQueueSize}
				capture := &captureTransport{}
				const topic = "kv@sglmock.test:30000@m"
				p := kvProfile(t, tc.profile, tc.page)
				p.SGLangVersion = tc.release
				pub := NewPublisher(cfg, topic, p.Rules(), capture, nil)
				m := mocktest.Start(t, api.Config{Profile: p, CacheEvents: pub})
				t.Cleanup(func() { pub.Close() })
				var rep replayer
				r := rand.New(rand.NewPCG(uint64(tc.page), 11))
				docs := make([][]int, 4)
				for i := range docs {
					docs[i] = make([]int, 300)
					for j := range docs[i] {
						docs[i][j] = 1024 + r.IntN(5000)
					}
				}
				check := func(step int) {
					t.Helper()
					synctest.Wait()
					rep.apply(t, capture.take(), topic)
					pages, err := m.Engine().CachePages(0)
					if err != nil {
						t.Fatal(err)
					}
					radixcache.SortRecords(pages)
					if got := rep.set.Records(); !radixcache.EqualRecords(got, pages) {
						t.Fatalf("step %d: the subscriber holds %d pages, the cache %d", step, len(got), len(pages))
					}
				}
				check(-1)
				for step := range 40 {
					if r.IntN(8) == 0 {
						code, body, _ := m.Do(t, http.MethodPost, "/flush_cache", "")
						if code != http.StatusOK {
							t.Fatalf("flush: %d %s", code, body)
						}
						check(step)
						continue
					}
					var wg sync.WaitGroup
					for range 1 + r.IntN(6) {
						doc := docs[r.IntN(len(docs))]
						ids := slices.Clone(doc[:20+r.IntN(len(doc)-20)])
						for range r.IntN(30) {
							ids = append(ids, 1024+r.IntN(5000))
						}
						req := map[string]any{"input_ids": ids, "sampling_params": map[string]any{"max_new_tokens": 1 + r.IntN(24)}}
						if r.IntN(4) == 0 {
							req["extra_key"] = "tenant"
						}
						body, _ := json.Marshal(req)
						wg.Go(func() {
							if code, resp, _ := m.Do(t, http.MethodPost, "/generate", string(body)); code != http.StatusOK {
								t.Errorf("generate: %d %s", code, resp)
							}
						})
					}
					wg.Wait()
					check(step)
				}
				if rep.removed == 0 || rep.cleared < 2 || rep.stored == 0 {
					t.Errorf("the run replayed %d stored, %d removed and %d cleared events: want evictions and a flush", rep.stored, rep.removed, rep.cleared)
				}
				if st := pub.Stats(); st.Dropped != 0 || st.Published != st.Batches || st.Events != int64(rep.stored+rep.removed+rep.cleared) {
					t.Errorf("publisher stats %+v; the subscriber replayed %d events", st, rep.stored+rep.removed+rep.cleared)
				}
				mocktest.CheckIdle(t, m.Engine())
			})
		})
	}
}

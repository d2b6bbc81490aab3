package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sglmock/sglmock/mockserver/kvevents"
	"github.com/sglmock/sglmock/radixcache"
)

// kvMessages receives a subscriber's messages for topic on a channel,
// decoded. Other topics are skipped: a publisher of another test process
// may find the subscriber's port.
func kvMessages(t *testing.T, s *kvevents.Subscriber, topic string) <-chan kvevents.Batch {
	t.Helper()
	out := make(chan kvevents.Batch, 1024)
	go func() {
		defer close(out)
		for {
			m, err := s.Recv()
			if err != nil {
				return
			}
			if m.Topic != topic {
				continue
			}
			b, err := kvevents.Decode(m.Payload)
			if err != nil {
				t.Errorf("seq %d: %v", m.Seq, err)
				return
			}
			out <- b
		}
	}()
	return out
}

// handshake flushes the cache until an AllBlocksCleared arrives, and
// returns the events after it in its batch: the subscription has then
// reached the replica, every later message comes through, and a replay
// that starts there starts from an empty cache. The flushes are retried
// because a subscription's first messages can be lost, as with any ZMQ
// PUB socket.
func handshake(t *testing.T, base string, msgs <-chan kvevents.Batch) []kvevents.Event {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		post(t, base+"/flush_cache", "")
		for drained := false; !drained; {
			select {
			case b := <-msgs:
				for i := len(b.Events) - 1; i >= 0; i-- {
					if b.Events[i].Kind == kvevents.AllBlocksCleared {
						return b.Events[i+1:]
					}
				}
			case <-time.After(50 * time.Millisecond):
				drained = true
			}
		}
	}
	t.Fatal("no AllBlocksCleared reached the subscriber")
	return nil
}

func post(t *testing.T, url, body string) string {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %d %s", url, resp.StatusCode, b)
	}
	return string(b)
}

// TestServeKVEvents runs serve with --kv-events-config connecting to a
// subscriber that binds (the router's side): without a topic the topic is
// SGLang's empty one, a prompt's pages arrive chained with its token ids, a
// flush clears them, and /server_info shows the config.
func TestServeKVEvents(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	sub, err := kvevents.Subscribe(fmt.Sprintf("tcp://127.0.0.1:%d", port), "", true)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	cfg := fmt.Sprintf(`{"publisher": "zmq", "endpoint": "tcp://127.0.0.1:%d", "buffer_steps": 100}`, port)
	// Without the overlap window a flush right after a response is never
	// refused, however fast the client.
	base, stop, _, done, logs := startServe(t, "--speedup", "100", "--served-model-name", "org/kv", "--kv-events-config", cfg,
		"--disable-overlap-schedule")
	msgs := kvMessages(t, sub, "")
	rest := handshake(t, base, msgs)

	post(t, base+"/generate", `{"input_ids": [1100, 1101, 1102, 1103, 1104], "sampling_params": {"max_new_tokens": 1}}`)
	post(t, base+"/flush_cache", "")
	// Replay until the flush after the prompt: the pages then held are the
	// prompt's (the handshake's flushes cleared the warmup's).
	var set radixcache.PageSet
	var held []radixcache.PageRecord
	for pending := rest; ; pending = (<-msgs).Events {
		for _, e := range pending {
			switch e.Kind {
			case kvevents.BlockStored:
				if err := set.Stored(e.Parent, e.HasParent, e.Pages()); err != nil {
					t.Fatal(err)
				}
			case kvevents.BlockRemoved:
				if err := set.Removed(e.Hashes...); err != nil {
					t.Fatal(err)
				}
			case kvevents.AllBlocksCleared:
				if recs := set.Records(); slices.ContainsFunc(recs, func(r radixcache.PageRecord) bool { return r.Tokens[0] == 1100 }) {
					held = recs
				}
				set.Cleared()
			}
		}
		if held != nil {
			break
		}
	}
	// Page size 1: one page per token, chained from the root. The prompt
	// and the first output token are cached but the last token.
	byParent := map[int64]radixcache.PageRecord{}
	var root radixcache.PageRecord
	for _, r := range held {
		if r.HasParent {
			byParent[r.Parent] = r
		} else {
			root = r
		}
	}
	var chain []int32
	for r, ok := root, len(held) > 0; ok; r, ok = byParent[r.Hash] {
		chain = append(chain, r.Tokens...)
	}
	if want := []int32{1100, 1101, 1102, 1103, 1104}; !slices.Equal(chain, want) || len(held) != len(want) {
		t.Errorf("pages held before the flush: %d, chained from the root %v; want the prompt's %v", len(held), chain, want)
	}

	resp, err := http.Get(base + "/server_info")
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		KVEventsConfig *string         `json:"kv_events_config"`
		KVEvents       json.RawMessage `json:"kv_events"`
	}
	json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if info.KVEventsConfig == nil || *info.KVEventsConfig != cfg {
		t.Errorf("/server_info kv_events_config: got %v, want %q", info.KVEventsConfig, cfg)
	}
	wantKV := fmt.Sprintf(`{"publisher":"zmq","endpoint_host":"127.0.0.1","endpoint_port_base":%d,"topic":"","block_size":1,"dp_size":1}`, port)
	if string(info.KVEvents) != wantKV {
		t.Errorf("/server_info kv_events: got %s, want %s", info.KVEvents, wantKV)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`KV events (zmq publisher): connects to tcp://127.0.0.1:%d, topic ""`, port)
	if !strings.Contains(logs.String(), want) {
		t.Errorf("log lacks %q:\n%s", want, logs.String())
	}
}

func TestServeKVEventsFlags(t *testing.T) {
	for _, tt := range []struct{ args, wantErr string }{
		{`{"publisher": "kafka"}`, "Unknown event publisher 'kafka'"},
		{`{"endpoint": "tcp://*"}`, "endpoint"},
		{`nope`, "not a JSON object"},
	} {
		if _, err := parseServeFlags([]string{"--kv-events-config", tt.args}, io.Discard); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("--kv-events-config %s: got %v, want an error containing %q", tt.args, err, tt.wantErr)
		}
	}
	var stderr strings.Builder
	o, err := parseServeFlags([]string{"--kv-events-config", `{"publisher": "zmq", "lora": 1}`}, &stderr)
	if err != nil || o.kvEvents == nil || o.kvEvents.Publisher != "zmq" || !strings.Contains(stderr.String(), `unknown key "lora" ignored`) {
		t.Errorf("an unknown key: options %+v, error %v, stderr %q", o, err, stderr.String())
	}
}

// twoFreePorts returns a loopback port P with P+1 free too.
func twoFreePorts(t *testing.T) int {
	t.Helper()
	for range 20 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		next, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port+1))
		ln.Close()
		if err == nil {
			next.Close()
			return port
		}
	}
	t.Fatal("no two consecutive free ports")
	return 0
}

// TestServeKVEventsPerRank: under DP attention rank r's publisher is on
// the endpoint's port + r (SGLang's offset_endpoint_port) and its batches
// carry the rank; a request pinned to rank 1 is announced there only.
func TestServeKVEventsPerRank(t *testing.T) {
	port := twoFreePorts(t)
	var msgs []<-chan kvevents.Batch
	for r := range 2 {
		sub, err := kvevents.Subscribe(fmt.Sprintf("tcp://127.0.0.1:%d", port+r), "", true)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		msgs = append(msgs, kvMessages(t, sub, ""))
	}
	cfg := fmt.Sprintf(`{"publisher": "zmq", "endpoint": "tcp://127.0.0.1:%d"}`, port)
	base, stop, _, done, logs := startServe(t, "--speedup", "100", "--kv-events-config", cfg, "--disable-overlap-schedule",
		"--tp-size", "2", "--dp-size", "2", "--enable-dp-attention")
	handshake(t, base, msgs[0])
	handshake(t, base, msgs[1])
	post(t, base+"/generate", `{"input_ids": [1200, 1201, 1202], "routed_dp_rank": 1, "sampling_params": {"max_new_tokens": 1}}`)
	// stores tells whether a batch stores the prompt's first page.
	stores := func(b kvevents.Batch) bool {
		return slices.ContainsFunc(b.Events, func(e kvevents.Event) bool {
			return e.Kind == kvevents.BlockStored && e.Pages()[0].Tokens[0] == 1200
		})
	}
	deadline := time.After(10 * time.Second)
	for stored := false; !stored; {
		select {
		case b := <-msgs[1]:
			if b.DPRank != 1 {
				t.Fatalf("rank 1's publisher sent a batch of rank %d", b.DPRank)
			}
			stored = stores(b)
		case <-deadline:
			t.Fatal("rank 1's publisher never announced the prompt")
		}
	}
	for quiet := time.After(200 * time.Millisecond); quiet != nil; {
		select {
		case b := <-msgs[0]:
			if b.DPRank != 0 || stores(b) {
				t.Fatalf("rank 0's publisher sent %+v for a request on rank 1", b)
			}
		case <-quiet:
			quiet = nil
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for r := range 2 {
		want := fmt.Sprintf(`KV events of DP rank %d (zmq publisher): connects to tcp://127.0.0.1:%d`, r, port+r)
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
}

// Without DP attention every rank's publisher takes attention-DP rank 0,
// so a bound endpoint collides, as in SGLang: serve refuses to start and
// says why.
func TestServeKVEventsPlainDPCollide(t *testing.T) {
	port := twoFreePorts(t)
	o, err := parseServeFlags([]string{"--port", "0", "--dp-size", "2", "--kv-events-config",
		fmt.Sprintf(`{"publisher": "zmq", "endpoint": "tcp://127.0.0.1:%d", "bind": true}`, port)}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	_, err = startKVEvents(o, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "DP rank 1's KV event publisher") ||
		!strings.Contains(err.Error(), "without --enable-dp-attention every rank's publisher takes attention-DP rank 0") {
		t.Fatalf("got %v, want rank 1's bind refused", err)
	}
}

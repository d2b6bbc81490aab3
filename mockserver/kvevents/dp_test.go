package kvevents

import (
	"github.com/sglmock/sglmock/compat"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglmock/sglmock/radixcache"
)

// TestForRankOffsetsTheEndpoints: SGLang's offset_endpoint_port, on the
// endpoint and the replay endpoint: a tcp port plus the rank, an inproc
// name with _dp and the rank, rank 0 as configured, anything else refused
// for a rank above 0.
func TestForRankOffsetsTheEndpoints(t *testing.T) {
	replay := "tcp://*:5600"
	for _, tc := range []struct {
		endpoint   string
		rank       int
		want       string
		wantReplay string
		err        string
	}{
		{"tcp://*:5557", 0, "tcp://*:5557", "tcp://*:5600", ""},
		{"tcp://*:5557", 3, "tcp://*:5560", "tcp://*:5603", ""},
		{"tcp://127.0.0.1:5557", 1, "tcp://127.0.0.1:5558", "tcp://*:5601", ""},
		{"tcp://[::1]:5557", 2, "tcp://[::1]:5559", "tcp://*:5602", ""},
		{"inproc://cache", 2, "inproc://cache_dp2", "tcp://*:5602", ""},
		{"ipc:///tmp/kv", 0, "ipc:///tmp/kv", "tcp://*:5600", ""},
		{"ipc:///tmp/kv", 1, "", "", `Invalid endpoint: must contain 'inproc' or 'tcp'`},
	} {
		cfg, err := Config{Endpoint: tc.endpoint, ReplayEndpoint: &replay}.ForRank(tc.rank)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("%s rank %d: got %v, want %q", tc.endpoint, tc.rank, err, tc.err)
			}
		case err != nil || cfg.Endpoint != tc.want || *cfg.ReplayEndpoint != tc.wantReplay || cfg.dpRank != tc.rank:
			t.Fatalf("%s rank %d: got %q, replay %q, rank %d, %v; want %q, %q", tc.endpoint, tc.rank, cfg.Endpoint, *cfg.ReplayEndpoint, cfg.dpRank, err, tc.want, tc.wantReplay)
		}
	}
	if replay != "tcp://*:5600" {
		t.Fatalf("ForRank changed the caller's replay endpoint: %s", replay)
	}
}

// payloadTransport keeps the payloads sent.
type payloadTransport struct{ sent chan []byte }

func (p *payloadTransport) Send(_ []byte, _ uint64, payload []byte) error {
	p.sent <- append([]byte(nil), payload...)
	return nil
}
func (p *payloadTransport) Subscriptions() []string { return nil }
func (p *payloadTransport) Close() error            { return nil }

// TestBatchesCarryTheRank: a rank's publisher stamps its batches with its
// attention-DP rank, the third field of SGLang's KVEventBatch.
func TestBatchesCarryTheRank(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, err := Config{Endpoint: "tcp://*:5557", MaxQueueSize: 4}.ForRank(2)
		if err != nil {
			t.Fatal(err)
		}
		out := &payloadTransport{sent: make(chan []byte, 1)}
		p := NewPublisher(cfg, "", compat.Rules{}, out, nil)
		defer p.Close()
		p.Stored(0, false, []radixcache.Page{{Hash: 1, Tokens: []int32{1}}})
		p.Publish(time.Now())
		b, err := Decode(<-out.sent)
		if err != nil || b.DPRank != 2 {
			t.Fatalf("got dp_rank %d, %v; want 2", b.DPRank, err)
		}
	})
}

package api_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
	"github.com/sglmock/sglmock/sim"
)

// stalledStream opens a stream over a raw connection, reads its headers
// and stops reading.
func stalledStream(t *testing.T, m *mocktest.Mock, path, body string) net.Conn {
	t.Helper()
	conn, err := m.HTTP.Dial()
	if err != nil {
		t.Fatal(err)
	}
	go fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, len(body), body)
	if _, err := http.ReadResponse(bufio.NewReader(conn), nil); err != nil {
		t.Fatal(err)
	}
	return conn
}

func simStats(t *testing.T, m *mocktest.Mock) sim.Stats {
	t.Helper()
	_, body, _ := m.Do(t, "GET", "/sim/stats", "")
	var st sim.Stats
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// A streaming client that stops reading is cut off once a write makes no
// progress for the stall timeout, its request aborted at once and counted
// in /sim/stats and /metrics; the engine holds nothing afterwards.
func TestStalledStreamIsAborted(t *testing.T) {
	for _, tt := range []struct{ path, body string }{
		{"/generate", `{"text": "hi", "stream": true, "sampling_params": {"max_new_tokens": 20000}}`},
		{"/v1/completions", `{"prompt": "hi", "stream": true, "max_tokens": 20000}`},
		{"/v1/chat/completions", `{"messages": [{"role": "user", "content": "hi"}], "stream": true, "max_tokens": 20000}`},
	} {
		t.Run(tt.path, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := mocktest.Start(t, api.Config{StallTimeout: 10 * time.Second, EnableMetrics: true})
				conn := stalledStream(t, m, tt.path, tt.body)
				defer conn.Close()
				time.Sleep(15 * time.Second) // virtual: the client reads nothing
				synctest.Wait()
				st := simStats(t, m)
				if st.StalledStreamsAborted != 1 || st.Running != 0 {
					t.Fatalf("after 15 s: got %d stalled streams aborted and %d running, want 1 and 0", st.StalledStreamsAborted, st.Running)
				}
				truths := m.Engine().Truths()
				if len(truths) != 1 || truths[0].Finish.Reason != "abort" || truths[0].CompletionTokens >= 20000 {
					t.Fatalf("got %+v, want the one request aborted", truths)
				}
				// Cut off 10 s after its first write blocked, at the step
				// boundary after that.
				if at := truths[0].Finished - truths[0].Arrival; at < 10*time.Second || at > 10*time.Second+50*time.Millisecond {
					t.Fatalf("aborted %v after arrival, want just past 10 s", at)
				}
				_, metrics, _ := m.Do(t, "GET", "/metrics", "")
				if want := `sglmock:stalled_streams_aborted_total{model_name="sglmock/small-1b"} 1`; !strings.Contains(metrics, want) {
					t.Fatalf("/metrics lacks %q", want)
				}
				mocktest.CheckIdle(t, m.Engine())
			})
		})
	}
}

// A client that never reads a long non-streaming answer is cut off too:
// the handler does not hold the answer forever.
func TestStalledAnswerIsCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{StallTimeout: 10 * time.Second})
		conn := postRaw(t, m, `{"text": "hi", "sampling_params": {"max_new_tokens": 2000}}`)
		defer conn.Close()
		time.Sleep(time.Minute) // virtual: the answer is ready, nobody reads it
		synctest.Wait()
		if st := simStats(t, m); st.StalledStreamsAborted != 1 {
			t.Fatalf("got %d clients cut off, want 1", st.StalledStreamsAborted)
		}
		conn.Close()
		mocktest.CheckIdle(t, m.Engine())
	})
}

// At most 64 writes may stay blocked past a second: when a 65th client
// stalls, the one blocked longest is cut at once, before its timeout.
func TestStalledStreamsAreBoundedInNumber(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{StallTimeout: time.Hour})
		body := `{"text": "hi", "stream": true, "sampling_params": {"max_new_tokens": 200}}`
		var conns []net.Conn
		for range 64 {
			conns = append(conns, stalledStream(t, m, "/generate", body))
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if st := simStats(t, m); st.StalledStreamsAborted != 0 {
			t.Fatalf("64 stalled streams: got %d cut, want 0", st.StalledStreamsAborted)
		}
		conns = append(conns, stalledStream(t, m, "/generate", body))
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		if st := simStats(t, m); st.StalledStreamsAborted != 1 {
			t.Fatalf("65 stalled streams: got %d cut, want the oldest 1", st.StalledStreamsAborted)
		}
		for _, c := range conns {
			c.Close()
		}
		time.Sleep(5 * time.Second) // the disconnected clients' aborts come due
		mocktest.CheckIdle(t, m.Engine())
	})
}

// The KV event publisher's drops and cuts appear in /sim/stats and
// /metrics, as the server reads them.
func TestKVEventDropsAreReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kv := sim.KVEvents{Batches: 9, Published: 7, DroppedQueueFull: 2, Subscribers: 1, SubscriberDrops: 5,
			SubscribersCut: 1, ReplayClientsCut: 3, ReplayMalformed: 4, ReplayBufferBytes: 1024}
		m := mocktest.Start(t, api.Config{EnableMetrics: true, KVEventStats: func() sim.KVEvents { return kv }})
		if st := simStats(t, m); st.KVEvents == nil || *st.KVEvents != kv {
			t.Fatalf("/sim/stats kv_events: got %+v, want %+v", st.KVEvents, kv)
		}
		_, metrics, _ := m.Do(t, "GET", "/metrics", "")
		for _, want := range []string{
			`sglmock:kv_events_dropped_total{model_name="sglmock/small-1b"} 2`,
			`sglmock:kv_events_subscriber_drops_total{model_name="sglmock/small-1b"} 5`,
			`sglmock:kv_events_subscribers_cut_total{model_name="sglmock/small-1b"} 1`,
			`sglmock:kv_events_replay_clients_cut_total{model_name="sglmock/small-1b"} 3`,
			`sglmock:kv_events_replay_buffer_bytes{model_name="sglmock/small-1b"} 1024`,
		} {
			if !strings.Contains(metrics, want) {
				t.Errorf("/metrics lacks %q", want)
			}
		}
	})
}

// slowReader reads at most 16 KiB a second: 64 KiB in 4 s.
type slowReader struct{ r io.Reader }

func (s slowReader) Read(p []byte) (int, error) {
	time.Sleep(time.Second)
	return s.r.Read(p[:min(len(p), 16<<10)])
}

// A long answer (some MB of logprobs) goes out in 64 KiB writes, each under
// the stall deadline: a client that reads slowly but steadily gets it whole,
// with its Content-Length, though it takes far longer than the stall
// timeout; one that stops reading partway is cut off and counted.
func TestSlowAnswerIsWrittenWhole(t *testing.T) {
	for _, tt := range []struct {
		name      string
		stopAfter int64 // bytes of the body read; 0 reads it all
		aborted   int64
	}{
		{"steady reader", 0, 0},
		{"reader stopping after 256 KiB", 256 << 10, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := mocktest.Start(t, api.Config{StallTimeout: 10 * time.Second})
				conn := postRaw(t, m, `{"text": "hi", "return_logprob": true, "top_logprobs_num": 20, "return_text_in_logprobs": true, `+
					`"sampling_params": {"max_new_tokens": 2000, "ignore_eos": true}}`)
				defer conn.Close()
				resp, err := http.ReadResponse(bufio.NewReaderSize(slowReader{conn}, 16<<10), nil)
				if err != nil {
					t.Fatal(err)
				}
				if resp.ContentLength < 1<<20 {
					t.Fatalf("got a Content-Length of %d, want an answer of over 1 MiB", resp.ContentLength)
				}
				if tt.stopAfter == 0 {
					got, err := io.ReadAll(resp.Body)
					if err != nil || int64(len(got)) != resp.ContentLength || !json.Valid(got) {
						t.Fatalf("got %d bytes of %d (valid JSON: %v), %v; want the whole answer", len(got), resp.ContentLength, json.Valid(got), err)
					}
				} else {
					if _, err := io.CopyN(io.Discard, resp.Body, tt.stopAfter); err != nil {
						t.Fatal(err)
					}
					time.Sleep(time.Minute) // virtual: the client reads no more
					synctest.Wait()
				}
				if st := simStats(t, m); st.StalledStreamsAborted != tt.aborted {
					t.Fatalf("got %d clients cut off, want %d", st.StalledStreamsAborted, tt.aborted)
				}
				conn.Close()
				mocktest.CheckIdle(t, m.Engine())
			})
		})
	}
}

// postRaw sends POST /generate with body on a connection of its own and
// returns the connection, for a test that reads the answer as slowly as
// it likes, or not at all.
func postRaw(t *testing.T, m *mocktest.Mock, body string) net.Conn {
	t.Helper()
	conn, err := m.HTTP.Dial()
	if err != nil {
		t.Fatal(err)
	}
	go fmt.Fprintf(conn, "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	return conn
}

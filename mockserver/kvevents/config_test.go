package kvevents

import (
	"slices"
	"strings"
	"testing"
)

func TestParseConfig(t *testing.T) {
	replay, empty := "tcp://*:5558", ""
	tests := []struct {
		name        string
		json        string
		want        Config
		wantIgnored []string
		binds       bool
	}{
		{"empty: SGLang's defaults", `{}`,
			Config{Publisher: "null", Endpoint: "tcp://*:5557", BufferSteps: 10000, HWM: 100000, MaxQueueSize: 100000}, nil, true},
		{"every key", `{"publisher":"zmq","endpoint":"tcp://10.0.0.9:6000","replay_endpoint":"tcp://*:5558","buffer_steps":5,"hwm":0,"max_queue_size":7,"topic":""}`,
			Config{Publisher: "zmq", Endpoint: "tcp://10.0.0.9:6000", ReplayEndpoint: &replay, BufferSteps: 5, HWM: 0, MaxQueueSize: 7, Topic: &empty}, nil, false},
		{"unknown keys are ignored, as pydantic ignores them", `{"publisher":"zmq","endpont":"x","zz":1}`,
			Config{Publisher: "zmq", Endpoint: "tcp://*:5557", BufferSteps: 10000, HWM: 100000, MaxQueueSize: 100000}, []string{"endpont", "zz"}, true},
		{"IPv6 wildcard binds", `{"endpoint":"tcp://[::]:5557"}`,
			Config{Publisher: "null", Endpoint: "tcp://[::]:5557", BufferSteps: 10000, HWM: 100000, MaxQueueSize: 100000}, nil, true},
		{"ipc binds", `{"endpoint":"ipc:///tmp/kv"}`,
			Config{Publisher: "null", Endpoint: "ipc:///tmp/kv", BufferSteps: 10000, HWM: 100000, MaxQueueSize: 100000}, nil, true},
	}
	for _, tt := range tests {
		got, ignored, err := ParseConfig(tt.json)
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if got.Publisher != tt.want.Publisher || got.Endpoint != tt.want.Endpoint || got.BufferSteps != tt.want.BufferSteps ||
			got.HWM != tt.want.HWM || got.MaxQueueSize != tt.want.MaxQueueSize ||
			!equalPtr(got.ReplayEndpoint, tt.want.ReplayEndpoint) || !equalPtr(got.Topic, tt.want.Topic) {
			t.Errorf("%s: got %+v, want %+v", tt.name, got, tt.want)
		}
		if !slices.Equal(ignored, tt.wantIgnored) {
			t.Errorf("%s: ignored %v, want %v", tt.name, ignored, tt.wantIgnored)
		}
		if got.Binds() != tt.binds {
			t.Errorf("%s: Binds() got %v, want %v", tt.name, got.Binds(), tt.binds)
		}
	}
}

func equalPtr(a, b *string) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func TestParseConfigRefuses(t *testing.T) {
	for _, tt := range []struct{ json, wantErr string }{
		{`[]`, "not a JSON object"},
		{`{"publisher":"kafka"}`, "Unknown event publisher 'kafka'"},
		{`{"hwm":"100"}`, "cannot unmarshal string"},
		{`{"hwm":-1}`, "hwm must be >= 0"},
		{`{"max_queue_size":0}`, "max_queue_size must be in 1..1000000"},
		{`{"buffer_steps":-1}`, "buffer_steps must be in 0..1000000"},
		{`{"buffer_steps":100000000}`, "buffer_steps must be in 0..1000000"},
		{`{"endpoint":"localhost:5557"}`, "want tcp://HOST:PORT"},
		{`{"endpoint":"udp://*:5557"}`, `unknown transport "udp"`},
		{`{"endpoint":"tcp://*:99999"}`, "not in 0..65535"},
		{`{"endpoint":null}`, `"endpoint" must not be null`},
		{`{"replay_endpoint":"tcp://*"}`, "replay_endpoint"},
	} {
		if _, _, err := ParseConfig(tt.json); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: got error %v, want one containing %q", tt.json, err, tt.wantErr)
		}
	}
}

func TestTopic(t *testing.T) {
	var c Config
	if got := c.TopicOr(RouterTopic("127.0.0.2", 30001, "org/m")); got != "kv@127.0.0.2:30001@org/m" {
		t.Errorf("default topic: got %q", got)
	}
	empty := ""
	c.Topic = &empty
	if got := c.TopicOr("x"); got != "" {
		t.Errorf("an explicit empty topic: got %q, want SGLang's empty topic", got)
	}
}

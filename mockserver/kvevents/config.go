package kvevents

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
)

// Config is SGLang's KVEventsConfig, the JSON of --kv-events-config, with
// its keys and defaults.
type Config struct {
	// Publisher is "zmq" or "null" (events are computed, then dropped).
	Publisher string `json:"publisher"`
	// Endpoint is the PUB socket's address. With "*", "::" or "0.0.0.0" as
	// its host, or an ipc:// address, the replica binds it and subscribers
	// connect; otherwise the replica connects to a subscriber that binds
	// (SGLang's heuristic), unless Bind says otherwise.
	Endpoint string `json:"endpoint"`
	// Bind, the mock's own key ("bind"), overrides the heuristic: true
	// binds Endpoint as given, so "tcp://127.0.0.1:5557" listens on
	// loopback only, which SGLang's heuristic cannot express; false
	// connects. SGLang ignores the key.
	Bind *bool `json:"bind"`
	// ReplayEndpoint, if set, is a ROUTER socket the replica binds, which
	// resends the buffered batches from a sequence number on.
	ReplayEndpoint *string `json:"replay_endpoint"`
	// BufferSteps is how many of the last batches the replay socket can
	// resend.
	BufferSteps int `json:"buffer_steps"`
	// HWM is the PUB socket's high-water mark: messages queued beyond it
	// are dropped (0: no limit).
	HWM int `json:"hwm"`
	// MaxQueueSize bounds the batches waiting for the publisher.
	MaxQueueSize int `json:"max_queue_size"`
	// Topic is the first frame of every message. Without a "topic" key it
	// is SGLang's default, the empty topic (sglmock fleet gives each
	// replica RouterTopic instead).
	Topic *string `json:"topic"`
	// dpRank is the attention-DP rank ForRank made the config for.
	dpRank int
}

// Defaults are SGLang's KVEventsConfig defaults.
const (
	DefaultEndpoint     = "tcp://*:5557"
	DefaultBufferSteps  = 10_000
	DefaultHWM          = 100_000
	DefaultMaxQueueSize = 100_000
)

// MaxBufferSteps and MaxQueueSizeLimit bound what the mock lets a config
// allocate; SGLang has no bound.
const (
	MaxBufferSteps    = 1_000_000 // a hundred times SGLang's default
	MaxQueueSizeLimit = 1_000_000 // ten times SGLang's default: some 40 MB of queue
)

var knownKeys = []string{"publisher", "endpoint", "replay_endpoint", "buffer_steps", "hwm", "max_queue_size", "topic", "bind"}

// ParseConfig reads --kv-events-config's JSON. Keys SGLang's pydantic
// model does not know are ignored, as SGLang ignores them, and returned
// so the caller can warn. A missing key takes SGLang's default.
func ParseConfig(s string) (cfg Config, ignored []string, err error) {
	cfg = Config{Publisher: "null", Endpoint: DefaultEndpoint, BufferSteps: DefaultBufferSteps, HWM: DefaultHWM, MaxQueueSize: DefaultMaxQueueSize}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &raw); err != nil {
		return Config{}, nil, fmt.Errorf("--kv-events-config: not a JSON object: %w", err)
	}
	for k := range raw {
		if !slices.Contains(knownKeys, k) {
			ignored = append(ignored, k)
		}
	}
	slices.Sort(ignored)
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	if err := dec.Decode(&cfg); err != nil {
		return Config{}, nil, fmt.Errorf("--kv-events-config: %w", err)
	}
	for _, k := range []string{"publisher", "endpoint", "buffer_steps", "hwm", "max_queue_size"} {
		if v, ok := raw[k]; ok && string(v) == "null" {
			return Config{}, nil, fmt.Errorf("--kv-events-config: %q must not be null", k)
		}
	}
	return cfg, ignored, cfg.Validate()
}

// Validate checks the values SGLang would refuse at start, and the bounds
// the mock adds.
func (c Config) Validate() error {
	switch c.Publisher {
	case "zmq", "null":
	default:
		return fmt.Errorf("--kv-events-config: Unknown event publisher '%s' (SGLang's publishers are \"zmq\" and \"null\")", c.Publisher)
	}
	if err := checkEndpoint("endpoint", c.Endpoint); err != nil {
		return err
	}
	if c.ReplayEndpoint != nil {
		if err := checkEndpoint("replay_endpoint", *c.ReplayEndpoint); err != nil {
			return err
		}
	}
	switch {
	case c.BufferSteps < 0 || c.BufferSteps > MaxBufferSteps:
		return fmt.Errorf("--kv-events-config: buffer_steps must be in 0..%d, got %d", MaxBufferSteps, c.BufferSteps)
	case c.HWM < 0:
		return fmt.Errorf("--kv-events-config: hwm must be >= 0 (0: no limit), got %d", c.HWM)
	case c.MaxQueueSize < 1 || c.MaxQueueSize > MaxQueueSizeLimit:
		return fmt.Errorf("--kv-events-config: max_queue_size must be in 1..%d (the mock keeps the queue bounded), got %d", MaxQueueSizeLimit, c.MaxQueueSize)
	}
	return nil
}

// checkEndpoint accepts the ZMQ addresses the publisher can open:
// tcp://host:port (host "*" binds every address) and ipc://path; SGLang
// also takes inproc://, which no router in another process can reach.
func checkEndpoint(key, ep string) error {
	scheme, addr, ok := strings.Cut(ep, "://")
	if !ok || addr == "" {
		return fmt.Errorf("--kv-events-config: %s %q: want tcp://HOST:PORT or ipc://PATH", key, ep)
	}
	switch scheme {
	case "ipc":
		return nil
	case "inproc":
		return fmt.Errorf("--kv-events-config: %s %q: an inproc:// socket reaches only threads of the same process, where no router runs; use tcp:// or ipc://", key, ep)
	case "tcp":
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			return fmt.Errorf("--kv-events-config: %s %q: %v", key, ep, err)
		}
		if n, err := strconv.Atoi(port); port != "*" && (err != nil || n < 0 || n > 65535) {
			return fmt.Errorf("--kv-events-config: %s %q: port %q is not in 0..65535", key, ep, port)
		}
		return nil
	}
	return fmt.Errorf("--kv-events-config: %s %q: unknown transport %q (tcp or ipc)", key, ep, scheme)
}

// Binds reports whether the replica binds the PUB endpoint (and
// subscribers connect to it) rather than connecting to a subscriber that
// binds: the "bind" key when given, else SGLang's rule
// (disaggregation/kv_events.py): a host of "*", "::" or "0.0.0.0", or an
// ipc:// address.
func (c Config) Binds() bool {
	if c.Bind != nil {
		return *c.Bind
	}
	ep := c.Endpoint
	return strings.Contains(ep, "*") || strings.Contains(ep, "::") || strings.Contains(ep, "0.0.0.0") ||
		strings.HasPrefix(ep, "ipc://")
}

// RouterTopic is the topic the llm-d router reads a replica's identity
// and model from: kv@<host>:<port>@<served model name>, host and port
// being the replica's HTTP address as the router's endpoints name it, unbracketed.
// SGLang sets no such topic itself; sglmock fleet gives it to every replica.
func RouterTopic(host string, port int, model string) string {
	return "kv@" + host + ":" + strconv.Itoa(port) + "@" + model
}

// TopicOr returns the configured topic, or def when the config has none.
func (c Config) TopicOr(def string) string {
	if c.Topic != nil {
		return *c.Topic
	}
	return def
}

// ForRank is the config of the publisher of attention-DP rank rank, as
// SGLang's ZmqEventPublisher makes it (offset_endpoint_port, applied to
// the endpoint and the replay endpoint): rank 0's is the config itself; a
// tcp:// port is offset by the rank; an inproc:// name gets "_dp" and the
// rank; any other endpoint is refused with SGLang's error. Its batches
// carry the rank.
func (c Config) ForRank(rank int) (Config, error) {
	c.dpRank = rank
	ep, err := offsetEndpoint(c.Endpoint, rank)
	if err != nil {
		return Config{}, err
	}
	c.Endpoint = ep
	if c.ReplayEndpoint != nil {
		replay, err := offsetEndpoint(*c.ReplayEndpoint, rank)
		if err != nil {
			return Config{}, err
		}
		c.ReplayEndpoint = &replay
	}
	return c, nil
}

// offsetEndpoint is SGLang's offset_endpoint_port.
func offsetEndpoint(ep string, rank int) (string, error) {
	switch {
	case ep == "" || rank == 0:
		return ep, nil
	case strings.Contains(ep, "inproc"):
		return fmt.Sprintf("%s_dp%d", ep, rank), nil
	case strings.Contains(ep, "tcp"):
		i := strings.LastIndexByte(ep, ':')
		if i < 0 {
			return ep, nil
		}
		port, err := strconv.Atoi(ep[i+1:])
		if err != nil {
			return "", fmt.Errorf("--kv-events-config: endpoint %q: the port is no integer, so DP rank %d's cannot be offset", ep, rank)
		}
		return fmt.Sprintf("%s:%d", ep[:i], port+rank), nil
	}
	return "", fmt.Errorf("--kv-events-config: endpoint %q for DP rank %d: Invalid endpoint: must contain 'inproc' or 'tcp' (SGLang offsets each rank's port)", ep, rank)
}

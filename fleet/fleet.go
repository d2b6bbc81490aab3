package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"

	"go.yaml.in/yaml/v3"

	"github.com/sglmock/sglmock/mockserver/kvevents"
	"github.com/sglmock/sglmock/sim"
)

// Layouts: distinct loopback addresses, or one address and consecutive
// ports.
const (
	LayoutAddresses = "addresses"
	LayoutPorts     = "ports"
)

// MaxReplicas bounds a fleet: 127.0.0.1 to 127.0.0.254.
const MaxReplicas = 254

// RouterKVEndpoint is where replicas connect their KV events by default:
// the router binds it.
const RouterKVEndpoint = "tcp://127.0.0.1:5557"

// EngineType is the llm-d label value that selects SGLang's metric names.
const EngineType = "sglang"

// Replica is one server of the fleet.
type Replica struct {
	Name string
	Host string
	Port int
	// KVEvents is the replica's --kv-events-config; Topic its resolved topic.
	KVEvents kvevents.Config
	Topic    string
}

// Addr is the replica's host:port.
func (r Replica) Addr() string { return net.JoinHostPort(r.Host, strconv.Itoa(r.Port)) }

// Plan lays out n replicas of model. kv is the KV event config the user
// gave, or nil for the default (every replica connects to
// RouterKVEndpoint).
func Plan(n int, layout, host string, basePort int, model string, kv *kvevents.Config) ([]Replica, error) {
	switch {
	case n < 1 || n > MaxReplicas:
		return nil, fmt.Errorf("--replicas %d: must be in 1..%d", n, MaxReplicas)
	case layout != LayoutAddresses && layout != LayoutPorts:
		return nil, fmt.Errorf("--layout %q: %s or %s", layout, LayoutAddresses, LayoutPorts)
	case basePort < 0 || basePort > 65535:
		return nil, fmt.Errorf("--port %d: must be in 0..65535 (0: any free port)", basePort)
	case layout == LayoutPorts && basePort > 0 && basePort+n-1 > 65535:
		return nil, fmt.Errorf("--port %d: replicas need ports %d..%d", basePort, basePort, basePort+n-1)
	}
	if strings.Contains(model, "@") {
		return nil, fmt.Errorf("served model name %q: the KV events' topic kv@HOST:PORT@MODEL cannot hold an @", model)
	}
	base := kvevents.Config{Publisher: "zmq", Endpoint: RouterKVEndpoint, BufferSteps: kvevents.DefaultBufferSteps,
		HWM: kvevents.DefaultHWM, MaxQueueSize: kvevents.DefaultMaxQueueSize}
	if kv != nil {
		base = *kv
	}
	if base.Binds() {
		// The router's configuration takes events on one endpoint it binds;
		// replicas that bind would need it to connect to each of them.
		return nil, fmt.Errorf("--kv-events-config endpoint %s binds: in a fleet the router binds one endpoint and every replica "+
			"connects to it; leave out --kv-events-config (tcp://127.0.0.1:5557) or give the endpoint the router binds, tcp://HOST:PORT", base.Endpoint)
	}
	out := make([]Replica, n)
	for i := range out {
		r := Replica{Name: fmt.Sprintf("sglmock-%d", i), Host: host, Port: basePort + i}
		if basePort == 0 {
			r.Port = 0 // each takes a free port
		}
		if layout == LayoutAddresses {
			r.Host, r.Port = fmt.Sprintf("127.0.0.%d", i+1), basePort
		}
		r.KVEvents = base
		if base.ReplayEndpoint != nil {
			ep, err := offsetPort(*base.ReplayEndpoint, i)
			if err != nil {
				return nil, err
			}
			r.KVEvents.ReplayEndpoint = &ep
		}
		r.Topic = base.TopicOr(kvevents.DefaultTopic(r.Host, r.Port, model))
		out[i] = r
	}
	return out, nil
}

// offsetPort adds i to a tcp endpoint's port (SGLang's
// offset_endpoint_port); an ipc or inproc name gets "_dp<i>" after index 0.
func offsetPort(ep string, i int) (string, error) {
	if i == 0 {
		return ep, nil
	}
	if !strings.HasPrefix(ep, "tcp://") {
		return ep + "_dp" + strconv.Itoa(i), nil
	}
	at := strings.LastIndex(ep, ":")
	port, err := strconv.Atoi(ep[at+1:])
	if err != nil || port+i > 65535 {
		return "", fmt.Errorf("kv events endpoint %s: cannot offset its port by %d", ep, i)
	}
	return ep[:at+1] + strconv.Itoa(port+i), nil
}

// endpointsFile is the llm-d router's file-discovery schema.
type endpointsFile struct {
	Endpoints []endpointEntry `yaml:"endpoints"`
}

type endpointEntry struct {
	Name      string            `yaml:"name"`
	Namespace string            `yaml:"namespace"`
	Address   string            `yaml:"address"`
	Port      string            `yaml:"port"`
	Labels    map[string]string `yaml:"labels"`
}

// EndpointsYAML is the llm-d router's endpoints file for the replicas.
func EndpointsYAML(replicas []Replica) ([]byte, error) {
	var f endpointsFile
	for _, r := range replicas {
		f.Endpoints = append(f.Endpoints, endpointEntry{
			Name: r.Name, Namespace: "default", Address: r.Host, Port: strconv.Itoa(r.Port),
			Labels: map[string]string{"llm-d.ai/engine-type": EngineType, "app.kubernetes.io/name": "sglmock"},
		})
	}
	return yaml.Marshal(f)
}

// ReadEndpoints reads an endpoints file back, as the router's
// file-discovery plugin does: each address a literal IP and each port a
// string of 1..65535.
func ReadEndpoints(b []byte) ([]Replica, error) {
	var f endpointsFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		return nil, err
	}
	var out []Replica
	for _, e := range f.Endpoints {
		port, err := strconv.Atoi(e.Port)
		if net.ParseIP(e.Address) == nil || err != nil || port < 1 || port > 65535 {
			return nil, fmt.Errorf("endpoint %q: address %q and port %q must be an IP and 1..65535", e.Name, e.Address, e.Port)
		}
		out = append(out, Replica{Name: e.Name, Host: e.Address, Port: port})
	}
	if len(out) == 0 {
		return nil, errors.New("no endpoints")
	}
	return out, nil
}

// RouterOptions are what the router configuration depends on.
type RouterOptions struct {
	EndpointsPath string // absolute path of the endpoints file
	Model         string // the served model name
	PageSize      int    // the replicas' page size: the router's block size
	KVEndpoint    string // the endpoint the router binds for KV events
	RenderURL     string // a replica's base URL, for the token-producer
}

// RouterConfig is an EndpointPickerConfig for the llm-d router over the
// fleet, in the router's own YAML.
func RouterConfig(o RouterOptions) ([]byte, error) {
	type plugin struct {
		Name       string `yaml:"name,omitempty"`
		Type       string `yaml:"type"`
		Parameters any    `yaml:"parameters,omitempty"`
	}
	type ref struct {
		PluginRef string `yaml:"pluginRef"`
		Weight    int    `yaml:"weight,omitempty"`
	}
	cfg := map[string]any{
		"apiVersion": "inference.networking.x-k8s.io/v1alpha1",
		"kind":       "EndpointPickerConfig",
		"plugins": []plugin{
			{Name: "file-discovery", Type: "file-discovery", Parameters: map[string]any{"path": o.EndpointsPath, "watchFile": true}},
			{Name: "token-producer", Type: "token-producer", Parameters: map[string]any{
				"modelName": o.Model, "vllm": map[string]any{"http": o.RenderURL}}},
			{Name: "precise-prefix-cache-scorer", Type: "precise-prefix-cache-scorer", Parameters: map[string]any{
				"tokenProcessorConfig": map[string]any{"blockSize": o.PageSize},
				"kvEventsConfig": map[string]any{
					"zmqEndpoint": o.KVEndpoint, "topicFilter": "kv@", "engineType": EngineType, "discoverPods": false,
				},
			}},
			{Name: "queue-scorer", Type: "queue-scorer"},
			{Name: "kv-cache-utilization-scorer", Type: "kv-cache-utilization-scorer"},
			{Name: "max-score-picker", Type: "max-score-picker"},
		},
		"schedulingProfiles": []map[string]any{{
			"name": "default",
			"plugins": []ref{
				{PluginRef: "precise-prefix-cache-scorer", Weight: 3},
				{PluginRef: "queue-scorer", Weight: 2},
				{PluginRef: "kv-cache-utilization-scorer", Weight: 2},
				{PluginRef: "max-score-picker"},
			},
		}},
		"dataLayer": map[string]any{"discovery": map[string]any{"pluginRef": "file-discovery"}},
	}
	return yaml.Marshal(cfg)
}

// RouterBindEndpoint is the endpoint the router binds for replicas that
// connect to endpoint: the same port on every address.
func RouterBindEndpoint(endpoint string) string {
	if at := strings.LastIndex(endpoint, ":"); strings.HasPrefix(endpoint, "tcp://") && at > 0 {
		return "tcp://*" + endpoint[at:]
	}
	return endpoint
}

// Table prints the replicas, one a row.
func Table(w io.Writer, replicas []Replica) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "replica\thttp\tkv events\ttopic\tground truth")
	for _, r := range replicas {
		mode := "connects to "
		if r.KVEvents.Binds() {
			mode = "binds "
		}
		fmt.Fprintf(tw, "%s\thttp://%s\t%s%s\t%s\thttp://%s/sim/requests\n", r.Name, r.Addr(), mode, r.KVEvents.Endpoint, r.Topic, r.Addr())
	}
	tw.Flush()
}

// Status is one replica's /sim/stats, or why it could not be read.
type Status struct {
	Replica
	Stats sim.Stats
	Err   error
}

// Fetch asks each replica for /sim/stats.
func Fetch(ctx context.Context, client *http.Client, replicas []Replica) []Status {
	out := make([]Status, len(replicas))
	for i, r := range replicas {
		out[i].Replica = r
		out[i].Err = get(ctx, client, "http://"+r.Addr()+"/sim/stats", &out[i].Stats)
	}
	return out
}

func get(ctx context.Context, client *http.Client, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(v)
}

// StatusTable prints each replica's load, cache and hit rate.
func StatusTable(w io.Writer, sts []Status) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "replica\thttp\trunning\tqueued\tkv used\tcache tokens\trequests\thit rate\t")
	for _, s := range sts {
		if s.Err != nil {
			fmt.Fprintf(tw, "%s\t%s\tdown: %v\t\t\t\t\t\t\n", s.Name, s.Addr(), s.Err)
			continue
		}
		st := s.Stats
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d/%d\t%d\t%d\t%.1f%%\t\n", s.Name, s.Addr(), st.Running, st.Queued,
			st.KVUsed, st.KVCapacity, st.CacheTokens, st.Requests, 100*st.HitRate)
	}
	tw.Flush()
}

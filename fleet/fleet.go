package fleet

import (
	"bytes"
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
	case layout == LayoutPorts && net.ParseIP(host) == nil:
		// The endpoints file and the topics name each replica by its
		// address: the router's file discovery takes IP addresses only.
		return nil, fmt.Errorf("--host %q: the router's endpoints file names each replica by IP address: give one, such as 127.0.0.1", host)
	}
	if strings.Contains(model, "@") {
		return nil, fmt.Errorf("served model name %q: the KV events' topic kv@HOST:PORT@MODEL cannot hold an @", model)
	}
	base := kvevents.Config{Publisher: "zmq", Endpoint: RouterKVEndpoint, BufferSteps: kvevents.DefaultBufferSteps,
		HWM: kvevents.DefaultHWM, MaxQueueSize: kvevents.DefaultMaxQueueSize}
	if kv != nil {
		base = *kv
	}
	if base.Topic != nil {
		// The router subscribes to kv@ and reads each replica's identity
		// from its topic: one topic for all would make them one endpoint.
		return nil, fmt.Errorf("--kv-events-config topic %q: in a fleet each replica publishes under its own topic, kv@HOST:PORT@MODEL, "+
			"which the router reads the replica from; leave topic out", *base.Topic)
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
		r.Topic = kvevents.RouterTopic(r.Host, r.Port, model)
		out[i] = r
	}
	return out, nil
}

// TopicFilter is the prefix of every replica's topic, which the router
// subscribes to.
const TopicFilter = "kv@"

// Listen binds every replica's HTTP address, all or none: a port that is
// taken fails the fleet before any replica starts. A replica planned on
// port 0 gets its free port here, and its topic names that port.
func Listen(replicas []Replica, model string) ([]net.Listener, error) {
	lns := make([]net.Listener, 0, len(replicas))
	for i := range replicas {
		r := &replicas[i]
		ln, err := net.Listen("tcp", r.Addr())
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return nil, fmt.Errorf("replica %s: %w; no replica started", r.Name, err)
		}
		lns = append(lns, ln)
		r.Port = ln.Addr().(*net.TCPAddr).Port
		r.Topic = kvevents.RouterTopic(r.Host, r.Port, model)
	}
	return lns, nil
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
	return marshalYAML(f)
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

// RouterAPIVersion is the EndpointPickerConfig's current apiVersion (the
// router still reads inference.networking.x-k8s.io/v1alpha1, with a
// deprecation warning).
const RouterAPIVersion = "llm-d.ai/v1alpha1"

// The router configuration's plugins, by name. Each plugin's name is its
// type: names are what the profile and the data layer refer to.
const (
	pluginDiscovery     = "file-discovery"
	pluginTokens        = "token-producer"
	pluginPrefixIndex   = "precise-prefix-cache-producer"
	pluginPrefixScorer  = "prefix-cache-scorer"
	pluginQueueScorer   = "queue-scorer"
	pluginKVUtilScorer  = "kv-cache-utilization-scorer"
	pluginPicker        = "max-score-picker"
	pluginMetricsSource = "metrics-data-source"
	pluginMetrics       = "core-metrics-extractor"
)

// SGLangMetrics is the sglang: metric mapping the router's
// core-metrics-extractor uses for endpoints labelled
// llm-d.ai/engine-type: sglang. It is the router's built-in sglang mapping
// less its cacheInfoSpec (sglang:cache_config_info), a series SGLang does
// not export: the built-in one fails on every scrape of every endpoint.
var SGLangMetrics = EngineMetrics{
	Name:                EngineType,
	QueuedRequestsSpec:  "sglang:num_queue_reqs",
	RunningRequestsSpec: "sglang:num_running_reqs",
	KVUsageSpec:         "sglang:token_usage",
	CacheInfoSpec:       "",
}

// EngineMetrics is one engine's entry in the core-metrics-extractor's
// engineConfigs: which series give the queue, the running requests and
// the KV usage. An empty CacheInfoSpec turns the cache-info lookup off.
type EngineMetrics struct {
	Name                string `yaml:"name"`
	QueuedRequestsSpec  string `yaml:"queuedRequestsSpec"`
	RunningRequestsSpec string `yaml:"runningRequestsSpec"`
	KVUsageSpec         string `yaml:"kvUsageSpec"`
	CacheInfoSpec       string `yaml:"cacheInfoSpec"`
}

// The EndpointPickerConfig, in the router's key order and spelling.
type (
	routerConfig struct {
		APIVersion         string              `yaml:"apiVersion"`
		Kind               string              `yaml:"kind"`
		Plugins            []routerPlugin      `yaml:"plugins"`
		SchedulingProfiles []schedulingProfile `yaml:"schedulingProfiles"`
		DataLayer          dataLayer           `yaml:"dataLayer"`
	}
	routerPlugin struct {
		Name       string `yaml:"name"`
		Type       string `yaml:"type"`
		Parameters any    `yaml:"parameters,omitempty"`
	}
	schedulingProfile struct {
		Name    string      `yaml:"name"`
		Plugins []pluginRef `yaml:"plugins"`
	}
	pluginRef struct {
		PluginRef string `yaml:"pluginRef"`
		Weight    int    `yaml:"weight,omitempty"`
	}
	dataLayer struct {
		// InjectDefaults false keeps the loader from adding its default
		// metrics source, whose extractor would use the built-in sglang
		// mapping again.
		InjectDefaults bool          `yaml:"injectDefaults"`
		Discovery      pluginRefOnly `yaml:"discovery"`
		Sources        []dataSource  `yaml:"sources"`
	}
	pluginRefOnly struct {
		PluginRef string `yaml:"pluginRef"`
	}
	dataSource struct {
		PluginRef  string          `yaml:"pluginRef"`
		Extractors []pluginRefOnly `yaml:"extractors"`
	}
	fileDiscoveryParams struct {
		Path      string `yaml:"path"`
		WatchFile bool   `yaml:"watchFile"`
	}
	tokenProducerParams struct {
		ModelName string `yaml:"modelName"`
		VLLM      struct {
			URL string `yaml:"url"`
		} `yaml:"vllm"`
	}
	prefixIndexParams struct {
		TokenProcessorConfig struct {
			BlockSizeTokens int `yaml:"blockSizeTokens"`
		} `yaml:"tokenProcessorConfig"`
		IndexerConfig struct {
			KVBlockIndexConfig struct {
				EnableMetrics bool `yaml:"enableMetrics"`
			} `yaml:"kvBlockIndexConfig"`
		} `yaml:"indexerConfig"`
		KVEventsConfig struct {
			ZMQEndpoint  string `yaml:"zmqEndpoint"`
			TopicFilter  string `yaml:"topicFilter"`
			EngineType   string `yaml:"engineType"`
			DiscoverPods bool   `yaml:"discoverPods"`
		} `yaml:"kvEventsConfig"`
	}
	prefixScorerParams struct {
		PrefixMatchInfoProducerName string `yaml:"prefixMatchInfoProducerName"`
	}
	metricsParams struct {
		EngineConfigs []EngineMetrics `yaml:"engineConfigs"`
	}
)

// RouterConfig is an EndpointPickerConfig for the llm-d router (v0.10)
// over the fleet: file discovery watching the endpoints file; the
// token-producer rendering each prompt through a replica's render
// endpoint; the precise-prefix-cache-producer indexing the replicas' KV
// events (engine type sglang, block size the page size, index metrics on)
// for the prefix-cache-scorer; the queue and KV-utilization scorers over
// the sglang: metrics; the max-score picker.
func RouterConfig(o RouterOptions) ([]byte, error) {
	tokens := tokenProducerParams{ModelName: o.Model}
	tokens.VLLM.URL = o.RenderURL
	var index prefixIndexParams
	index.TokenProcessorConfig.BlockSizeTokens = o.PageSize
	index.IndexerConfig.KVBlockIndexConfig.EnableMetrics = true
	index.KVEventsConfig.ZMQEndpoint = o.KVEndpoint
	index.KVEventsConfig.TopicFilter = TopicFilter
	index.KVEventsConfig.EngineType = EngineType
	cfg := routerConfig{
		APIVersion: RouterAPIVersion,
		Kind:       "EndpointPickerConfig",
		Plugins: []routerPlugin{
			{Name: pluginDiscovery, Type: pluginDiscovery, Parameters: fileDiscoveryParams{Path: o.EndpointsPath, WatchFile: true}},
			{Name: pluginTokens, Type: pluginTokens, Parameters: tokens},
			{Name: pluginPrefixIndex, Type: pluginPrefixIndex, Parameters: index},
			{Name: pluginPrefixScorer, Type: pluginPrefixScorer, Parameters: prefixScorerParams{PrefixMatchInfoProducerName: pluginPrefixIndex}},
			{Name: pluginQueueScorer, Type: pluginQueueScorer},
			{Name: pluginKVUtilScorer, Type: pluginKVUtilScorer},
			{Name: pluginPicker, Type: pluginPicker},
			{Name: pluginMetricsSource, Type: pluginMetricsSource},
			{Name: pluginMetrics, Type: pluginMetrics, Parameters: metricsParams{EngineConfigs: []EngineMetrics{SGLangMetrics}}},
		},
		SchedulingProfiles: []schedulingProfile{{
			Name: "default",
			Plugins: []pluginRef{
				{PluginRef: pluginPrefixScorer, Weight: 3},
				{PluginRef: pluginQueueScorer, Weight: 2},
				{PluginRef: pluginKVUtilScorer, Weight: 2},
				{PluginRef: pluginPicker},
			},
		}},
		DataLayer: dataLayer{
			Discovery: pluginRefOnly{PluginRef: pluginDiscovery},
			Sources:   []dataSource{{PluginRef: pluginMetricsSource, Extractors: []pluginRefOnly{{PluginRef: pluginMetrics}}}},
		},
	}
	return marshalYAML(cfg)
}

// marshalYAML writes v as YAML indented by two spaces, as the router's own
// samples are.
func marshalYAML(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// RouterBindEndpoint is the endpoint the router binds for replicas that
// connect to endpoint: the same one when its host is a loopback address
// (router and replicas on one machine), else the same port on every
// address (the replicas may reach the router through an address it does
// not own, such as a Service's).
func RouterBindEndpoint(endpoint string) string {
	at := strings.LastIndex(endpoint, ":")
	if !strings.HasPrefix(endpoint, "tcp://") || at < 0 {
		return endpoint
	}
	if ip := net.ParseIP(strings.Trim(endpoint[len("tcp://"):at], "[]")); ip != nil && ip.IsLoopback() {
		return endpoint
	}
	return "tcp://*" + endpoint[at:]
}

// RouterCommand is the command line that starts the llm-d router's
// endpoint picker (v0.10) on the fleet's configuration without
// Kubernetes: a pool name is required (any name: in file-discovery mode
// it only labels metrics and logs), ext_proc is served as plain gRPC
// (an Envoy that speaks TLS to it drops --secure-serving=false), and
// tracing is off (it prints spans on stdout by default).
func RouterCommand(eppConfigPath string) string {
	return "epp --config-file " + eppConfigPath + " --pool-name sglmock --pool-namespace local --secure-serving=false --tracing=false"
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
			// The error ends the line, out of the columns, which it would
			// otherwise widen for every row.
			fmt.Fprintf(tw, "%s\t%s\t  down: %v\n", s.Name, s.Addr(), s.Err)
			continue
		}
		st := s.Stats
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d/%d\t%d\t%d\t%.1f%%\t\n", s.Name, s.Addr(), st.Running, st.Queued,
			st.KVUsed, st.KVCapacity, st.CacheTokens, st.Requests, 100*st.HitRate)
	}
	tw.Flush()
}

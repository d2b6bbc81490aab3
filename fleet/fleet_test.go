package fleet

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/kvevents"
	"github.com/sglmock/sglmock/mockserver/mocktest"
	"github.com/sglmock/sglmock/sim"
)

func TestPlan(t *testing.T) {
	rs, err := Plan(3, LayoutAddresses, "127.0.0.1", 30000, "org/m", nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rs {
		got = append(got, r.Name+" "+r.Addr()+" "+r.KVEvents.Endpoint+" "+r.Topic)
	}
	want := "sglmock-0 127.0.0.1:30000 tcp://127.0.0.1:5557 kv@127.0.0.1:30000@org/m|" +
		"sglmock-1 127.0.0.2:30000 tcp://127.0.0.1:5557 kv@127.0.0.2:30000@org/m|" +
		"sglmock-2 127.0.0.3:30000 tcp://127.0.0.1:5557 kv@127.0.0.3:30000@org/m"
	if strings.Join(got, "|") != want {
		t.Errorf("addresses:\n got %s\nwant %s", strings.Join(got, "|"), want)
	}

	// A connecting config with a replay socket, which each replica binds:
	// replay ports offset by the replica's index.
	replay := "tcp://*:6000"
	kv := kvevents.Config{Publisher: "zmq", Endpoint: "tcp://10.0.0.9:5557", ReplayEndpoint: &replay, MaxQueueSize: 10}
	rs, err = Plan(3, LayoutPorts, "127.0.0.1", 30000, "m", &kv)
	if err != nil {
		t.Fatal(err)
	}
	got = nil
	for _, r := range rs {
		got = append(got, r.Addr()+" "+r.KVEvents.Endpoint+" "+*r.KVEvents.ReplayEndpoint)
	}
	if want := "127.0.0.1:30000 tcp://10.0.0.9:5557 tcp://*:6000|127.0.0.1:30001 tcp://10.0.0.9:5557 tcp://*:6001|127.0.0.1:30002 tcp://10.0.0.9:5557 tcp://*:6002"; strings.Join(got, "|") != want {
		t.Errorf("ports, replay:\n got %s\nwant %s", strings.Join(got, "|"), want)
	}
	// Replicas that bind would leave the router one endpoint per replica
	// to connect to: refused.
	// A topic of the user's would be every replica's: refused.
	topic := "kv@shared"
	withTopic := kvevents.Config{Publisher: "zmq", Endpoint: "tcp://10.0.0.9:5557", Topic: &topic, MaxQueueSize: 10}
	if _, err := Plan(2, LayoutAddresses, "127.0.0.1", 30000, "m", &withTopic); err == nil || !strings.Contains(err.Error(), `--kv-events-config topic "kv@shared": in a fleet each replica publishes under its own topic`) {
		t.Errorf("a topic for every replica: got %v, want it refused", err)
	}
	binds := kvevents.Config{Publisher: "zmq", Endpoint: "tcp://*:5557", MaxQueueSize: 10}
	if _, err := Plan(3, LayoutAddresses, "127.0.0.1", 30000, "m", &binds); err == nil || !strings.Contains(err.Error(), "tcp://*:5557 binds") {
		t.Errorf("a binding endpoint: got %v, want it refused", err)
	}

	// The endpoints file takes IP addresses only: a host name would give
	// the router, and fleet status, a file they refuse.
	if _, err := Plan(2, LayoutPorts, "localhost", 30000, "m", nil); err == nil ||
		err.Error() != `--host "localhost": the router's endpoints file names each replica by IP address: give one, such as 127.0.0.1` {
		t.Errorf("--layout ports --host localhost: got %v, want it refused", err)
	}
	if _, err := Plan(2, LayoutAddresses, "localhost", 30000, "m", nil); err != nil {
		t.Errorf("--layout addresses ignores --host: got %v", err)
	}

	for _, tt := range []struct {
		n             int
		layout, model string
		port          int
		wantErr       string
	}{
		{0, LayoutAddresses, "m", 1, "--replicas 0"},
		{255, LayoutAddresses, "m", 1, "--replicas 255"},
		{2, "hosts", "m", 1, `--layout "hosts"`},
		{2, LayoutPorts, "m", 65535, "replicas need ports 65535..65536"},
		{2, LayoutAddresses, "a@b", 1, "cannot hold an @"},
	} {
		if _, err := Plan(tt.n, tt.layout, "127.0.0.1", tt.port, tt.model, nil); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("Plan(%d, %s, %d, %s): got %v, want %q", tt.n, tt.layout, tt.port, tt.model, err, tt.wantErr)
		}
	}
}

// The files for the router: the goldens, decoded strictly against the
// router's schema (routerschema_test.go) and checked for what it would
// warn about.
func TestRouterFiles(t *testing.T) {
	rs, err := Plan(2, LayoutAddresses, "127.0.0.1", 30000, "org/m", nil)
	if err != nil {
		t.Fatal(err)
	}
	eps, err := EndpointsYAML(rs)
	if err != nil {
		t.Fatal(err)
	}
	mocktest.Golden(t, "endpoints.yaml", eps)
	if err := checkEndpoints(eps); err != nil {
		t.Errorf("endpoints.yaml: %v", err)
	}
	back, err := ReadEndpoints(eps)
	if err != nil || len(back) != 2 || back[1].Addr() != "127.0.0.2:30000" {
		t.Errorf("ReadEndpoints: %v %v", back, err)
	}
	if _, err := ReadEndpoints([]byte("endpoints:\n- {name: a, address: localhost, port: '1'}\n")); err == nil {
		t.Error("a host name: no error (the router's file discovery takes IP addresses only)")
	}
	cfg := routerConfigFor(t)
	mocktest.Golden(t, "epp.yaml", cfg)
	if err := checkRouterConfig(cfg); err != nil {
		t.Errorf("epp.yaml against the router's schema: %v", err)
	}
}

func routerConfigFor(t *testing.T) []byte {
	t.Helper()
	cfg, err := RouterConfig(RouterOptions{EndpointsPath: "/run/fleet/endpoints.yaml", Model: "org/m", PageSize: 16,
		KVEndpoint: RouterBindEndpoint(RouterKVEndpoint), RenderURL: "http://127.0.0.1:30000"})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// The schema check fails on each thing the router refuses or warns about,
// each change made to the generated config.
func TestRouterSchemaRejects(t *testing.T) {
	cfg := string(routerConfigFor(t))
	for _, tt := range []struct {
		name, old, new, wantErr string
	}{
		{"vllm.http, the router's 'unknown field \"http\"'", "url: http://127.0.0.1:30000", "http: http://127.0.0.1:30000",
			"field http not found in type struct"},
		{"deprecated apiVersion", "apiVersion: llm-d.ai/v1alpha1", "apiVersion: inference.networking.x-k8s.io/v1alpha1",
			"apiVersion inference.networking.x-k8s.io/v1alpha1 is deprecated"},
		{"deprecated blockSize", "blockSizeTokens: 16", "blockSizeTokens: 16\n        blockSize: 16",
			"tokenProcessorConfig.blockSize is deprecated"},
		{"deprecated scorer type", "type: precise-prefix-cache-producer", "type: precise-prefix-cache-scorer",
			"type precise-prefix-cache-scorer is deprecated"},
		{"default metrics source injected", "injectDefaults: false", "injectDefaults: true", "dataLayer.injectDefaults is not false"},
		{"the built-in sglang cache info", `cacheInfoSpec: ""`, "cacheInfoSpec: sglang:cache_config_info", `needs cacheInfoSpec: ""`},
		{"no cacheInfoSpec", "\n          cacheInfoSpec: \"\"", "", `needs cacheInfoSpec: ""`},
		{"a scorer without its producer", "prefixMatchInfoProducerName: precise-prefix-cache-producer", "prefixMatchInfoProducerName: other",
			`prefixMatchInfoProducerName: no plugin named "other"`},
		{"pods discovered in file mode", "discoverPods: false", "discoverPods: true", "file discovery with discoverPods true"},
		{"vllm's events", "engineType: sglang", "engineType: vllm", "kvEventsConfig needs engineType sglang"},
		{"an unknown top-level key", "kind: EndpointPickerConfig", "kind: EndpointPickerConfig\nparser: {pluginRef: x}", "parser: deprecated or unknown"},
		{"a profile naming no plugin", "pluginRef: queue-scorer\n", "pluginRef: queue\n", `schedulingProfiles[default]: no plugin named "queue"`},
	} {
		changed := strings.Replace(cfg, tt.old, tt.new, 1)
		if changed == cfg {
			t.Fatalf("%s: %q is not in the generated config", tt.name, tt.old)
		}
		if err := checkRouterConfig([]byte(changed)); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: got %v, want an error with %q", tt.name, err, tt.wantErr)
		}
	}
}

// Every EndpointPickerConfig in docs/fleet.md passes the same check: the
// Kubernetes one with its per-pod subscribers wired.
func TestDocsRouterConfigs(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "fleet.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllSubmatch(b, -1)
	n := 0
	for _, m := range blocks {
		if !bytes.Contains(m[1], []byte("kind: EndpointPickerConfig")) {
			continue
		}
		n++
		if err := checkRouterConfig(m[1]); err != nil {
			t.Errorf("docs/fleet.md, EndpointPickerConfig %d:\n%s\n%v", n, m[1], err)
		}
	}
	if n < 2 {
		t.Errorf("docs/fleet.md has %d EndpointPickerConfigs, want the fleet's and the Kubernetes one", n)
	}
}

// The metric mapping names series the mock exports, each a gauge: the
// router's extractor finds them all (no extract error). SGLang's scheduler
// sets its gauges at its first log point, which a served replica's warmup
// request reaches before it is ready; here one request does.
func TestSGLangMetricsExported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{Speedup: 1, EnableMetrics: true})
		if code, body, _ := m.Do(t, "POST", "/generate", `{"text": "The capital city of France is", "sampling_params": {"max_new_tokens": 8}}`); code != 200 {
			t.Fatalf("/generate: %d %s", code, body)
		}
		code, body, _ := m.Do(t, "GET", "/metrics", "")
		if code != 200 {
			t.Fatalf("/metrics: %d", code)
		}
		for _, spec := range []string{SGLangMetrics.QueuedRequestsSpec, SGLangMetrics.RunningRequestsSpec, SGLangMetrics.KVUsageSpec} {
			if !strings.Contains(body, "\n# TYPE "+spec+" gauge\n") || !regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(spec)+`(\{[^}]*\})? `).MatchString(body) {
				t.Errorf("%s: not a gauge with a sample in /metrics", spec)
			}
		}
	})
}

// A replica that does not answer says why at the end of its row, and the
// other rows keep their columns.
func TestStatusTable(t *testing.T) {
	var b bytes.Buffer
	StatusTable(&b, []Status{
		{Replica: Replica{Name: "sglmock-0", Host: "127.0.0.1", Port: 30000},
			Stats: sim.Stats{Running: 1, KVUsed: 2048, KVCapacity: 262144, CacheTokens: 1407, Requests: 12, HitRate: 0.5}},
		{Replica: Replica{Name: "sglmock-1", Host: "127.0.0.2", Port: 30000},
			Err: errors.New(`Get "http://127.0.0.2:30000/sim/stats": dial tcp 127.0.0.2:30000: connect: connection refused`)},
	})
	want := "" +
		"    replica             http  running  queued      kv used  cache tokens  requests  hit rate\n" +
		"  sglmock-0  127.0.0.1:30000        1       0  2048/262144          1407        12     50.0%\n" +
		"  sglmock-1  127.0.0.2:30000  down: Get \"http://127.0.0.2:30000/sim/stats\": dial tcp 127.0.0.2:30000: connect: connection refused\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

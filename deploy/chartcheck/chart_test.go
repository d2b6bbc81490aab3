package chartcheck

import (
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/intstr"
	kscheme "k8s.io/client-go/kubernetes/scheme"
)

const (
	chartDir    = "../helm/sglmock"
	releaseName = "ci"
	namespace   = "sglmock"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.yaml from the rendered chart")

// valueSets are the values the chart is checked with.
var valueSets = []struct{ name, file string }{
	{"default", ""},                    // the chart's own values.yaml
	{"all-on", "testdata/all-on.yaml"}, // every option on
}

func readValues(t *testing.T, file string) map[string]any {
	t.Helper()
	if file == "" {
		return map[string]any{}
	}
	v, err := chartutil.ReadValuesFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return v.AsMap()
}

// TestLint lints the chart as `helm lint --strict` does: a warning fails.
func TestLint(t *testing.T) {
	for _, vs := range valueSets {
		linter := lint.All(chartDir, readValues(t, vs.file), namespace, false)
		for _, m := range linter.Messages {
			if m.Severity >= support.WarningSev {
				t.Errorf("%s values: helm lint: %s", vs.name, m)
			}
		}
	}
}

// render renders the chart as `helm template` does (the values checked
// against values.schema.json), with templates that fail on a missing value,
// and returns the manifests as `helm template` prints them.
func render(vals map[string]any) (string, error) {
	files, err := renderFiles(vals)
	if err != nil {
		return "", err
	}
	names := make([]string, 0, len(files))
	for name := range files {
		if !strings.HasSuffix(name, "NOTES.txt") {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var out strings.Builder
	for _, name := range names {
		for _, doc := range splitDocuments(files[name]) {
			fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", name, doc)
		}
	}
	return out.String(), nil
}

// renderFiles renders every template, NOTES.txt included, by file name.
func renderFiles(vals map[string]any) (map[string]string, error) {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		return nil, err
	}
	rv, err := chartutil.ToRenderValues(chrt, vals,
		chartutil.ReleaseOptions{Name: releaseName, Namespace: namespace, Revision: 1, IsInstall: true}, nil)
	if err != nil {
		return nil, err
	}
	return engine.Engine{Strict: true}.Render(chrt, rv)
}

var documentSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// splitDocuments returns the YAML documents of a rendered file that hold
// more than white space and comments.
func splitDocuments(s string) []string {
	var docs []string
	for _, doc := range documentSeparator.Split(s, -1) {
		doc = strings.TrimSpace(doc)
		for _, line := range strings.Split(doc, "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
				docs = append(docs, doc)
				break
			}
		}
	}
	return docs
}

// decoder decodes YAML or JSON into the Kubernetes API types, and the
// Prometheus Operator's, strictly: an unknown field, a field spelled in
// another case, or a field given twice is an error.
var decoder = func() runtime.Decoder {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{kscheme.AddToScheme, monitoringv1.AddToScheme} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	return serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
}()

// manifests are the objects a release of the chart creates.
type manifests struct {
	text           string // as `helm template` prints them
	deployment     *appsv1.Deployment
	service        *corev1.Service
	configMap      *corev1.ConfigMap // nil without an inline profile
	serviceMonitor *monitoringv1.ServiceMonitor
}

// decodeManifests decodes every document strictly and sorts the objects by
// kind; a kind the chart does not make, or one made twice, is an error.
func decodeManifests(text string) (*manifests, error) {
	m := &manifests{text: text}
	var errs []string
	for _, doc := range splitDocuments(text) {
		obj, gvk, err := decoder.Decode([]byte(doc), nil, nil)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		var twice bool
		switch o := obj.(type) {
		case *appsv1.Deployment:
			twice, m.deployment = m.deployment != nil, o
		case *corev1.Service:
			twice, m.service = m.service != nil, o
		case *corev1.ConfigMap:
			twice, m.configMap = m.configMap != nil, o
		case *monitoringv1.ServiceMonitor:
			twice, m.serviceMonitor = m.serviceMonitor != nil, o
		default:
			errs = append(errs, fmt.Sprintf("%s: a kind the checks do not know", gvk))
		}
		if twice {
			errs = append(errs, fmt.Sprintf("%s: rendered twice", gvk))
		}
	}
	if m.deployment == nil || m.service == nil {
		errs = append(errs, "the release lacks its Deployment or its Service")
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return m, nil
}

// renderValueSet renders a value set and decodes the manifests strictly.
func renderValueSet(t *testing.T, name, file string) *manifests {
	t.Helper()
	text, err := render(readValues(t, file))
	if err != nil {
		t.Fatalf("%s values: helm template: %v", name, err)
	}
	m, err := decodeManifests(text)
	if err != nil {
		t.Fatalf("%s values: strict decoding:\n%v", name, err)
	}
	return m
}

// golden compares got with the file, or rewrites the file under -update.
// (sglmock's mocktest.Golden does the same in the main module, which this
// one does not import: its packages would be compiled here too.)
func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if got != string(want) {
		t.Errorf("the rendered chart differs from %s (go test -update rewrites it after review):\n%s", path, firstDifference(string(want), got))
	}
}

func firstDifference(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := range max(len(w), len(g)) {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d: got %q, want %q", i+1, gl, wl)
		}
	}
	return ""
}

// The strict decoder is what makes the checks worth anything: it must
// refuse a field Kubernetes does not have, a field in the wrong case, and a
// field given twice, each of which the API server would drop or refuse.
func TestDecoderIsStrict(t *testing.T) {
	const service = "apiVersion: v1\nkind: Service\nmetadata:\n  name: s\nspec:\n  ports:\n    - port: 80\n"
	if _, err := decodeManifests(service + "---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\n"); err != nil {
		t.Fatalf("a valid Service and Deployment: %v", err)
	}
	for name, doc := range map[string]string{
		"unknown field":      service + "  selectr:\n    app: x\n",
		"field in its case":  service + "  Selector:\n    app: x\n",
		"duplicated field":   service + "  type: ClusterIP\n  type: NodePort\n",
		"unknown kind":       "apiVersion: v1\nkind: Servize\nmetadata:\n  name: s\n",
		"wrong type":         service + "  clusterIPs: 10.0.0.1\n",
		"unknown field deep": service + "  sessionAffinityConfig:\n    clientIP:\n      timeout: 10\n",
	} {
		if _, err := decodeManifests(doc); err == nil {
			t.Errorf("%s: decoded without an error", name)
		}
	}
}

// TestTemplate renders every value set (as `helm template`), compares it
// with its golden file, and decodes every manifest strictly.
func TestTemplate(t *testing.T) {
	for _, vs := range valueSets {
		m := renderValueSet(t, vs.name, vs.file)
		golden(t, filepath.Join("testdata", vs.name+".golden.yaml"), m.text)
		checkConsistent(t, vs.name, m)
	}
}

// checkConsistent checks what holds for every value set: the objects point
// at each other, and the pod runs locked down.
func checkConsistent(t *testing.T, name string, m *manifests) {
	t.Helper()
	d := m.deployment
	pod := d.Spec.Template
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%s: %d containers, want 1", name, len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	selector, err := metav1LabelSelector(d)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if !selector.Matches(labels.Set(pod.Labels)) {
		t.Errorf("%s: the Deployment's selector %v does not select its pods %v", name, selector, pod.Labels)
	}
	if !labels.SelectorFromSet(m.service.Spec.Selector).Matches(labels.Set(pod.Labels)) {
		t.Errorf("%s: the Service's selector %v does not select the pods %v", name, m.service.Spec.Selector, pod.Labels)
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if port := flagValue(c.Args, "--port"); port != fmt.Sprint(ports["http"]) {
		t.Errorf("%s: --port %q, but the container port http is %d", name, port, ports["http"])
	}
	for _, sp := range m.service.Spec.Ports {
		if sp.TargetPort.Type != intstr.String || ports[sp.TargetPort.StrVal] == 0 {
			t.Errorf("%s: the Service's port %s targets %v, which is no container port", name, sp.Name, sp.TargetPort.String())
		}
	}
	for probe, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/health" || ports[p.HTTPGet.Port.StrVal] == 0 {
			t.Errorf("%s: the %s probe is %+v; want GET /health on a named container port", name, probe, p)
		}
	}

	// Locked down: non-root, read-only root, no privilege escalation, no
	// capability, no service account token.
	psc, sc := pod.Spec.SecurityContext, c.SecurityContext
	switch {
	case psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0:
		t.Errorf("%s: pod security context %+v: want runAsNonRoot and a non-zero runAsUser", name, psc)
	case psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("%s: pod seccomp profile %+v: want RuntimeDefault", name, psc.SeccompProfile)
	case sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Errorf("%s: container security context %+v: want a read-only root file system", name, sc)
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Errorf("%s: container security context: want allowPrivilegeEscalation false", name)
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
		t.Errorf("%s: container capabilities %+v: want drop [ALL] and nothing added", name, sc.Capabilities)
	case pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken:
		t.Errorf("%s: the pod mounts a service account token", name)
	}

	// Metrics: the scrape annotations name the http port and /metrics.
	if slices.Contains(c.Args, "--enable-metrics") {
		a := pod.Annotations
		if a["prometheus.io/scrape"] != "true" || a["prometheus.io/port"] != fmt.Sprint(ports["http"]) || a["prometheus.io/path"] != "/metrics" {
			t.Errorf("%s: scrape annotations %v: want scrape true, port %d, path /metrics", name, a, ports["http"])
		}
	}
	if sm := m.serviceMonitor; sm != nil {
		if !labels.SelectorFromSet(sm.Spec.Selector.MatchLabels).Matches(labels.Set(m.service.Labels)) {
			t.Errorf("%s: the ServiceMonitor's selector %v does not select the Service %v", name, sm.Spec.Selector.MatchLabels, m.service.Labels)
		}
		if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != m.service.Spec.Ports[0].Name || sm.Spec.Endpoints[0].Path != "/metrics" {
			t.Errorf("%s: ServiceMonitor endpoints %+v: want the Service's port %s, path /metrics", name, sm.Spec.Endpoints, m.service.Spec.Ports[0].Name)
		}
	}

	// An inline profile: the ConfigMap's file is where --profile looks.
	if m.configMap != nil {
		if len(pod.Spec.Volumes) != 1 || pod.Spec.Volumes[0].ConfigMap == nil || pod.Spec.Volumes[0].ConfigMap.Name != m.configMap.Name {
			t.Fatalf("%s: volumes %+v: want the ConfigMap %s", name, pod.Spec.Volumes, m.configMap.Name)
		}
		if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].Name != pod.Spec.Volumes[0].Name {
			t.Fatalf("%s: volume mounts %+v", name, c.VolumeMounts)
		}
		for file := range m.configMap.Data {
			if want := c.VolumeMounts[0].MountPath + "/" + file; flagValue(c.Args, "--profile") != want {
				t.Errorf("%s: --profile %q, want the mounted %q", name, flagValue(c.Args, "--profile"), want)
			}
		}
	}
}

func metav1LabelSelector(d *appsv1.Deployment) (labels.Selector, error) {
	if d.Spec.Selector == nil || len(d.Spec.Selector.MatchExpressions) > 0 {
		return nil, fmt.Errorf("the Deployment's selector %+v: want matchLabels only", d.Spec.Selector)
	}
	return labels.SelectorFromSet(d.Spec.Selector.MatchLabels), nil
}

// flagValue returns the value of a --flag=value argument, or "".
func flagValue(args []string, flag string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

// sglangKVEventsConfig is SGLang's KVEventsConfig (its --kv-events-config
// JSON): python/sglang/srt/disaggregation/kv_events.py.
type sglangKVEventsConfig struct {
	Publisher      string `json:"publisher"`
	Endpoint       string `json:"endpoint"`
	ReplayEndpoint string `json:"replay_endpoint"`
	BufferSteps    int    `json:"buffer_steps"`
	HWM            int    `json:"hwm"`
	MaxQueueSize   int    `json:"max_queue_size"`
	Topic          string `json:"topic"`
}

// TestValues checks what each value becomes: the container's arguments,
// the KV events' configuration and the objects each option adds.
func TestValues(t *testing.T) {
	def := renderValueSet(t, "default", "")
	c := def.deployment.Spec.Template.Spec.Containers[0]
	if want := []string{"--port=30000", "--profile=default", "--speedup=1", "--enable-metrics"}; !slices.Equal(c.Args, want) {
		t.Errorf("default args: got %q, want %q", c.Args, want)
	}
	if c.Image != "sglmock:0.1.0" || len(c.Env) != 0 || len(c.Ports) != 1 {
		t.Errorf("default container: image %q, env %v, ports %v; want sglmock:0.1.0, no env, one port", c.Image, c.Env, c.Ports)
	}
	if def.configMap != nil || def.serviceMonitor != nil || *def.deployment.Spec.Replicas != 1 {
		t.Errorf("default values: a ConfigMap (%v), a ServiceMonitor (%v), or %d replicas", def.configMap != nil, def.serviceMonitor != nil, *def.deployment.Spec.Replicas)
	}

	all := renderValueSet(t, "all-on", "testdata/all-on.yaml")
	c = all.deployment.Spec.Template.Spec.Containers[0]
	kvArg := c.Args[len(c.Args)-2]
	want := []string{"--port=31000", "--profile=/etc/sglmock/profile.yaml", "--speedup=100",
		"--served-model-name=sglmock/chartcheck", "--enable-metrics", kvArg, "--enable-cache-report"}
	if !slices.Equal(c.Args, want) {
		t.Errorf("all-on args: got %q, want %q", c.Args, want)
	}
	// The JSON has SGLang's keys (KVEventsConfig) and no other.
	var kv sglangKVEventsConfig
	js, ok := strings.CutPrefix(kvArg, "--kv-events-config=")
	if !ok {
		t.Fatalf("all-on: no --kv-events-config in %q", c.Args)
	}
	dec := json.NewDecoder(strings.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&kv); err != nil {
		t.Fatalf("--kv-events-config %s: %v", js, err)
	}
	if want := (sglangKVEventsConfig{"zmq", "tcp://*:5557", "tcp://*:5558", 5000, 50000, 20000, "kv@$(POD_IP):31000@sglmock/chartcheck"}); kv != want {
		t.Errorf("--kv-events-config: got %+v, want %+v", kv, want)
	}
	// $(POD_IP) is the pod's IP, from the downward API.
	if len(c.Env) != 1 || c.Env[0].Name != "POD_IP" || c.Env[0].ValueFrom == nil || c.Env[0].ValueFrom.FieldRef == nil ||
		c.Env[0].ValueFrom.FieldRef.FieldPath != "status.podIP" {
		t.Errorf("all-on env %+v: want POD_IP from status.podIP", c.Env)
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if want := map[string]int32{"http": 31000, "kv-events": 5557, "kv-replay": 5558}; !maps.Equal(ports, want) {
		t.Errorf("all-on container ports: got %v, want %v", ports, want)
	}
	inline := readValues(t, "testdata/all-on.yaml")["profile"].(map[string]any)["inline"].(string)
	if all.configMap == nil || all.configMap.Data["profile.yaml"] != inline {
		t.Errorf("all-on: the ConfigMap does not hold the inline profile as given")
	}
	if all.serviceMonitor == nil || all.serviceMonitor.Labels["release"] != "prometheus" ||
		all.serviceMonitor.Spec.Endpoints[0].Interval != "5s" || all.serviceMonitor.Spec.Endpoints[0].ScrapeTimeout != "4s" {
		t.Errorf("all-on: ServiceMonitor %+v: want labels release=prometheus, interval 5s, timeout 4s", all.serviceMonitor)
	}
	pod := all.deployment.Spec.Template
	if pod.Labels["llm-d.ai/engine-type"] != "sglang" || pod.Annotations["example.com/owner"] != "chartcheck" ||
		pod.Annotations["checksum/profile"] == "" {
		t.Errorf("all-on pod: labels %v, annotations %v: want the extra label, the extra annotation and the profile's checksum", pod.Labels, pod.Annotations)
	}
	if *all.deployment.Spec.Replicas != 3 || all.service.Spec.Type != corev1.ServiceTypeNodePort || all.service.Spec.Ports[0].Port != 8080 {
		t.Errorf("all-on: %d replicas, Service %s port %d; want 3, NodePort, 8080", *all.deployment.Spec.Replicas, all.service.Spec.Type, all.service.Spec.Ports[0].Port)
	}
}

// Values the chart refuses, each with the reason it gives.
func TestValuesRefused(t *testing.T) {
	for _, tt := range []struct {
		name, values, wantErr string
	}{
		{"a misspelled value", "speedUp: 100", "additional properties 'speedUp' not allowed"},
		{"a speedup of zero", "speedup: 0", "speedup"},
		{"a port out of range", "port: 70000", "port"},
		{"KV events without a model for the topic", "kvEvents: {enabled: true}", "set servedModelName (or kvEvents.topic)"},
		{"an endpoint that is no ZMQ address", "kvEvents: {enabled: true, endpoint: 'localhost:5557'}", "endpoint"},
	} {
		vals, err := chartutil.ReadValues([]byte(tt.values))
		if err != nil {
			t.Fatal(err)
		}
		_, err = render(vals)
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: got error %v, want one with %q", tt.name, err, tt.wantErr)
		}
	}
}

// A replica that connects to a router (no "*" in the endpoint) opens no
// port for it, and a topic given needs no model name.
func TestKVEventsConnectingToARouter(t *testing.T) {
	vals, err := chartutil.ReadValues([]byte("kvEvents: {enabled: true, endpoint: 'tcp://router.inference.svc:5557', topic: my-topic}"))
	if err != nil {
		t.Fatal(err)
	}
	text, err := render(vals)
	if err != nil {
		t.Fatal(err)
	}
	m, err := decodeManifests(text)
	if err != nil {
		t.Fatal(err)
	}
	c := m.deployment.Spec.Template.Spec.Containers[0]
	js := flagValue(c.Args, "--kv-events-config")
	var kv sglangKVEventsConfig
	if err := json.Unmarshal([]byte(js), &kv); err != nil {
		t.Fatalf("--kv-events-config %q: %v", js, err)
	}
	if kv.Endpoint != "tcp://router.inference.svc:5557" || kv.Topic != "my-topic" || kv.ReplayEndpoint != "" {
		t.Errorf("--kv-events-config %+v: want the router's endpoint, the topic given, no replay endpoint", kv)
	}
	if len(c.Ports) != 1 || c.Ports[0].Name != "http" {
		t.Errorf("container ports %+v: want http alone", c.Ports)
	}
}

// The install notes give the llm-d router's wiring when the pods bind their
// KV events (the router connects to each, which needs an
// endpoint-notification-source feeding its producer), and none when they
// connect to a router that binds.
func TestNotesKVEvents(t *testing.T) {
	for _, tt := range []struct {
		values string
		want   bool
	}{
		{"kvEvents: {enabled: true, endpoint: 'tcp://*:6000'}\nservedModelName: m", true},
		{"kvEvents: {enabled: true, endpoint: 'tcp://router.inference.svc:5557', topic: t}", false},
		{"kvEvents: {enabled: false}", false},
	} {
		vals, err := chartutil.ReadValues([]byte(tt.values))
		if err != nil {
			t.Fatal(err)
		}
		files, err := renderFiles(vals)
		if err != nil {
			t.Fatal(err)
		}
		notes := files["sglmock/templates/NOTES.txt"]
		got := strings.Contains(notes, "discoverPods: true, podDiscoveryConfig: {socketPort: 6000}}") && strings.Contains(notes, "endpoint-notification-source") &&
			strings.Contains(notes, `cacheInfoSpec: ""`)
		if got != tt.want {
			t.Errorf("values %q: router wiring in the notes %t, want %t:\n%s", tt.values, got, tt.want, notes)
		}
	}
}

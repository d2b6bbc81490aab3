package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// The Envoy types the documented configurations name in "@type": linked
// in so protojson resolves them.
var _ = []proto.Message{&hcmv3.HttpConnectionManager{}, &extprocfilterv3.ExternalProcessor{}, &routerv3.Router{},
	&upstreamhttpv3.HttpProtocolOptions{}, &tlsv3.UpstreamTlsContext{}}

// envoyBlocks returns docs/fleet.md's ```yaml blocks that contain marker.
func envoyBlocks(t *testing.T, marker string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "fleet.md"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(b), -1) {
		if strings.Contains(m[1], marker) {
			out = append(out, m[1])
		}
	}
	return out
}

// decodeEnvoy decodes Envoy YAML into m as Envoy does: an unknown field
// or an unknown "@type" fails; then the API's own constraints
// (protoc-gen-validate) are checked.
func decodeEnvoy(t *testing.T, text string, m interface {
	proto.Message
	ValidateAll() error
}) {
	t.Helper()
	var v any
	if err := yaml.Unmarshal([]byte(text), &v); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := (protojson.UnmarshalOptions{}).Unmarshal(js, m); err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	if err := m.ValidateAll(); err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
}

// The Envoy configuration in docs/fleet.md is valid Envoy (v1.37 API) and
// matches the endpoint picker's command line there: ext_proc first, to the
// picker on 127.0.0.1:9002 over plain HTTP/2 gRPC (--secure-serving=false),
// headers sent and bodies FULL_DUPLEX_STREAMED (the picker buffers the
// request body itself and answers with streamed body mutations, which
// Envoy accepts in no other mode), and the route to an ORIGINAL_DST
// cluster that takes its destination from the header the picker sets.
func TestDocsEnvoyConfig(t *testing.T) {
	blocks := envoyBlocks(t, "static_resources:")
	if len(blocks) != 1 {
		t.Fatalf("docs/fleet.md has %d Envoy bootstraps, want 1", len(blocks))
	}
	var bs bootstrapv3.Bootstrap
	decodeEnvoy(t, blocks[0], &bs)

	clusters := map[string]*clusterv3.Cluster{}
	for _, c := range bs.GetStaticResources().GetClusters() {
		clusters[c.GetName()] = c
	}
	listeners := bs.GetStaticResources().GetListeners()
	if len(listeners) != 1 || len(listeners[0].GetFilterChains()) != 1 || len(listeners[0].GetFilterChains()[0].GetFilters()) != 1 {
		t.Fatalf("want one listener with one filter chain of one filter (the HTTP connection manager)")
	}
	var hcm hcmv3.HttpConnectionManager
	if err := listeners[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	filters := hcm.GetHttpFilters()
	if len(filters) != 2 {
		t.Fatalf("%d HTTP filters, want ext_proc then the router", len(filters))
	}
	var ep extprocfilterv3.ExternalProcessor
	if err := filters[0].GetTypedConfig().UnmarshalTo(&ep); err != nil {
		t.Fatalf("the first HTTP filter is not ext_proc: %v", err)
	}
	if err := filters[1].GetTypedConfig().UnmarshalTo(&routerv3.Router{}); err != nil {
		t.Fatalf("the last HTTP filter is not the router: %v", err)
	}
	mode := ep.GetProcessingMode()
	if mode.GetRequestHeaderMode() != extprocfilterv3.ProcessingMode_SEND || mode.GetResponseHeaderMode() != extprocfilterv3.ProcessingMode_SEND ||
		mode.GetRequestBodyMode() != extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED ||
		mode.GetResponseBodyMode() != extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED ||
		mode.GetRequestTrailerMode() != extprocfilterv3.ProcessingMode_SEND || mode.GetResponseTrailerMode() != extprocfilterv3.ProcessingMode_SEND {
		t.Errorf("processing mode %v: want headers and trailers SEND, bodies FULL_DUPLEX_STREAMED", mode)
	}
	picker := clusters[ep.GetGrpcService().GetEnvoyGrpc().GetClusterName()]
	if picker == nil {
		t.Fatalf("ext_proc's cluster %q is not defined", ep.GetGrpcService().GetEnvoyGrpc().GetClusterName())
	}
	addr := picker.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
	if addr.GetAddress() != "127.0.0.1" || addr.GetPortValue() != 9002 {
		t.Errorf("ext_proc goes to %s:%d, want the picker's 127.0.0.1:9002", addr.GetAddress(), addr.GetPortValue())
	}
	if picker.GetTransportSocket() != nil {
		t.Errorf("ext_proc's cluster has a transport socket: the command line serves plain gRPC (--secure-serving=false)")
	}
	checkHTTP2(t, picker)

	routes := hcm.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()
	upstream := clusters[routes[0].GetRoute().GetCluster()]
	if upstream == nil {
		t.Fatalf("the route's cluster %q is not defined", routes[0].GetRoute().GetCluster())
	}
	if upstream.GetType() != clusterv3.Cluster_ORIGINAL_DST || upstream.GetLbPolicy() != clusterv3.Cluster_CLUSTER_PROVIDED ||
		!upstream.GetOriginalDstLbConfig().GetUseHttpHeader() || upstream.GetOriginalDstLbConfig().GetHttpHeaderName() != DestinationHeader {
		t.Errorf("the route's cluster %s: want ORIGINAL_DST, CLUSTER_PROVIDED, destination from the %s header", upstream.GetName(), DestinationHeader)
	}
}

// The TLS variant of the picker's cluster, for a picker left at
// --secure-serving=true (its self-signed certificate: no verification).
func TestDocsEnvoyTLSCluster(t *testing.T) {
	blocks := envoyBlocks(t, "UpstreamTlsContext")
	if len(blocks) != 1 {
		t.Fatalf("docs/fleet.md has %d TLS clusters for the picker, want 1", len(blocks))
	}
	var c clusterv3.Cluster
	decodeEnvoy(t, blocks[0], &c)
	var tlsCtx tlsv3.UpstreamTlsContext
	if err := c.GetTransportSocket().GetTypedConfig().UnmarshalTo(&tlsCtx); err != nil {
		t.Fatal(err)
	}
	if tlsCtx.GetCommonTlsContext().GetValidationContext().GetTrustedCa() != nil {
		t.Error("the picker's certificate is self-signed: the cluster cannot verify it against a CA")
	}
	checkHTTP2(t, &c)
}

// checkHTTP2: gRPC needs HTTP/2 to the picker.
func checkHTTP2(t *testing.T, c *clusterv3.Cluster) {
	t.Helper()
	opts, ok := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
	var po upstreamhttpv3.HttpProtocolOptions
	if !ok || opts.UnmarshalTo(&po) != nil || po.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		t.Errorf("cluster %s: want explicit HTTP/2 (gRPC)", c.GetName())
	}
}

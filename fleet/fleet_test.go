package fleet

import (
	"strings"
	"testing"

	"github.com/sglmock/sglmock/mockserver/kvevents"
	"github.com/sglmock/sglmock/mockserver/mocktest"
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
	binds := kvevents.Config{Publisher: "zmq", Endpoint: "tcp://*:5557", MaxQueueSize: 10}
	if _, err := Plan(3, LayoutAddresses, "127.0.0.1", 30000, "m", &binds); err == nil || !strings.Contains(err.Error(), "tcp://*:5557 binds") {
		t.Errorf("a binding endpoint: got %v, want it refused", err)
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
	back, err := ReadEndpoints(eps)
	if err != nil || len(back) != 2 || back[1].Addr() != "127.0.0.2:30000" {
		t.Errorf("ReadEndpoints: %v %v", back, err)
	}
	if _, err := ReadEndpoints([]byte("endpoints:\n- {name: a, address: localhost, port: '1'}\n")); err == nil {
		t.Error("a host name: no error (the router's file discovery takes IP addresses only)")
	}
	cfg, err := RouterConfig(RouterOptions{EndpointsPath: "/run/fleet/endpoints.yaml", Model: "org/m", PageSize: 16,
		KVEndpoint: RouterBindEndpoint(RouterKVEndpoint), RenderURL: "http://127.0.0.1:30000"})
	if err != nil {
		t.Fatal(err)
	}
	mocktest.Golden(t, "epp.yaml", cfg)
}

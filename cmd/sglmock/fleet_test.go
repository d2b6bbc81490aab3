package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/sglmock/sglmock/fleet"
	"github.com/sglmock/sglmock/mockserver/kvevents"
)

func TestSplitFleetFlags(t *testing.T) {
	fo, rest, err := splitFleetFlags([]string{"--replicas", "4", "--speedup", "10", "--layout=ports", "--dir", "d", "--port", "0"})
	if err != nil || fo.replicas != 4 || fo.layout != "ports" || fo.dir != "d" || strings.Join(rest, " ") != "--speedup 10 --port 0" {
		t.Errorf("got %+v %q %v", fo, rest, err)
	}
	if _, _, err := splitFleetFlags([]string{"--replicas", "x"}); err == nil {
		t.Error("--replicas x: no error")
	}
	if _, _, err := splitFleetFlags([]string{"--dir"}); err == nil {
		t.Error("--dir without a value: no error")
	}
}

// TestFleet runs three replicas on 127.0.0.1..3 on loopback, their KV
// events connecting to a subscriber that binds, as the router does: the
// files for the router, a request on one replica that only it caches, its
// events under its own topic, status, /sim/ on each, and a clean stop.
func TestFleet(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	kvPort := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	sub, err := kvevents.Subscribe(fmt.Sprintf("tcp://127.0.0.1:%d", kvPort), "kv@", true)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	dir := t.TempDir()
	o, err := parseServeFlags([]string{"--port", "0", "--speedup", "100", "--skip-server-warmup", "--served-model-name", "org/m",
		"--kv-events-config", fmt.Sprintf(`{"publisher": "zmq", "endpoint": "tcp://127.0.0.1:%d"}`, kvPort)}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	stop, cancel := context.WithCancel(context.Background())
	defer cancel()
	kill, killNow := context.WithCancel(context.Background())
	defer killNow()
	readyCh := make(chan []fleet.Replica, 1)
	done := make(chan error, 1)
	var out bytes.Buffer
	logs := &syncBuffer{}
	plan, err := planFleet(fleetOptions{replicas: 3, layout: fleet.LayoutAddresses, dir: dir}, o)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		done <- runFleetServers(stop, kill, plan, o, &out, logs, func(r []fleet.Replica) { readyCh <- r })
	}()
	var replicas []fleet.Replica
	select {
	case replicas = <-readyCh:
	case err := <-done:
		t.Fatalf("the fleet ended early: %v\n%s", err, logs.String())
	}
	for i, r := range replicas {
		if want := fmt.Sprintf("127.0.0.%d", i+1); r.Host != want || r.Topic != fmt.Sprintf("kv@%s:%d@org/m", want, r.Port) {
			t.Errorf("replica %d: %s, topic %s; want host %s", i, r.Addr(), r.Topic, want)
		}
	}

	// The endpoints file, as the router's file discovery reads it.
	b, err := os.ReadFile(filepath.Join(dir, "endpoints.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var ef struct {
		Endpoints []struct {
			Name, Namespace, Address, Port string
			Labels                         map[string]string
		}
	}
	if err := yaml.Unmarshal(b, &ef); err != nil || len(ef.Endpoints) != 3 {
		t.Fatalf("endpoints.yaml: %v\n%s", err, b)
	}
	for i, e := range ef.Endpoints {
		if e.Address != replicas[i].Host || e.Port != fmt.Sprint(replicas[i].Port) || e.Labels["llm-d.ai/engine-type"] != "sglang" {
			t.Errorf("endpoint %d: %+v", i, e)
		}
	}
	epp, err := os.ReadFile(filepath.Join(dir, "epp.yaml"))
	if err != nil || !bytes.Contains(epp, []byte("path: "+filepath.Join(dir, "endpoints.yaml"))) ||
		!bytes.Contains(epp, []byte(fmt.Sprintf("zmqEndpoint: tcp://127.0.0.1:%d\n", kvPort))) ||
		!bytes.Contains(epp, []byte("blockSizeTokens: 1\n")) || !bytes.Contains(epp, []byte("url: http://"+replicas[0].Addr()+"\n")) {
		t.Errorf("epp.yaml (%v):\n%s", err, epp)
	}
	if want := "  epp --config-file " + filepath.Join(dir, "epp.yaml") + " --pool-name sglmock --pool-namespace local --secure-serving=false --tracing=false\n"; !strings.Contains(out.String(), "sglmock-2  http://127.0.0.3:") ||
		!strings.Contains(out.String(), want) {
		t.Errorf("table and router command line:\n%s\nwant the line %q", out.String(), want)
	}
	// Each replica's KV events config names its topic explicitly, as
	// /server_info shows it.
	var info struct {
		KVEventsConfig string `json:"kv_events_config"`
	}
	resp, err := http.Get("http://" + replicas[2].Addr() + "/server_info")
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/server_info: %d %v", resp.StatusCode, err)
	}
	if want := fmt.Sprintf(`"topic":"kv@127.0.0.3:%d@org/m"`, replicas[2].Port); !strings.Contains(info.KVEventsConfig, want) {
		t.Errorf("replica 2's kv_events_config %s: want %s in it", info.KVEventsConfig, want)
	}

	// A prompt on replica 1 is cached there only, and announced under its
	// topic.
	r1 := "http://" + replicas[1].Addr()
	msgs := kvMessages(t, sub, replicas[1].Topic)
	handshake(t, r1, msgs)
	for range 2 {
		post(t, r1+"/generate", `{"input_ids": [1100, 1101, 1102, 1103], "sampling_params": {"max_new_tokens": 1}}`)
	}
	for seen := false; !seen; {
		for _, e := range (<-msgs).Events {
			seen = seen || (e.Kind == kvevents.BlockStored && e.Tokens[0] == 1100)
		}
	}
	var status bytes.Buffer
	if code := runFleetStatus([]string{"--dir", dir}, &status, io.Discard); code != 0 {
		t.Fatalf("fleet status: exit %d\n%s", code, status.String())
	}
	// Replica 1 served both requests; the second reused 3 of 4 prompt
	// tokens: 3 of 8, 37.5 %. The others served none.
	lines := strings.Split(strings.TrimSpace(status.String()), "\n")
	row := func(i int) string { return strings.Join(strings.Fields(lines[i])[2:], " ") }
	if len(lines) != 4 || row(1) != "0 0 0/262144 0 0 0.0%" || row(2) != "0 0 0/262144 4 2 37.5%" || row(3) != "0 0 0/262144 0 0 0.0%" {
		t.Errorf("status:\n%s", status.String())
	}
	for _, r := range replicas {
		resp, err := http.Get("http://" + r.Addr() + "/sim/profile")
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("%s /sim/profile: %v %v", r.Name, err, resp)
		} else {
			resp.Body.Close()
		}
	}

	cancel() // Ctrl-C
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "Shutdown complete."); n != 3 {
		t.Errorf("%d replicas shut down, want 3:\n%s", n, logs.String())
	}
	if code := runFleetStatus([]string{"--dir", dir}, io.Discard, io.Discard); code != 1 {
		t.Errorf("status of a stopped fleet: exit %d, want 1", code)
	}
}

// A port taken on one replica's address fails the fleet before any
// replica starts: no replica logs, and the addresses bound for the
// others are free again.
func TestFleetPortClash(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	o, err := parseServeFlags([]string{"--port", fmt.Sprint(port), "--skip-server-warmup"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := planFleet(fleetOptions{replicas: 3, layout: fleet.LayoutAddresses, dir: t.TempDir()}, o)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	logs := &syncBuffer{}
	err = runFleetServers(context.Background(), context.Background(), plan, o, &out, logs, nil)
	want := fmt.Sprintf("replica sglmock-1: listen tcp 127.0.0.2:%d: bind: address already in use; no replica started", port)
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %q", err, want)
	}
	if out.Len() != 0 || logs.String() != "" {
		t.Errorf("a replica started: stdout %q, logs %q", out.String(), logs.String())
	}
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatalf("replica 0's address is still bound: %v", err)
	}
	ln.Close()
}

// Fleet usage errors exit 2, as every usage error does, with one line.
func TestFleetUsageErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--replicas", "0"}, "sglmock fleet: --replicas 0: must be in 1..254\n"},
		{[]string{"--replicas", "255"}, "sglmock fleet: --replicas 255: must be in 1..254\n"},
		{[]string{"--replicas", "x"}, "sglmock fleet: --replicas \"x\": parse error\n"},
		{[]string{"--replicas", "2", "--layout", "hosts"}, "sglmock fleet: --layout \"hosts\": addresses or ports\n"},
		{[]string{"--replicas", "2", "--layout", "ports", "--port", "65535"}, "sglmock fleet: --port 65535: replicas need ports 65535..65536\n"},
		{[]string{"--replicas", "2", "--served-model-name", "a@b"}, "sglmock fleet: served model name \"a@b\": the KV events' topic kv@HOST:PORT@MODEL cannot hold an @\n"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(append([]string{"fleet"}, tt.args...), &stdout, &stderr); code != 2 || stderr.String() != tt.want || stdout.Len() != 0 {
			t.Errorf("fleet %q: got exit %d, stderr %q; want 2, %q", tt.args, code, stderr.String(), tt.want)
		}
	}
}

// Under DP attention SGLang's rank r sends its KV events to the
// endpoint's port + r, which the router the fleet configures does not
// bind: the fleet refuses it, and takes plain DP ranks, which all use the
// endpoint itself.
func TestFleetRefusesDPAttention(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tp-size", "2", "--dp-size", "2", "--enable-dp-attention"}, "--enable-dp-attention with --dp-size 2: " +
			"SGLang sends DP rank r's KV events to the endpoint's port + r, and the router this fleet configures binds one endpoint, so it would never " +
			"see ranks 1..1; run the fleet without DP attention"},
		{[]string{"--dp-size", "2"}, ""},
	} {
		o, err := parseServeFlags(tc.args, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		_, err = planFleet(fleetOptions{replicas: 2, layout: fleet.LayoutAddresses, dir: t.TempDir()}, o)
		if got := fmt.Sprint(err); (tc.want == "" && err != nil) || (tc.want != "" && got != tc.want) {
			t.Errorf("fleet %q: got %v, want %q", tc.args, err, tc.want)
		}
	}
}

func TestFleetStatusHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"fleet", "status", "--help"}, &stdout, &stderr); code != 0 ||
		!strings.HasPrefix(stderr.String(), "Usage: sglmock fleet status [--dir DIR | --endpoints FILE]\n") ||
		!strings.Contains(stderr.String(), "  -endpoints string") {
		t.Errorf("fleet status --help: exit %d, stderr:\n%s", code, stderr.String())
	}
}

// The router cannot decode bigram KV events: an EAGLE-family profile gets
// a warning, the others none.
func TestFleetBigramWarning(t *testing.T) {
	for _, tt := range []struct {
		profile, want string
	}{
		{"default", ""},
		{"llama-8b-eagle3-h100", "warning: profile llama-8b-eagle3-h100 uses EAGLE3 speculative decoding, so its radix cache keys pages on token bigrams"},
	} {
		o, err := parseServeFlags([]string{"--profile", tt.profile}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if got := bigramWarning(o); !strings.HasPrefix(got, tt.want) || (tt.want == "") != (got == "") {
			t.Errorf("%s: got %q, want it to start with %q", tt.profile, got, tt.want)
		}
	}
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sglmock/sglmock/fleet"
	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/kvevents"
)

// fleetOptions are sglmock fleet's own flags; the rest are serve's.
type fleetOptions struct {
	replicas int
	layout   string
	dir      string
}

// splitFleetFlags takes --replicas, --layout and --dir (as --name value or
// --name=value) out of args and leaves serve's flags.
func splitFleetFlags(args []string) (fleetOptions, []string, error) {
	fs, fo := fleetFlags(io.Discard)
	var rest []string
	for i := 0; i < len(args); i++ {
		name, value, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if !strings.HasPrefix(args[i], "-") || fs.Lookup(name) == nil {
			rest = append(rest, args[i])
			continue
		}
		if !hasValue {
			if i+1 == len(args) {
				return *fo, nil, fmt.Errorf("flag needs an argument: --%s", name)
			}
			i++
			value = args[i]
		}
		if err := fs.Set(name, value); err != nil {
			return *fo, nil, fmt.Errorf("--%s %q: %v", name, value, err)
		}
	}
	return *fo, rest, nil
}

// fleetFlags defines fleet's own flags, printing to out; the others are
// serve's, for every replica.
func fleetFlags(out io.Writer) (*flag.FlagSet, *fleetOptions) {
	fo := &fleetOptions{}
	fs := flag.NewFlagSet("sglmock fleet", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.IntVar(&fo.replicas, "replicas", 2, "how many replicas")
	fs.StringVar(&fo.layout, "layout", fleet.LayoutAddresses,
		"addresses (127.0.0.1, .2, ... at --port) or ports (--host at --port, --port+1, ...)")
	fs.StringVar(&fo.dir, "dir", "sglmock-fleet", "where endpoints.yaml and epp.yaml are written")
	return fs, fo
}

const fleetUsage = `Usage: sglmock fleet --replicas N [--layout addresses|ports] [--dir DIR] [serve flags]
       sglmock fleet status [--dir DIR | --endpoints FILE]

Runs N sglmock replicas in this process, each a whole server with its own engine,
radix cache and KV event publisher, for a cache-aware router such as the llm-d
router. With --layout addresses (the default) replica i listens on 127.0.0.(i+1)
at --port; with --layout ports on --host at --port + i. Metrics are on (the
router scrapes sglang: series). KV events: without --kv-events-config every
replica connects to tcp://127.0.0.1:5557, which the router binds, under its own
topic kv@ADDRESS:PORT@MODEL; --kv-events-config may name another endpoint the
router binds (one that binds itself is refused). --dir (default sglmock-fleet)
receives endpoints.yaml, the router's file-discovery endpoints, and epp.yaml, a
router configuration that watches it and scores by prefix cache (KV events) and
load. Ctrl-C stops them all. "sglmock fleet status" prints each replica's load,
cache size and hit rate.
`

func runFleet(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "status" {
		return runFleetStatus(args[1:], stdout, stderr)
	}
	if len(args) == 0 || slicesContainsHelp(args) {
		fmt.Fprint(stderr, fleetUsage)
		if len(args) == 0 {
			return 2
		}
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Fleet flags:")
		ff, _ := fleetFlags(stderr)
		ff.PrintDefaults()
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Serve flags, for every replica:")
		fs, _, _ := serveFlags(stderr)
		fs.PrintDefaults()
		return 0
	}
	fo, serveArgs, err := splitFleetFlags(args)
	if err != nil {
		fmt.Fprintln(stderr, "sglmock fleet:", err)
		return 2
	}
	o, err := parseServeFlags(serveArgs, stderr)
	if code, done := flagExit("fleet", err, stderr); done {
		return code
	}
	stop, kill := interrupts()
	if err := runFleetServers(stop, kill, fo, o, stdout, stderr, nil); err != nil {
		fmt.Fprintln(stderr, "sglmock fleet:", err)
		return 1
	}
	return 0
}

func slicesContainsHelp(args []string) bool {
	for _, a := range args {
		if a == "-h" || a == "--help" || a == "-help" {
			return true
		}
	}
	return false
}

// runFleetServers starts the replicas, writes the router's files once
// every replica listens, prints the table, and waits for them to stop
// (stop: graceful, kill: at once). ready, if set, is called with the
// replicas as they listen.
func runFleetServers(stop, kill context.Context, fo fleetOptions, o *serveOptions, stdout, logw io.Writer, ready func([]fleet.Replica)) error {
	model := api.ServedModelName(api.ServerArgs{ModelPath: o.modelPath, ServedModelName: o.servedModelName}, o.profile)
	replicas, err := fleet.Plan(fo.replicas, fo.layout, o.host, o.port, model, o.kvEvents)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(fo.dir, 0o755); err != nil {
		return err
	}
	dir, err := filepath.Abs(fo.dir)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make([]error, len(replicas))
	addrs := make([]chan string, len(replicas))
	ctx, cancel := context.WithCancel(stop)
	defer cancel()
	for i, r := range replicas {
		ro := *o
		ro.host, ro.port, ro.enableMetrics, ro.routerTopic = r.Host, r.Port, true, true
		kv := r.KVEvents
		if o.kvEvents == nil || o.kvEvents.Topic == nil {
			kv.Topic = nil // serve names the replica by the port it listens on
		}
		js, err := json.Marshal(kv)
		if err != nil {
			return err
		}
		ro.kvEvents, ro.kvEventsConfig = &kv, string(js)
		addrs[i] = make(chan string, 1)
		ro.ready = addrs[i]
		wg.Go(func() {
			errs[i] = serve(ctx, kill, &ro, &prefixWriter{w: logw, prefix: "[" + r.Name + "] "})
			if errs[i] != nil {
				cancel() // one replica failing stops the fleet
			}
		})
	}
	for i := range replicas {
		select {
		case addr := <-addrs[i]:
			host, port, _ := net.SplitHostPort(addr)
			replicas[i].Host = host
			replicas[i].Port, _ = strconv.Atoi(port)
			replicas[i].Topic = replicas[i].KVEvents.TopicOr(kvevents.DefaultTopic(host, replicas[i].Port, model))
		case <-ctx.Done():
			wg.Wait()
			return errors.Join(append(errs, ctx.Err())...)
		}
	}
	if err := writeFleetFiles(dir, replicas, model, o.profile.PageSize, o.kvEvents); err != nil {
		cancel()
		wg.Wait()
		return err
	}
	fleet.Table(stdout, replicas)
	fmt.Fprintf(stdout, "\nllm-d router files: %s (file discovery) and %s (EndpointPickerConfig).\n",
		filepath.Join(dir, "endpoints.yaml"), filepath.Join(dir, "epp.yaml"))
	fmt.Fprintf(stdout, "Status: sglmock fleet status --dir %s. Ctrl-C stops every replica.\n", fo.dir)
	if ready != nil {
		ready(replicas)
	}
	wg.Wait()
	return errors.Join(errs...)
}

// writeFleetFiles writes endpoints.yaml and epp.yaml, each atomically (a
// rename, which the router's file watcher follows).
func writeFleetFiles(dir string, replicas []fleet.Replica, model string, pageSize int, kv *kvevents.Config) error {
	endpoints, err := fleet.EndpointsYAML(replicas)
	if err != nil {
		return err
	}
	routerKV := fleet.RouterBindEndpoint(fleet.RouterKVEndpoint)
	if kv != nil {
		routerKV = fleet.RouterBindEndpoint(kv.Endpoint)
	}
	epp, err := fleet.RouterConfig(fleet.RouterOptions{
		EndpointsPath: filepath.Join(dir, "endpoints.yaml"), Model: model, PageSize: pageSize,
		KVEndpoint: routerKV, RenderURL: "http://" + replicas[0].Addr(),
	})
	if err != nil {
		return err
	}
	for name, b := range map[string][]byte{"endpoints.yaml": endpoints, "epp.yaml": epp} {
		tmp := filepath.Join(dir, "."+name+".tmp")
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	return nil
}

// prefixWriter starts every write, one log line, with the replica's
// name, in a single Write to w, so the replicas' lines never interleave.
type prefixWriter struct {
	w      io.Writer
	prefix string
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	if _, err := p.w.Write(append([]byte(p.prefix), b...)); err != nil {
		return 0, err
	}
	return len(b), nil
}

func runFleetStatus(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sglmock fleet status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "sglmock-fleet", "the fleet's directory (its endpoints.yaml)")
	file := fs.String("endpoints", "", "an endpoints file (default: DIR/endpoints.yaml)")
	if code, done := flagExit("fleet status", parseFlags(fs, args, false), stderr); done {
		return code
	}
	path := *file
	if path == "" {
		path = filepath.Join(*dir, "endpoints.yaml")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(stderr, "sglmock fleet status:", err)
		return 1
	}
	replicas, err := fleet.ReadEndpoints(b)
	if err != nil {
		fmt.Fprintf(stderr, "sglmock fleet status: %s: %v\n", path, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sts := fleet.Fetch(ctx, &http.Client{Timeout: 5 * time.Second}, replicas)
	fleet.StatusTable(stdout, sts)
	for _, s := range sts {
		if s.Err != nil {
			return 1
		}
	}
	return 0
}

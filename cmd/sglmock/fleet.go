package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
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
at --port; with --layout ports on --host at --port + i. Every address is bound
before any replica starts. Metrics are on (the router scrapes sglang: series).
KV events: without --kv-events-config every replica connects to
tcp://127.0.0.1:5557, which the router binds, under its own topic
kv@ADDRESS:PORT@MODEL; --kv-events-config may name another endpoint the router
binds (one that binds itself is refused), and a replay_endpoint each replica
binds at its port + i, on loopback as everything the fleet listens on by
default (tcp://127.0.0.1:5558; a wildcard listens on every interface). --dir
(default sglmock-fleet) receives endpoints.yaml, the router's file-discovery
endpoints, and epp.yaml, an llm-d router (v0.10) configuration that watches it
and scores by prefix cache (KV events, block size the page size: give
--page-size 16, as every built-in profile has page size 1) and load; the table
ends with the router's command line. EAGLE-family profiles send bigram KV
events the router cannot decode (a warning says so); --enable-dp-attention is
refused (SGLang sends DP rank r's KV events to the endpoint's port + r, which
the router does not bind). Ctrl-C stops them all. "sglmock fleet status"
prints each replica's load, cache size and hit rate.
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
	plan, err := planFleet(fo, o)
	if err != nil {
		fmt.Fprintln(stderr, "sglmock fleet:", err)
		return 2
	}
	stop, kill := interrupts()
	if err := runFleetServers(stop, kill, plan, o, stdout, stderr, nil); err != nil {
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

// fleetPlan is a fleet checked against its flags, before anything starts.
type fleetPlan struct {
	dir      string // as given, for the status command line
	absDir   string
	model    string
	replicas []fleet.Replica
}

// planFleet lays the replicas out from the flags; its errors are usage
// errors.
func planFleet(fo fleetOptions, o *serveOptions) (fleetPlan, error) {
	if p := o.profile; p.DPAttention() {
		// SGLang's publisher of attention-DP rank r offsets the endpoint's
		// port by r (offset_endpoint_port): the router binds only the one.
		return fleetPlan{}, fmt.Errorf("--enable-dp-attention with --dp-size %d: SGLang sends DP rank r's KV events to the endpoint's port + r, "+
			"and the router this fleet configures binds one endpoint, so it would never see ranks 1..%d; run the fleet without DP attention",
			p.Ranks(), p.Ranks()-1)
	}
	model := api.ServedModelName(api.ServerArgs{ModelPath: o.modelPath, ServedModelName: o.servedModelName}, o.profile)
	replicas, err := fleet.Plan(fo.replicas, fo.layout, o.host, o.port, model, o.kvEvents)
	if err != nil {
		return fleetPlan{}, err
	}
	dir, err := filepath.Abs(fo.dir)
	if err != nil {
		return fleetPlan{}, fmt.Errorf("--dir %s: %w", fo.dir, err)
	}
	return fleetPlan{dir: fo.dir, absDir: dir, model: model, replicas: replicas}, nil
}

// bigramWarning says why the llm-d router cannot use a profile's KV
// events when it keys its radix cache on bigrams.
func bigramWarning(o *serveOptions) string {
	if !o.profile.BigramKeys() {
		return ""
	}
	return fmt.Sprintf("warning: profile %s uses %s speculative decoding, so its radix cache keys pages on token bigrams and its KV events "+
		"carry [token, token] pairs, as SGLang's do; the llm-d router (v0.10) cannot decode them "+
		"(msgpack: invalid code=92 decoding uint64) and routes such a fleet by load alone. Use a profile without EAGLE-family speculation "+
		"for prefix-cache routing.", o.profile.Name, o.profile.Speculative.Algorithm)
}

// runFleetServers binds every replica's address (a clash fails before
// any replica starts), starts the replicas, writes the router's files once
// every replica listens, prints the table and the router's command line,
// and waits for them to stop (stop: graceful, kill: at once). ready, if
// set, is called with the replicas as they listen.
func runFleetServers(stop, kill context.Context, plan fleetPlan, o *serveOptions, stdout, logw io.Writer, ready func([]fleet.Replica)) error {
	if w := bigramWarning(o); w != "" {
		fmt.Fprintln(logw, w)
	}
	replicas := plan.replicas
	if err := os.MkdirAll(plan.absDir, 0o755); err != nil {
		return err
	}
	lns, err := fleet.Listen(replicas, plan.model)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make([]error, len(replicas))
	up := make([]chan string, len(replicas))
	ctx, cancel := context.WithCancel(stop)
	defer cancel()
	for i, r := range replicas {
		ro := *o
		ro.host, ro.port, ro.enableMetrics, ro.listener = r.Host, r.Port, true, lns[i]
		kv := r.KVEvents
		kv.Topic = &replicas[i].Topic // explicit: the router tells replicas apart by it
		js, err := json.Marshal(kv)
		if err != nil {
			return err
		}
		ro.kvEvents, ro.kvEventsConfig = &kv, string(js)
		up[i] = make(chan string, 1)
		ro.ready = up[i]
		wg.Go(func() {
			errs[i] = serve(ctx, kill, &ro, &prefixWriter{w: logw, prefix: "[" + r.Name + "] "})
			if errs[i] != nil {
				cancel() // one replica failing stops the fleet
			}
		})
	}
	for i := range replicas {
		select {
		case <-up[i]:
		case <-ctx.Done():
			wg.Wait()
			return errors.Join(append(errs, ctx.Err())...)
		}
	}
	if err := writeFleetFiles(plan.absDir, replicas, plan.model, o.profile.PageSize, o.kvEvents); err != nil {
		cancel()
		wg.Wait()
		return err
	}
	fleet.Table(stdout, replicas)
	eppConfig := filepath.Join(plan.absDir, "epp.yaml")
	fmt.Fprintf(stdout, "\nllm-d router files: %s (file discovery) and %s (EndpointPickerConfig).\n",
		filepath.Join(plan.absDir, "endpoints.yaml"), eppConfig)
	fmt.Fprintf(stdout, "Router (llm-d-router v0.10 endpoint picker; ext_proc on :9002, plain gRPC):\n  %s\n", fleet.RouterCommand(eppConfig))
	fmt.Fprintf(stdout, "Status: sglmock fleet status --dir %s. Ctrl-C stops every replica.\n", plan.dir)
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

const fleetStatusUsage = `Usage: sglmock fleet status [--dir DIR | --endpoints FILE]

Asks every replica of a running fleet for its /sim/stats and prints one row
each: running and queued requests, KV cache tokens in use of the capacity,
tokens held in the radix cache, requests served, and the share of prompt
tokens served from the cache. The replicas are those of DIR/endpoints.yaml
(what sglmock fleet wrote), or of any llm-d file-discovery endpoints file.
Exits 1 if a replica does not answer.
`

func runFleetStatus(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sglmock fleet status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, fleetStatusUsage+"\n")
		fs.PrintDefaults()
	}
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

package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

type options struct {
	epp, health, metrics, endpoints, model string
	tls, verbose                           bool
	checks                                 string
	prompts, sends, words, flushPrompts    int
	probes, chatSends                      int
	seed                                   uint64
	settle, readyTimeout, timeout          time.Duration
	minHit                                 float64
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	var o options
	fs := flag.NewFlagSet("eppcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: eppcheck --endpoints DIR/endpoints.yaml --model NAME [flags]

Plays Envoy in front of the llm-d router's endpoint picker (EPP) over a running
sglmock fleet: each request goes through the picker's ext_proc stream as Envoy
sends it, then to the replica it picked, and its response back through the
picker. It prints the routing figures and checks them: repeats routed to a
replica that holds the prompt, the cached share of their prompt tokens, a
flushed replica losing its prompts, and chat. Exits 1 if a check fails.

`)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.epp, "epp", "127.0.0.1:9002", "the picker's ext_proc address")
	fs.StringVar(&o.health, "health", "127.0.0.1:9003", "the picker's gRPC health address, asked until it serves")
	fs.StringVar(&o.metrics, "metrics", "http://127.0.0.1:9090/metrics", "the picker's metrics URL (\"\": do not read them)")
	fs.BoolVar(&o.tls, "tls", false, "ext_proc over TLS, certificate not verified (the picker's default --secure-serving=true; its health port stays plain)")
	fs.StringVar(&o.endpoints, "endpoints", "", "the fleet's endpoints.yaml (the replicas to flush or send to directly)")
	fs.StringVar(&o.model, "model", "", "the served model name")
	fs.StringVar(&o.checks, "checks", "route,flush,chat", "which experiments to run, comma-separated")
	fs.IntVar(&o.prompts, "prompts", 8, "distinct prompts in the routing experiment")
	fs.IntVar(&o.sends, "sends", 4, "sends of each prompt, shuffled")
	fs.IntVar(&o.words, "words", 1650, "words per prompt (some 2,100 tokens)")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the prompts and their order")
	fs.IntVar(&o.flushPrompts, "flush-prompts", 4, "prompts in the flush check")
	fs.IntVar(&o.probes, "probes", 3, "probes of each prompt after the flush")
	fs.IntVar(&o.chatSends, "chat-sends", 3, "sends of the chat conversation")
	fs.DurationVar(&o.settle, "settle", 300*time.Millisecond, "pause after each request, for its KV events to reach the picker")
	fs.DurationVar(&o.readyTimeout, "ready-timeout", time.Minute, "how long to wait for the picker to serve")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Minute, "bound on the whole run")
	fs.Float64Var(&o.minHit, "min-hit", 0.9, "the repeat hit fraction the routing check needs")
	fs.BoolVar(&o.verbose, "v", false, "print every request: where it went, its cached tokens, the scores")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if o.endpoints == "" || o.model == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "eppcheck: --endpoints and --model are required, and no arguments (see --help)")
		return 2
	}
	// A check with nothing to count would pass having checked nothing (no
	// probe after the flush) or have no repeat to judge.
	for _, c := range []struct {
		name     string
		got, min int
	}{{"prompts", o.prompts, 1}, {"sends", o.sends, 2}, {"words", o.words, 1},
		{"flush-prompts", o.flushPrompts, 1}, {"probes", o.probes, 1}, {"chat-sends", o.chatSends, 2}} {
		if c.got < c.min {
			fmt.Fprintf(stderr, "eppcheck: --%s %d: must be at least %d\n", c.name, c.got, c.min)
			return 2
		}
	}
	if err := check(o, stdout); err != nil {
		fmt.Fprintln(stderr, "eppcheck:", err)
		return 1
	}
	return 0
}

// errChecksFailed: the run went through and some figure missed its bar.
var errChecksFailed = errors.New("some checks failed")

func check(o options, w io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	replicas, err := readEndpoints(o.endpoints)
	if err != nil {
		return err
	}
	creds := insecure.NewCredentials()
	if o.tls {
		creds = credentials.NewTLS(&tls.Config{InsecureSkipVerify: true}) // the picker's self-signed certificate
	}
	conn, err := grpc.NewClient(o.epp, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := waitReady(ctx, o, len(replicas), w); err != nil {
		return err
	}
	r := &Runner{EPP: extprocv3.NewExternalProcessorClient(conn), HTTP: &http.Client{Timeout: time.Minute},
		Model: o.model, Replicas: replicas, Settle: o.settle}
	if o.verbose {
		r.Log = w
	}
	var results []string
	verdict := func(ok bool, format string, args ...any) {
		mark := "PASS"
		if !ok {
			mark = "FAIL"
		}
		results = append(results, mark+" "+fmt.Sprintf(format, args...))
	}
	for _, c := range strings.Split(o.checks, ",") {
		switch c {
		case "route":
			fmt.Fprintf(w, "\n== routing: %d prompts x %d sends, shuffled (seed %d), through the picker at %s; replicas %s\n",
				o.prompts, o.sends, o.seed, o.epp, strings.Join(replicas, ", "))
			sends, err := r.Route(ctx, Prompts(o.prompts, o.words, o.seed), o.sends, o.seed)
			if err != nil {
				return err
			}
			f := routeFigures(sends, len(replicas))
			f.print(w)
			verdict(f.Repeats > 0 && f.HitFraction() >= o.minHit, "repeat hit fraction %.3f (%d/%d), want >= %.2f",
				f.HitFraction(), f.RepeatHits, f.Repeats, o.minHit)
			verdict(f.CachedShare() >= 0.9, "cached share on repeats %.1f %%, want >= 90 %%", 100*f.CachedShare())
		case "flush":
			fmt.Fprintf(w, "\n== flush: %d prompts, each held by two replicas; then POST /flush_cache on one\n", o.flushPrompts)
			f, err := r.Flush(ctx, Prompts(o.flushPrompts, o.words, o.seed+1000), o.probes)
			if err != nil {
				return err
			}
			f.print(w)
			verdict(f.BeforeToHolder == f.Before, "before the flush %d/%d probes to a holder", f.BeforeToHolder, f.Before)
			verdict(f.AfterToFlushed == 0 && f.AfterToSurvivor == f.After, "after the flush %d/%d probes to the flushed replica, %d/%d to the surviving holder",
				f.AfterToFlushed, f.After, f.AfterToSurvivor, f.After)
		case "chat":
			fmt.Fprintf(w, "\n== chat: one system + user conversation, %d sends through the picker\n", o.chatSends)
			p := Prompts(2, o.words/2, o.seed+2000)
			f, err := r.Chat(ctx, p[0], p[1], o.chatSends)
			if err != nil {
				return err
			}
			f.print(w)
			last := f.Sends[len(f.Sends)-1]
			share := ratio(last.CachedTokens, last.PromptTokens)
			verdict(f.Pinned() && share >= 0.9, "chat repeats on the first replica: %t, last send %.1f %% cached", f.Pinned(), 100*share)
		default:
			return fmt.Errorf("--checks: unknown %q (route, flush, chat)", c)
		}
	}
	if o.metrics != "" {
		fmt.Fprintln(w, "\n== the picker's metrics")
		lines, err := scrape(ctx, o.metrics, pickerMetrics)
		if err != nil {
			return fmt.Errorf("the picker's metrics: %w", err)
		}
		for _, l := range lines {
			fmt.Fprintln(w, l)
		}
		// The counter has no sample until an extract fails.
		errs := sumMetric(lines, "datalayer_extract_errors_total")
		verdict(errs == 0, "the picker counted %g metric extract errors (the sglang mapping reads only series the replicas export)", errs)
	}
	fmt.Fprintln(w, "\n== checks")
	failed := false
	for _, res := range results {
		fmt.Fprintln(w, res)
		failed = failed || strings.HasPrefix(res, "FAIL")
	}
	if failed {
		return errChecksFailed
	}
	return nil
}

// readEndpoints reads the replicas' host:port from an llm-d
// file-discovery endpoints file.
func readEndpoints(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f struct {
		Endpoints []struct {
			Address string `yaml:"address"`
			Port    string `yaml:"port"`
		} `yaml:"endpoints"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []string
	for _, e := range f.Endpoints {
		out = append(out, e.Address+":"+e.Port)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no endpoints", path)
	}
	return out, nil
}

// waitReady asks the picker's health service until it serves (it starts
// serving after file discovery's first load), then, if its metrics are
// read, until it counts every replica ready. The health service is plain
// gRPC, whether ext_proc is TLS or not.
func waitReady(ctx context.Context, o options, replicas int, w io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, o.readyTimeout)
	defer cancel()
	conn, err := grpc.NewClient(o.health, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		if err == nil && resp.Status == healthpb.HealthCheckResponse_SERVING {
			break
		}
		last = err
		if err == nil {
			last = fmt.Errorf("health %s", resp.Status)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the picker at %s did not serve within %s: %v", o.health, o.readyTimeout, last)
		case <-tick.C:
		}
	}
	if o.metrics == "" {
		return nil
	}
	gauge := regexp.MustCompile(`^llm_d_epp_ready_endpoints(\{[^}]*\})? `)
	for {
		lines, err := scrape(ctx, o.metrics, gauge)
		if err == nil && len(lines) == 1 {
			v, _ := strconv.ParseFloat(strings.Fields(lines[0])[1], 64)
			if int(v) >= replicas {
				fmt.Fprintf(w, "the picker serves; %s\n", lines[0])
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the picker's %s never counted %d ready endpoints (last: %q, %v)", o.metrics, replicas, lines, err)
		case <-tick.C:
		}
	}
}

// pickerMetrics are the picker's series the run reports: endpoints
// ready, metric extract errors, KV events received, and the prefix
// index's admissions and lookups (its deprecated kvcache_ twins left out).
var pickerMetrics = regexp.MustCompile(`^llm_d_(router_)?epp_(ready_endpoints|datalayer_extract_errors_total|` +
	`kv_cache_events_(messages_received|zmq_errors|subscriber_reconnections)_total|` +
	`kv_cache_index_(admissions|evictions|lookup_requests|lookup_hits)_total)\b`)

// sumMetric adds up the samples of the series whose name ends in suffix.
func sumMetric(lines []string, suffix string) float64 {
	sum := 0.0
	for _, l := range lines {
		end := strings.IndexAny(l, "{ ")
		if end < 0 || !strings.HasSuffix(l[:end], suffix) {
			continue
		}
		v, _ := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64) // the value ends the line
		sum += v
	}
	return sum
}

// scrape returns the metric lines that match re.
func scrape(ctx context.Context, url string, re *regexp.Regexp) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	var out []string
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 64<<20))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if re.MatchString(sc.Text()) {
			out = append(out, sc.Text())
		}
	}
	return out, sc.Err()
}

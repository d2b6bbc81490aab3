package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sglmock/sglmock/harness"
	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/profile"
)

const auditUsage = `Usage: sglmock audit [flags] -- CMD [ARGS...]

Starts a mock SGLang server with an empty prefix cache (no warmup request),
or with --upstream a recording proxy in front of a real SGLang or vLLM
server, runs CMD with the server's address in its environment, forwarding
CMD's output and the signals sglmock gets to CMD's process group, then
judges from the server's records every request the command sent:

  - a request whose reuse of an earlier prompt's prefix cut its TTFT by
    --min-impact or more is POISONED, the cause naming its pattern with the
    numbers: a repeat (a warm-up, a retry, a two-point leg), a near-repeat
    (all but a short tail: a nonce at the end), or a shared prefix;
  - smaller reuse (prompts that start alike by chance) is one summary line;
  - reuse up to what every prompt shares on its route (a BOS token, a chat
    template's head; measured afterwards with two unrelated nonces) is none;
  - the report says what the cache did to the run's TTFT and E2E, and with
    --tool-result, the tool's own error on each of its figures.

CMD's environment gets:
  SGLANG_URL, SGLANG_BASE_URL   http://HOST:PORT
  OPENAI_BASE_URL, OPENAI_API_BASE   http://HOST:PORT/v1
  SGLANG_HOST, SGLANG_PORT      HOST and PORT
  OPENAI_API_KEY                "sglmock", unless already set
  NO_PROXY, no_proxy            HOST, 127.0.0.1 and localhost added, when
                                HTTP(S)_PROXY is set
A script with a fixed URL (http://127.0.0.1:30000) is audited with --port.

Exit status: CMD's own when CMD failed; 1 when the run is POISONED: a
request is, and the poisoned reuse moved a figure the run reports (mean,
median or p99 of TTFT or E2E over the measured requests) by --min-run-impact
or more, or any at all with --strict; 2 for a usage error or a server that
cannot be reached; 3 when nothing was checked (no request reached the
server, the server let records go, or it reports no cached tokens); 0 when
clean, or when the poisoned requests moved no figure the run reports (the
finding and its fix are printed).

Flags:
`

type auditOptions struct {
	profile   *profile.Profile
	speedup   float64
	allow     harness.SharedPrefixAllowance
	minImpact float64
	// minRunImpact and strict decide when poisoned requests fail the run.
	minRunImpact float64
	strict       bool
	jsonPath     string
	toolPath     string
	host         string
	port         int
	upstream     string
	records      string
	cfg          api.Config
	command      []string
}

// allowanceFlag is --allow-shared-prefix: auto or a number of tokens.
type allowanceFlag struct {
	p *harness.SharedPrefixAllowance
}

func (f allowanceFlag) String() string {
	if f.p == nil {
		return "0"
	}
	return f.p.String()
}

func (f allowanceFlag) Set(s string) error {
	v, err := harness.ParseSharedPrefixAllowance(s)
	if err != nil {
		return errors.New("want auto or a number of tokens >= 0")
	}
	*f.p = v
	return nil
}

func parseAuditFlags(args []string, stderr io.Writer) (*auditOptions, error) {
	fs := flag.NewFlagSet("sglmock audit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &auditOptions{}
	profileName := fs.String("profile", "default", "cost profile: a built-in name (see 'sglmock profiles') or a YAML file")
	floatFlag(fs, &o.speedup, "speedup", 1, "`S` simulated seconds per wall second")
	fs.Var(allowanceFlag{&o.allow}, "allow-shared-prefix", "`auto|N`: auto takes a prefix 3 or more requests share for the workload's own (a system prompt),\n"+
		"which does not poison (repeats and near-repeats still do); N tolerates reuse of up to N tokens beyond the floor")
	floatFlag(fs, &o.minImpact, "min-impact", harness.DefaultMinImpact, "a reuse poisons a request when it cuts its TTFT by at least `PERCENT`")
	floatFlag(fs, &o.minRunImpact, "min-run-impact", harness.DefaultMinRunImpact, "poisoned requests fail the run (exit 1) when they move a figure it reports\n"+
		"(mean, median or p99 of TTFT or E2E over the measured requests) by at least `PERCENT`; below, they are a finding and the run exits 0;\n"+
		"a run where what a poisoned request saved is not known (no timing fit behind a proxy) fails on any")
	fs.BoolVar(&o.strict, "strict", false, "fail the run (exit 1) on any poisoned request, whatever it moved")
	fs.StringVar(&o.jsonPath, "json", "", "also write the report as JSON to this file (for CI)")
	fs.StringVar(&o.toolPath, "tool-result", "", "the load tool's result `FILE` (bench_serving --output-file, vLLM --save-result): its figures against the truth")
	fs.StringVar(&o.host, "host", "127.0.0.1", "bind the mock (or the proxy) to this address")
	fs.IntVar(&o.port, "port", 0, "bind the mock (or the proxy) to this port, where a script with a fixed URL looks (0: a free one)")
	fs.StringVar(&o.upstream, "upstream", "", "a real server's `URL` (http://HOST:PORT): audit it through a recording proxy instead of a mock")
	fs.StringVar(&o.records, "records", "", "with --upstream: write each request the proxy saw to this `FILE`, one JSON line as soon as its answer is read "+
		"(route, rid, prompt hash, times, counts), so that a run audit cannot finish keeps them")
	fs.BoolVar(&o.cfg.DisableRadixCache, "disable-radix-cache", false, "disable prefix caching: cached_tokens is always 0")
	fs.BoolVar(&o.cfg.EnableCacheReport, "enable-cache-report", false, "report usage.prompt_tokens_details.cached_tokens in OpenAI responses")
	fs.BoolVar(&o.cfg.EnableMetrics, "enable-metrics", false, "serve Prometheus metrics on /metrics")
	fs.IntVar(&o.cfg.StreamInterval, "stream-interval", 1, "send a stream event every N output tokens")
	// A load tool sizes its prompts with the model's tokenizer and names
	// the model in its requests; the mock counts and answers as the tool
	// expects only with both.
	tokenizerPath := fs.String("tokenizer-path", "", "the model's tokenizer `DIR` (tokenizer.json with tokenizer_config.json, or Kimi's tiktoken.model), "+
		"as serve's: the mock counts tokens as the load tool's --tokenizer does")
	fs.StringVar(&o.cfg.Args.ServedModelName, "served-model-name", "", "the model name the mock serves (/v1/models), the one the load tool's --model gives")
	profileFlags := profile.RegisterFlags(fs)
	fs.Usage = func() {
		fmt.Fprint(stderr, auditUsage)
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args, true); err != nil {
		return nil, err
	}
	o.command = fs.Args()
	if len(o.command) == 0 {
		return nil, errors.New("no command to run: sglmock audit [flags] -- CMD [ARGS...]")
	}
	switch {
	case o.speedup <= 0 || o.speedup > 1e6:
		return nil, fmt.Errorf("--speedup %v: must be in (0, 1e6]", o.speedup)
	case o.minImpact <= 0 || o.minImpact > 100:
		return nil, fmt.Errorf("--min-impact %v: must be a percentage in (0, 100]", o.minImpact)
	case o.minRunImpact <= 0 || o.minRunImpact > 100:
		return nil, fmt.Errorf("--min-run-impact %v: must be a percentage in (0, 100]", o.minRunImpact)
	case o.port < 0 || o.port > 65535:
		return nil, fmt.Errorf("--port %d: must be in 0..65535", o.port)
	case o.cfg.StreamInterval < 1:
		return nil, fmt.Errorf("--stream-interval %d: must be >= 1", o.cfg.StreamInterval)
	}
	if o.upstream != "" {
		var mockOnly []string
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "upstream", "records", "allow-shared-prefix", "min-impact", "min-run-impact", "strict", "json", "tool-result", "host", "port":
			default:
				mockOnly = append(mockOnly, "--"+f.Name)
			}
		})
		if len(mockOnly) > 0 {
			return nil, fmt.Errorf("%s configure the mock, which --upstream replaces with the real server", strings.Join(mockOnly, ", "))
		}
		return o, nil
	}
	if o.records != "" {
		return nil, errors.New("--records needs --upstream: the mock keeps its own records (GET /sim/requests)")
	}
	p, err := loadProfile(*profileName, profileFlags)
	if err != nil {
		return nil, err
	}
	o.profile = p
	if *tokenizerPath != "" {
		if o.cfg.Tokenizer, _, err = serveTokenizer(*tokenizerPath, ""); err != nil {
			return nil, err
		}
		o.cfg.Args.TokenizerPath = *tokenizerPath
	}
	return o, nil
}

// auditTarget is what the command talks to: the mock, or the proxy.
type auditTarget struct {
	url   string // what the command is given
	close func()
	// client reads the records (the mock) or probes the server itself
	// (the real one).
	client *harness.Client
	rec    *harness.Recorder
}

func runAudit(args []string, stdout, stderr io.Writer) int {
	o, err := parseAuditFlags(args, stderr)
	if code, done := flagExit("audit", err, stderr); done {
		return code
	}
	addr := net.JoinHostPort(o.host, strconv.Itoa(o.port))
	t, err := startAuditTarget(o, addr)
	if err != nil {
		fmt.Fprintln(stderr, "sglmock audit:", err)
		return 2
	}
	defer t.close()
	if o.upstream != "" {
		fmt.Fprintf(stderr, "sglmock audit: recording proxy at %s in front of %s; running %q\n", t.url, o.upstream, o.command)
	} else {
		fmt.Fprintf(stderr, "sglmock audit: mock %s (profile %s, x%g) at %s; running %q\n", api.SimVersion, o.profile.Name, o.speedup, t.url, o.command)
	}
	status, runErr := runCommand(o.command, commandEnv(os.Environ(), t.url), stdout, stderr)
	if runErr != nil {
		fmt.Fprintln(stderr, "sglmock audit:", runErr)
		return 2
	}
	ctx := context.Background()
	opt := harness.AuditOptions{MinImpact: o.minImpact, AllowSharedPrefix: o.allow, MinRunImpact: o.minRunImpact, Strict: o.strict,
		Tool: harness.DetectTool(o.command)}
	// The tool's result file says which requests it measured (the last
	// ones; its warm-up came before them), so it is read first. A file the
	// tool did not write (it failed, or it was told another name) costs the
	// comparison, not the verdict on the run.
	var res *harness.ToolResult
	var toolErr error
	if o.toolPath != "" {
		if res, toolErr = readToolResult(o.toolPath); toolErr == nil {
			opt.Measured = res.Completed + res.Failed
			if opt.Tool == "" {
				opt.Tool = res.Tool
			}
		}
	}
	var rep *harness.AuditReport
	if t.rec != nil {
		rep, err = harness.AuditUpstream(ctx, t.rec, t.client, opt)
	} else {
		rep, err = harness.Audit(ctx, t.client, opt)
	}
	if err != nil {
		fmt.Fprintln(stderr, "sglmock audit:", err)
		return 2
	}
	if res != nil {
		rep.Tool, toolErr = harness.CompareTool(ctx, t.client, rep, o.toolPath, res)
	}
	fmt.Fprintln(stdout)
	rep.WriteTable(stdout)
	if o.jsonPath != "" {
		if err := writeFile(o.jsonPath, rep.WriteJSON); err != nil {
			fmt.Fprintln(stderr, "sglmock audit:", err)
			return 2
		}
	}
	if toolErr != nil {
		fmt.Fprintln(stderr, "sglmock audit: --tool-result:", toolErr)
	}
	switch {
	case status != 0:
		fmt.Fprintf(stderr, "sglmock audit: the command failed with exit status %d; its figures are not to be trusted whatever the verdict\n", status)
		return status
	case rep.Verdict.Level() == harness.Poisoned:
		return 1
	case toolErr != nil:
		return 2
	case !rep.Checked:
		return 3
	}
	return 0
}

func readToolResult(path string) (*harness.ToolResult, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return harness.ReadToolResult(f)
}

// startAuditTarget starts the mock, or the recording proxy in front of
// --upstream (which must answer first), at addr.
func startAuditTarget(o *auditOptions, addr string) (*auditTarget, error) {
	httpClient := &http.Client{Timeout: 60 * time.Second}
	if o.upstream == "" {
		m, err := startLocalMockAt(addr, o.profile, o.speedup, o.cfg)
		if err != nil {
			return nil, bindError(addr, err)
		}
		return &auditTarget{url: commandURL(o.host, m.Port), close: m.Close,
			client: &harness.Client{HTTP: httpClient, BaseURL: m.URL, Backend: harness.SGLang}}, nil
	}
	rec, err := harness.NewRecorder(o.upstream, nil)
	if err != nil {
		return nil, err
	}
	// The probes of a server started with --api-key need the key the
	// command is given.
	up := &harness.Client{HTTP: httpClient, BaseURL: rec.Upstream(), Backend: harness.SGLang, APIKey: os.Getenv("OPENAI_API_KEY")}
	if err := checkUpstream(up); err != nil {
		return nil, err
	}
	journal := io.Discard
	if o.records != "" {
		f, err := os.OpenFile(o.records, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return nil, fmt.Errorf("--records: %w", err)
		}
		rec.SetJournal(f)
		journal = f
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		closeJournal(journal)
		return nil, bindError(addr, err)
	}
	hs := &http.Server{Handler: rec, ReadHeaderTimeout: 30 * time.Second}
	go hs.Serve(ln)
	return &auditTarget{url: commandURL(o.host, ln.Addr().(*net.TCPAddr).Port), rec: rec, client: up,
		close: func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if hs.Shutdown(ctx) != nil {
				hs.Close()
			}
			rec.SetJournal(nil)
			closeJournal(journal)
		}}, nil
}

// closeJournal closes --records' file, if one was opened.
func closeJournal(w io.Writer) {
	if c, ok := w.(io.Closer); ok {
		c.Close()
	}
}

// checkUpstream asks the real server for /v1/models, which SGLang and vLLM
// both serve, before the command runs against it.
func checkUpstream(c *harness.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.BaseURL+"/v1/models", nil)
	if err != nil {
		return err
	}
	if c.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.APIKey)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("--upstream %s: cannot reach the server: %w", c.BaseURL, err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("--upstream %s: GET /v1/models answered HTTP %d: is it an SGLang or vLLM server?", c.BaseURL, resp.StatusCode)
	}
	return nil
}

func bindError(addr string, err error) error {
	return fmt.Errorf("cannot listen on %s (another server there? --port 0 picks a free port): %w", addr, err)
}

// commandURL is the base URL the command is given: a wildcard bind is
// reached on loopback.
func commandURL(host string, port int) string {
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, strconv.Itoa(port))
}

// commandEnv is the command's environment: the server's address under the
// names clients read, and, when a proxy is set for HTTP, the server's host
// and loopback in NO_PROXY, so that the command's requests reach it.
func commandEnv(environ []string, base string) []string {
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(base, "http://"))
	env := append([]string(nil), environ...)
	get := func(name string) string {
		for i := len(env) - 1; i >= 0; i-- {
			if v, ok := strings.CutPrefix(env[i], name+"="); ok {
				return v
			}
		}
		return ""
	}
	proxied := false
	for _, name := range []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"} {
		proxied = proxied || get(name) != ""
	}
	if proxied {
		var hosts []string
		for _, list := range []string{get("NO_PROXY"), get("no_proxy"), host + ",127.0.0.1,localhost"} {
			for _, h := range strings.Split(list, ",") {
				if h = strings.TrimSpace(h); h != "" && !slices.Contains(hosts, h) {
					hosts = append(hosts, h)
				}
			}
		}
		noProxy := strings.Join(hosts, ",")
		env = append(env, "NO_PROXY="+noProxy, "no_proxy="+noProxy)
	}
	env = append(env, "SGLANG_URL="+base, "SGLANG_BASE_URL="+base,
		"OPENAI_BASE_URL="+base+"/v1", "OPENAI_API_BASE="+base+"/v1",
		"SGLANG_HOST="+host, "SGLANG_PORT="+port)
	if get("OPENAI_API_KEY") == "" {
		env = append(env, "OPENAI_API_KEY=sglmock")
	}
	return env
}

// writeFile creates path and writes it with f.
func writeFile(path string, f func(io.Writer) error) error {
	file, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := f(file); err != nil {
		file.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return file.Close()
}

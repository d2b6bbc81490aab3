package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sglmock/sglmock/harness"
	"github.com/sglmock/sglmock/mockserver/profile"
)

// benchOptions are the flags of `sglmock bench twopoint|stream`.
type benchOptions struct {
	method       string // "twopoint" or "stream"
	url          string
	backend      string
	model        string
	apiKey       string
	points       []harness.Point
	a, b         int
	methods      []harness.Method
	noncePos     string
	repeat       int
	maxNewTokens int
	noFlush      bool
	inputIDs     bool
	flush        harness.FlushPolicy
	allowShared  int
	csvPath      string
	jsonPath     string
	plotPath     string
	dryRun       bool
	profile      *profile.Profile
	httpTimeout  time.Duration
}

const benchUsage = `Usage: sglmock bench twopoint [flags]
       sglmock bench stream [flags]

Measures an SGLang-compatible server as benchmark scripts do, checks every
measurement for the traps that poison it, and, against sglmock, prints each
figure's error against the modelled truth.

  twopoint  per context, a leg with max_new_tokens a and a leg with b on the
            same prompt: decode tok/s = (b-a)/(t_b-t_a), TTFT ~ t_a,
            prefill tok/s = prompt_tok/t_a. --method picks how the legs are
            kept cold: naive (the same prompt twice, no flush: the seed's
            bug), flush (POST /flush_cache before each leg), nonce (a fresh
            nonce in each prompt), flush+nonce (the seed's fix); a comma list
            runs several.
  stream    one streaming request per context: TTFT from the first event,
            decode tok/s token-weighted from meta_info.completion_tokens;
            also the per-event ITL a script counting one token per event
            reports, and how far off it is.

Every row ends with a verdict: ok, SUSPECT: cause, or POISONED: cause.
Exit status: 1 when any row is POISONED; 2 for a usage error, a server that
cannot be reached or a request it refused (the rows measured before it are
printed); 0 otherwise.

Flags:
`

func parseBenchFlags(args []string, stderr io.Writer) (*benchOptions, error) {
	if len(args) == 0 || (args[0] != "twopoint" && args[0] != "stream") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
			fmt.Fprint(stderr, benchUsage)
			return nil, flag.ErrHelp
		}
		return nil, errors.New("want a method: sglmock bench twopoint|stream [flags] (see sglmock bench --help)")
	}
	o := &benchOptions{method: args[0]}
	fs := flag.NewFlagSet("sglmock bench "+o.method, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var ctxList, methods, backend string
	var retryWait, timeout float64
	fs.StringVar(&o.url, "url", "http://127.0.0.1:30000", "the server's base URL")
	fs.StringVar(&backend, "backend", "sglang", "API family: sglang (/generate, /flush_cache), vllm (OpenAI routes, /reset_prefix_cache) or openai (no flush: nonce only)")
	fs.StringVar(&o.apiKey, "api-key", "", "send \"Authorization: Bearer KEY\" (a server launched with --api-key wants it; default $OPENAI_API_KEY)")
	fs.StringVar(&o.model, "model", "", "the \"model\" field of OpenAI-route requests (default: the first model GET /v1/models lists)")
	fs.StringVar(&ctxList, "ctx", "1024,8192,32768", "contexts in server tokens, comma-separated; REQ:TOKENS labels a row REQ and sends TOKENS (to replay a script that sized prompts with another tokenizer)")
	fs.BoolVar(&o.inputIDs, "input-ids", false, "send prompts as token ids instead of text (no tokenizer involved, no BOS added)")
	fs.IntVar(&o.flush.Retries, "flush-retries", 3, "retry a refused flush this many times (SGLang refuses one sent right after a response: 400 \"Flush cache failed.\"); 0 tries once, as a naive script does")
	floatFlag(fs, &retryWait, "flush-retry-wait", 0.5, "wall `seconds` between flush retries")
	floatFlag(fs, &o.flush.Timeout, "flush-timeout", 0, "send /flush_cache?timeout=`S`: the server waits up to S of its seconds for idle before refusing (recent SGLang); 0 tries at once")
	fs.IntVar(&o.allowShared, "allow-shared-prefix", 0, "tolerate this many reused tokens beyond the measured shared floor (a chance match of a nonce's first token on a real tokenizer)")
	fs.StringVar(&o.csvPath, "csv", "", "also write the rows as CSV to this file")
	fs.StringVar(&o.jsonPath, "json", "", "also write the whole report (every leg, its flushes and truth) as JSON to this file")
	fs.StringVar(&o.plotPath, "plot", "", "also plot TTFT, prefill and decode tok/s against context to this PNG file")
	floatFlag(fs, &timeout, "request-timeout", harness.DefaultRequestTimeout.Seconds(), "give up on a request, and end the run, after this many wall `seconds` (a 200k-token prefill takes minutes; 0 waits forever)")
	if o.method == "twopoint" {
		fs.IntVar(&o.a, "a", 1, "max_new_tokens of leg a")
		fs.IntVar(&o.b, "b", 17, "max_new_tokens of leg b")
		fs.StringVar(&methods, "method", "flush+nonce", "naive, flush, nonce or flush+nonce; a comma list runs each in turn")
		fs.StringVar(&o.noncePos, "nonce-position", "start", "where the nonce goes: start, or end (everything before it stays shared: the checks flag it)")
		fs.IntVar(&o.repeat, "repeat", 1, "measure each context this many times and report the medians and the spread")
		fs.BoolVar(&o.dryRun, "dry-run", false, "send nothing: print each method's predicted time for the sweep on --profile")
	} else {
		fs.IntVar(&o.maxNewTokens, "max-new-tokens", 256, "max_new_tokens of the streaming request")
		fs.BoolVar(&o.noFlush, "no-flush", false, "do not flush before each request (its nonce alone keeps it cold)")
	}
	// The profile flags describe the deployment --dry-run predicts; stream
	// has no dry run, so it takes none.
	profileName := new(string)
	own := map[string]bool{}
	var profileFlags *profile.Flags
	if o.method == "twopoint" {
		fs.StringVar(profileName, "profile", "", "with --dry-run: the profile whose cost model predicts the times")
	}
	fs.VisitAll(func(f *flag.Flag) { own[f.Name] = true })
	if o.method == "twopoint" {
		profileFlags = profile.RegisterFlags(fs)
	}
	fs.Usage = func() {
		fmt.Fprint(stderr, benchUsage)
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args[1:], false); err != nil {
		return nil, err
	}
	o.backend = backend
	if o.apiKey == "" {
		o.apiKey = os.Getenv("OPENAI_API_KEY") // not the flag's default: help would print it
	}
	if !slices.Contains(harness.Backends, harness.Backend(backend)) {
		return nil, fmt.Errorf("--backend %q: must be sglang, vllm or openai", backend)
	}
	o.url = strings.TrimRight(o.url, "/")
	if !strings.HasPrefix(o.url, "http://") && !strings.HasPrefix(o.url, "https://") {
		return nil, fmt.Errorf("--url %q: must start with http:// or https://", o.url)
	}
	var err error
	if o.points, err = parsePoints(ctxList); err != nil {
		return nil, err
	}
	if retryWait < 0 || timeout < 0 {
		return nil, errors.New("--flush-retry-wait and --request-timeout must be >= 0")
	}
	o.flush.RetryWait = time.Duration(retryWait * float64(time.Second))
	o.httpTimeout = time.Duration(timeout * float64(time.Second))
	if o.method == "twopoint" {
		if o.methods, err = harness.ParseMethods(methods); err != nil {
			return nil, fmt.Errorf("--method: %w", err)
		}
	}
	var modelFlag string
	fs.Visit(func(f *flag.Flag) {
		if !own[f.Name] && modelFlag == "" {
			modelFlag = f.Name
		}
	})
	if modelFlag != "" && !o.dryRun {
		return nil, fmt.Errorf("--%s describes a profile: it only goes with --dry-run --profile (the server under test has its own)", modelFlag)
	}
	if *profileName != "" || o.dryRun {
		if !o.dryRun {
			return nil, errors.New("--profile only goes with --dry-run (the server under test has its own)")
		}
		if *profileName == "" {
			return nil, errors.New("--dry-run needs --profile: the cost model that predicts the times")
		}
		if o.profile, err = loadProfile(*profileName, profileFlags); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// parsePoints parses "1024,8192" or "1024:1407,8192:11382".
func parsePoints(s string) ([]harness.Point, error) {
	var out []harness.Point
	for _, f := range strings.Split(s, ",") {
		req, tok, hasTok := strings.Cut(strings.TrimSpace(f), ":")
		r, err := strconv.Atoi(req)
		if err != nil || r < 1 {
			return nil, fmt.Errorf("--ctx %q: %q is not a positive whole number", s, req)
		}
		p := harness.Point{CtxReq: r, Tokens: r}
		if hasTok {
			if p.Tokens, err = strconv.Atoi(tok); err != nil || p.Tokens < 1 {
				return nil, fmt.Errorf("--ctx %q: %q is not a positive whole number", s, tok)
			}
		}
		if p.Tokens < 16 || p.Tokens > harness.MaxTokens {
			return nil, fmt.Errorf("--ctx %q: a prompt needs 16..%d tokens", s, harness.MaxTokens)
		}
		out = append(out, p)
	}
	return out, nil
}

func runBench(args []string, stdout, stderr io.Writer) int {
	o, err := parseBenchFlags(args, stderr)
	if code, done := flagExit("bench", err, stderr); done {
		return code
	}
	if o.dryRun {
		return dryRun(o, stdout, stderr)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c := &harness.Client{HTTP: &http.Client{Timeout: o.httpTimeout}, BaseURL: o.url, Backend: harness.Backend(o.backend),
		Model: o.model, InputIDs: o.inputIDs, APIKey: o.apiKey}
	return bench(ctx, c, o, nil, stdout, stderr)
}

// bench runs the method and writes every output; the exit status follows
// the verdicts.
func bench(ctx context.Context, c *harness.Client, o *benchOptions, newID func() string, stdout, stderr io.Writer) int {
	opt := harness.Options{Flush: o.flush, AllowSharedPrefix: o.allowShared, Progress: newProgress(stderr), NewID: newID}
	var rep *harness.Report
	var err error
	if o.method == "twopoint" {
		tp := &harness.TwoPoint{Client: c, Points: o.points, A: o.a, B: o.b, Methods: o.methods,
			NoncePosition: harness.NoncePosition(o.noncePos), Repeat: o.repeat, Options: opt}
		rep, err = tp.Run(ctx)
	} else {
		st := &harness.Stream{Client: c, Points: o.points, MaxNewTokens: o.maxNewTokens, NoFlush: o.noFlush, Options: opt}
		rep, err = st.Run(ctx)
	}
	if rep != nil && (len(rep.Rows) > 0 || len(rep.Stream) > 0) {
		rep.WriteTable(stdout)
		if werr := writeOutputs(rep, o); werr != nil {
			fmt.Fprintln(stderr, "sglmock bench:", werr)
			return 2
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "sglmock bench %s: %v\n", o.method, err)
		return 2
	}
	if rep.Poisoned() {
		fmt.Fprintln(stderr, "sglmock bench: POISONED rows: their figures do not measure what they claim (see the verdicts).")
		return 1
	}
	return 0
}

func writeOutputs(rep *harness.Report, o *benchOptions) error {
	if o.csvPath != "" {
		if err := writeFile(o.csvPath, rep.WriteCSV); err != nil {
			return err
		}
	}
	if o.jsonPath != "" {
		if err := writeFile(o.jsonPath, rep.WriteJSON); err != nil {
			return err
		}
	}
	if o.plotPath != "" {
		return rep.WritePlot(o.plotPath)
	}
	return nil
}

// profilePredictor is the profile's evaluator behind harness.Predictor.
type profilePredictor struct{ p *profile.Profile }

func (pp profilePredictor) Seconds(prompt, cached, completion int) float64 {
	e := pp.p.Expect(prompt, cached, completion)
	return e.TTFT.Seconds() + e.DecodeSeconds
}

func (pp profilePredictor) CachedOnRepeat(prompt int) int { return pp.p.ReusablePrefixLen(prompt) }

func dryRun(o *benchOptions, stdout, stderr io.Writer) int {
	tp := &harness.TwoPoint{Points: o.points, A: o.a, B: o.b, Methods: o.methods, Repeat: o.repeat,
		NoncePosition: harness.NoncePosition(o.noncePos)}
	if err := tp.WriteDryRun(stdout, o.profile.Name, profilePredictor{o.profile}); err != nil {
		fmt.Fprintln(stderr, "sglmock bench:", err)
		return 2
	}
	return 0
}

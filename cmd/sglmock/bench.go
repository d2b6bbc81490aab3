package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sglmock/sglmock/calibrate"
	"github.com/sglmock/sglmock/harness"
	"github.com/sglmock/sglmock/mockserver/profile"
	"github.com/sglmock/sglmock/sim"
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
	plotFormat   string
	wide         bool
	dryRun       bool
	profile      *profile.Profile
	httpTimeout  time.Duration
	// calibrateAfter is where --calibrate-after writes the profile fitted
	// to the sweep ("" for none); profile is then the fit's base, and fit
	// its --table and --predict.
	calibrateAfter string
	fit            calibrate.Options
}

const benchUsage = `Usage: sglmock bench twopoint [flags]
       sglmock bench stream [flags]

Measures an SGLang-compatible server as benchmark scripts do, checks every
measurement for the traps that poison it, and, against sglmock, prints each
figure's error against the modelled truth.

  twopoint  per context, a leg with max_new_tokens a and a leg with b on the
            same prompt: decode tok/s = (b-a)/(t_b-t_a), TTFT ~ t_a,
            prefill tok/s = prompt_tok/t_a. --method picks how the legs are
            kept cold: naive (the same prompt twice, no flush: the original
            benchmark's bug), flush (POST /flush_cache before each leg),
            nonce (a fresh nonce in each prompt), flush+nonce (its fix),
            salt (a fresh cache_salt on each leg: SGLang reads it on
            /generate from 0.5.17, and the row names the server's release
            when it does not); a comma list runs several.
  stream    one streaming request per context: TTFT from the first event,
            decode tok/s token-weighted from meta_info.completion_tokens;
            also the per-event ITL a script counting one token per event
            reports, and how far off it is.

With --calibrate-after FILE, twopoint then fits a profile to the sweep (as
'sglmock calibrate --json' does), prints its report (every leg measured
against fitted, the leave-one-out accuracy, what to measure next) and writes
the profile to FILE; --profile and the profile flags describe the deployment
measured.

Each row is printed as its context finishes, and ends with a verdict: ok,
SUSPECT or POISONED, with the numbers of the notes under the table that say
why. --wide prints every column. On a terminal a status line shows the leg
in flight and the time left (from the server's cost model against sglmock,
else fitted to the legs done so far).

Exit status: 1 when any row is POISONED, or --calibrate-after's fit is not
within the rows' noise; 2 for a usage error, a server that cannot be reached
or a request it refused (the rows measured before it are printed and
written); 130 when interrupted (Ctrl-C: likewise); 0 otherwise.

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
	fs.StringVar(&o.csvPath, "csv", "", "also write the rows as CSV to this file (- for standard output; the table then goes to standard error)")
	fs.StringVar(&o.jsonPath, "json", "", "also write the whole report (every leg, its flushes and truth) as JSON to this file (- for standard output, as --csv)")
	fs.StringVar(&o.plotPath, "plot", "", "also plot the figures against context to this file; its extension picks the format: "+strings.Join(harness.PlotFormats(), ", "))
	fs.BoolVar(&o.wide, "wide", false, "print every column (the default table keeps the figures to compare)")
	floatFlag(fs, &timeout, "request-timeout", harness.DefaultRequestTimeout.Seconds(), "give up on a request, and end the run, after this many wall `seconds` (a 200k-token prefill takes minutes; 0 waits forever)")
	if o.method == "twopoint" {
		fs.IntVar(&o.a, "a", 1, "max_new_tokens of leg a")
		fs.IntVar(&o.b, "b", 17, "max_new_tokens of leg b")
		fs.StringVar(&methods, "method", "flush+nonce", "naive, flush, nonce, flush+nonce or salt; a comma list runs each in turn")
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
	var fit fitOptions
	if o.method == "twopoint" {
		fs.StringVar(profileName, "profile", "", "with --dry-run: the profile whose cost model predicts the times; "+
			"with --calibrate-after: the profile whose limits, chunking and speculative decoding describe the deployment measured (default: default)")
		fs.StringVar(&o.calibrateAfter, "calibrate-after", "", "after the sweep, fit a profile to its rows and write it to this YAML `file` "+
			"('-' for standard output), printing the fit's report: measured against fitted for every leg, its leave-one-out accuracy, what to measure next")
		fit = calibrateFlags(fs)
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
	if o.calibrateAfter != "" {
		if err := o.checkCalibrateAfter(*profileName, profileFlags, fit); err != nil {
			return nil, err
		}
	} else if err := noFitFlags(fs); err != nil {
		return nil, err
	} else if modelFlag != "" && !o.dryRun {
		return nil, fmt.Errorf("--%s describes a profile: it only goes with --dry-run --profile, or --calibrate-after (the server under test has its own)", modelFlag)
	}
	if o.calibrateAfter == "" && (*profileName != "" || o.dryRun) {
		if !o.dryRun {
			return nil, errors.New("--profile only goes with --dry-run or --calibrate-after (the server under test has its own)")
		}
		if *profileName == "" {
			return nil, errors.New("--dry-run needs --profile: the cost model that predicts the times")
		}
		if o.profile, err = loadProfile(*profileName, profileFlags); err != nil {
			return nil, err
		}
	}
	if err := o.checkOutputs(); err != nil {
		return nil, err
	}
	return o, nil
}

// checkCalibrateAfter checks --calibrate-after's flags and loads the
// fit's base profile.
func (o *benchOptions) checkCalibrateAfter(profileName string, flags *profile.Flags, fit fitOptions) error {
	if o.dryRun {
		return errors.New("--calibrate-after fits what a sweep measured, and --dry-run sends nothing")
	}
	sizes := map[int]bool{}
	for _, p := range o.points {
		sizes[p.Tokens] = true
	}
	if len(sizes) < 3 {
		return fmt.Errorf("--calibrate-after needs --ctx at 3 prompt sizes or more (the prefill has three coefficients); 4 or more also say how well the profile predicts: got %d", len(sizes))
	}
	var err error
	if o.fit, err = fit.options(); err != nil {
		return err
	}
	if profileName == "" {
		profileName = "default"
	}
	o.profile, err = loadProfile(profileName, flags)
	return err
}

// noFitFlags refuses the fit's flags without --calibrate-after.
func noFitFlags(fs *flag.FlagSet) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		if (f.Name == "table" || f.Name == "predict") && err == nil {
			err = fmt.Errorf("--%s is a flag of the fit: it only goes with --calibrate-after", f.Name)
		}
	})
	return err
}

// checkOutputs refuses, before anything is sent, outputs that could not be
// written at the end of a sweep that may take an hour: a plot format
// nobody can draw, a directory that is not there or not writable, two
// outputs on one file or both on standard output.
func (o *benchOptions) checkOutputs() error {
	outputs := []struct{ flag, path string }{{"csv", o.csvPath}, {"json", o.jsonPath}, {"plot", o.plotPath}, {"calibrate-after", o.calibrateAfter}}
	if o.dryRun {
		for _, out := range outputs {
			if out.path != "" {
				return fmt.Errorf("--%s writes a run's rows, and --dry-run sends nothing", out.flag)
			}
		}
		return nil
	}
	var toStdout []string
	for _, out := range outputs {
		if out.path == "-" && out.flag != "plot" {
			toStdout = append(toStdout, "--"+out.flag+" -")
		}
	}
	switch len(toStdout) {
	case 0, 1:
	case 2:
		return fmt.Errorf("%s and %s would both write to standard output: give one of them a file", toStdout[0], toStdout[1])
	default:
		return fmt.Errorf("%s would all write to standard output: give all but one of them a file", strings.Join(toStdout, ", "))
	}
	if o.plotPath == "-" {
		return errors.New("--plot needs a file name: its extension picks the format")
	}
	if o.plotPath != "" {
		var err error
		if o.plotFormat, err = harness.PlotFormat(o.plotPath); err != nil {
			return fmt.Errorf("--plot %s: %w", o.plotPath, err)
		}
	}
	seen := map[string]string{}
	for _, out := range outputs {
		if out.path == "" || out.path == "-" {
			continue
		}
		abs, err := filepath.Abs(out.path)
		if err != nil {
			return fmt.Errorf("--%s %s: %w", out.flag, out.path, err)
		}
		if other, ok := seen[abs]; ok {
			return fmt.Errorf("--%s and --%s both write %s", other, out.flag, out.path)
		}
		seen[abs] = out.flag
		if err := checkWritable(out.path); err != nil {
			return fmt.Errorf("--%s %s: %w", out.flag, out.path, err)
		}
	}
	return nil
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
	go func() {
		// After the first Ctrl-C the run stops and writes what it has; a
		// second one ends the process at once.
		<-ctx.Done()
		stop()
	}()
	c := &harness.Client{HTTP: &http.Client{Timeout: o.httpTimeout}, BaseURL: o.url, Backend: harness.Backend(o.backend),
		Model: o.model, InputIDs: o.inputIDs, APIKey: o.apiKey}
	return bench(ctx, c, o, nil, stdout, stderr)
}

// exitInterrupted is the exit status of a run stopped by Ctrl-C, as a
// shell gives a process killed by SIGINT.
const exitInterrupted = 130

// bench runs the method, printing each row as it finishes, and writes
// every output; the exit status follows the verdicts. Cancelling ctx
// (Ctrl-C) stops the run: the rows finished by then are printed and
// written, and the exit status is 130.
func bench(ctx context.Context, c *harness.Client, o *benchOptions, newID func() string, stdout, stderr io.Writer) int {
	out := stdout
	if o.csvPath == "-" || o.jsonPath == "-" || o.calibrateAfter == "-" {
		out = stderr
	}
	con := newConsole(out, stderr, o.wide)
	con.table.SetRowsPerTable(len(o.points))
	opt := harness.Options{Flush: o.flush, AllowSharedPrefix: o.allowShared, Progress: con, NewID: newID, CostModel: costModel}
	started := time.Now()
	var rep *harness.Report
	var err error
	rows := len(o.points)
	if o.method == "twopoint" {
		tp := &harness.TwoPoint{Client: c, Points: o.points, A: o.a, B: o.b, Methods: o.methods,
			NoncePosition: harness.NoncePosition(o.noncePos), Repeat: o.repeat, Options: opt}
		rows *= len(o.methods)
		rep, err = tp.Run(ctx)
	} else {
		st := &harness.Stream{Client: c, Points: o.points, MaxNewTokens: o.maxNewTokens, NoFlush: o.noFlush, Options: opt}
		rep, err = st.Run(ctx)
	}
	done := 0
	if rep != nil {
		done = len(rep.Rows) + len(rep.Stream)
	}
	if werr := con.Close(rep); werr != nil {
		fmt.Fprintln(stderr, "sglmock bench:", werr)
		return 2
	}
	var written []string
	if done > 0 {
		var werr error
		if written, werr = writeOutputs(rep, o, harness.PlotCaption{Server: o.url, Date: started}, stdout); werr != nil {
			fmt.Fprintln(stderr, "sglmock bench:", werr)
			return 2
		}
	}
	fitted := 0
	if err == nil && o.calibrateAfter != "" {
		fitted = calibrateAfter(rep, o, out, stdout, stderr)
	}
	switch {
	case err != nil && ctx.Err() != nil:
		fmt.Fprintf(stderr, "sglmock bench %s: interrupted: %s\n", o.method, completed(done, rows, written))
		return exitInterrupted
	case err != nil:
		fmt.Fprintf(stderr, "sglmock bench %s: %v\n", o.method, err)
		if done < rows {
			fmt.Fprintf(stderr, "sglmock bench %s: %s\n", o.method, completed(done, rows, written))
		}
		return 2
	case rep.Poisoned():
		fmt.Fprintln(stderr, "sglmock bench: POISONED rows: their figures do not measure what they claim (see the verdicts).")
		return max(1, fitted)
	}
	return fitted
}

// calibrateAfter fits a profile to the sweep's rows, prints the fit's
// report to out and writes the profile; its exit status is calibrate's.
func calibrateAfter(rep *harness.Report, o *benchOptions, out, stdout, stderr io.Writer) int {
	rows, err := calibrate.FromReport(rep)
	if err != nil {
		fmt.Fprintln(stderr, "sglmock bench: --calibrate-after:", err)
		return 2
	}
	opt := o.fit
	opt.Name = "calibrated"
	if o.calibrateAfter != "-" {
		opt.Name = strings.TrimSuffix(filepath.Base(o.calibrateAfter), filepath.Ext(o.calibrateAfter))
	}
	fmt.Fprintf(out, "\ncalibrated on this sweep (base profile %s):\n", o.profile.Name)
	return fitAndWrite(rows, o.profile, opt, "a sweep of "+o.url, o.calibrateAfter, out, stdout, stderr, "sglmock bench: --calibrate-after")
}

// completed says what an unfinished run left: its rows and its files.
func completed(done, rows int, written []string) string {
	if done == 0 {
		return fmt.Sprintf("no row of %d was complete; nothing written", rows)
	}
	s := fmt.Sprintf("%d of %d rows complete, printed above", done, rows)
	if len(written) > 0 {
		s += "; written to " + strings.Join(written, ", ")
	}
	return s
}

// writeOutputs writes the CSV, the JSON and the plot that were asked for
// and names the files written. "-" is standard output.
func writeOutputs(rep *harness.Report, o *benchOptions, caption harness.PlotCaption, stdout io.Writer) ([]string, error) {
	var written []string
	for _, out := range []struct {
		path  string
		write func(io.Writer) error
	}{
		{o.csvPath, rep.WriteCSV},
		{o.jsonPath, rep.WriteJSON},
		{o.plotPath, func(w io.Writer) error { return rep.WritePlot(w, o.plotFormat, caption) }},
	} {
		if out.path == "" {
			continue
		}
		if err := writeOutput(out.path, out.write, stdout); err != nil {
			return written, err
		}
		if out.path != "-" {
			written = append(written, out.path)
		}
	}
	return written, nil
}

// costModel reads the profile a server's /sim/profile gives into the cost
// model of the dry run, which predicts the time left.
func costModel(p *sim.Profile) (harness.Predictor, error) {
	prof, err := profile.Parse(bytes.NewReader(p.Profile), p.Name)
	if err != nil {
		return nil, err
	}
	return profilePredictor{prof}, nil
}

// profilePredictor is the profile's evaluator behind harness.Predictor.
type profilePredictor struct{ p *profile.Profile }

func (pp profilePredictor) Seconds(prompt, cached, completion int) float64 {
	e := pp.p.Expect(prompt, cached, completion)
	return e.TTFT.Seconds() + e.DecodeSeconds
}

func (pp profilePredictor) CachedOnRepeat(prompt int) int { return pp.p.ReusablePrefixLen(prompt) }

func dryRun(o *benchOptions, stdout, stderr io.Writer) int {
	if err := fitsContext(o.points, o.b, o.profile); err != nil {
		fmt.Fprintln(stderr, "sglmock bench:", err)
		return 2
	}
	tp := &harness.TwoPoint{Points: o.points, A: o.a, B: o.b, Methods: o.methods, Repeat: o.repeat,
		NoncePosition: harness.NoncePosition(o.noncePos)}
	if err := tp.WriteDryRun(stdout, o.profile.Name, profilePredictor{o.profile}); err != nil {
		fmt.Fprintln(stderr, "sglmock bench:", err)
		return 2
	}
	writeExtrapolation(stdout, o.profile, o.points)
	return 0
}

// writeExtrapolation says which contexts of a dry run lie past the
// prompts a calibrated profile was measured on.
func writeExtrapolation(w io.Writer, p *profile.Profile, points []harness.Point) {
	c := p.Calibration
	if c == nil {
		return
	}
	var past []string
	for _, pt := range points {
		if x := p.Beyond(pt.Tokens); x > 0 {
			past = append(past, fmt.Sprintf("ctx %d (%.1fx the longest)", pt.CtxReq, x))
		}
	}
	if len(past) == 0 {
		return
	}
	accuracy := ""
	if c.Accuracy > 0 {
		accuracy = fmt.Sprintf(", where it predicts within ±%.1f %%", 100*c.Accuracy)
	}
	verb := "lies"
	if len(past) > 1 {
		verb = "lie"
	}
	fmt.Fprintf(w, "\nProfile %s was calibrated on prompts of %d..%d tokens%s: %s %s past them, an extrapolation.\n",
		p.Name, c.MinPromptTokens, c.MaxPromptTokens, accuracy, strings.Join(past, ", "), verb)
}

// fitsContext refuses, as the server would, a context whose leg b does not
// fit the profile: a prompt must be shorter than the longest input it
// takes and leave room for b new tokens in the context length. A dry run
// that priced such a sweep would promise one the server then stops at
// that context.
func fitsContext(points []harness.Point, b int, p *profile.Profile) error {
	longest := harness.LongestPrompt(p.ContextLength, b)
	for _, pt := range points {
		if pt.Tokens > longest {
			return fmt.Errorf("--ctx %d: profile %s takes prompts of at most %d tokens with b=%d (context_length %d); the server would refuse this one",
				pt.Tokens, p.Name, longest, b, p.ContextLength)
		}
	}
	return nil
}

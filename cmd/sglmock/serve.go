package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sglmock/sglmock/internal/gctune"
	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/engine"
	"github.com/sglmock/sglmock/mockserver/kvevents"
	"github.com/sglmock/sglmock/mockserver/profile"
	"github.com/sglmock/sglmock/mockserver/tokenizer"
)

// serveOptions are sglmock serve's flags, spelled as SGLang's
// launch_server spells them, plus --profile, --speedup and --seed.
type serveOptions struct {
	host, modelPath, servedModelName, apiKey, logLevel, profileName string
	port                                                            int
	speedup, shutdownGrace                                          float64
	skipWarmup                                                      bool
	disableRadixCache, enableCacheReport, enableMetrics             bool
	streamInterval                                                  int
	maxBodyBytes, simTruthBytes, bodyBudget, answerBudget           int64
	apiKeyFile                                                      string
	kvEventsConfig                                                  string // as given, for /server_info
	kvEvents                                                        *kvevents.Config
	tokenizerPath                                                   string
	tokenizer                                                       *tokenizer.Tokenizer // nil: the profile's
	readHeaderTimeout, idleTimeout, bodyTimeout, stallTimeout       time.Duration
	profile                                                         *profile.Profile
	// launched are the deployment flags SGLang leaves None unless given,
	// for /server_info.
	launched profile.Launched
	// ignoredLaunchFlags are the flags of SGLang's launch_server given
	// that sglmock does not model, named in one warning line.
	ignoredLaunchFlags []string
	// ready, if set, receives the listening address once the server is up.
	ready chan<- string
	// listener, if set, is the bound address to serve on (fleet binds
	// every replica's before starting any).
	listener net.Listener
}

var logLevels = []string{"debug", "info", "warning", "error", "critical"}

// parseServeFlags parses the flags and applies them over the profile:
// a flag that is set wins over the profile's value.
func parseServeFlags(args []string, stderr io.Writer) (*serveOptions, error) {
	fs, o, profileFlags := serveFlags(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: sglmock serve [flags]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Serves SGLang's HTTP API over a simulated engine. Flags are SGLang's launch_server flags;")
		fmt.Fprintln(stderr, "those that describe the model override the profile. Every other flag of SGLang's launch_server")
		fmt.Fprintln(stderr, "(--trust-remote-code, --mem-fraction-static, --kv-cache-dtype, ...) is accepted, with its values,")
		fmt.Fprintln(stderr, "and named in one warning line; as in SGLang, a flag may be shortened to an unambiguous prefix")
		fmt.Fprintln(stderr, "(--tp 8), and --config FILE reads flags from a YAML file.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	return o.parse(fs, profileFlags, args, stderr)
}

// serveFlags defines serve's flags, printing to out: serve's own and
// fleet's, whose every replica takes them.
func serveFlags(out io.Writer) (*flag.FlagSet, *serveOptions, *profile.Flags) {
	fs := flag.NewFlagSet("sglmock serve", flag.ContinueOnError)
	fs.SetOutput(out)
	o := &serveOptions{}
	fs.StringVar(&o.host, "host", "127.0.0.1", "address to listen on")
	fs.IntVar(&o.port, "port", 30000, "port to listen on")
	fs.StringVar(&o.modelPath, "model-path", "", "model path reported by /model_info (default: the profile's served model name); "+
		"a model directory, or a model id in the local Hugging Face cache, also gives the tokenizer")
	fs.StringVar(&o.tokenizerPath, "tokenizer-path", "", "a Hugging Face model `DIR` (tokenizer.json with tokenizer_config.json, or Kimi's tiktoken.model) "+
		"whose tokenizer and chat template count and show every token (default: --model-path, else the profile's tokenizer_path, else the built-in tokenizer)")
	fs.StringVar(&o.servedModelName, "served-model-name", "", "model name in /v1/models (default: --model-path)")
	fs.StringVar(&o.apiKey, "api-key", "", "require 'Authorization: Bearer KEY' (health checks and metrics stay open); "+
		"--api-key-file or the SGLANG_API_KEY environment variable keep the key out of the process list")
	fs.StringVar(&o.apiKeyFile, "api-key-file", "", "read the API key from this file (surrounding white space is ignored)")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: "+strings.Join(logLevels, ", "))
	fs.StringVar(&o.profileName, "profile", "default", "cost profile: a built-in name (see 'sglmock profiles') or a YAML file")
	floatFlag(fs, &o.speedup, "speedup", 1, "`S` simulated seconds per wall second")
	floatFlag(fs, &o.shutdownGrace, "shutdown-grace", 10, "wall `seconds` in-flight requests get to finish on SIGINT/SIGTERM before they are aborted")
	fs.BoolVar(&o.skipWarmup, "skip-server-warmup", false, "skip SGLang's warmup request (it leaves its prompt in the prefix cache)")
	fs.BoolVar(&o.disableRadixCache, "disable-radix-cache", false, "disable prefix caching: cached_tokens is always 0")
	fs.BoolVar(&o.enableCacheReport, "enable-cache-report", false, "report usage.prompt_tokens_details.cached_tokens in OpenAI responses")
	fs.BoolVar(&o.enableMetrics, "enable-metrics", false, "serve Prometheus metrics on /metrics")
	fs.IntVar(&o.streamInterval, "stream-interval", 1, "send a stream event every N output tokens")
	fs.Int64Var(&o.maxBodyBytes, "max-body-bytes", 256<<20, "largest request body accepted; larger ones get 413")
	fs.Int64Var(&o.bodyBudget, "body-budget-bytes", api.DefaultBodyBudget, "request bodies in flight, all requests together (a render's token ids included); "+
		"past it a request gets 503 with Retry-After before more of its body is read")
	fs.Int64Var(&o.answerBudget, "answer-budget-bytes", api.DefaultAnswerBudget, "what generation requests together may make the server hold until their answers "+
		"are written (prompt and output tokens, output text); past it a request waits its turn, as behind a full batch")
	fs.DurationVar(&o.readHeaderTimeout, "read-header-timeout", 30*time.Second, "longest wait for a request's headers (wall time)")
	fs.DurationVar(&o.idleTimeout, "idle-timeout", 5*time.Second, "how long an idle keep-alive connection stays open (wall time; uvicorn's default, as SGLang runs it)")
	fs.DurationVar(&o.stallTimeout, "stall-timeout", api.DefaultStallTimeout, "longest a write to a client may make no progress before the client counts as gone and its requests are aborted (wall time)")
	fs.DurationVar(&o.bodyTimeout, "body-timeout", 60*time.Second, "longest wait for more of a request's body, and for the whole body beyond it at 1 MiB/s, before answering 408 (wall time)")
	fs.Int64Var(&o.simTruthBytes, "sim-truth-bytes", engine.DefaultTruthBytes,
		"memory the finished requests' ground truths (/sim/requests) may hold, the oldest evicted first")
	fs.StringVar(&o.kvEventsConfig, "kv-events-config", "", "publish the radix cache's KV events over ZMQ, as SGLang: a JSON object with SGLang's keys "+
		`(publisher, endpoint, replay_endpoint, buffer_steps, hwm, max_queue_size, topic) and the mock's own "bind": true, which binds the endpoint as given, `+
		`e.g. '{"publisher":"zmq","endpoint":"tcp://127.0.0.1:5557","bind":true}' for loopback only (SGLang's form, "tcp://*:5557", binds every interface); `+
		`without a topic, SGLang's empty topic`)
	profileFlags := profile.RegisterFlags(fs)
	return fs, o, profileFlags
}

// parse parses args into o and checks every value.
func (o *serveOptions) parse(fs *flag.FlagSet, profileFlags *profile.Flags, args []string, stderr io.Writer) (*serveOptions, error) {
	launch, err := splitLaunchArgs(fs, args)
	if err != nil {
		return nil, err
	}
	if err := parseFlags(fs, launch.own, false); err != nil {
		return nil, err
	}
	o.ignoredLaunchFlags = launch.ignored
	switch {
	case o.port < 0 || o.port > 65535:
		return nil, fmt.Errorf("--port %d: must be in 0..65535", o.port)
	case o.speedup <= 0 || o.speedup > 1e6:
		return nil, fmt.Errorf("--speedup %v: must be in (0, 1e6]", o.speedup)
	case !slices.Contains(logLevels, o.logLevel):
		return nil, fmt.Errorf("--log-level %q: must be one of %s", o.logLevel, strings.Join(logLevels, ", "))
	case o.streamInterval < 1:
		return nil, fmt.Errorf("--stream-interval %d: must be >= 1", o.streamInterval)
	case o.maxBodyBytes < 1:
		return nil, fmt.Errorf("--max-body-bytes %d: must be >= 1", o.maxBodyBytes)
	case o.simTruthBytes < 1:
		return nil, fmt.Errorf("--sim-truth-bytes %d: must be >= 1", o.simTruthBytes)
	case o.bodyBudget < 1:
		return nil, fmt.Errorf("--body-budget-bytes %d: must be >= 1", o.bodyBudget)
	case o.answerBudget < 1:
		return nil, fmt.Errorf("--answer-budget-bytes %d: must be >= 1", o.answerBudget)
	case o.shutdownGrace < 0:
		return nil, fmt.Errorf("--shutdown-grace %v: must be >= 0", o.shutdownGrace)
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"read-header-timeout", o.readHeaderTimeout}, {"idle-timeout", o.idleTimeout}, {"body-timeout", o.bodyTimeout}, {"stall-timeout", o.stallTimeout}} {
		if d.v <= 0 {
			return nil, fmt.Errorf("--%s %v: must be > 0", d.flag, d.v)
		}
	}
	if o.kvEventsConfig != "" {
		cfg, ignored, err := kvevents.ParseConfig(o.kvEventsConfig)
		if err != nil {
			return nil, err
		}
		for _, k := range ignored {
			fmt.Fprintf(stderr, "sglmock serve: --kv-events-config: unknown key %q ignored (SGLang ignores it too)\n", k)
		}
		o.kvEvents = &cfg
	}
	key, err := apiKey(o.apiKey, o.apiKeyFile, os.Getenv("SGLANG_API_KEY"))
	if err != nil {
		return nil, err
	}
	o.apiKey = key
	p, err := loadProfile(o.profileName, profileFlags)
	if err != nil {
		return nil, err
	}
	o.profile = p
	o.launched = profileFlags.Launched()
	if len(o.ignoredLaunchFlags) > 0 {
		fmt.Fprintf(stderr, "%s: SGLang flags accepted and ignored (the profile stands for the deployment they describe): %s\n",
			fs.Name(), strings.Join(o.ignoredLaunchFlags, " "))
	}
	var warning string
	if o.tokenizer, warning, err = serveTokenizer(o.tokenizerPath, o.modelPath); err != nil {
		return nil, err
	}
	if warning != "" {
		fmt.Fprintf(stderr, "%s: %s\n", fs.Name(), warning)
	}
	return o, nil
}

// serveTokenizer loads the tokenizer --tokenizer-path names, else the one
// in --model-path's directory, as SGLang does; nil when neither gives one
// (the profile's tokenizer_path or the built-in tokenizer then serve). A
// --model-path that is no local model is only the model's name, and the
// warning says so: a client that loads the model's tokenizer would count
// every prompt differently from the server.
func serveTokenizer(tokenizerPath, modelPath string) (tok *tokenizer.Tokenizer, warning string, err error) {
	flag, path := "--tokenizer-path", tokenizerPath
	if path == "" {
		flag, path = "--model-path", modelPath
	}
	if path == "" {
		return nil, "", nil
	}
	dir, ok := tokenizer.Resolve(path)
	if !ok {
		if flag == "--model-path" {
			return nil, fmt.Sprintf("--model-path %s is no local directory nor a model in the local Hugging Face cache: it names the model only, and the profile's tokenizer counts tokens (give --tokenizer-path DIR to count as the model does)", path), nil
		}
		return nil, "", fmt.Errorf("--tokenizer-path %s: no such directory, nor a model id in the local Hugging Face cache", path)
	}
	if tok, err = tokenizer.Load(dir); err != nil {
		return nil, "", fmt.Errorf("%s %s: %w", flag, path, err)
	}
	return tok, "", nil
}

// apiKey picks the API key: --api-key, else --api-key-file, else the
// SGLANG_API_KEY environment variable; none means no key.
func apiKey(flagKey, file, env string) (string, error) {
	switch {
	case flagKey != "" && file != "":
		return "", errors.New("--api-key and --api-key-file: give one or the other")
	case flagKey != "":
		return flagKey, nil
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("--api-key-file: %w", err)
		}
		key := strings.TrimSpace(string(b))
		if key == "" {
			return "", fmt.Errorf("--api-key-file %s: the file is empty", file)
		}
		return key, nil
	}
	return env, nil
}

func runServe(args []string, stdout, stderr io.Writer) int {
	o, err := parseServeFlags(args, stderr)
	if code, done := flagExit("serve", err, stderr); done {
		return code
	}
	stop, kill := interrupts()
	if err := serve(stop, kill, o, stderr); err != nil {
		fmt.Fprintln(stderr, "sglmock serve:", err)
		return 1
	}
	return 0
}

// interrupts returns a context that ends at the first SIGINT or SIGTERM
// (shut down gracefully) and one that ends at the second (stop at once).
func interrupts() (stop, kill context.Context) {
	stop, stopNow := context.WithCancel(context.Background())
	kill, killNow := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sigs
		stopNow()
		<-sigs
		killNow()
		signal.Stop(sigs)
	}()
	return stop, kill
}

// serve runs the server until stop ends, then shuts down gracefully: new
// work gets 503 while /sim/, /metrics and the info endpoints keep
// answering; in-flight requests get --shutdown-grace to finish, then the
// rest are aborted. kill ending during the grace period stops everything
// at once.
func serve(stop, kill context.Context, o *serveOptions, logw io.Writer) error {
	logger := slog.New(newSGLangHandler(logw, o.logLevel))
	defer gctune.ForServer(o.bodyBudget+o.answerBudget+o.simTruthBytes, os.Getenv).Apply()()
	ln := o.listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", net.JoinHostPort(o.host, strconv.Itoa(o.port))); err != nil {
			return err
		}
	}
	defer ln.Close()
	args := api.ServerArgs{Host: o.host, Port: o.port, ModelPath: o.modelPath, ServedModelName: o.servedModelName, LogLevel: o.logLevel,
		TokenizerPath: o.tokenizerPath, ContextLength: o.launched.ContextLength, MaxTotalTokens: o.launched.MaxTotalTokens,
		MaxRunningRequests: o.launched.MaxRunningRequests}
	pubs, err := startKVEvents(o, logger)
	if err != nil {
		return err
	}
	var kvInfo *api.KVEventsInfo
	if pubs != nil {
		defer pubs.Close() // after the engine, which the deferred srv.Close stops
		args.KVEventsConfig = &o.kvEventsConfig
		kvInfo = &api.KVEventsInfo{Publisher: o.kvEvents.Publisher, Endpoint: o.kvEvents.Endpoint, Topic: pubs[0].Topic()}
	}
	srv, err := api.New(api.Config{
		Profile:           o.profile,
		Args:              args,
		RankCacheEvents:   pubs.sinks(),
		KVEvents:          kvInfo,
		KVEventStats:      pubs.stats(),
		APIKey:            o.apiKey,
		Speedup:           o.speedup,
		SpinWindow:        engine.DefaultSpinWindow,
		DisableRadixCache: o.disableRadixCache,
		EnableCacheReport: o.enableCacheReport,
		EnableMetrics:     o.enableMetrics,
		StreamInterval:    o.streamInterval,
		MaxBodyBytes:      o.maxBodyBytes,
		SimTruthBytes:     o.simTruthBytes,
		BodyBudgetBytes:   o.bodyBudget,
		AnswerBudgetBytes: o.answerBudget,
		Logger:            logger,
		ReadHeaderTimeout: o.readHeaderTimeout,
		IdleTimeout:       o.idleTimeout,
		BodyTimeout:       o.bodyTimeout,
		Tokenizer:         o.tokenizer,
		StallTimeout:      o.stallTimeout,
		HiCacheStorageDir: hicacheStorageDir(),
	})
	if err != nil {
		return err
	}
	defer srv.Close()
	hs := srv.HTTPServer()
	defer hs.Close() // closes the listener too, whatever happens below
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	args = srv.Args()
	bi, _ := debug.ReadBuildInfo()
	logger.Info(fmt.Sprintf("sglmock %s serving %s (profile %s, speedup %g, tokenizer %s) on http://%s; listen backlog %s",
		sglmockVersion(version, bi), args.ServedModelName, o.profile.Name, o.speedup, srv.Engine().Tokenizer().Name(), ln.Addr(), backlog()))
	if o.skipWarmup {
		srv.MarkReady()
	} else if err := srv.Warmup(stop); err != nil && stop.Err() == nil {
		return fmt.Errorf("warmup: %w", err)
	}
	logger.Info("The server is fired up and ready to roll!")
	if o.ready != nil {
		o.ready <- ln.Addr().String()
	}
	select {
	case err := <-served:
		return err
	case <-stop.Done():
	}
	logger.Info("Shutting down: new requests get 503; in-flight requests have " +
		strconv.FormatFloat(o.shutdownGrace, 'g', -1, 64) + " s to finish (a second Ctrl-C stops at once).")
	srv.BeginShutdown()
	if !drain(srv.Engine(), time.Duration(o.shutdownGrace*float64(time.Second)), kill) {
		logger.Info("Stopped at once.")
		return nil
	}
	// Whatever still runs is aborted ("The server is shutting down."); each
	// handler writes its request's abort (and a stream's [DONE]) and
	// returns. Connections that still hang on are closed after a short wait.
	srv.Engine().Close()
	wait, cancel := context.WithTimeout(kill, 5*time.Second)
	defer cancel()
	hs.Shutdown(wait)
	logger.Info("Shutdown complete.")
	return nil
}

// drain waits until the engine holds no request or grace has passed. It
// returns false if kill ends first.
func drain(e *engine.Engine, grace time.Duration, kill context.Context) bool {
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for {
		if st := e.Stats(); st.Running+st.Queued == 0 {
			return true
		}
		select {
		case <-deadline.C:
			return true
		case <-kill.Done():
			return false
		case <-poll.C:
		}
	}
}

// backlog reports the kernel's accept queue bound, which Go's listener
// uses: net.core.somaxconn.
func backlog() string {
	b, err := os.ReadFile("/proc/sys/net/core/somaxconn")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

// sglangHandler writes log records as SGLang's server does:
// "[2026-11-30 10:00:00] Prefill batch, ...".
type sglangHandler struct {
	mu    *sync.Mutex // the engine and the server log from different goroutines
	w     io.Writer
	level slog.Level
	// prefix names the scheduler a line comes from, after the time, as
	// SGLang's scheduler processes do (" DP1 TP1"): from a logger's
	// dp_rank and tp_rank.
	prefix string
}

func newSGLangHandler(w io.Writer, level string) *sglangHandler {
	l := slog.LevelInfo
	switch level {
	case "debug":
		l = slog.LevelDebug
	case "warning":
		l = slog.LevelWarn
	case "error", "critical":
		l = slog.LevelError
	}
	return &sglangHandler{mu: new(sync.Mutex), w: w, level: l}
}

func (h *sglangHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *sglangHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := fmt.Fprintf(h.w, "[%s%s] %s\n", r.Time.Format("2006-01-02 15:04:05"), h.prefix, r.Message)
	return err
}

func (h *sglangHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	for _, a := range attrs {
		switch a.Key {
		case "dp_rank":
			c.prefix += " DP" + a.Value.String()
		case "tp_rank":
			c.prefix += " TP" + a.Value.String()
		}
	}
	return &c
}
func (h *sglangHandler) WithGroup(string) slog.Handler { return h }

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"sglmock/mockserver/api"
	"sglmock/mockserver/engine"
	"sglmock/mockserver/profile"
)

// serveOptions are sglmock serve's flags, spelled as SGLang's
// launch_server spells them, plus --profile, --speedup and --seed.
type serveOptions struct {
	host, modelPath, servedModelName, apiKey, logLevel, profileName string
	schedulePolicy                                                  string
	port                                                            int
	speedup, shutdownGrace                                          float64
	skipWarmup                                                      bool
	disableRadixCache, enableCacheReport, enableMetrics             bool
	streamInterval                                                  int
	maxBodyBytes                                                    int64
	profile                                                         *profile.Profile
	// ready, if set, receives the listening address once the server is up.
	ready chan<- string
}

var logLevels = []string{"debug", "info", "warning", "error", "critical"}

// parseServeFlags parses the flags and applies them over the profile:
// a flag that is set wins over the profile's value.
func parseServeFlags(args []string, stderr io.Writer) (*serveOptions, error) {
	fs := flag.NewFlagSet("sglmock serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &serveOptions{}
	fs.StringVar(&o.host, "host", "127.0.0.1", "address to listen on")
	fs.IntVar(&o.port, "port", 30000, "port to listen on")
	fs.StringVar(&o.modelPath, "model-path", "", "model path reported by /model_info (default: the profile's served model name)")
	fs.StringVar(&o.servedModelName, "served-model-name", "", "model name in /v1/models (default: --model-path)")
	fs.StringVar(&o.apiKey, "api-key", "", "require 'Authorization: Bearer KEY' (health checks and metrics stay open)")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: "+strings.Join(logLevels, ", "))
	fs.StringVar(&o.profileName, "profile", "default", "cost profile: a built-in name (see 'sglmock profiles') or a YAML file")
	fs.Float64Var(&o.speedup, "speedup", 1, "simulated seconds per wall second")
	fs.Float64Var(&o.shutdownGrace, "shutdown-grace", 10, "wall seconds in-flight requests get to finish on SIGINT/SIGTERM before they are aborted")
	fs.BoolVar(&o.skipWarmup, "skip-server-warmup", false, "skip SGLang's warmup request (it leaves its prompt in the prefix cache)")
	fs.BoolVar(&o.disableRadixCache, "disable-radix-cache", false, "disable prefix caching: cached_tokens is always 0")
	fs.BoolVar(&o.enableCacheReport, "enable-cache-report", false, "report usage.prompt_tokens_details.cached_tokens in OpenAI responses")
	fs.BoolVar(&o.enableMetrics, "enable-metrics", false, "serve Prometheus metrics on /metrics")
	fs.IntVar(&o.streamInterval, "stream-interval", 1, "send a stream event every N decode steps")
	fs.Int64Var(&o.maxBodyBytes, "max-body-bytes", 256<<20, "largest request body accepted; larger ones get 413")
	fs.StringVar(&o.schedulePolicy, "schedule-policy", "fcfs", "scheduling policy: fcfs (SGLang's default; the only one modelled)")
	profileFlags := profile.RegisterFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: sglmock serve [flags]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Serves SGLang's HTTP API over a simulated engine. Flags are SGLang's launch_server flags;")
		fmt.Fprintln(stderr, "those that describe the model override the profile.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (flags start with --)", fs.Arg(0))
	}
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
	case o.shutdownGrace < 0:
		return nil, fmt.Errorf("--shutdown-grace %v: must be >= 0", o.shutdownGrace)
	case o.schedulePolicy == "lpm" || o.schedulePolicy == "dfs-weight" || o.schedulePolicy == "lof" || o.schedulePolicy == "random":
		return nil, fmt.Errorf("--schedule-policy %s: not modelled; sglmock schedules fcfs, SGLang's default", o.schedulePolicy)
	case o.schedulePolicy != "fcfs":
		return nil, fmt.Errorf("--schedule-policy %q: unknown; SGLang's policies are fcfs, lpm, dfs-weight, lof and random, and sglmock models fcfs", o.schedulePolicy)
	}
	p, err := loadProfile(o.profileName, profileFlags)
	if err != nil {
		return nil, err
	}
	o.profile = p
	return o, nil
}

func runServe(args []string, stdout, stderr io.Writer) int {
	o, err := parseServeFlags(args, stderr)
	if code, done := flagExit("serve", err, stderr); done {
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, o, stderr); err != nil {
		fmt.Fprintln(stderr, "sglmock serve:", err)
		return 1
	}
	return 0
}

// serve runs the server until ctx ends, then shuts down gracefully: new
// requests get 503, in-flight ones get --shutdown-grace to finish, then the
// rest are aborted.
func serve(ctx context.Context, o *serveOptions, logw io.Writer) error {
	logger := slog.New(newSGLangHandler(logw, o.logLevel))
	srv, err := api.New(api.Config{
		Profile: o.profile,
		Args: api.ServerArgs{
			Host: o.host, Port: o.port, ModelPath: o.modelPath, ServedModelName: o.servedModelName, LogLevel: o.logLevel,
		},
		APIKey:            o.apiKey,
		Speedup:           o.speedup,
		SpinWindow:        engine.DefaultSpinWindow,
		DisableRadixCache: o.disableRadixCache,
		EnableCacheReport: o.enableCacheReport,
		EnableMetrics:     o.enableMetrics,
		StreamInterval:    o.streamInterval,
		MaxBodyBytes:      o.maxBodyBytes,
		Logger:            logger,
	})
	if err != nil {
		return err
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", net.JoinHostPort(o.host, strconv.Itoa(o.port)))
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv.Handler(), ConnContext: noDelay, ReadHeaderTimeout: 30 * time.Second}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	args := srv.Args()
	logger.Info(fmt.Sprintf("sglmock %s serving %s (profile %s, speedup %g) on http://%s; listen backlog %s",
		api.SimVersion, args.ServedModelName, o.profile.Name, o.speedup, ln.Addr(), backlog()))
	if o.skipWarmup {
		srv.MarkReady()
	} else if err := srv.Warmup(ctx); err != nil && ctx.Err() == nil {
		return fmt.Errorf("warmup: %w", err)
	}
	logger.Info("The server is fired up and ready to roll!")
	if o.ready != nil {
		o.ready <- ln.Addr().String()
	}
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	logger.Info("Shutting down: new requests get 503; in-flight requests have " +
		strconv.FormatFloat(o.shutdownGrace, 'g', -1, 64) + " s to finish.")
	srv.BeginShutdown()
	grace, cancel := context.WithTimeout(context.Background(), time.Duration(o.shutdownGrace*float64(time.Second)))
	defer cancel()
	if err := hs.Shutdown(grace); err != nil {
		// Grace is over: abort what still runs. Each handler then writes its
		// request's abort (and a stream's [DONE]) and returns; connections
		// that still hang on are closed after a short drain.
		srv.Engine().AbortAll()
		drain, cancelDrain := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancelDrain()
		if err := hs.Shutdown(drain); err != nil {
			hs.Close()
		}
	}
	logger.Info("Shutdown complete.")
	return nil
}

// noDelay sets TCP_NODELAY on every accepted connection, so small SSE
// events leave at once (Go's default, made explicit).
func noDelay(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	return ctx
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
// "[2026-11-30 10:00:00] Prefill batch. ...".
type sglangHandler struct {
	mu    sync.Mutex // the engine and the server log from different goroutines
	w     io.Writer
	level slog.Level
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
	return &sglangHandler{w: w, level: l}
}

func (h *sglangHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *sglangHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := fmt.Fprintf(h.w, "[%s] %s\n", r.Time.Format("2006-01-02 15:04:05"), r.Message)
	return err
}

func (h *sglangHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *sglangHandler) WithGroup(string) slog.Handler      { return h }

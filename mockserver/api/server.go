package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sglmock/sglmock/compat"
	"github.com/sglmock/sglmock/mockserver/engine"
	"github.com/sglmock/sglmock/mockserver/hicache"
	"github.com/sglmock/sglmock/mockserver/profile"
	"github.com/sglmock/sglmock/mockserver/tokenizer"
	"github.com/sglmock/sglmock/sim"
)

// SimVersion is sglmock's own version, under /server_info's "sim"; the
// SGLang release the mock follows (the profile's, compat.Default unless
// --sglang-version or sglang_version says otherwise) is its "version", and
// /v1/loads', which clients compare.
const (
	SimVersion     = "0.1.0"
	weightVersion  = "default"
	defaultMaxBody = 256 << 20 // a 200k-token prompt as input_ids is about 2 MB
)

// ServerArgs are the launch arguments, named as SGLang's server args, that
// /server_info reports flattened, as SGLang dumps its ServerArgs: those
// SGLang leaves None unless the launch gives them (context_length,
// max_total_tokens, max_running_requests) are null unless given, and
// max_running_requests is 48 under speculative decoding, as SGLang's
// post-init sets it. The simulation fills those SGLang infers from the
// GPU (page_size, chunked_prefill_size). The effective values are where
// SGLang reports them: max_total_num_tokens, max_req_input_len,
// internal_states' effective_max_running_requests_per_dp, /v1/models'
// max_model_len.
type ServerArgs struct {
	Host               string `json:"host"`
	Port               int    `json:"port"`
	ModelPath          string `json:"model_path"`
	TokenizerPath      string `json:"tokenizer_path"`
	ServedModelName    string `json:"served_model_name"`
	ContextLength      *int   `json:"context_length"`
	PageSize           int    `json:"page_size"`
	ChunkedPrefillSize int    `json:"chunked_prefill_size"`
	MaxPrefillTokens   int    `json:"max_prefill_tokens"`
	MaxRunningRequests *int   `json:"max_running_requests"`
	MaxTotalTokens     *int   `json:"max_total_tokens"`
	DisableRadixCache  bool   `json:"disable_radix_cache"`
	// DisableOverlapSchedule is true when SGLang runs the deployment
	// without its overlap scheduler (profile.OverlapOff): the profile has
	// no flush window (--disable-overlap-schedule), or its release turns
	// the scheduler off for its speculative algorithm. The flush window is
	// the overlap scheduler's only effect the mock models.
	DisableOverlapSchedule    bool    `json:"disable_overlap_schedule"`
	EnableCacheReport         bool    `json:"enable_cache_report"`
	EnableMetrics             bool    `json:"enable_metrics"`
	APIKey                    *string `json:"api_key"` // always reported as null: it is a secret
	SpeculativeAlgorithm      *string `json:"speculative_algorithm"`
	SpeculativeNumSteps       *int    `json:"speculative_num_steps"`
	SpeculativeEagleTopK      *int    `json:"speculative_eagle_topk"`
	SpeculativeNumDraftTokens *int    `json:"speculative_num_draft_tokens"`
	StreamInterval            int     `json:"stream_interval"`
	LogLevel                  string  `json:"log_level"`
	RandomSeed                uint64  `json:"random_seed"`
	SchedulePolicy            string  `json:"schedule_policy"`
	RadixEvictionPolicy       string  `json:"radix_eviction_policy"`
	DecodeLogInterval         int     `json:"decode_log_interval"`
	SkipTokenizerInit         bool    `json:"skip_tokenizer_init"`
	TPSize                    int     `json:"tp_size"`
	DPSize                    int     `json:"dp_size"`
	EnableDPAttention         bool    `json:"enable_dp_attention"`
	LoadBalanceMethod         string  `json:"load_balance_method"`
	KVEventsConfig            *string `json:"kv_events_config"` // --kv-events-config as given, or null
	hicacheArgs

	// Priority scheduling, as the profile sets it (schedule_policy is
	// above).
	EnablePriorityScheduling       bool `json:"enable_priority_scheduling"`
	DisablePriorityPreemption      bool `json:"disable_priority_preemption"`
	DefaultPriorityValue           *int `json:"default_priority_value"`
	AbortOnPriorityWhenDisabled    bool `json:"abort_on_priority_when_disabled"`
	ScheduleLowPriorityValuesFirst bool `json:"schedule_low_priority_values_first"`
	PriorityPreemptionThreshold    int  `json:"priority_scheduling_preemption_threshold"`
}

// Config configures a Server.
type Config struct {
	// Profile is the deployment, with any launch flags already applied.
	Profile *profile.Profile
	// Args are reported by /server_info; New fills what the profile says.
	Args ServerArgs
	// APIKey, when set, is required as "Authorization: Bearer KEY".
	APIKey string
	// Speedup, SpinWindow and DisableRadixCache configure the engine.
	Speedup           float64
	SpinWindow        time.Duration
	DisableRadixCache bool
	EnableCacheReport bool
	EnableMetrics     bool
	// StreamInterval sends a stream event when the output's length in
	// tokens is 1 modulo it (and at the finish), as SGLang's
	// --stream-interval; 0 means 1.
	StreamInterval int
	// MaxBodyBytes bounds request bodies; larger ones get 413. 0 means
	// 256 MiB.
	MaxBodyBytes int64
	// BodyBudgetBytes bounds the request bodies in flight, all requests
	// together: past it a request gets 503 before its body is read.
	// AnswerBudgetBytes bounds what generation requests together make the
	// server hold until their answers are written: past it a request waits
	// its turn. 0 means DefaultBodyBudget and DefaultAnswerBudget
	// (budget.go).
	BodyBudgetBytes, AnswerBudgetBytes int64
	// SimTruthBytes bounds the memory of the ground truths /sim/requests
	// serves (engine.Config.TruthBytes); 0 means 256 MiB.
	SimTruthBytes int64
	// Logger receives the engine's SGLang-style lines; nil discards them.
	Logger *slog.Logger
	// ReadHeaderTimeout and IdleTimeout bound, in wall time, how long a
	// connection may take to send a request's headers and stay idle
	// between requests (HTTPServer applies them); BodyTimeout bounds each
	// wait for more of a request's body, and the whole body to BodyTimeout
	// plus one second per MiB. 0 means no limit.
	ReadHeaderTimeout, IdleTimeout, BodyTimeout time.Duration
	// StallTimeout is how long, in wall time, a write of an answer or a
	// stream event may make no progress before the client counts as gone
	// and its requests are aborted (stall.go); 0 means
	// DefaultStallTimeout.
	StallTimeout time.Duration
	// CacheEvents, if set, receives the radix cache's KV events
	// (engine.Config.CacheEvents); Args.KVEventsConfig is what /server_info
	// shows of its configuration, KVEvents its kv_events descriptor.
	CacheEvents engine.CacheEvents
	KVEvents    *KVEventsInfo
	// RankCacheEvents, if set, has each DP rank's (engine.Config's), in
	// place of CacheEvents.
	RankCacheEvents []engine.CacheEvents
	// KVEventStats, if set, reports the KV event publisher's counts under
	// /sim/stats and /metrics.
	KVEventStats func() sim.KVEvents
	// Tokenizer, if set, replaces the built-in tokenizer; else New loads
	// the profile's tokenizer_path, if it names one.
	Tokenizer *tokenizer.Tokenizer
	// HiCacheStorageDir and HiCacheStore configure HiCache's storage tier
	// (engine.Config's).
	HiCacheStorageDir string
	HiCacheStore      hicache.Store
}

// KVEventsInfo is the KV event publisher as /server_info's kv_events
// descriptor describes it: the publisher ("zmq" or "null"), the PUB
// endpoint as configured and the topic its messages carry.
type KVEventsInfo struct {
	Publisher, Endpoint, Topic string
}

const (
	stateStarting int32 = iota
	stateReady
	stateShuttingDown
)

// Server is an SGLang-compatible HTTP server over a simulated engine.
type Server struct {
	cfg     Config
	args    ServerArgs
	rules   compat.Rules // the profile's SGLang release's
	eng     *engine.Engine
	router  *router
	state   atomic.Int32
	metrics *metrics
	// healthChecks numbers /health_generate requests: two checks in the
	// same nanosecond still get distinct rids.
	healthChecks atomic.Uint64
	// stalls bounds the writes to clients that stopped reading.
	stalls *stallGuard
	// bodies and answers are the server-wide budgets (budget.go).
	bodies, answers *byteBudget
	// cpu shares the cores among long work (cpu.go).
	cpu *cpuSlots
	// sseBuffers recycles the streams' event buffers (newSSE).
	sseBuffers sync.Pool
}

// New creates a server in the starting state: /health answers 503 until
// Warmup or MarkReady.
func New(cfg Config) (*Server, error) {
	if cfg.Profile == nil {
		return nil, errors.New("api: no profile")
	}
	if cfg.StreamInterval == 0 {
		cfg.StreamInterval = 1
	}
	if cfg.StreamInterval < 0 {
		return nil, fmt.Errorf("api: stream interval must be >= 1, got %d", cfg.StreamInterval)
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = defaultMaxBody
	}
	if cfg.Tokenizer == nil && cfg.Profile.TokenizerPath != "" {
		tok, err := tokenizer.Load(cfg.Profile.TokenizerPath)
		if err != nil {
			return nil, fmt.Errorf("profile %q: tokenizer_path: %w", cfg.Profile.Name, err)
		}
		cfg.Tokenizer = tok
		if cfg.Args.TokenizerPath == "" {
			cfg.Args.TokenizerPath = cfg.Profile.TokenizerPath
		}
	}
	if cfg.StallTimeout == 0 {
		cfg.StallTimeout = DefaultStallTimeout
	}
	if cfg.BodyBudgetBytes == 0 {
		cfg.BodyBudgetBytes = DefaultBodyBudget
	}
	if cfg.AnswerBudgetBytes == 0 {
		cfg.AnswerBudgetBytes = DefaultAnswerBudget
	}
	if cfg.BodyBudgetBytes < 0 || cfg.AnswerBudgetBytes < 0 {
		return nil, fmt.Errorf("api: budgets must be positive, got %d bytes of bodies and %d of answers", cfg.BodyBudgetBytes, cfg.AnswerBudgetBytes)
	}
	if err := cfg.Profile.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, rules: cfg.Profile.Rules(), stalls: &stallGuard{timeout: cfg.StallTimeout},
		bodies: newByteBudget(cfg.BodyBudgetBytes), answers: newByteBudget(cfg.AnswerBudgetBytes), cpu: newCPUSlots()}
	s.args = s.fillArgs(cfg.Args)
	var onFinish func(*engine.Truth)
	if cfg.EnableMetrics {
		s.metrics = newMetrics(s.args.ServedModelName, cfg.Profile)
		onFinish = s.metrics.finished
	}
	eng, err := engine.New(engine.Config{
		Profile:           cfg.Profile,
		Speedup:           cfg.Speedup,
		SpinWindow:        cfg.SpinWindow,
		DisableRadixCache: cfg.DisableRadixCache,
		TruthBytes:        cfg.SimTruthBytes,
		Logger:            cfg.Logger,
		OnFinish:          onFinish,
		CacheEvents:       cfg.CacheEvents,
		RankCacheEvents:   cfg.RankCacheEvents,
		Tokenizer:         cfg.Tokenizer,
		HiCacheStorageDir: cfg.HiCacheStorageDir,
		HiCacheStore:      cfg.HiCacheStore,
		ServedModelName:   s.args.ServedModelName,
	})
	if err != nil {
		if s.metrics != nil {
			s.metrics.close()
		}
		return nil, err
	}
	s.eng = eng
	if s.metrics != nil {
		s.metrics.registry.MustRegister(&engineCollector{eng: eng, model: s.args.ServedModelName, schedulers: eng.Ranks() == 1}, &mockCollector{s: s},
			&hicacheCollector{eng: eng})
		registerRankCollectors(s.metrics.registry, eng, s.args.ServedModelName)
	}
	s.router = s.routes()
	return s, nil
}

// ServedModelName is the model name a server launched with these args
// reports: --served-model-name, else --model-path, else the profile's.
func ServedModelName(a ServerArgs, p *profile.Profile) string {
	switch {
	case a.ServedModelName != "":
		return a.ServedModelName
	case a.ModelPath != "":
		return a.ModelPath
	}
	return p.ServedModelName
}

func (s *Server) fillArgs(a ServerArgs) ServerArgs {
	p := s.cfg.Profile
	a.ServedModelName = ServedModelName(a, p)
	if a.ModelPath == "" {
		a.ModelPath = p.ServedModelName
	}
	if a.TokenizerPath == "" {
		a.TokenizerPath = a.ModelPath
	}
	a.PageSize = p.PageSize
	a.ChunkedPrefillSize = p.RankChunkedPrefillSize() // SGLang divides it under DP attention
	a.MaxPrefillTokens = p.MaxPrefillTokens
	if a.MaxRunningRequests == nil && p.Speculative != nil {
		// speculative_hook.py sets it when the launch does not.
		n := p.MaxRunningRequests
		a.MaxRunningRequests = &n
	}
	a.DisableRadixCache = s.cfg.DisableRadixCache
	a.DisableOverlapSchedule = p.OverlapOff() != ""
	a.EnableCacheReport = s.cfg.EnableCacheReport
	a.EnableMetrics = s.cfg.EnableMetrics
	a.APIKey = nil
	if spec := p.Speculative; spec != nil {
		alg, steps, topk, draft := spec.Algorithm, spec.NumSteps, spec.EagleTopK, spec.NumDraftTokens
		a.SpeculativeAlgorithm, a.SpeculativeNumSteps, a.SpeculativeEagleTopK, a.SpeculativeNumDraftTokens = &alg, &steps, &topk, &draft
	}
	a.StreamInterval = s.cfg.StreamInterval
	if a.LogLevel == "" {
		a.LogLevel = "info"
	}
	a.RandomSeed = p.Seed
	a.SchedulePolicy, a.RadixEvictionPolicy = p.Policy(), "lru"
	fillPriorityArgs(&a, p)
	a.DecodeLogInterval = 40
	a.TPSize, a.DPSize = p.TensorParallel(), p.Ranks()
	a.EnableDPAttention, a.LoadBalanceMethod = p.DPAttention(), p.BalanceMethod()
	a.hicacheArgs = hicacheServerArgs(p)
	return a
}

// Handler returns the HTTP handler.
func (s *Server) Handler() http.Handler { return s.router }

// Engine returns the simulated engine.
func (s *Server) Engine() *engine.Engine { return s.eng }

// Args returns the server args /server_info reports.
func (s *Server) Args() ServerArgs { return s.args }

// MarkReady makes the server answer health checks with 200.
func (s *Server) MarkReady() { s.state.CompareAndSwap(stateStarting, stateReady) }

// Warmup runs SGLang's warmup request (a short generation of "The capital
// city of France is") and marks the server ready, as launch_server does.
// With several DP ranks the request is a batch of the prompt once a rank
// (_execute_server_warmup), which the controller spreads one to a rank:
// every rank's cache holds the prompt, and round_robin starts again at
// rank 0. Like SGLang's, the warmup prompt stays in the prefix cache and
// the request counts in the metrics (an ordinary /generate there); it
// stays out of /sim/requests, which lists the clients' requests.
func (s *Server) Warmup(ctx context.Context) error {
	var streams []*engine.Stream
	for range s.eng.Ranks() {
		st, err := s.eng.Submit(engine.Request{Text: "The capital city of France is", MaxNewTokens: 8, Internal: true})
		if err != nil {
			abortStreams(streams)
			return err
		}
		streams = append(streams, st)
	}
	for i, st := range streams {
		for {
			ev, err := st.Next(ctx)
			if err != nil {
				abortStreams(streams[i:])
				return err
			}
			if ev.Finish != nil {
				break
			}
		}
	}
	s.MarkReady()
	return nil
}

// BeginShutdown makes new requests and health checks answer 503 while
// in-flight requests finish.
func (s *Server) BeginShutdown() { s.state.Store(stateShuttingDown) }

// Close aborts whatever still runs and stops the engine.
func (s *Server) Close() {
	s.BeginShutdown()
	s.eng.Close()
	if s.metrics != nil {
		s.metrics.close()
	}
}

// routes builds the router. Old and new endpoint names are both served.
func (s *Server) routes() *router {
	r := newRouter()
	r.notFound = func(c *exchange) { writeJSON(c, http.StatusNotFound, jsonObject{"detail": "Not Found"}) }
	r.methodNotAllowed = func(c *exchange) {
		writeJSON(c, http.StatusMethodNotAllowed, jsonObject{"detail": "Method Not Allowed"})
	}
	r.onPanic = s.recovered
	r.middleware = []handlerFunc{s.stateGate, s.authenticate, s.limitBody}

	get, post, getPost := []string{http.MethodGet}, []string{http.MethodPost}, []string{http.MethodGet, http.MethodPost}
	r.handle([]string{http.MethodPost, http.MethodPut}, "/generate", s.generate)
	r.handle(post, "/v1/completions", requireJSON, s.completions)
	r.handle(post, "/v1/chat/completions", requireJSON, s.chatCompletions)
	r.handle(get, "/v1/models", s.listModels)
	r.handle(get, "/v1/models/*model", s.getModel)
	r.handle(getPost, "/flush_cache", s.sameOriginOnly, s.flushCache)
	r.handle(post, "/reset_prefix_cache", s.sameOriginOnly, s.resetPrefixCache) // vLLM's, for --backend vllm rehearsals
	r.handle(get, "/health", s.health)
	r.handle(get, "/health_generate", s.healthGenerate)
	r.handle(get, "/get_model_info", s.modelInfo)
	r.handle(get, "/model_info", s.modelInfo)
	r.handle(get, "/get_server_info", s.serverInfo)
	r.handle(get, "/server_info", s.serverInfo)
	r.handle(get, "/get_load", s.getLoad)
	r.handle(get, "/v1/loads", s.loads)
	r.handle(get, "/metrics", s.serveMetrics)
	r.handle(getPost, "/start_profile", s.startProfile)
	r.handle(getPost, "/stop_profile", s.stopProfile)
	r.handle(post, "/abort_request", s.sameOriginOnly, s.abortRequest)
	r.handle(post, "/tokenize", s.tokenize)
	r.handle(post, "/v1/tokenize", s.tokenize)
	r.handle(post, "/detokenize", s.detokenize)
	r.handle(post, "/v1/detokenize", s.detokenize)
	r.handle(getPost, "/ping", func(c *exchange) { c.Status(http.StatusOK) })
	r.handle(get, "/sim/profile", s.simProfile)
	r.handle(get, "/sim/expect", s.simExpect)
	r.handle(get, "/sim/requests", s.simRequests)
	r.handle(get, "/sim/requests/:rid", s.simRequest)
	r.handle(get, "/sim/flushes", s.simFlushes)
	r.handle(get, "/sim/stats", s.simStats)
	r.handle(post, "/v1/completions/render", requireJSON, s.renderCompletions)
	r.handle(post, "/v1/chat/completions/render", requireJSON, s.renderChat)
	s.hicacheRoutes(r)
	return r
}

// recovered answers a handler's panic with 500 and logs it with its
// stack; a panic with http.ErrAbortHandler goes on to net/http, which
// closes the connection. So does one after the answer began (a stream's
// first events went out): ending it as if complete would hand the client
// a truncated answer that reads as whole.
func (s *Server) recovered(c *exchange, err any) {
	if err == http.ErrAbortHandler {
		panic(err)
	}
	logger := s.cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger.Error("panic serving a request", "method", c.Request.Method, "path", c.Request.URL.Path, "panic", err, "stack", string(debug.Stack()))
	if c.Writer.written {
		panic(http.ErrAbortHandler)
	}
	writeJSON(c, http.StatusInternalServerError, errorObject(fmt.Sprint(err), "Internal Server Error", 500))
}

// stateGate answers 503 as SGLang does: while starting, the health checks
// fail (clients poll them to know when to begin; SGLang's own warmup request
// goes through /generate meanwhile); while shutting down, everything but
// the endpoints that describe the server refuses new work.
func (s *Server) stateGate(c *exchange) {
	state := s.state.Load()
	path := c.Request.URL.Path
	health := strings.HasPrefix(path, "/health")
	switch {
	case state == stateReady:
		return
	case state == stateStarting && !health:
		return
	case state == stateShuttingDown && !health && (path == "/metrics" || path == "/ping" ||
		strings.HasPrefix(path, "/sim/") || strings.HasSuffix(path, "server_info") ||
		strings.HasSuffix(path, "model_info") || strings.HasPrefix(path, "/v1/models")):
		return
	}
	msg := "The server is starting."
	if state == stateShuttingDown {
		msg = "The server is shutting down."
	}
	c.Header("Retry-After", "1")
	writeJSON(c, http.StatusServiceUnavailable, errorObject(msg, "Service Unavailable", 503))
	c.Abort()
}

func writeTooLarge(c *exchange, limit int64) {
	writeJSON(c, http.StatusRequestEntityTooLarge,
		errorObject(fmt.Sprintf("Request body too large: the limit is %d bytes.", limit), "Request Entity Too Large", 413))
}

// requireJSON is SGLang's check on /v1 POST endpoints.
func requireJSON(c *exchange) {
	media, _, _ := strings.Cut(strings.ToLower(c.GetHeader("Content-Type")), ";")
	if strings.TrimSpace(media) != "application/json" {
		writeValidationError(c, "[{'loc': ('header', 'content-type'), 'msg': \"Unsupported Media Type: Only 'application/json' is allowed\", 'type': 'value_error'}]")
		c.Abort()
	}
}

// received is the simulated time c's body had arrived; the engine's now if
// it was not read.
func (s *Server) received(c *exchange) time.Duration {
	if c.hasReceived {
		return c.received
	}
	return s.eng.Now()
}

// readBody decodes the JSON body into v. On failure it has written the
// response (400, 408, 413 or 503) and returns false.
func (s *Server) readBody(c *exchange, v any) bool {
	// A declared length, checked against --max-body-bytes (limitBody), is
	// charged to the body budget before a byte is read, and the buffer
	// grown to it once; a body without one is charged as its buffer grows
	// from empty.
	buf := new(bytes.Buffer)
	var charge int64
	if n := c.Request.ContentLength; n > 0 {
		buf = bodyBuffers.Get().(*bytes.Buffer)
		charge = n + bytes.MinRead
	}
	defer putBodyBuffer(buf)
	hold := s.bodies.tryAcquire(charge)
	if hold == nil {
		s.writeBodyBusy(c)
		return false
	}
	c.bodyHold = hold
	if n := c.Request.ContentLength; n > 0 {
		buf.Grow(int(n) + bytes.MinRead)
	}
	if err := readCharged(buf, c.Request.Body, hold); errors.Is(err, errBodyBudget) {
		s.writeBodyBusy(c)
		return false
	} else if err != nil {
		s.writeReadError(c, err)
		return false
	}
	c.received, c.hasReceived = s.eng.Now(), true
	if len(bytes.TrimSpace(buf.Bytes())) == 0 {
		writeValidationError(c, "Field required: the request body is empty")
		return false
	}
	// No JSON text holds a raw NUL; the message says so where the
	// decoder's would only call it an invalid character.
	if i := bytes.IndexByte(buf.Bytes(), 0); i >= 0 {
		writeValidationError(c, fmt.Sprintf("JSON decode error at byte %d: invalid character '\\x00' (a NUL byte is never valid JSON)", i+1))
		return false
	}
	// The decoder copies what it keeps, so the buffer is free after this.
	// A large body's decoding is long work (cpu.go).
	long := buf.Len() >= shortWork
	if long {
		s.cpu.take()
	}
	err := decodeBody(buf.Bytes(), v)
	if long {
		s.cpu.give()
	}
	if err != nil {
		writeValidationError(c, describeJSONError(err))
		return false
	}
	return true
}

// errBodyBudget is a body whose buffer would pass the body budget.
var errBodyBudget = errors.New("api: the body budget is full")

// readCharged reads body to its end into buf, charging hold for each
// growth of buf before it happens; a growth that does not fit is
// errBodyBudget, with nothing more read.
func readCharged(buf *bytes.Buffer, body io.Reader, hold *budgetHold) error {
	for {
		if buf.Available() < bytes.MinRead {
			// bytes.Buffer grows to twice its capacity, or to what it holds
			// and MinRead more.
			before := buf.Cap()
			want := max(2*before, buf.Len()+bytes.MinRead)
			if !hold.grow(int64(want - before)) {
				return errBodyBudget
			}
			buf.Grow(bytes.MinRead)
			if extra := buf.Cap() - want; extra > 0 {
				hold.grow(int64(extra)) // the allocator's rounding up
			}
		}
		free := buf.AvailableBuffer()[:buf.Available()]
		n, err := body.Read(free)
		buf.Write(free[:n])
		switch {
		case err == io.EOF:
			return nil
		case err != nil:
			return err
		}
	}
}

// writeBodyBusy answers a request whose body does not fit the body budget:
// 503 with Retry-After, sent before any more of the body is read. The rest
// of the body is then read and thrown away as it comes (nothing is kept,
// and the body's deadlines still apply), so that a client that reads its
// answer only once it has sent its whole body, as Python's http.client
// does, gets the 503 rather than a connection reset under its feet.
func (s *Server) writeBodyBusy(c *exchange) {
	rc := http.NewResponseController(c.Writer)
	rc.EnableFullDuplex() // the body is read after the answer
	c.Header("Connection", "close")
	s.writeBusy(c, fmt.Sprintf("The server holds %d bytes of request bodies already (--body-budget-bytes); "+
		"this one's %d bytes do not fit. Retry later.", s.bodies.limit, c.Request.ContentLength))
	rc.Flush()
	io.Copy(io.Discard, c.Request.Body)
}

// writeBusy is 503 with Retry-After: the server is full for now.
func (s *Server) writeBusy(c *exchange, message string) {
	c.Header("Retry-After", "1")
	writeJSON(c, http.StatusServiceUnavailable, errorObject(message, "Service Unavailable", 503))
}

// bodyBuffers recycles the buffers request bodies are read into; one that
// grew past maxPooledBody is dropped, so a large body's memory goes back.
var bodyBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxPooledBody = 64 << 10

func putBodyBuffer(b *bytes.Buffer) {
	if b.Cap() <= maxPooledBody {
		b.Reset()
		bodyBuffers.Put(b)
	}
}

func describeJSONError(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &typ):
		// The path names the embedded struct of the OpenAI bodies, which
		// is no JSON key.
		typ.Field = strings.TrimPrefix(typ.Field, "openAICommon.")
		if msg, ok := outOfRange(typ); ok {
			return msg
		}
		return fmt.Sprintf("Input should be a valid %s: field %q got a JSON %s", typ.Type, typ.Field, typ.Value)
	case errors.As(err, &syn):
		return fmt.Sprintf("JSON decode error at byte %d: %v", syn.Offset, err)
	}
	return err.Error()
}

// jsonContentType is the Content-Type of JSON responses, one slice for all
// of them: net/http only reads it.
var jsonContentType = []string{"application/json"}

// writeJSON writes v as one line of JSON without HTML escaping, as orjson
// and pydantic do.
func writeJSON(c *exchange, status int, v any) {
	c.Writer.Header()["Content-Type"] = jsonContentType
	c.Status(status)
	c.Writer.Write(marshal(v))
}

func marshal(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err) // every response type marshals
	}
	// Encode ends the value with a newline.
	return padExponents(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
}

// padExponents writes the negative one-digit exponents of a JSON text's
// numbers with two digits, 1e-07 where encoding/json writes 1e-7, as
// Python's json.dumps (float repr) writes them; strings keep their text.
// encoding/json writes an exponent only below 1e-6 and from 1e21 on, so
// -7, -8 and -9 are the exponents it shortens.
func padExponents(b []byte) []byte {
	if !hasShortExponent(b) {
		return b
	}
	out := make([]byte, 0, len(b)+8)
	inString, escaped := false, false
	for i, c := range b {
		out = append(out, c)
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '-' && i > 0 && b[i-1] == 'e' && shortExponentAt(b, i+1):
			out = append(out, '0')
		}
	}
	return out
}

// hasShortExponent reports whether b holds "e-" and one digit anywhere,
// strings included: most texts have none and are returned as they are.
func hasShortExponent(b []byte) bool {
	for i := 0; ; {
		j := bytes.Index(b[i:], []byte("e-"))
		if j < 0 {
			return false
		}
		i += j + 2
		if shortExponentAt(b, i) {
			return true
		}
	}
}

// shortExponentAt reports whether b[i] is an exponent's only digit.
func shortExponentAt(b []byte, i int) bool {
	return i < len(b) && isDigit(b[i]) && (i+1 == len(b) || !isDigit(b[i+1]))
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// errorResponse is SGLang's ErrorResponse envelope.
type errorResponse struct {
	Object  string `json:"object"`
	Message string `json:"message"`
	Type    string `json:"type"`
	Param   any    `json:"param"`
	Code    int    `json:"code"`
}

func errorObject(message, typ string, code int) errorResponse {
	return errorResponse{Object: "error", Message: message, Type: typ, Code: code}
}

// writeValidationError is the 400 SGLang returns for a request that fails
// validation (FastAPI's 422, turned into 400).
func writeValidationError(c *exchange, message string) {
	writeJSON(c, http.StatusBadRequest, errorObject(message, "Bad Request", 400))
}

// writeGenerateError is /generate's 400 envelope for errors raised while
// handling the request.
func writeGenerateError(c *exchange, message string) {
	writeJSON(c, http.StatusBadRequest, jsonObject{"error": jsonObject{"message": message}})
}

// writeOpenAIError is the OpenAI endpoints' 400 for a refused request.
func writeOpenAIError(c *exchange, message string) {
	writeJSON(c, http.StatusBadRequest, errorObject(message, "BadRequestError", 400))
}

func (s *Server) serveMetrics(c *exchange) {
	if s.metrics == nil {
		writeJSON(c, http.StatusNotFound, jsonObject{"detail": "Not Found"})
		return
	}
	s.metrics.serve(c.Writer, c.Request)
}

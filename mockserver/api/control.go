package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sglmock/sglmock/mockserver/engine"
	"github.com/sglmock/sglmock/mockserver/tokenizer"
)

// flushedText is SGLang's /flush_cache reply on success.
const flushedText = "Cache flushed.\nPlease check backend logs for more details. " +
	"(When there are running or waiting requests, the operation will not be performed.)\n"

// flushCache flushes the radix cache: 200 when idle, else 400 with the
// reason; ?timeout=S (simulated seconds) waits for idle up to S. As SGLang's
// plain Response, the reply has no Content-Type.
func (s *Server) flushCache(c *exchange) {
	var timeout time.Duration
	if raw := c.Query("timeout"); raw != "" {
		secs, err := strconv.ParseFloat(raw, 64)
		if err != nil || secs < 0 || math.IsNaN(secs) || math.IsInf(secs, 0) {
			writeValidationError(c, fmt.Sprintf("timeout: Input should be a finite number >= 0, got %q", clip(raw)))
			return
		}
		// Clamped: past about 292 years a Duration overflows, and a timeout
		// that long waits for idle, as Python's float deadline does.
		timeout = time.Duration(math.MaxInt64)
		if secs < float64(math.MaxInt64)/float64(time.Second) {
			timeout = time.Duration(secs * float64(time.Second))
		}
	}
	err := s.eng.Flush(c.Request.Context(), timeout, c.Request.RemoteAddr)
	if err != nil && errors.Is(err, c.Request.Context().Err()) {
		return // the client left while the flush waited; nobody reads a reply
	}
	code, body := flushReply(err)
	c.Writer.Header()["Content-Type"] = nil // present and empty: no sniffed type either
	c.Status(code)
	c.Writer.WriteString(body)
}

// health answers 200 at once when serving (the stateGate answers 503 while
// starting or shutting down), as current SGLang does.
func (s *Server) health(c *exchange) { c.Status(http.StatusOK) }

// healthGenerate runs a one-token generation unless something already runs,
// as SGLang does; the request stays out of the metrics and /sim/requests.
func (s *Server) healthGenerate(c *exchange) {
	if !s.eng.Stats().Idle {
		c.Status(http.StatusOK)
		return
	}
	st, err := s.eng.Submit(engine.Request{
		RID:          fmt.Sprintf("HEALTH_CHECK_%d_%d", time.Now().UnixNano(), s.healthChecks.Add(1)),
		InputIDs:     []int32{0},
		MaxNewTokens: 1,
		Internal:     true,
		NoMetrics:    true, // SGLang's health check sets log_metrics=false
	})
	if err != nil {
		c.Status(http.StatusServiceUnavailable)
		return
	}
	for {
		ev, err := st.Next(c.Request.Context())
		if err != nil {
			st.Abort()
			return
		}
		if ev.Finish != nil {
			break
		}
	}
	c.Status(http.StatusOK)
}

func (s *Server) modelInfo(c *exchange) {
	writeJSON(c, http.StatusOK, jsonObject{
		"model_path":                s.args.ModelPath,
		"tokenizer_path":            s.args.TokenizerPath,
		"is_generation":             true,
		"preferred_sampling_params": nil,
		"weight_version":            weightVersion,
		"has_image_understanding":   false,
		"has_audio_understanding":   false,
		"model_type":                "sglmock",
		"architectures":             []string{"SGLMockForCausalLM"},
	})
}

// flatArgs renders the server args as a JSON object map.
func (s *Server) flatArgs() map[string]any {
	var m map[string]any
	if err := json.Unmarshal(marshal(s.args), &m); err != nil {
		panic(err)
	}
	return m
}

// simInfo is the "sim" section: what SGLang does not have.
func (s *Server) simInfo() jsonObject {
	return jsonObject{"profile": s.cfg.Profile.Name, "speedup": s.eng.Speedup(), "version": SimVersion}
}

func (s *Server) serverInfo(c *exchange) {
	info := s.flatArgs()
	// The scheduler's info, which SGLang merges in at launch.
	info["status"] = "ready"
	info["max_total_num_tokens"] = s.cfg.Profile.MaxTotalTokens
	info["max_req_input_len"] = s.cfg.Profile.MaxReqInputLen()
	info["kv_events"] = kvEventsBlock(s.cfg.KVEvents, s.args.PageSize, s.args.DPSize)
	info["internal_states"] = s.internalStates()
	info["version"] = s.cfg.Profile.Release()
	info["sim"] = s.simInfo()
	writeJSON(c, http.StatusOK, info)
}

// kvEventsDescriptor is /server_info's kv_events: what a KV-aware router
// needs to subscribe without being told the ports (http_server.py, as
// SGLang's tests of _build_kv_events_block pin it).
type kvEventsDescriptor struct {
	Publisher        string `json:"publisher"`
	EndpointHost     string `json:"endpoint_host"`
	EndpointPortBase int    `json:"endpoint_port_base"`
	Topic            string `json:"topic"`
	BlockSize        int    `json:"block_size"`
	DPSize           int    `json:"dp_size"`
}

// kvEventsBlock is the kv_events descriptor, or nil (JSON null, the key
// still there) when no zmq publisher runs or its endpoint is no TCP address
// a router could dial: inproc:// or ipc://, no port, or a port outside
// 1..65535. The host is as configured, a wildcard ("*", "0.0.0.0")
// included: the router substitutes the replica's own address; an IPv6
// host keeps its brackets.
func kvEventsBlock(kv *KVEventsInfo, pageSize, dpSize int) *kvEventsDescriptor {
	if kv == nil || kv.Publisher != "zmq" || pageSize <= 0 {
		return nil
	}
	addr, ok := strings.CutPrefix(kv.Endpoint, "tcp://")
	i := strings.LastIndexByte(addr, ':')
	if !ok || i < 0 {
		return nil
	}
	port, err := strconv.Atoi(addr[i+1:])
	if err != nil || port < 1 || port > 65535 {
		return nil
	}
	return &kvEventsDescriptor{Publisher: kv.Publisher, EndpointHost: addr[:i], EndpointPortBase: port,
		Topic: kv.Topic, BlockSize: pageSize, DPSize: dpSize}
}

func (s *Server) abortRequest(c *exchange) {
	var body struct {
		RID      string `json:"rid"`
		AbortAll bool   `json:"abort_all"`
	}
	if !s.readBody(c, &body) {
		return
	}
	if body.AbortAll {
		s.eng.AbortAll()
	} else if body.RID != "" {
		s.eng.Abort(body.RID)
	}
	c.Status(http.StatusOK)
}

// startProfile and stopProfile accept SGLang's profiler calls: the mock has
// nothing to profile, so they only answer as SGLang does.
func (s *Server) startProfile(c *exchange) {
	c.Data(http.StatusOK, "text/plain; charset=utf-8", []byte("Start profiling.\n"))
}

func (s *Server) stopProfile(c *exchange) {
	c.Data(http.StatusOK, "text/plain; charset=utf-8", []byte("Stop profiling. This will take some time.\n"))
}

func (s *Server) tokenize(c *exchange) {
	var body struct {
		Prompt json.RawMessage `json:"prompt"`
		chatTemplateRequest
		// AddSpecialTokens adds the tokenizer's BOS; by default a prompt
		// gets it and a chat, whose template writes its own, does not.
		AddSpecialTokens *bool `json:"add_special_tokens"`
	}
	if !s.readBody(c, &body) {
		return
	}
	tok := s.eng.Tokenizer()
	var text string
	addSpecial := true
	switch {
	case body.Messages != nil:
		prompt, err := s.chatPrompt(&body.chatTemplateRequest)
		if err != nil {
			writeRefusal(c, generateEnvelope, err)
			return
		}
		text, addSpecial = prompt.Text, false
	case !isNull(body.Prompt):
		if err := json.Unmarshal(body.Prompt, &text); err != nil {
			writeValidationError(c, "prompt: Input should be a valid string")
			return
		}
	default:
		writeValidationError(c, "prompt or messages: Field required")
		return
	}
	// Counted first, without allocating: one request may not make the
	// server hold a tokenization of unbounded size. Both stop when the
	// client leaves.
	s.cpu.take() // long work: cpu.go
	defer s.cpu.give()
	ctx := tokenizer.WithPace(c.Request.Context(), s.cpu.pace)
	n, err := tok.CountContext(ctx, text)
	if err != nil {
		return
	}
	if n > maxTokenizeTokens {
		writeValidationError(c, fmt.Sprintf("The text is %d tokens; /tokenize takes at most %d.", n, maxTokenizeTokens))
		return
	}
	if body.AddSpecialTokens != nil {
		addSpecial = *body.AddSpecialTokens
	}
	ids, _, err := tok.EncodeWithinContext(ctx, []int32{}, text, addSpecial, -1) // an empty text's tokens are [], not null
	if err != nil {
		return
	}
	writeJSON(c, http.StatusOK, jsonObject{"tokens": ids, "count": len(ids), "max_model_len": s.cfg.Profile.ContextLength})
}

// maxTokenizeTokens bounds /tokenize and /detokenize: five times the
// longest context of any deployment modelled, a few MB of JSON.
const maxTokenizeTokens = 1 << 20

func (s *Server) detokenize(c *exchange) {
	var body struct {
		Tokens []int32 `json:"tokens"`
		// SkipSpecialTokens leaves special tokens out of the text, as
		// SGLang does by default.
		SkipSpecialTokens *bool `json:"skip_special_tokens"`
	}
	if !s.readBody(c, &body) {
		return
	}
	if body.Tokens == nil {
		writeValidationError(c, "tokens: Field required")
		return
	}
	if len(body.Tokens) > maxTokenizeTokens {
		writeValidationError(c, fmt.Sprintf("tokens: %d ids; /detokenize takes at most %d.", len(body.Tokens), maxTokenizeTokens))
		return
	}
	skip := body.SkipSpecialTokens == nil || *body.SkipSpecialTokens
	writeJSON(c, http.StatusOK, jsonObject{"text": s.eng.Tokenizer().Decode(body.Tokens, skip)})
}

// resetPrefixCache is vLLM's POST /reset_prefix_cache, which vLLM serves
// when started with VLLM_SERVER_DEV_MODE=1
// (vllm/entrypoints/serve/dev/cache/api_router.py): it empties the prefix
// cache and answers 200 {"success": bool}, false while running requests
// hold cache blocks (vLLM's block pool refuses then). Here a request that
// only waits, or an iteration that only just finished a request (the
// profile's flush_busy_after_finish_s), does not refuse it: vLLM frees a
// request's blocks when it finishes. So that `bench --backend vllm` can be
// rehearsed against the mock; /sim/flushes records it like any flush.
// reset_running_requests=true has vLLM preempt the running requests first;
// the mock does not model preemption, and says so with 501 while requests
// run. reset_external resets a KV connector's cache, which the mock has
// not: it is accepted.
func (s *Server) resetPrefixCache(c *exchange) {
	var resetRunning bool
	for _, name := range []string{"reset_running_requests", "reset_external"} {
		raw, given := c.GetQuery(name)
		if !given {
			continue
		}
		v, ok := fastAPIBool(raw)
		if !ok {
			writeJSON(c, http.StatusUnprocessableEntity, jsonObject{"detail": []jsonObject{{
				"type": "bool_parsing", "loc": []string{"query", name},
				"msg": "Input should be a valid boolean, unable to interpret input", "input": clip(raw),
			}}})
			return
		}
		if name == "reset_running_requests" {
			resetRunning = v
		}
	}
	st := s.eng.Stats()
	if resetRunning && st.Running > 0 {
		writeJSON(c, http.StatusNotImplemented, errorObject(
			"reset_running_requests: sglmock does not model vLLM's preemption of running requests; reset when they have finished",
			"Not Implemented", http.StatusNotImplemented))
		return
	}
	// While nothing runs, wait out the profile's settling window, as vLLM
	// has freed the blocks already; while requests run, refuse at once.
	var wait time.Duration
	if st.Running == 0 {
		wait = s.cfg.Profile.FlushBusyAfterFinish()
	}
	err := s.eng.Flush(c.Request.Context(), wait, c.Request.RemoteAddr)
	if err != nil && errors.Is(err, c.Request.Context().Err()) {
		return // the client left while the reset waited
	}
	writeJSON(c, http.StatusOK, jsonObject{"success": err == nil})
}

// fastAPIBool reads a query parameter as FastAPI (pydantic) reads a bool.
func fastAPIBool(raw string) (v, ok bool) {
	switch strings.ToLower(raw) {
	case "1", "true", "t", "yes", "y", "on":
		return true, true
	case "0", "false", "f", "no", "n", "off":
		return false, true
	}
	return false, false
}

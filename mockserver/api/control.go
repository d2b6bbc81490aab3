package api

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	json "github.com/goccy/go-json"

	"github.com/gin-gonic/gin"

	"github.com/sglmock/sglmock/mockserver/engine"
	"github.com/sglmock/sglmock/mockserver/tokenizer"
)

// flushedText is SGLang's /flush_cache reply on success.
const flushedText = "Cache flushed.\nPlease check backend logs for more details. " +
	"(When there are running or waiting requests, the operation will not be performed.)\n"

// flushCache flushes the radix cache: 200 when idle, else 400 with the
// reason; ?timeout=S (simulated seconds) waits for idle up to S. As SGLang's
// plain Response, the reply has no Content-Type.
func (s *Server) flushCache(c *gin.Context) {
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
func (s *Server) health(c *gin.Context) { c.Status(http.StatusOK) }

// healthGenerate runs a one-token generation unless something already runs,
// as SGLang does; the request stays out of the metrics.
func (s *Server) healthGenerate(c *gin.Context) {
	if !s.eng.Stats().Idle {
		c.Status(http.StatusOK)
		return
	}
	st, err := s.eng.Submit(engine.Request{
		RID:          fmt.Sprintf("HEALTH_CHECK_%d_%d", time.Now().UnixNano(), s.healthChecks.Add(1)),
		InputIDs:     []int32{0},
		MaxNewTokens: 1,
		Internal:     true,
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

func (s *Server) modelInfo(c *gin.Context) {
	writeJSON(c, http.StatusOK, gin.H{
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
func (s *Server) simInfo() gin.H {
	return gin.H{"profile": s.cfg.Profile.Name, "speedup": s.eng.Speedup(), "version": SimVersion}
}

func (s *Server) serverInfo(c *gin.Context) {
	st := s.eng.Stats()
	state := s.flatArgs()
	state["last_gen_throughput"] = st.LastGenThroughput
	if st.SpecRounds > 0 {
		state["avg_spec_accept_length"] = st.AvgSpecAcceptLength
	}
	state["memory_usage"] = gin.H{"weight": 0.0, "kvcache": 0.0, "token_capacity": st.KVCapacity, "graph": 0.0}
	state["effective_max_running_requests_per_dp"] = s.args.MaxRunningRequests
	info := s.flatArgs()
	info["max_total_num_tokens"] = s.args.MaxTotalTokens
	info["max_req_input_len"] = s.cfg.Profile.MaxReqInputLen()
	info["internal_states"] = []map[string]any{state}
	info["version"] = SGLangVersion
	info["sim"] = s.simInfo()
	writeJSON(c, http.StatusOK, info)
}

func (s *Server) abortRequest(c *gin.Context) {
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
func (s *Server) startProfile(c *gin.Context) {
	c.Data(http.StatusOK, "text/plain; charset=utf-8", []byte("Start profiling.\n"))
}

func (s *Server) stopProfile(c *gin.Context) {
	c.Data(http.StatusOK, "text/plain; charset=utf-8", []byte("Stop profiling. This will take some time.\n"))
}

func (s *Server) tokenize(c *gin.Context) {
	var body struct {
		Prompt   json.RawMessage `json:"prompt"`
		Messages []chatMessage   `json:"messages"`
	}
	if !s.readBody(c, &body) {
		return
	}
	var text string
	switch {
	case body.Messages != nil:
		var err error
		if text, err = renderChat(body.Messages); err != nil {
			writeRefusal(c, generateEnvelope, err)
			return
		}
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
	// server hold a tokenization of unbounded size.
	if n := tokenizer.Count(text); n > maxTokenizeTokens {
		writeValidationError(c, fmt.Sprintf("The text is %d tokens; /tokenize takes at most %d.", n, maxTokenizeTokens))
		return
	}
	ids := tokenizer.EncodePrompt(nil, text, s.cfg.Profile.AddBOSToken)
	writeJSON(c, http.StatusOK, gin.H{"tokens": ids, "count": len(ids), "max_model_len": s.args.ContextLength})
}

// maxTokenizeTokens bounds /tokenize and /detokenize: five times the
// longest context of any deployment modelled, a few MB of JSON.
const maxTokenizeTokens = 1 << 20

func (s *Server) detokenize(c *gin.Context) {
	var body struct {
		Tokens []int32 `json:"tokens"`
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
	writeJSON(c, http.StatusOK, gin.H{"text": tokenizer.Decode(body.Tokens)})
}

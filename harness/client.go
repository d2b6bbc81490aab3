package harness

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"time"
)

// Backend is the API family the server speaks.
type Backend string

// The backends. SGLang has /generate and /flush_cache; vLLM has the OpenAI
// routes and POST /reset_prefix_cache; a plain OpenAI-compatible server has
// no way to empty its prefix cache, so only the nonce method works there.
const (
	SGLang Backend = "sglang"
	VLLM   Backend = "vllm"
	OpenAI Backend = "openai"
)

// Backends lists the valid Backend values.
var Backends = []Backend{SGLang, VLLM, OpenAI}

// ErrNoFlush is returned when a flush is asked of a backend that has no
// route to empty the prefix cache.
var ErrNoFlush = errors.New("the OpenAI API has no route to empty a server's prefix cache (SGLang has POST /flush_cache, vLLM POST /reset_prefix_cache), so --backend openai can only keep legs cold with a nonce: use --method nonce, or --backend sglang|vllm if the server is one")

// HTTPError is a non-200 answer.
type HTTPError struct {
	Route  string
	Status int
	Body   string
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("%s: HTTP %d: %s", e.Route, e.Status, strings.TrimSpace(e.Body))
}

// ConnError wraps a failure to reach the server at all (refused, reset,
// timed out): the commands exit 2 on it.
type ConnError struct{ Err error }

func (e *ConnError) Error() string { return "cannot reach the server: " + e.Err.Error() }
func (e *ConnError) Unwrap() error { return e.Err }

// Client talks to one server. HTTP may be any *http.Client (tests pass
// mocktest's in-memory one); BaseURL has no trailing slash.
type Client struct {
	HTTP    *http.Client
	BaseURL string
	Backend Backend
	// Model is the "model" field of OpenAI requests; "" means the first
	// model /v1/models lists.
	Model string
	// InputIDs sends prompts as token ids instead of text.
	InputIDs bool
	// APIKey, when set, goes out as "Authorization: Bearer KEY" (a server
	// launched with --api-key wants it).
	APIKey string
	// maxAnswer bounds an answer read whole; 0 means maxAnswerBytes.
	maxAnswer int64
}

// Prompt is what one leg sends: text, or token ids when the client sends
// input ids.
type Prompt struct {
	Text string
	IDs  []int
}

// Generation is one finished request as the client saw it.
type Generation struct {
	RID              string
	PromptTokens     int
	CompletionTokens int
	// CachedTokens is meaningful when CachedKnown: the server reported it
	// (meta_info.cached_tokens, or usage.prompt_tokens_details).
	CachedTokens int
	CachedKnown  bool
	// Wall is the wall time from sending the request to its last byte.
	Wall time.Duration
	// Events are a stream's events that carried output, in order.
	Events []Event
}

// Event is one stream event: when it arrived after the request was sent
// and the cumulative completion tokens it reports (CountKnown false when
// the server reported none, in which case one token per event is assumed).
type Event struct {
	At               time.Duration
	CompletionTokens int
	CountKnown       bool
}

// discoverModel sets Model to the first model GET /v1/models lists, as
// benchmark scripts do: vLLM answers 404 to a model name it does not
// serve. A server without the route keeps "default".
func (c *Client) discoverModel(ctx context.Context) error {
	var models struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	status, err := c.get(ctx, "/v1/models", &models)
	switch {
	case status == http.StatusNotFound:
		return nil
	case err != nil:
		return err
	case len(models.Data) > 0:
		c.Model = models.Data[0].ID
	}
	return nil
}

func (c *Client) model() string {
	if c.Model == "" {
		return "default"
	}
	return c.Model
}

// post sends a JSON body and returns the response, or a ConnError.
func (c *Client) post(ctx context.Context, route string, body any) (*http.Response, error) {
	req, err := c.request(ctx, route, body)
	if err != nil {
		return nil, err
	}
	return c.do(req)
}

// request builds a POST with a JSON body (none when body is nil).
func (c *Client) request(ctx context.Context, route string, body any) (*http.Request, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+route, r)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, nil
}

func (c *Client) do(req *http.Request) (*http.Response, error) {
	if c.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.APIKey)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, &ConnError{err}
	}
	return resp, nil
}

// get fetches route and decodes a 200 JSON answer into v. It returns the
// status, so callers can tell a 404 (a route the server does not have)
// from a failure.
func (c *Client) get(ctx context.Context, route string, v any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.BaseURL+route, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := readAnswer(resp.Body, c.answerLimit())
	if err != nil {
		return resp.StatusCode, fmt.Errorf("GET %s: %w", route, err)
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, &HTTPError{Route: "GET " + route, Status: resp.StatusCode, Body: string(b)}
	}
	if err := json.Unmarshal(b, v); err != nil {
		return resp.StatusCode, fmt.Errorf("GET %s: %w", route, err)
	}
	return resp.StatusCode, nil
}

// maxAnswerBytes bounds an answer the harness reads whole: far beyond the
// JSON of 10,000 records, and small enough that no server can exhaust the
// client's memory.
const maxAnswerBytes = 256 << 20

func (c *Client) answerLimit() int64 {
	if c.maxAnswer > 0 {
		return c.maxAnswer
	}
	return maxAnswerBytes
}

// readAnswer reads a whole answer of at most limit bytes; a longer one is
// an error, not an allocation.
func readAnswer(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, &ConnError{err}
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("the answer is longer than %d bytes", limit)
	}
	return b, nil
}

// generateBody is the request body of one leg for the client's backend.
func (c *Client) generateBody(p Prompt, maxNew int, rid string, stream bool) (string, map[string]any) {
	route, textKey, idsKey := "/v1/completions", "prompt", "prompt"
	var body map[string]any
	if c.Backend == SGLang {
		route, textKey, idsKey = "/generate", "text", "input_ids"
		body = map[string]any{
			"sampling_params": map[string]any{"max_new_tokens": maxNew, "temperature": 0, "ignore_eos": true},
			"stream":          stream,
		}
	} else {
		body = map[string]any{"model": c.model(), "max_tokens": maxNew, "temperature": 0, "ignore_eos": true, "stream": stream}
		if stream {
			body["stream_options"] = map[string]any{"include_usage": true, "continuous_usage_stats": true}
		}
	}
	if rid != "" {
		body["rid"] = rid
	}
	if c.InputIDs {
		body[idsKey] = p.IDs
	} else {
		body[textKey] = p.Text
	}
	return route, body
}

// Generate sends one request with max new tokens and the given rid, and
// times it on the wall clock from sending (the body is encoded before the
// clock starts) to the last byte. A stream records every event that
// carries output.
func (c *Client) Generate(ctx context.Context, p Prompt, maxNew int, rid string, stream bool) (*Generation, error) {
	route, body := c.generateBody(p, maxNew, rid, stream)
	req, err := c.request(ctx, route, body)
	if err != nil {
		return nil, err
	}
	// The clock starts when the request is written: the client's own
	// encoding and connection set-up are not the server's latency.
	// The transport reports the write on its own goroutine, possibly after
	// the response began (a server may answer before the body is read), so
	// the time comes over a channel; without one the clock starts at send.
	start := time.Now()
	wrote := make(chan time.Time, 1)
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) {
			// A retried request is written again: keep the last write, and
			// never block the transport.
			select {
			case <-wrote:
			default:
			}
			select {
			case wrote <- time.Now():
			default:
			}
		},
	}))
	resp, err := c.do(req)
	if err != nil {
		return nil, err
	}
	select {
	case start = <-wrote:
	default:
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, &HTTPError{Route: "POST " + route, Status: resp.StatusCode, Body: string(b)}
	}
	g := &Generation{RID: rid}
	if stream {
		err = c.readStream(resp.Body, start, g)
		g.Wall = time.Since(start)
	} else {
		var b []byte
		b, err = io.ReadAll(resp.Body)
		// The clock stops at the last byte, before the answer is decoded.
		g.Wall = time.Since(start)
		if err == nil {
			err = c.parseFinal(b, g)
		} else {
			err = &ConnError{err}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("POST %s: %w", route, err)
	}
	return g, nil
}

// answer is the union of the fields read from a /generate body or event
// and an OpenAI completion body or chunk.
type answer struct {
	ID       string `json:"id"`
	MetaInfo *struct {
		ID               string `json:"id"`
		PromptTokens     int    `json:"prompt_tokens"`
		CompletionTokens int    `json:"completion_tokens"`
		CachedTokens     *int   `json:"cached_tokens"`
	} `json:"meta_info"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens *int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Choices []struct {
		Text string `json:"text"`
	} `json:"choices"`
	Error json.RawMessage `json:"error"`
}

// apply copies the counts an answer carries into g; it reports whether the
// answer carried a completion token count.
func (a *answer) apply(g *Generation) bool {
	switch {
	case a.MetaInfo != nil:
		g.PromptTokens, g.CompletionTokens = a.MetaInfo.PromptTokens, a.MetaInfo.CompletionTokens
		if a.MetaInfo.CachedTokens != nil {
			g.CachedTokens, g.CachedKnown = *a.MetaInfo.CachedTokens, true
		}
		return true
	case a.Usage != nil:
		g.PromptTokens, g.CompletionTokens = a.Usage.PromptTokens, a.Usage.CompletionTokens
		if d := a.Usage.PromptTokensDetails; d != nil && d.CachedTokens != nil {
			g.CachedTokens, g.CachedKnown = *d.CachedTokens, true
		}
		return true
	}
	return false
}

func (c *Client) parseFinal(b []byte, g *Generation) error {
	var a answer
	if err := json.Unmarshal(b, &a); err != nil {
		return fmt.Errorf("reading the answer: %w", err)
	}
	if !a.apply(g) {
		return fmt.Errorf("the answer has neither meta_info nor usage: %.200s", b)
	}
	return nil
}

// readStream reads SSE events until [DONE]. An event with output (a
// /generate event, or an OpenAI chunk whose text is not empty) is recorded
// with its arrival time and cumulative completion tokens; a final usage
// chunk without choices only completes the counts.
func (c *Client) readStream(body io.Reader, start time.Time, g *Generation) error {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	done := false
	for sc.Scan() {
		line := sc.Text()
		data, ok := strings.CutPrefix(line, "data:")
		if !ok {
			continue
		}
		data = strings.TrimSpace(data)
		if data == "[DONE]" {
			done = true
			break
		}
		at := time.Since(start)
		var a answer
		if err := json.Unmarshal([]byte(data), &a); err != nil {
			return fmt.Errorf("reading a stream event: %w", err)
		}
		if len(a.Error) > 0 && string(a.Error) != "null" {
			return fmt.Errorf("the server ended the stream with an error: %s", a.Error)
		}
		counted := a.apply(g)
		output := a.MetaInfo != nil || (len(a.Choices) > 0 && a.Choices[0].Text != "")
		if !output {
			continue
		}
		ev := Event{At: at, CompletionTokens: g.CompletionTokens, CountKnown: counted}
		if !counted {
			ev.CompletionTokens = len(g.Events) + 1
		}
		if n := len(g.Events); n > 0 && g.Events[n-1].CompletionTokens == ev.CompletionTokens && counted {
			continue // no new tokens (text held back, or a finish-only event)
		}
		g.Events = append(g.Events, ev)
	}
	if err := sc.Err(); err != nil {
		return &ConnError{err}
	}
	if !done {
		return errors.New("the stream ended without data: [DONE]")
	}
	if len(g.Events) == 0 {
		return errors.New("the stream carried no output")
	}
	if g.CompletionTokens == 0 {
		g.CompletionTokens = g.Events[len(g.Events)-1].CompletionTokens
	}
	return nil
}

// FlushAttempt is one try at emptying the prefix cache.
type FlushAttempt struct {
	Status int    `json:"status"`
	Body   string `json:"body"`
}

// OK tells whether the server accepted the flush.
func (a FlushAttempt) OK() bool { return a.Status == http.StatusOK }

// FlushOnce asks the server once to empty its prefix cache: SGLang's
// /flush_cache (with ?timeout= when timeout > 0, in the server's seconds),
// vLLM's /reset_prefix_cache. A refusal is an attempt with its status and
// body, not an error; errors are transport failures and ErrNoFlush.
func (c *Client) FlushOnce(ctx context.Context, timeout float64) (FlushAttempt, error) {
	var route string
	switch c.Backend {
	case SGLang:
		route = "/flush_cache"
		if timeout > 0 {
			route += "?timeout=" + strconv.FormatFloat(timeout, 'g', -1, 64)
		}
	case VLLM:
		route = "/reset_prefix_cache"
	default:
		return FlushAttempt{}, ErrNoFlush
	}
	resp, err := c.post(ctx, route, nil)
	if err != nil {
		return FlushAttempt{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return FlushAttempt{}, &ConnError{err}
	}
	return FlushAttempt{Status: resp.StatusCode, Body: string(b)}, nil
}

// CanFlush tells whether the backend has a flush route.
func (c *Client) CanFlush() bool { return c.Backend == SGLang || c.Backend == VLLM }

// errNoTokenize means the server has no /tokenize route.
var errNoTokenize = errors.New("no /tokenize route")

// Tokenize counts the server tokens of text with POST /tokenize (SGLang
// and vLLM both have it). A server without it gives errNoTokenize.
func (c *Client) Tokenize(ctx context.Context, text string) (int, error) {
	if c.Backend == OpenAI {
		return 0, errNoTokenize
	}
	body := map[string]any{"prompt": text}
	if c.Backend == VLLM {
		body["model"] = c.model()
	}
	resp, err := c.post(ctx, "/tokenize", body)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, &ConnError{err}
	}
	if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed {
		return 0, errNoTokenize
	}
	if resp.StatusCode != http.StatusOK {
		return 0, &HTTPError{Route: "POST /tokenize", Status: resp.StatusCode, Body: string(b)}
	}
	var out struct {
		Count  *int  `json:"count"`
		Tokens []int `json:"tokens"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return 0, fmt.Errorf("POST /tokenize: %w", err)
	}
	if out.Count != nil {
		return *out.Count, nil
	}
	return len(out.Tokens), nil
}

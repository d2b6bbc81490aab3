package harness

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
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
	return fmt.Sprintf("%s: HTTP %d: %s", e.Route, e.Status, clip(strings.TrimSpace(e.Body), maxShownBody))
}

// maxShownBody is how much of a server's text a message quotes.
const maxShownBody = 500

// clip shortens s to at most n bytes for a message, saying how long it was.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("%s... (%d bytes)", strings.ToValidUTF8(s[:n], ""), len(s))
}

// ConnError wraps a failure to reach the server at all (refused, reset,
// timed out): the commands exit 2 on it.
type ConnError struct{ Err error }

func (e *ConnError) Error() string {
	var ne net.Error
	if errors.As(e.Err, &ne) && ne.Timeout() {
		return "the server did not answer in time (--request-timeout; 0 waits forever): " + e.Err.Error()
	}
	return "cannot reach the server: " + e.Err.Error()
}
func (e *ConnError) Unwrap() error { return e.Err }

// DefaultRequestTimeout is how long bench waits for one request by
// default: a 200k-token prefill on the slowest deployment modelled
// (kimi-k2.6-rtx6000) takes about four minutes, so ten leave room, and a
// server that never answers ends the run instead of hanging it.
const DefaultRequestTimeout = 10 * time.Minute

// The harness reads no answer whole without a bound: a server that sends
// more than any answer to the request can hold is misbehaving, and its
// answer ends in ErrTooLarge after at most the bound is read, whatever it
// sends.
const (
	// maxSmallBody bounds an answer of a few fields: a flush's text,
	// /v1/models, /sim/profile, /sim/expect, /sim/stats, an error.
	maxSmallBody = 1 << 20
	// maxRecordsBody bounds /sim/requests, /sim/flushes and one request's
	// truth: the mock keeps at most 10,000 records of a few hundred bytes.
	maxRecordsBody = 16 << 20
	// bodyBytesPerToken bounds what one token adds to an answer: its text
	// (a few bytes, at most a long piece escaped), its id and, in a
	// stream's cumulative text, its share of the line.
	bodyBytesPerToken = 256
	// maxTokenizeBytesPerByte bounds a /tokenize answer by the text sent:
	// every byte of text is at most one token, an id of at most ten digits
	// and a comma.
	maxTokenizeBytesPerByte = 12
)

// ErrTooLarge is returned when an answer is larger than any answer to the
// request can be.
var ErrTooLarge = errors.New("the answer is larger than any answer to this request can be")

// generationBodyLimit bounds the answer to a request for maxNew tokens.
func generationBodyLimit(maxNew int) int64 {
	return maxSmallBody + int64(bodyBytesPerToken)*int64(max(maxNew, 0))
}

// readBounded reads a whole body of at most limit bytes. A longer one is
// ErrTooLarge after limit+1 bytes, never an allocation of its size.
func readBounded(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return b, &ConnError{err}
	}
	if int64(len(b)) > limit {
		return b[:limit], fmt.Errorf("%w: more than %s", ErrTooLarge, byteSize(limit))
	}
	return b, nil
}

// byteSize renders a size in bytes as "64 KiB" or "1.5 MiB".
func byteSize(n int64) string {
	switch {
	case n >= 1<<30:
		return strconv.FormatFloat(float64(n)/(1<<30), 'g', 3, 64) + " GiB"
	case n >= 1<<20:
		return strconv.FormatFloat(float64(n)/(1<<20), 'g', 3, 64) + " MiB"
	case n >= 1<<10:
		return strconv.FormatFloat(float64(n)/(1<<10), 'g', 3, 64) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

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
	// maxAnswer, when above 0, lowers every bound on an answer read whole
	// (for tests of the bounds).
	maxAnswer int64
}

// Prompt is what one leg sends: text, or token ids when the client sends
// input ids, and the cache_salt it carries, if any.
type Prompt struct {
	Text      string
	IDs       []int
	CacheSalt string
	// DPRank, if set, pins the request to that DP rank (SGLang's
	// routed_dp_rank): the harness's own probes on a deployment of
	// several ranks.
	DPRank *int
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
	// SpecVerifyCt is meta_info.spec_verify_ct, the speculative rounds the
	// request took; nil when the server reports none.
	SpecVerifyCt *int
	// SpecHistogram is meta_info.spec_correct_drafts_histogram (or its
	// older name, spec_accept_histogram, when the answer has only that):
	// SpecHistogram[i] is the speculative rounds that accepted i drafts,
	// so gave i+1 tokens; nil when the server reports none.
	// SpecHistogramField is the name it came under.
	SpecHistogram      []int
	SpecHistogramField string
	// DPRank is meta_info.dp_rank, the DP rank that ran the request, when
	// the server says (SGLang with several ranks); nil otherwise.
	DPRank *int
	// Tiers is cached_tokens_details: which tier (device, host, storage)
	// the cached tokens came from, on a server with HiCache; nil when the
	// server reports none.
	Tiers *Tiers
	// CountsReported: the server reported the request's counts (meta_info,
	// or usage: in a stream, an event's or the final usage chunk's).
	CountsReported bool
	// Malformed names the counts that were not whole numbers in range
	// ("cached_tokens 1e300"); they are clamped.
	Malformed []string
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

// SGLangVersion is the "version" SGLang's /server_info reports: "" when
// the server has no such route, answers it with an error, or reports no
// version as a string. Only a server that cannot be reached is an error.
func (c *Client) SGLangVersion(ctx context.Context) (string, error) {
	var info struct {
		Version any `json:"version"`
	}
	if _, err := c.get(ctx, "/server_info", &info); err != nil {
		var ce *ConnError
		if errors.As(err, &ce) {
			return "", err
		}
		return "", nil
	}
	v, _ := info.Version.(string)
	return v, nil
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

// ContextLength is the server's context length as its /v1/models reports
// it (max_model_len of the first model); 0 when the server reports none.
func (c *Client) ContextLength(ctx context.Context) (int, error) {
	var models struct {
		Data []struct {
			MaxModelLen json.Number `json:"max_model_len"`
		} `json:"data"`
	}
	status, err := c.get(ctx, "/v1/models", &models)
	switch {
	case status == http.StatusNotFound || status == http.StatusUnauthorized:
		return 0, nil
	case err != nil:
		return 0, err
	case len(models.Data) == 0 || models.Data[0].MaxModelLen == "":
		return 0, nil
	}
	n, err := models.Data[0].MaxModelLen.Int64()
	if err != nil || n <= 0 || n > MaxTokens {
		return 0, nil // a length no model has says nothing to check against
	}
	return int(n), nil
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
	return c.getBounded(ctx, route, v, maxSmallBody)
}

// getBounded is get for an answer of at most limit bytes.
func (c *Client) getBounded(ctx context.Context, route string, v any, limit int64) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.BaseURL+route, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if c.maxAnswer > 0 {
		limit = min(limit, c.maxAnswer)
	}
	b, err := readBounded(resp.Body, limit)
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
	if p.DPRank != nil {
		body["routed_dp_rank"] = *p.DPRank
	}
	if p.CacheSalt != "" {
		body["cache_salt"] = p.CacheSalt
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
	// The clock starts when the transport has a connection for the
	// request, before it writes a byte: the client's own encoding and a
	// new connection's set-up are not the server's latency, the write is
	// part of any client's. GotConn runs on the goroutine that sends the
	// request, so its time is never late; the transport's report of the
	// finished write comes on its own goroutine, possibly after the
	// answer has begun, and would shorten the measurement by as much.
	var mu sync.Mutex
	connected := time.Now()
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) {
			// A retried request gets a connection again: keep the last.
			mu.Lock()
			connected = time.Now()
			mu.Unlock()
		},
	}))
	resp, err := c.do(req)
	if err != nil {
		return nil, err
	}
	mu.Lock()
	start := connected
	mu.Unlock()
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := readBounded(resp.Body, maxSmallBody)
		return nil, &HTTPError{Route: "POST " + route, Status: resp.StatusCode, Body: string(b)}
	}
	g := &Generation{RID: rid}
	if stream {
		err = c.readStream(resp.Body, start, maxNew, g)
		g.Wall = time.Since(start)
	} else {
		var b []byte
		b, err = readBounded(resp.Body, generationBodyLimit(maxNew))
		// The clock stops at the last byte, before the answer is decoded.
		g.Wall = time.Since(start)
		if err == nil {
			err = c.parseFinal(b, g)
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
		PromptTokens     count  `json:"prompt_tokens"`
		CompletionTokens count  `json:"completion_tokens"`
		CachedTokens     *count `json:"cached_tokens"`
		SpecVerifyCt     *count `json:"spec_verify_ct"`
		// SGLang's histogram of accepted drafts a round, under its
		// current name and the one it keeps for old clients.
		SpecCorrectDraftsHistogram []count        `json:"spec_correct_drafts_histogram"`
		SpecAcceptHistogram        []count        `json:"spec_accept_histogram"`
		DPRank                     *count         `json:"dp_rank"`
		CachedTokensDetails        *cachedDetails `json:"cached_tokens_details"`
	} `json:"meta_info"`
	// Sglext is SGLang's extension of OpenAI answers (HiCache tiers, with
	// return_cached_tokens_details).
	Sglext *struct {
		CachedTokensDetails *cachedDetails `json:"cached_tokens_details"`
	} `json:"sglext"`
	Usage *struct {
		PromptTokens        count `json:"prompt_tokens"`
		CompletionTokens    count `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens *count `json:"cached_tokens"`
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
	var prompt, completion count
	var cached, verify, dpRank *count
	var hist []count
	var details *cachedDetails
	histField := ""
	switch {
	case a.MetaInfo != nil:
		prompt, completion, cached, verify = a.MetaInfo.PromptTokens, a.MetaInfo.CompletionTokens, a.MetaInfo.CachedTokens, a.MetaInfo.SpecVerifyCt
		dpRank = a.MetaInfo.DPRank
		details = a.MetaInfo.CachedTokensDetails
		hist, histField = a.MetaInfo.SpecCorrectDraftsHistogram, "spec_correct_drafts_histogram"
		if hist == nil {
			hist, histField = a.MetaInfo.SpecAcceptHistogram, "spec_accept_histogram"
		}
	case a.Usage != nil:
		prompt, completion = a.Usage.PromptTokens, a.Usage.CompletionTokens
		if d := a.Usage.PromptTokensDetails; d != nil {
			cached = d.CachedTokens
		}
	default:
		return false
	}
	// Each answer restates the counts: the last one's are kept.
	g.CountsReported = true
	g.Malformed = g.Malformed[:0]
	g.PromptTokens = prompt.take("prompt_tokens", g)
	g.CompletionTokens = completion.take("completion_tokens", g)
	if cached != nil {
		g.CachedTokens, g.CachedKnown = cached.take("cached_tokens", g), true
	}
	if a.Sglext != nil && details == nil {
		details = a.Sglext.CachedTokensDetails
	}
	if details != nil {
		g.Tiers = details.tiers(g)
	}
	if verify != nil {
		v := verify.take("spec_verify_ct", g)
		g.SpecVerifyCt = &v
	}
	if dpRank != nil {
		r := dpRank.take("dp_rank", g)
		g.DPRank = &r
	}
	if hist != nil {
		g.SpecHistogram, g.SpecHistogramField = make([]int, len(hist)), histField
		before := len(g.Malformed)
		for i, c := range hist {
			g.SpecHistogram[i] = c.take(fmt.Sprintf("%s[%d]", histField, i), g)
		}
		// A histogram names its first malformed entry, not all of them.
		if n := len(g.Malformed) - before; n > 1 {
			g.Malformed = append(g.Malformed[:before+1], fmt.Sprintf("%d more in %s", n-1, histField))
		}
	}
	return true
}

// maxCount bounds a count as the harness keeps it: far beyond any real
// count, and exact in a float64.
const maxCount = 1 << 53

// count is a token count as a server reports it: any JSON number. One that
// is not a whole number in ±maxCount keeps its literal, so a check can name
// it, and is clamped.
type count struct {
	n       int
	literal string
}

// UnmarshalJSON reads any JSON number; null leaves the count 0.
func (c *count) UnmarshalJSON(b []byte) error {
	s := string(b)
	if s == "null" {
		return nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil && n >= -maxCount && n <= maxCount {
		c.n = int(n)
		return nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		var ne *strconv.NumError
		if errors.As(err, &ne) && ne.Err == strconv.ErrRange {
			f = math.Copysign(math.Inf(1), f) // beyond float64: clamped below
		} else {
			return fmt.Errorf("a token count must be a number, got %.40s", s)
		}
	}
	c.n = int(max(-maxCount, min(maxCount, f)))
	if f != math.Trunc(f) || math.Abs(f) > maxCount {
		c.literal = s
	}
	return nil
}

// take returns the count, and notes in g a count that was not a whole
// number in range.
func (c count) take(name string, g *Generation) int {
	if c.literal != "" {
		g.Malformed = append(g.Malformed, name+" "+clip(c.literal, 40))
	}
	return c.n
}

func (c *Client) parseFinal(b []byte, g *Generation) error {
	var a answer
	if err := json.Unmarshal(b, &a); err != nil {
		return fmt.Errorf("reading the answer: %w", err)
	}
	if !a.apply(g) {
		return fmt.Errorf("the answer has neither meta_info nor usage: %s", clip(string(b), 200))
	}
	return nil
}

// readStream reads SSE events until [DONE]. An event with output (a
// /generate event, or an OpenAI chunk whose text is not empty) is recorded
// with its arrival time and cumulative completion tokens; a final usage
// chunk without choices only completes the counts.
//
// An event is a line of at most generationBodyLimit(maxNew) bytes (SGLang's
// native events repeat the whole text so far), and a stream records at
// most maxStreamEvents(maxNew) events: a server that sends more is
// misbehaving, and the read ends in ErrTooLarge.
func (c *Client) readStream(body io.Reader, start time.Time, maxNew int, g *Generation) error {
	sc := bufio.NewScanner(body)
	limit := generationBodyLimit(maxNew)
	sc.Buffer(make([]byte, 0, 64<<10), int(min(limit, math.MaxInt32)))
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
		if len(g.Events) == maxStreamEvents(maxNew) {
			return fmt.Errorf("%w: more than %d events with output for max_new_tokens %d", ErrTooLarge, len(g.Events), maxNew)
		}
		g.Events = append(g.Events, ev)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("%w: an event longer than %s", ErrTooLarge, byteSize(limit))
		}
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

// maxStreamEvents bounds the events with output a stream may carry: one per
// token, and as many again for events that split a token's text.
func maxStreamEvents(maxNew int) int { return 2*max(maxNew, 0) + 16 }

// FlushAttempt is one try at emptying the prefix cache.
type FlushAttempt struct {
	Status int    `json:"status"`
	Body   string `json:"body"`
	// Oversized is an answer longer than any flush answer can be: its
	// Body is cut and says so.
	Oversized bool `json:"oversized,omitempty"`
	// RefusedRanks are the DP ranks that refused a flush answered 200
	// (placement.go: SGLang answers with the first rank's answer).
	RefusedRanks []string `json:"refused_ranks,omitempty"`
}

// OK tells whether the server accepted the flush: a 200, unless its body
// says {"success": false}, as current vLLM's /reset_prefix_cache answers
// when it could not reset (a request was running), or is longer than any
// flush answer (a server that says that much is not one to take at its
// word).
func (a FlushAttempt) OK() bool {
	if a.Status != http.StatusOK || a.Oversized || len(a.RefusedRanks) > 0 {
		return false
	}
	var answer struct {
		Success *bool `json:"success"`
	}
	if json.Unmarshal([]byte(a.Body), &answer) == nil && answer.Success != nil {
		return *answer.Success
	}
	return true
}

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
	// A flush's answer is a line of text: a longer one is recorded cut,
	// with its size, as what the server said.
	b, err := readBounded(resp.Body, maxSmallBody)
	if errors.Is(err, ErrTooLarge) {
		return FlushAttempt{Status: resp.StatusCode, Body: clip(string(b), maxShownBody) + " (" + err.Error() + ")", Oversized: true}, nil
	}
	if err != nil {
		return FlushAttempt{}, err
	}
	return FlushAttempt{Status: resp.StatusCode, Body: clip(string(b), maxShownBody)}, nil
}

// CanFlush tells whether the backend has a flush route.
func (c *Client) CanFlush() bool { return c.Backend == SGLang || c.Backend == VLLM }

// errNoTokenize means the server has no /tokenize route.
var errNoTokenize = errors.New("no /tokenize route")

// Tokenize counts the server tokens of text with POST /tokenize: SGLang
// and vLLM both have it, and serve it beside their OpenAI routes, so
// --backend openai tries it too. A server without it (404, 405, or any
// refusal on --backend openai) gives errNoTokenize. The answer is read
// within a bound set by the text's length, and its count must be a whole
// number in 0..len(text)+64 (a BOS and a template's head beyond one token
// per byte).
func (c *Client) Tokenize(ctx context.Context, text string) (int, error) {
	body := map[string]any{"prompt": text}
	if c.Backend != SGLang {
		body["model"] = c.model()
	}
	resp, err := c.post(ctx, "/tokenize", body)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed,
		c.Backend == OpenAI && resp.StatusCode != http.StatusOK:
		return 0, errNoTokenize
	}
	b, err := readBounded(resp.Body, maxSmallBody+maxTokenizeBytesPerByte*int64(len(text)))
	if err != nil {
		return 0, fmt.Errorf("POST /tokenize: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, &HTTPError{Route: "POST /tokenize", Status: resp.StatusCode, Body: string(b)}
	}
	var out struct {
		Count  *count            `json:"count"`
		Tokens []json.RawMessage `json:"tokens"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		if c.Backend == OpenAI {
			return 0, errNoTokenize
		}
		return 0, fmt.Errorf("POST /tokenize: %w", err)
	}
	n := len(out.Tokens)
	if out.Count != nil {
		n = out.Count.n
		if out.Count.literal != "" {
			n = -1
		}
	}
	if n < 0 || n > len(text)+64 {
		return 0, fmt.Errorf("POST /tokenize: a count of %s tokens for a text of %d bytes is impossible", countText(out.Count, n), len(text))
	}
	return n, nil
}

// countText is a count as the server wrote it.
func countText(c *count, n int) string {
	if c != nil && c.literal != "" {
		return c.literal
	}
	return strconv.Itoa(n)
}

package harness

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sglmock/sglmock/sim"
)

// Bounds of what the recording proxy keeps. It forwards everything, but
// reads (and keeps) only bounded parts of it.
const (
	// maxProxyRecords is the generation requests recorded; later ones are
	// forwarded and counted as let go.
	maxProxyRecords = 100_000
	// maxInspectBody is the largest request body read to learn its prompt;
	// a longer one is forwarded unread and not audited.
	maxInspectBody = 64 << 20
	// maxRequestBytes is the request bodies kept over the whole run, to be
	// read after it (the prompt, to find which earlier prompt a request
	// reused); past it each is read at once and only its prompt's first
	// promptHead bytes kept (its hash stays exact).
	maxRequestBytes = 256 << 20
	promptHead      = 4 << 10
	// maxEventLine is the longest stream line parsed; a longer one is
	// forwarded but not read.
	maxEventLine = 4 << 20
	// headEvents are the first stream events looked at for the first one
	// with output.
	headEvents = 8
	// maxAnswerBody is the most of a whole (not streamed) answer read.
	maxAnswerBody = 64 << 20
	// maxAnswerBytes bounds what the answers in flight keep at once (whole
	// answers, a stream's partial line and its last two lines): each is
	// parsed when it ends and its bytes dropped, only its counts kept; an
	// answer that would pass the bound is forwarded and not read.
	maxAnswerBytes = 256 << 20
	// maxFlushAnswer is the most of a flush's answer kept.
	maxFlushAnswer = 1 << 10
)

// Recorder is a recording reverse proxy in front of a real SGLang or vLLM
// server. It forwards every request unchanged and passes each answer
// through as it arrives (a stream's events unbuffered), and it records
// each generation request (/generate, /v1/completions,
// /v1/chat/completions: route, rid, prompt, the counts and cached_tokens
// the server reports, when its first output and its end went by) and each
// flush (/flush_cache, /reset_prefix_cache) with its answer. Parsing is
// left for after the answer ends; while it streams the proxy only splits
// lines and keeps a few.
type Recorder struct {
	upstream *url.URL
	proxy    *httputil.ReverseProxy
	start    time.Time
	// maxRequestBytes is maxRequestBytes but in tests.
	maxRequestBytes int64

	// inspecting counts the request bodies and answers still being read;
	// recording waits for them.
	inspecting sync.WaitGroup
	// answerBytes counts what the answers in flight keep (maxAnswerBytes;
	// answerLimit but in tests).
	answerBytes, answerPeak atomic.Int64
	answerLimit             int64
	// journal, if set, gets each record as a JSON line when its answer
	// has been read (SetJournal).
	journalMu sync.Mutex
	journal   io.Writer

	mu        sync.Mutex
	records   []*proxyRecord
	flushes   []sim.Flush
	letGo     int
	bodyBytes int64
	closed    bool // the command ended: what is recorded is being judged
}

// proxyRecord is one generation request as the proxy saw it.
type proxyRecord struct {
	rec   *Recorder
	start time.Duration

	// The rest is filled in as the answer passes, and the request's body
	// is read after it, under the record's lock.
	mu         sync.Mutex
	route, rid string
	// key is the prompt as text ("" when the body was not read), hash
	// the whole prompt's; batch marks a request of several prompts or
	// samples.
	key, hash string
	batch     bool
	// salted: the body carried a cache_salt (a string that is not empty).
	salted bool
	// request is the request's body, until it is read.
	request  []byte
	stream   bool
	status   int
	line     []byte // a stream's partial line
	overlong bool   // a line or body past its bound was skipped
	// headSeen counts the first events looked at for output, first is
	// when the first with output went by.
	headSeen int
	first    time.Duration
	tail     [2]streamLine
	events   int
	body     []byte // a whole answer, up to maxAnswerBody
	// kept is what body, line and tail charge to the recorder's
	// answerBytes, until the answer is read (read) and they are dropped.
	kept int64
	end  time.Duration
	done bool
	read *answerRead // the answer, once read
}

// answerRead is what an answer said, read when it ended: all a record
// keeps of it.
type answerRead struct {
	first  time.Duration
	counts proxyCounts
	unread string
}

type streamLine struct {
	at   time.Duration
	data []byte
}

// NewRecorder returns a proxy to upstream (http://HOST:PORT) that reaches
// it with transport (nil: a transport like http.DefaultTransport's).
func NewRecorder(upstream string, transport http.RoundTripper) (*Recorder, error) {
	u, err := url.Parse(strings.TrimRight(upstream, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--upstream %q: want http://HOST:PORT", upstream)
	}
	if transport == nil {
		transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	rec := &Recorder{upstream: u, start: time.Now(), maxRequestBytes: maxRequestBytes, answerLimit: maxAnswerBytes}
	rec.proxy = &httputil.ReverseProxy{
		Rewrite:        func(pr *httputil.ProxyRequest) { pr.SetURL(u) },
		Transport:      transport,
		FlushInterval:  -1, // every write goes out at once
		ModifyResponse: rec.modifyResponse,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if pr, ok := r.Context().Value(recordKey{}).(*proxyRecord); ok {
				pr.mu.Lock()
				pr.status = http.StatusBadGateway
				pr.mu.Unlock()
				pr.finish(rec.since())
			}
			http.Error(w, "sglmock audit's proxy cannot reach "+u.String()+": "+err.Error(), http.StatusBadGateway)
		},
	}
	return rec, nil
}

// Upstream is the server the proxy forwards to.
func (rec *Recorder) Upstream() string { return rec.upstream.String() }

func (rec *Recorder) since() time.Duration { return time.Since(rec.start) }

// generationRoute is the route a generation request's path names.
func generationRoute(path string) (string, bool) {
	switch path {
	case "/generate":
		return sim.RouteGenerate, true
	case "/v1/completions":
		return sim.RouteCompletions, true
	case "/v1/chat/completions":
		return sim.RouteChat, true
	}
	return "", false
}

type recordKey struct{}

// contextWith carries the record to modifyResponse.
func contextWith(r *http.Request, pr *proxyRecord) context.Context {
	return context.WithValue(r.Context(), recordKey{}, pr)
}

// ServeHTTP forwards r, recording it when it generates or flushes.
func (rec *Recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/flush_cache" || r.URL.Path == "/reset_prefix_cache" {
		rec.serveFlush(w, r)
		return
	}
	route, ok := generationRoute(r.URL.Path)
	if !ok || r.Method != http.MethodPost {
		rec.proxy.ServeHTTP(w, r)
		return
	}
	pr := &proxyRecord{rec: rec, route: route, start: rec.since()}
	var body []byte
	if r.ContentLength <= maxInspectBody {
		b, err := io.ReadAll(io.LimitReader(r.Body, maxInspectBody+1))
		if err != nil {
			http.Error(w, "sglmock audit's proxy: reading the request: "+err.Error(), http.StatusBadRequest)
			return
		}
		if len(b) > maxInspectBody {
			// Too long to read: forwarded as it comes, its prompt unknown.
			r.Body = readCloser{io.MultiReader(bytes.NewReader(b), r.Body), r.Body}
		} else {
			// Read whole: forwarded from memory, the request's own body
			// done with (net/http's server may discard what is left of a
			// body once the answer starts).
			body = b
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
		}
	}
	rec.mu.Lock()
	if len(rec.records) >= maxProxyRecords {
		rec.letGo++
		rec.mu.Unlock()
		rec.proxy.ServeHTTP(w, r)
		return
	}
	// What the request asked is read after the run, costing the run
	// nothing, while the bodies kept fit their bound; past it, each is
	// read beside its answer, on a goroutine of its own, and only its
	// prompt's head kept. Either is set up before the request goes on: a
	// client may have its whole answer, and the run may end, before this
	// handler returns.
	keep := false
	if body != nil {
		keep = rec.bodyBytes+int64(len(body)) <= rec.maxRequestBytes
		if keep {
			rec.bodyBytes += int64(len(body))
			pr.request = body // pr is not shared yet
		} else {
			rec.inspecting.Add(1)
		}
	}
	rec.records = append(rec.records, pr)
	rec.mu.Unlock()
	if body != nil && !keep {
		go func() {
			defer rec.inspecting.Done()
			inspect(pr, body, true)
		}()
	}
	rec.proxy.ServeHTTP(w, r.WithContext(contextWith(r, pr)))
}

type readCloser struct {
	io.Reader
	io.Closer
}

// inspect reads the prompt and rid of a request body, keeping only the
// prompt's head when truncate; a request of several prompts or samples
// (n > 1) is marked a batch, forwarded but not audited.
func inspect(pr *proxyRecord, b []byte, truncate bool) {
	var body struct {
		RID      json.RawMessage `json:"rid"`
		Text     json.RawMessage `json:"text"`
		InputIDs json.RawMessage `json:"input_ids"`
		Prompt   json.RawMessage `json:"prompt"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		N              *int            `json:"n"`
		SamplingParams json.RawMessage `json:"sampling_params"`
		CacheSalt      json.RawMessage `json:"cache_salt"`
	}
	if json.Unmarshal(b, &body) != nil {
		return // the server answered it; no prompt to match
	}
	var rid, key, text, salt string
	route, batch := pr.route, false
	json.Unmarshal(body.RID, &rid)
	json.Unmarshal(body.CacheSalt, &salt)
	var sp struct {
		N *int `json:"n"`
	}
	json.Unmarshal(body.SamplingParams, &sp)
	var ids []int64
	switch {
	case body.N != nil && *body.N > 1 || sp.N != nil && *sp.N > 1:
		batch = true
	case len(body.Messages) > 0:
		var sb strings.Builder
		sb.WriteString("chat\x00")
		for _, m := range body.Messages {
			sb.WriteString(m.Role + "\x00" + messageContent(m.Content) + "\x01")
		}
		key = sb.String()
	case json.Unmarshal(body.Text, &text) == nil && len(body.Text) > 0 && body.Text[0] == '"',
		json.Unmarshal(body.Prompt, &text) == nil && len(body.Prompt) > 0 && body.Prompt[0] == '"':
		key = "text\x00" + text
	case json.Unmarshal(body.InputIDs, &ids) == nil && len(ids) > 0, json.Unmarshal(body.Prompt, &ids) == nil && len(ids) > 0:
		var sb strings.Builder
		sb.WriteString("ids\x00")
		for _, id := range ids {
			sb.WriteString(strconv.FormatInt(id, 10) + ",")
		}
		key = sb.String()
		route = sim.RouteCompletionsTokens
		if pr.route == sim.RouteGenerate {
			route = sim.RouteGenerateIDs
		}
	case len(body.Text) > 0 || len(body.Prompt) > 0 || len(body.InputIDs) > 0:
		batch = true // a list of prompts
	}
	var hash string
	if key != "" {
		h := sha256.Sum256([]byte(key))
		hash = hex.EncodeToString(h[:8])
	}
	if len(key) > promptHead && truncate {
		key = key[:promptHead]
	}
	pr.mu.Lock()
	pr.rid, pr.key, pr.hash, pr.route, pr.batch, pr.salted = rid, key, hash, route, batch, salt != ""
	pr.mu.Unlock()
}

// messageContent is a chat message's text: a string, or its text parts.
func messageContent(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	json.Unmarshal(raw, &parts)
	var sb strings.Builder
	for _, p := range parts {
		sb.WriteString(p.Type + "\x02" + p.Text)
	}
	return sb.String()
}

// serveFlush forwards a flush and records it with its answer.
func (rec *Recorder) serveFlush(w http.ResponseWriter, r *http.Request) {
	f := sim.Flush{At: rec.since().Seconds(), Origin: r.RemoteAddr}
	if t, err := strconv.ParseFloat(r.URL.Query().Get("timeout"), 64); err == nil {
		f.Timeout = t
	}
	rw := &flushWriter{ResponseWriter: w}
	rec.proxy.ServeHTTP(rw, r)
	f.Answered = rec.since().Seconds()
	// One rule with bench's own flushes: a 200 that says {"success":
	// false} (vLLM's reset, a request running), or more than any flush
	// answer, is refused.
	oversized := rw.n > maxSmallBody
	f.OK = FlushAttempt{Status: rw.status, Body: string(rw.body), Oversized: oversized}.OK()
	f.Outcome = fmt.Sprintf("HTTP %d %s", rw.status, strings.TrimSpace(string(rw.body)))
	if oversized {
		f.Outcome = fmt.Sprintf("HTTP %d %s... (%d bytes: longer than any flush answer can be)", rw.status, rw.body[:min(64, len(rw.body))], rw.n)
	}
	if f.OK {
		f.Outcome = sim.OutcomeFlushed
	}
	rec.mu.Lock()
	rec.flushes = append(rec.flushes, f)
	rec.mu.Unlock()
}

// flushWriter keeps a flush answer's status and its first bytes.
type flushWriter struct {
	http.ResponseWriter
	status int
	body   []byte
	// n counts the answer's bytes: past maxSmallBody, the most bench reads
	// of a flush's answer, it is longer than any flush answer can be.
	n int
}

func (w *flushWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *flushWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if room := maxFlushAnswer - len(w.body); room > 0 {
		w.body = append(w.body, b[:min(room, len(b))]...)
	}
	w.n += len(b)
	return w.ResponseWriter.Write(b)
}

func (w *flushWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// modifyResponse wraps a generation answer's body in the recording reader.
func (rec *Recorder) modifyResponse(resp *http.Response) error {
	pr, ok := resp.Request.Context().Value(recordKey{}).(*proxyRecord)
	if !ok {
		return nil
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.status = resp.StatusCode
	if enc := resp.Header.Get("Content-Encoding"); enc != "" && enc != "identity" {
		pr.overlong = true // compressed: forwarded, not read
		return nil
	}
	pr.stream = strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	resp.Body = &recordingBody{ReadCloser: resp.Body, rec: rec, pr: pr}
	return nil
}

// recordingBody passes an answer's bytes through and notes them.
type recordingBody struct {
	io.ReadCloser
	rec *Recorder
	pr  *proxyRecord
}

func (b *recordingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.pr.note(p[:n], b.rec.since())
	}
	if err != nil {
		b.pr.finish(b.rec.since())
	}
	return n, err
}

func (b *recordingBody) Close() error {
	b.pr.finish(b.rec.since())
	return b.ReadCloser.Close()
}

// note takes the answer's next bytes: a stream's first few lines that
// carry data are looked at for output as they end and its last two kept; a
// whole answer is kept up to its bound. What is kept counts against the
// recorder's bound on answers in flight.
func (pr *proxyRecord) note(p []byte, at time.Duration) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.overlong {
		return
	}
	if !pr.stream {
		ok := maxAnswerBody-len(pr.body) >= len(p)
		if ok {
			pr.body, ok = pr.appendKept(pr.body, p)
		}
		if !ok {
			pr.skip()
		}
		return
	}
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			pr.addToLine(p)
			return
		}
		pr.addToLine(p[:i])
		pr.endLine(at)
		p = p[i+1:]
	}
}

func (pr *proxyRecord) addToLine(p []byte) {
	ok := len(pr.line)+len(p) <= maxEventLine
	if ok {
		pr.line, ok = pr.appendKept(pr.line, p)
	}
	if !ok {
		pr.skip()
	}
}

// appendKept appends p to buf, charging the recorder's answerBytes for
// buf's growth first; it reports false, appending nothing, when the growth
// does not fit.
func (pr *proxyRecord) appendKept(buf, p []byte) ([]byte, bool) {
	if len(buf)+len(p) <= cap(buf) {
		return append(buf, p...), true
	}
	want := max(2*cap(buf), len(buf)+len(p))
	grow := int64(want - cap(buf))
	if pr.rec.answerBytes.Add(grow) > pr.rec.answerLimit {
		pr.rec.answerBytes.Add(-grow)
		return buf, false
	}
	for held := pr.rec.answerBytes.Load(); ; held = pr.rec.answerBytes.Load() {
		if peak := pr.rec.answerPeak.Load(); held <= peak || pr.rec.answerPeak.CompareAndSwap(peak, held) {
			break
		}
	}
	buf = slices.Grow(buf, want-len(buf))
	pr.kept += grow
	return append(buf, p...), true
}

// skip gives up reading the answer (past a bound): it is forwarded, not
// read, and what it kept is dropped.
func (pr *proxyRecord) skip() {
	pr.overlong = true
	pr.drop()
}

// drop lets go of the answer's bytes and their charge.
func (pr *proxyRecord) drop() {
	pr.rec.answerBytes.Add(-pr.kept)
	pr.kept = 0
	pr.body, pr.line, pr.tail = nil, nil, [2]streamLine{}
}

func (pr *proxyRecord) endLine(at time.Duration) {
	data, ok := bytes.CutPrefix(bytes.TrimSpace(pr.line), []byte("data:"))
	pr.line = pr.line[:0]
	if !ok {
		return
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 || string(data) == "[DONE]" {
		return
	}
	pr.events++
	if pr.first == 0 && pr.headSeen < headEvents {
		pr.headSeen++
		var a proxyAnswer
		if json.Unmarshal(data, &a) == nil && a.output() {
			pr.first = at
		}
	}
	// The last two lines, in buffers reused from line to line.
	pr.tail[0], pr.tail[1] = pr.tail[1], pr.tail[0]
	var kept bool
	if pr.tail[1].data, kept = pr.appendKept(pr.tail[1].data[:0], data); !kept {
		pr.skip()
		return
	}
	pr.tail[1].at = at
}

// finish records the answer's end and reads it, on a goroutine of its
// own (the client may still be taking the last bytes): its counts are kept,
// its bytes dropped, and the journal, if any, gets the record. An answer
// that ends after the command did is left unread.
func (pr *proxyRecord) finish(at time.Duration) {
	pr.mu.Lock()
	if pr.done {
		pr.mu.Unlock()
		return
	}
	pr.done, pr.end = true, at
	pr.mu.Unlock()
	rec := pr.rec
	rec.mu.Lock()
	if rec.closed {
		rec.mu.Unlock()
		return
	}
	rec.inspecting.Add(1)
	rec.mu.Unlock()
	go func() {
		defer rec.inspecting.Done()
		pr.inspectKept()
		pr.mu.Lock()
		pr.read = pr.readAnswer()
		pr.drop()
		pr.mu.Unlock()
		rec.writeJournal(pr.seen())
	}()
}

// proxyAnswer is the union of what a /generate answer or event and an
// OpenAI answer or chunk say about a request.
type proxyAnswer struct {
	ID       string `json:"id"`
	Text     string `json:"text"`
	MetaInfo *struct {
		ID               string          `json:"id"`
		PromptTokens     int             `json:"prompt_tokens"`
		CompletionTokens int             `json:"completion_tokens"`
		CachedTokens     *int            `json:"cached_tokens"`
		FinishReason     json.RawMessage `json:"finish_reason"`
		E2ELatency       *float64        `json:"e2e_latency"`
		DPRank           *int            `json:"dp_rank"`
		// CachedTokensDetails is HiCache's split of cached_tokens by tier.
		CachedTokensDetails *struct {
			Device, Host   int
			Storage        int
			StorageBackend string `json:"storage_backend"`
		} `json:"cached_tokens_details"`
		// SGLang's time stats under --enable-metrics: when the request
		// entered its prefill batch and when the batch finished, in
		// seconds since the epoch.
		ForwardEntryTime    *float64 `json:"forward_entry_time"`
		PrefillFinishedTime *float64 `json:"prefill_finished_time"`
		RequestReceivedTS   *float64 `json:"request_received_ts"`
	} `json:"meta_info"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens *int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Choices []struct {
		Text  string `json:"text"`
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
}

// output tells whether an event carries generated text.
func (a *proxyAnswer) output() bool {
	if a.MetaInfo != nil {
		return a.Text != ""
	}
	return len(a.Choices) > 0 && (a.Choices[0].Text != "" || a.Choices[0].Delta.Content != "")
}

// proxyCounts is what the server said of one request.
type proxyCounts struct {
	prompt, completion, cached int
	usage, cachedKnown         bool
	finish, id                 string
	dpRank                     *int // meta_info.dp_rank: SGLang with several DP ranks
	tiers                      *sim.CacheTiers
	// prefillEntry and prefillDone are the server's own times of the
	// request's prefill batch, received when it got the request (0 when
	// it reports none).
	prefillEntry, prefillDone, received float64
}

func (c *proxyCounts) apply(a *proxyAnswer) {
	if a.ID != "" {
		c.id = a.ID
	}
	switch {
	case a.MetaInfo != nil:
		c.usage, c.prompt, c.completion = true, a.MetaInfo.PromptTokens, a.MetaInfo.CompletionTokens
		if a.MetaInfo.CachedTokens != nil {
			c.cached, c.cachedKnown = *a.MetaInfo.CachedTokens, true
		}
		if d := a.MetaInfo.CachedTokensDetails; d != nil {
			c.tiers = &sim.CacheTiers{Device: d.Device, Host: d.Host, Storage: d.Storage, StorageBackend: clip(d.StorageBackend, 64)}
			if !simTiers(c.tiers).hicache() {
				c.tiers = nil // a server without HiCache: all on the device
			}
		}
		if a.MetaInfo.ID != "" {
			c.id = a.MetaInfo.ID
		}
		if a.MetaInfo.DPRank != nil {
			c.dpRank = a.MetaInfo.DPRank
		}
		if e, d := a.MetaInfo.ForwardEntryTime, a.MetaInfo.PrefillFinishedTime; e != nil && d != nil {
			c.prefillEntry, c.prefillDone = *e, *d
		}
		if r := a.MetaInfo.RequestReceivedTS; r != nil {
			c.received = *r
		}
		var fr struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(a.MetaInfo.FinishReason, &fr) == nil && fr.Type != "" {
			c.finish = fr.Type
		}
	case a.Usage != nil:
		c.usage, c.prompt, c.completion = true, a.Usage.PromptTokens, a.Usage.CompletionTokens
		if d := a.Usage.PromptTokensDetails; d != nil && d.CachedTokens != nil {
			c.cached, c.cachedKnown = *d.CachedTokens, true
		}
	}
	if len(a.Choices) > 0 && a.Choices[0].FinishReason != nil {
		c.finish = *a.Choices[0].FinishReason
	}
}

// seen is what a record says once its answer has ended: the request,
// the counts the server reported, and when its first output went by.
type seen struct {
	route, rid, key, hash string
	batch, readable       bool
	salted                bool
	start, end, first     time.Duration
	counts                proxyCounts
	// unread says why the answer could not be read.
	unread string
}

func (pr *proxyRecord) seen() seen {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	v := seen{route: pr.route, rid: pr.rid, key: pr.key, hash: pr.hash, batch: pr.batch, salted: pr.salted, start: pr.start, end: pr.end}
	if r := pr.read; r != nil {
		v.first, v.counts, v.unread = r.first, r.counts, r.unread
	} else {
		v.unread = fmt.Sprintf("HTTP %d: it had not ended when the command did", pr.status)
	}
	v.readable = v.unread == ""
	return v
}

// inspectKept reads the request's body, if it was kept to be read later,
// and lets it go.
func (pr *proxyRecord) inspectKept() {
	pr.mu.Lock()
	body := pr.request
	pr.request = nil
	pr.mu.Unlock()
	if body != nil {
		inspect(pr, body, false)
	}
}

// readAnswer reads what the answer says, once it has ended; pr.mu is
// held.
func (pr *proxyRecord) readAnswer() *answerRead {
	r := &answerRead{}
	switch {
	case pr.overlong:
		r.unread = fmt.Sprintf("HTTP %d: compressed, or a line or body past the proxy's bound", pr.status)
	case pr.status != http.StatusOK:
		r.unread = fmt.Sprintf("HTTP %d", pr.status)
	case !pr.stream:
		var a proxyAnswer
		if json.Unmarshal(pr.body, &a) != nil {
			r.unread = "HTTP 200: not JSON"
			break
		}
		r.counts.apply(&a)
	case pr.events == 0:
		r.unread = "HTTP 200: a stream without data events"
	default:
		r.first = pr.first
		for _, l := range pr.tail {
			var a proxyAnswer
			if l.data != nil && json.Unmarshal(l.data, &a) == nil {
				r.counts.apply(&a)
			}
		}
	}
	return r
}

// SetJournal has the proxy write each request to w as one JSON line as
// soon as its answer has been read, so that a run audit cannot finish (the
// process killed, the machine gone) keeps what the proxy saw.
func (rec *Recorder) SetJournal(w io.Writer) {
	rec.journalMu.Lock()
	rec.journal = w
	rec.journalMu.Unlock()
}

// journalLine is one request as the journal writes it: what the proxy saw
// of it, times in seconds since the proxy started.
type journalLine struct {
	Route            string   `json:"route"`
	RID              string   `json:"rid,omitempty"`
	PromptHash       string   `json:"prompt_hash,omitempty"`
	Batch            bool     `json:"batch,omitempty"`
	Start            float64  `json:"start_s"`
	End              float64  `json:"end_s"`
	TTFT             *float64 `json:"ttft_s,omitempty"`
	PromptTokens     int      `json:"prompt_tokens"`
	CompletionTokens int      `json:"completion_tokens"`
	CachedTokens     *int     `json:"cached_tokens"`
	FinishReason     string   `json:"finish_reason,omitempty"`
	Unread           string   `json:"unread,omitempty"`
}

func (rec *Recorder) writeJournal(v seen) {
	rec.journalMu.Lock()
	defer rec.journalMu.Unlock()
	if rec.journal == nil {
		return
	}
	c := v.counts
	l := journalLine{Route: v.route, RID: cmp.Or(v.rid, c.id), PromptHash: v.hash, Batch: v.batch, Start: v.start.Seconds(), End: v.end.Seconds(),
		PromptTokens: c.prompt, CompletionTokens: c.completion, FinishReason: c.finish, Unread: v.unread}
	if v.first > 0 {
		ttft := (v.first - v.start).Seconds()
		l.TTFT = &ttft
	}
	if c.cachedKnown {
		l.CachedTokens = &c.cached
	}
	b, _ := json.Marshal(l) // plain fields always marshal
	rec.journal.Write(append(b, '\n'))
}

// recording is what the proxy has recorded, copied out.
type recording struct {
	records []*proxyRecord
	flushes []sim.Flush
	letGo   int
}

func (rec *Recorder) recording() recording {
	rec.mu.Lock()
	rec.closed = true // answers that end from now on stay unread
	rec.mu.Unlock()
	rec.inspecting.Wait()
	rec.mu.Lock()
	got := recording{records: append([]*proxyRecord(nil), rec.records...), flushes: append([]sim.Flush(nil), rec.flushes...), letGo: rec.letGo}
	rec.mu.Unlock()
	for _, pr := range got.records {
		pr.inspectKept()
	}
	return got
}

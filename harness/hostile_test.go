package harness_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglmock/sglmock/harness"
	"github.com/sglmock/sglmock/mockserver/mocktest"
)

// endless answers 200 with prefix and then bytes for as long as the client
// reads: a body of any size, 4 GB or more, that the harness must cut.
func endless(status int, prefix string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(status)
		io.WriteString(w, prefix)
		chunk := bytes.Repeat([]byte("x"), 64<<10)
		for {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}
}

// allocated runs f and returns the bytes the process allocated meanwhile:
// an upper bound on the heap a response could pin.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// Every answer the harness reads is bounded by what the request can get
// back: a server that sends more (here, without end) costs the client at
// most a few times the bound, and the call ends in ErrTooLarge (or, for a
// flush, an attempt whose body is cut and says so, and which is no
// accepted flush).
func TestHostileBodiesAreBounded(t *testing.T) {
	ctx := context.Background()
	stream := func(w http.ResponseWriter, r *http.Request) {
		// Events with ever more tokens, past any max_new_tokens.
		w.WriteHeader(200)
		for i := 1; ; i++ {
			if _, err := fmt.Fprintf(w, "data: {\"text\":\"x\",\"meta_info\":{\"prompt_tokens\":5,\"completion_tokens\":%d}}\n\n", i); err != nil {
				return
			}
		}
	}
	tests := []struct {
		name    string
		handler http.HandlerFunc
		call    func(c *harness.Client) error
		bound   uint64
	}{
		{"a /generate answer without end", endless(200, `{"text": "`), func(c *harness.Client) error {
			_, err := c.Generate(ctx, harness.Prompt{Text: "hello"}, 17, "r", false)
			return err
		}, 1 << 20},
		{"a stream event without end", endless(200, `data: {"text": "`), func(c *harness.Client) error {
			_, err := c.Generate(ctx, harness.Prompt{Text: "hello"}, 17, "r", true)
			return err
		}, 1 << 20},
		{"stream events without end", stream, func(c *harness.Client) error {
			_, err := c.Generate(ctx, harness.Prompt{Text: "hello"}, 17, "r", true)
			return err
		}, 1 << 20},
		{"an error answer without end", endless(500, "Internal error: "), func(c *harness.Client) error {
			_, err := c.Generate(ctx, harness.Prompt{Text: "hello"}, 17, "r", false)
			var he *harness.HTTPError
			if !errors.As(err, &he) || he.Status != 500 || len(err.Error()) > 600 {
				return fmt.Errorf("got %.200v, want an HTTP 500 error quoting a few hundred bytes", err)
			}
			return harness.ErrTooLarge
		}, 1 << 20},
		{"a /flush_cache answer without end", endless(200, "Cache flushed."), func(c *harness.Client) error {
			a, err := c.FlushOnce(ctx, 0)
			if err != nil || !strings.HasPrefix(a.Body, "Cache flushed.xxx") || !strings.Contains(a.Body, "more than 1 MiB") || len(a.Body) > 700 {
				return fmt.Errorf("got %.100q (%d bytes), %v; want the answer cut, saying so", a.Body, len(a.Body), err)
			}
			if a.OK() {
				return fmt.Errorf("got an accepted flush from a 200 without end, want it refused")
			}
			return harness.ErrTooLarge
		}, 1 << 20},
		{"a /tokenize answer without end", endless(200, `{"tokens": [`), func(c *harness.Client) error {
			_, err := c.Tokenize(ctx, "hello")
			return err
		}, 1 << 20},
		{"a /sim/profile answer without end", endless(200, `{"name": "`), func(c *harness.Client) error {
			_, err := c.SimInfo(ctx)
			return err
		}, 1 << 20},
		{"a /sim/requests answer without end", endless(200, `[{"rid": "`), func(c *harness.Client) error {
			_, err := c.Requests(ctx)
			return err
		}, 16 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := mocktest.NewServer(tt.handler)
				defer srv.Close()
				c := &harness.Client{HTTP: srv.Client, BaseURL: srv.URL, Backend: harness.SGLang}
				var err error
				n := allocated(func() { err = tt.call(c) })
				if !errors.Is(err, harness.ErrTooLarge) {
					t.Errorf("got %v, want ErrTooLarge", err)
				}
				// io.ReadAll grows its buffer as it reads: some twice the
				// bound in all (more under the race detector), plus the
				// transport's own buffers. Without a bound the call reads
				// for as long as the server writes.
				if limit := 5*tt.bound + 2<<20; n > limit {
					t.Errorf("the call allocated %d bytes, want at most %d (5 x its %d-byte bound + 2 MiB)", n, limit, tt.bound)
				}
			})
		})
	}
}

// A server that never answers ends the run at the request timeout bench
// uses by default, on virtual time exactly, with a message that names it.
func TestServerThatNeverAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := mocktest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done()
		}))
		defer srv.Close()
		c := &harness.Client{HTTP: &http.Client{Transport: srv.Transport, Timeout: harness.DefaultRequestTimeout},
			BaseURL: srv.URL, Backend: harness.SGLang}
		start := time.Now()
		_, err := twoPointOn(c, 1024).Run(context.Background())
		if err == nil || !strings.Contains(err.Error(), "the server did not answer in time (--request-timeout; 0 waits forever)") {
			t.Fatalf("got %v, want the request timeout named", err)
		}
		if got := time.Since(start); got != harness.DefaultRequestTimeout {
			t.Errorf("the run ended after %v, want the default request timeout %v", got, harness.DefaultRequestTimeout)
		}
	})
}

// twoPointOn is flush+nonce at one context against c.
func twoPointOn(c *harness.Client, tokens int) *harness.TwoPoint {
	return &harness.TwoPoint{Client: c, Points: []harness.Point{{CtxReq: tokens, Tokens: tokens}}, A: 1, B: 17,
		Methods: []harness.Method{harness.FlushNonce}, NoncePosition: harness.NonceStart, Repeat: 1,
		Options: harness.Options{NewID: counter()}}
}

// fakeServer is a server that answers as SGLang does but with the counts
// the test gives: /tokenize counts a text's words (or says tokenize), and
// /generate reports meta (filled in with the prompt's words and the
// output asked for), taking a millisecond per output token.
type fakeServer struct {
	tokenize func(words int) string
	meta     func(words, maxNew int) string
	// streamMeta is a stream event's meta_info after done tokens in
	// rounds speculative rounds; streams are served only with it.
	streamMeta func(words, done, rounds int) string
	calls      atomic.Int64
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Text           string `json:"text"`
		Prompt         string `json:"prompt"`
		SamplingParams struct {
			MaxNewTokens int `json:"max_new_tokens"`
		} `json:"sampling_params"`
		Stream bool `json:"stream"`
	}
	json.NewDecoder(r.Body).Decode(&body)
	switch r.URL.Path {
	case "/generate":
		if body.Stream && f.streamMeta != nil {
			// One event a round of four tokens, each with the counts so far.
			maxNew := body.SamplingParams.MaxNewTokens
			for done, round := 1, 0; done <= maxNew; done, round = min(done+4, maxNew+1), round+1 {
				time.Sleep(time.Millisecond)
				fmt.Fprintf(w, "data: {\"text\": \"x\", \"meta_info\": {%s}}\n\n", f.streamMeta(len(strings.Fields(body.Text)), min(done, maxNew), round))
				w.(http.Flusher).Flush()
			}
			io.WriteString(w, "data: [DONE]\n\n")
			return
		}
	}
	switch r.URL.Path {
	case "/tokenize":
		f.calls.Add(1)
		io.WriteString(w, f.tokenize(len(strings.Fields(body.Prompt))))
	case "/generate":
		maxNew := body.SamplingParams.MaxNewTokens
		time.Sleep(time.Duration(maxNew) * time.Millisecond)
		fmt.Fprintf(w, `{"text": "x", "meta_info": {%s}}`, f.meta(len(strings.Fields(body.Text)), maxNew))
	case "/flush_cache":
		io.WriteString(w, "Cache flushed.\n")
	default:
		http.NotFound(w, r)
	}
}

func wordCount(words int) string { return fmt.Sprintf(`{"count": %d}`, words) }

// The counts a server reports are checked before they are believed: a
// count no server can give makes the row SUSPECT with the number, never
// ok, and never a negative rate.
func TestImpossibleCounts(t *testing.T) {
	meta := func(prompt, cached string) func(int, int) string {
		return func(words, maxNew int) string {
			p := fmt.Sprint(words)
			if prompt != "" {
				p = prompt
			}
			return fmt.Sprintf(`"prompt_tokens": %s, "completion_tokens": %d, "cached_tokens": %s`, p, maxNew, cached)
		}
	}
	tests := []struct {
		name  string
		meta  func(int, int) string
		cause string
	}{
		{"negative cached", meta("", "-5"), "leg a: the server reported impossible counts: cached_tokens -5 of a 1024-token prompt, so cache reuse is unchecked"},
		{"cached beyond the prompt", meta("", "1000000000"), "leg b: the server reported impossible counts: cached_tokens 1000000000 of a 1024-token prompt, so cache reuse is unchecked"},
		{"cached as a float", meta("", "1e9"), "cached_tokens 1000000000 of a 1024-token prompt"},
		{"cached past int64", meta("", "1e300"), "leg a: the server reported impossible counts: cached_tokens 1e300, cached_tokens 9007199254740992 of a 1024-token prompt"},
		{"negative prompt", meta("-100", "0"), "leg a: the server reported impossible counts: prompt_tokens -100"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := mocktest.NewServer(&fakeServer{tokenize: wordCount, meta: tt.meta})
				defer srv.Close()
				rep := run(t, twoPointOn(&harness.Client{HTTP: srv.Client, BaseURL: srv.URL, Backend: harness.SGLang}, 1024))
				row := rep.Rows[0]
				if row.Verdict.Level() != harness.Suspect || !strings.Contains(row.Verdict.String(), tt.cause) {
					t.Errorf("verdict %q, want SUSPECT naming %q", row.Verdict, tt.cause)
				}
				if row.PrefillTPS < 0 || (row.DecodeTPS != nil && *row.DecodeTPS < 0) {
					t.Errorf("rates: prefill %v, decode %v; want none negative", row.PrefillTPS, *row.DecodeTPS)
				}
				var table bytes.Buffer
				rep.WriteTable(&table)
				if strings.Contains(table.String(), " ok") {
					t.Errorf("table:\n%s", table.String())
				}
			})
		})
	}
}

// A /tokenize that says one token whatever it is sent cannot make the
// sizing grow: the prompt stays within twice the target's words, the calls
// within their bound, and the row says the two counts disagree.
func TestTokenizeThatAlwaysSaysOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeServer{tokenize: func(int) string { return `{"count": 1}` }, meta: func(words, maxNew int) string {
			return fmt.Sprintf(`"prompt_tokens": %d, "completion_tokens": %d, "cached_tokens": 0`, words, maxNew)
		}}
		srv := mocktest.NewServer(f)
		defer srv.Close()
		var rep *harness.Report
		n := allocated(func() {
			rep = run(t, twoPointOn(&harness.Client{HTTP: srv.Client, BaseURL: srv.URL, Backend: harness.SGLang}, 8192))
		})
		row := rep.Rows[0]
		if row.PromptTokens > 2*8192 || !strings.Contains(row.Verdict.String(), "the server's /tokenize counted 1 tokens for the prompt, its answer") {
			t.Errorf("prompt %d tokens, verdict %q; want at most 16384 and the disagreement named", row.PromptTokens, row.Verdict)
		}
		// Two legs, each sized in at most 32 calls.
		if calls := f.calls.Load(); calls > 64 {
			t.Errorf("%d /tokenize calls, want at most 64", calls)
		}
		if n > 64<<20 {
			t.Errorf("the run allocated %d bytes, want at most 64 MiB", n)
		}
	})
}

// A server without /sim/ (a real SGLang) that reports its histogram of
// accepted drafts gets the scatter check from it, under either name; a
// histogram no server can report is named as the other impossible counts
// are, and then goes unused; without a usable one the row says the
// scatter is not checked.
func TestSpecHistogram(t *testing.T) {
	// 44 rounds of 1..6 tokens giving 192: 4.36 ± 1.69 tokens a round.
	meta := func(hist string, verify int) func(int, int) string {
		return func(words, maxNew int) string {
			m := fmt.Sprintf(`"prompt_tokens": %d, "completion_tokens": %d, "cached_tokens": 0`, words, maxNew)
			if maxNew > 1 {
				m += fmt.Sprintf(`, "spec_verify_ct": %d, %s`, verify, hist)
			}
			return m
		}
	}
	const h = "[4, 4, 4, 8, 8, 16, 0]"
	ok := "SUSPECT: b-a = 192 spans about 44 speculative rounds of 4.36 ± 1.69 tokens, so one run's decode is known to ±11.4 % only (95 %): use --b 4017 (about 920 rounds) or --repeat 33"
	unchecked := func(rounds int) string {
		return fmt.Sprintf("; b-a = 192 spans about %d speculative rounds, and the server reports no usable histogram of accepted drafts (meta_info.spec_correct_drafts_histogram), so the scatter of one run's decode is not checked: --repeat measures it", rounds)
	}
	for _, tt := range []struct {
		name string
		meta func(int, int) string
		want string
		hist []int
	}{
		{"current name", meta(`"spec_correct_drafts_histogram": `+h+`, "spec_accept_histogram": [44]`, 44), ok, []int{4, 4, 4, 8, 8, 16, 0}},
		{"older name", meta(`"spec_accept_histogram": `+h, 44), ok, []int{4, 4, 4, 8, 8, 16, 0}},
		{"negative", meta(`"spec_accept_histogram": [4, -4, 4, 8, 8, 16]`, 44),
			"SUSPECT: leg b: the server reported impossible counts: spec_accept_histogram[1] -4" + unchecked(44), nil},
		{"rounds other than spec_verify_ct", meta(`"spec_accept_histogram": `+h, 45),
			"SUSPECT: leg b: the server reported impossible counts: spec_accept_histogram of 44 rounds for spec_verify_ct 45" + unchecked(45), nil},
		{"malformed", meta(`"spec_accept_histogram": [4, 4, 4.5, 8, 8, 16, 1e400]`, 44),
			"SUSPECT: leg b: the server reported impossible counts: spec_accept_histogram[2] 4.5, 1 more in spec_accept_histogram" + unchecked(44), nil},
		// No histogram at all: ok, and the row says what it could not check.
		{"none", meta(`"weight_version": "default"`, 44), "ok (" + unchecked(44)[2:] + ")", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := mocktest.NewServer(&fakeServer{tokenize: wordCount, meta: tt.meta})
				defer srv.Close()
				tp := twoPointOn(&harness.Client{HTTP: srv.Client, BaseURL: srv.URL, Backend: harness.SGLang}, 1024)
				tp.B = 193
				row := run(t, tp).Rows[0]
				if got := row.Verdict.String(); got != tt.want {
					t.Errorf("verdict\n got %q\nwant %q", got, tt.want)
				}
				if got := row.Runs[0].B.SpecHistogram; !slices.Equal(got, tt.hist) {
					t.Errorf("leg b's histogram %v, want %v", got, tt.hist)
				}
			})
		})
	}
}

// A stream over speculative rounds from a server that sends no histogram
// of accepted drafts (nor /sim/): the row says the scatter of its decode
// is not checked rather than an ok that claims it.
func TestStreamScatterUnchecked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		plain := func(words, maxNew int) string {
			return fmt.Sprintf(`"prompt_tokens": %d, "completion_tokens": %d, "cached_tokens": 0`, words, maxNew)
		}
		srv := mocktest.NewServer(&fakeServer{tokenize: wordCount, meta: plain, streamMeta: func(words, done, rounds int) string {
			return fmt.Sprintf(`"prompt_tokens": %d, "completion_tokens": %d, "cached_tokens": 0, "spec_verify_ct": %d`, words, done, rounds)
		}})
		defer srv.Close()
		st := &harness.Stream{Client: &harness.Client{HTTP: srv.Client, BaseURL: srv.URL, Backend: harness.SGLang},
			Points: []harness.Point{{CtxReq: 1024, Tokens: 1024}}, MaxNewTokens: 1025, Options: harness.Options{NewID: counter()}}
		row := run(t, st).Stream[0]
		want := "the 1024 tokens after the first span about 256 speculative rounds, and the server reports no usable histogram of accepted drafts (meta_info.spec_correct_drafts_histogram), so the scatter of one run's decode is not checked"
		if !slices.ContainsFunc(row.Verdict.Causes, func(c harness.Cause) bool { return c.Level == harness.OK && c.Text == want }) || row.Verdict.Level() != harness.OK {
			t.Errorf("verdict %q, want ok with %q", row.Verdict, want)
		}
	})
}

// vllmLike answers as vLLM does on /v1/completions (as llm-d's simulator
// does too): stream chunks carry text and no token counts, one token a
// chunk, and the final usage chunk (stream_options.include_usage) says
// usage(n) tokens for the n sent, with cached tokens 0.
func vllmLike(usage func(n int) int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Prompt    string `json:"prompt"`
			MaxTokens int    `json:"max_tokens"`
			Stream    bool   `json:"stream"`
		}
		json.NewDecoder(r.Body).Decode(&body)
		words := len(strings.Fields(body.Prompt))
		counts := func(n int) string {
			return fmt.Sprintf(`{"prompt_tokens": %d, "completion_tokens": %d, "prompt_tokens_details": {"cached_tokens": 0}}`, words, n)
		}
		switch {
		case r.URL.Path == "/v1/models":
			io.WriteString(w, `{"data": [{"id": "llama"}]}`)
		case r.URL.Path == "/tokenize":
			io.WriteString(w, wordCount(words))
		case r.URL.Path != "/v1/completions":
			http.NotFound(w, r)
		case !body.Stream:
			time.Sleep(time.Millisecond)
			fmt.Fprintf(w, `{"choices": [{"text": "w", "finish_reason": "length"}], "usage": %s}`, counts(body.MaxTokens))
		default:
			for range body.MaxTokens {
				time.Sleep(time.Millisecond)
				io.WriteString(w, "data: {\"choices\": [{\"text\": \" w\", \"finish_reason\": null}]}\n\n")
				w.(http.Flusher).Flush()
			}
			fmt.Fprintf(w, "data: {\"choices\": [], \"usage\": %s}\n\ndata: [DONE]\n\n", counts(usage(body.MaxTokens)))
		}
	}
}

// A stream whose events carry no token counts is judged from its final
// usage: equal to the events, one token an event holds and the row is ok,
// saying so; else it is SUSPECT with both numbers.
func TestStreamEventsWithoutCounts(t *testing.T) {
	for _, tt := range []struct {
		usage func(int) int
		level harness.Level
		want  string
	}{
		{func(n int) int { return n }, harness.OK, "the events carry no token counts; the final usage's 257 tokens are the 257 events: one token per event"},
		{func(n int) int { return 2 * n }, harness.Suspect, "the events carry no token counts, and the final usage says 514 tokens for 257 events: the decode rate assumes one token per event"},
	} {
		synctest.Test(t, func(t *testing.T) {
			srv := mocktest.NewServer(vllmLike(tt.usage))
			defer srv.Close()
			st := &harness.Stream{Client: &harness.Client{HTTP: srv.Client, BaseURL: srv.URL, Backend: harness.OpenAI},
				Points: []harness.Point{{CtxReq: 1024, Tokens: 1024}}, MaxNewTokens: 257, Options: harness.Options{NewID: counter()}}
			row := run(t, st).Stream[0]
			if row.Verdict.Level() != tt.level || !slices.ContainsFunc(row.Verdict.Causes, func(c harness.Cause) bool {
				return c.Level == tt.level && c.Text == tt.want && slices.Equal(c.Figures, []harness.Figure{harness.FigureDecode})
			}) {
				t.Errorf("verdict %q, want %s with %q", row.Verdict, tt.level, tt.want)
			}
		})
	}
}

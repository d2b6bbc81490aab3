package harness_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglmock/sglmock/harness"
	"github.com/sglmock/sglmock/internal/norace"
	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
)

// counter returns a NewID that gives "id-1", "id-2", ...: deterministic
// nonces and rids.
func counter() func() string {
	n := 0
	return func() string { n++; return fmt.Sprintf("id-%d", n) }
}

func client(m *mocktest.Mock) *harness.Client {
	return &harness.Client{HTTP: m.Client, BaseURL: m.URL, Backend: harness.SGLang}
}

// retryFlushes is bench's default: kimi-k2.6-rtx6000 refuses a flush for
// 33 ms after a response, as SGLang does while its last batch settles.
var retryFlushes = harness.FlushPolicy{Retries: 3, RetryWait: 100 * time.Millisecond}

// originalPoints are the original benchmark's contexts: 1024, 8192 and
// 32768 requested gave 1407, 11382 and 45507 prompt tokens.
var originalPoints = []harness.Point{{CtxReq: 1024, Tokens: 1407}, {CtxReq: 8192, Tokens: 11382}, {CtxReq: 32768, Tokens: 45507}}

func twoPoint(m *mocktest.Mock, points []harness.Point, methods ...harness.Method) *harness.TwoPoint {
	return &harness.TwoPoint{Client: client(m), Points: points, A: 1, B: 17, Methods: methods,
		NoncePosition: harness.NonceStart, Repeat: 1, Options: harness.Options{NewID: counter(), Flush: retryFlushes}}
}

// run runs a method and fails the test on an error.
func run(t *testing.T, method interface {
	Run(context.Context) (*harness.Report, error)
}) *harness.Report {
	t.Helper()
	rep, err := method.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// On the original benchmark's profile and sizes, naive is poisoned at every size and
// says why; flush, nonce, flush+nonce and salt measure decode and TTFT with no
// error against the truth of the requests they sent (virtual time: the
// client's clock is exact), and report the method's own bias.
func TestMethodsAgainstTruth(t *testing.T) {
	norace.Skip(t, "checks each method's figures against the truth")
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{Profile: mocktest.Profile(t, "kimi-k2.6-rtx6000")})
		rep := run(t, twoPoint(m, originalPoints, harness.Methods...))
		if rep.Server.Mock != "kimi-k2.6-rtx6000" || rep.Server.Speedup != 1 || rep.Server.SharedFloor != 0 {
			t.Fatalf("server: got %+v", rep.Server)
		}
		if got, want := len(rep.Rows), 15; got != want {
			t.Fatalf("rows: got %d, want %d", got, want)
		}
		for _, row := range rep.Rows {
			name := fmt.Sprintf("%s at %d", row.Method, row.PromptTokens)
			if row.Method == harness.Naive {
				want := fmt.Sprintf("POISONED: leg b reused %d of %d prompt tokens (cached_tokens); t_b < t_a, so decode is undefined", row.PromptTokens-1, row.PromptTokens)
				if got := row.Verdict.String(); got != want {
					t.Errorf("%s: verdict %q, want %q", name, got, want)
				}
				if row.DecodeTPS != nil || row.Truth.DecodeErr != nil {
					t.Errorf("%s: decode %v, want undefined", name, *row.DecodeTPS)
				}
				continue
			}
			// b-a = 16 spans a handful of DDTREE rounds (4.40 tokens each on
			// average): the verdict says so and names one b for this and the
			// acceptance scatter both: 738 rounds, which know one run's decode
			// to ±2.5 % (the model's 4.40 ± 1.52 tokens a round), not the 40
			// that would only fix the whole-round steps.
			rounds := *row.Runs[0].B.SpecVerifyCt
			if row.Runs[0].A.SpecVerifyCt != nil || row.SpecRounds == nil || *row.SpecRounds != float64(rounds) {
				t.Errorf("%s: spec rounds %v, legs' spec_verify_ct %v and %d; want leg a none, the row leg b's", name, row.SpecRounds, row.Runs[0].A.SpecVerifyCt, rounds)
			}
			want := fmt.Sprintf("SUSPECT: b-a = 16: only %d speculative rounds, and decode moves by a whole round (%s %%) from run to run: use --b 3249 (about 738 rounds of 4.40 tokens, which the scatter of the tokens a round accepts needs too)",
				rounds, strconv.FormatFloat(math.Round(1000/float64(rounds))/10, 'f', -1, 64))
			if row.Method.Flushes() {
				// Each flush comes right after a response, inside kimi's 50 ms
				// settling window: refused once, accepted on the retry.
				want += "; 2 of 2 flushes were refused at first and accepted on a retry, after at most 2 tries"
			}
			if got := row.Verdict.String(); got != want {
				t.Errorf("%s: verdict %q, want %q", name, got, want)
			}
			if row.Suggested == nil || *row.Suggested != (harness.Suggestion{B: 3249}) {
				t.Errorf("%s: suggested %+v, want b 3249", name, row.Suggested)
			}
			if *row.CachedA != 0 || *row.CachedB != 0 {
				t.Errorf("%s: cached %d, %d, want 0, 0", name, *row.CachedA, *row.CachedB)
			}
			tr := row.Truth
			if math.Abs(tr.TTFTErr) > 1e-9 || tr.DecodeErr == nil || math.Abs(*tr.DecodeErr) > 1e-9 {
				t.Errorf("%s: errors against truth: TTFT %g, decode %v; want 0 on virtual time", name, tr.TTFTErr, *tr.DecodeErr)
			}
			// A cold leg's TTFT is the cold TTFT: the method has no TTFT bias.
			if math.Abs(tr.TTFTBias) > 1e-6 {
				t.Errorf("%s: TTFT bias %g, want 0", name, tr.TTFTBias)
			}
		}
		mocktest.CheckIdle(t, m.Engine())
	})
}

// Without speculative decoding (the default profile) the two-point decode
// rate also matches the steady-state rate: 16 rounds at contexts a few
// tokens apart.
func TestFlushNonceBiasWithoutSpeculation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{})
		rep := run(t, twoPoint(m, []harness.Point{{CtxReq: 4096, Tokens: 4096}}, harness.FlushNonce))
		row := rep.Rows[0]
		if row.PromptTokens != 4096 {
			t.Errorf("prompt tokens: got %d, want 4096 (sized with /tokenize)", row.PromptTokens)
		}
		if b := *row.Truth.DecodeBias; math.Abs(b) > 0.001 {
			t.Errorf("decode bias: got %g, want within 0.1 %%", b)
		}
	})
}

// A nonce at the end of the prompt leaves everything before it shared.
func TestSuffixNonceIsPoisoned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{})
		tp := twoPoint(m, []harness.Point{{CtxReq: 1024, Tokens: 1024}}, harness.NonceMethod)
		tp.NoncePosition = harness.NonceEnd
		row := run(t, tp).Rows[0]
		if row.Verdict.Level() != harness.Poisoned || !strings.Contains(row.Verdict.String(), "leg b reused 10") {
			t.Fatalf("verdict: got %q, want leg b's reuse of the shared filler", row.Verdict)
		}
		// All the filler before the nonce (four words and a colon: 5 tokens)
		// is reused.
		if got, want := *row.CachedB, 1024-5; got != want {
			t.Errorf("cached_b: got %d, want %d", got, want)
		}
	})
}

// Input ids are sized exactly and carry no BOS.
func TestInputIDs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{})
		tp := twoPoint(m, []harness.Point{{CtxReq: 1000, Tokens: 1000}}, harness.Naive, harness.FlushNonce)
		tp.Client.InputIDs = true
		rep := run(t, tp)
		// The default profile's prefill is cheap: t_b > t_a, and only
		// cached_tokens shows the poison.
		if got := rep.Rows[0].Verdict.String(); got != "POISONED: leg b reused 999 of 1000 prompt tokens (cached_tokens)" {
			t.Errorf("naive: %s", got)
		}
		if row := rep.Rows[1]; row.PromptTokens != 1000 || row.Verdict.String() != "ok" {
			t.Errorf("flush+nonce: %d tokens, %s; want 1000, ok", row.PromptTokens, row.Verdict)
		}
	})
}

// --repeat reports the medians, the spread and every run; naive repeated
// also reuses leg a after the first run.
func TestRepeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{Profile: mocktest.Profile(t, "kimi-k2.6-rtx6000")})
		tp := twoPoint(m, originalPoints[:1], harness.FlushNonce)
		tp.Repeat = 3
		row := run(t, tp).Rows[0]
		if len(row.Runs) != 3 {
			t.Fatalf("runs: got %d, want 3", len(row.Runs))
		}
		var decodes []float64
		for _, r := range row.Runs {
			decodes = append(decodes, 16/(r.B.Seconds-r.A.Seconds))
		}
		lo, hi := math.Min(decodes[0], math.Min(decodes[1], decodes[2])), math.Max(decodes[0], math.Max(decodes[1], decodes[2]))
		mid := decodes[0] + decodes[1] + decodes[2] - lo - hi
		if *row.DecodeTPS != mid || row.Spread != (hi-lo)/mid {
			t.Errorf("decode %g spread %g, want the median %g and (max-min)/median %g", *row.DecodeTPS, row.Spread, mid, (hi-lo)/mid)
		}
		if row.Spread == 0 {
			t.Errorf("three speculative runs gave the same decode rate %v: the spread is not measured", decodes)
		}
		if *row.Truth.DecodeErr != 0 {
			t.Errorf("decode error %g, want 0", *row.Truth.DecodeErr)
		}
	})
}

// A flush refused because the server is busy is reported with the
// server's text, and the legs after it are never silently measured.
func TestBusyFlushIsReported(t *testing.T) {
	for _, tt := range []struct {
		name   string
		policy harness.FlushPolicy
		tries  string
	}{
		{"retries", harness.FlushPolicy{Retries: 2, RetryWait: 10e6}, "3 tries"},
		{"naive script", harness.FlushPolicy{}, "1 try"},
		{"server timeout", harness.FlushPolicy{Timeout: 0.05}, "1 try"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := mocktest.Start(t, api.Config{})
				// A long request keeps the server busy for the whole test.
				done := make(chan error, 1)
				go func() {
					_, _, _, err := m.Send("POST", "/generate", `{"text": "busy", "sampling_params": {"max_new_tokens": 30000}}`)
					done <- err
				}()
				synctest.Wait()
				route := "/flush_cache"
				if tt.policy.Timeout > 0 {
					route += "?timeout=0.05"
				}
				code, refusal, _ := m.Do(t, "POST", route, "")
				if code != 400 {
					t.Fatalf("a flush while busy: got %d %q, want 400", code, refusal)
				}
				tp := twoPoint(m, []harness.Point{{CtxReq: 512, Tokens: 512}}, harness.FlushMethod)
				tp.Flush = tt.policy
				row := run(t, tp).Rows[0]
				want := fmt.Sprintf("flush before leg a refused (%s): HTTP 400 %q", tt.tries, strings.TrimSpace(refusal))
				if !strings.Contains(row.Verdict.String(), want) || !strings.Contains(row.Verdict.String(), "flush before leg b refused") {
					t.Errorf("verdict: got %q, want it to contain %q for both legs", row.Verdict, want)
				}
				// Leg b's prompt is leg a's: with the flush refused it is served
				// from the cache.
				if row.Verdict.Level() != harness.Poisoned || !strings.Contains(row.Verdict.String(), "leg b reused 511 of 512") {
					t.Errorf("verdict: got %q, want leg b's reuse named", row.Verdict)
				}
				if n := len(row.Runs[0].B.Flush.Attempts); fmt.Sprintf("%d", n) != strings.Fields(tt.tries)[0] {
					t.Errorf("leg b's flush attempts: got %d, want %s", n, tt.tries)
				}
				m.Do(t, "POST", "/abort_request", `{"abort_all": true}`)
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				mocktest.CheckIdle(t, m.Engine())
			})
		})
	}
}

// --backend openai has no flush route: asking for a flush method is a
// clear error before anything is sent; nonce works, and with
// --enable-cache-report a null cached_tokens counts as 0 once a repeated
// prompt has shown the server reports them.
func TestOpenAIBackend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{EnableCacheReport: true})
		c := client(m)
		c.Backend = harness.OpenAI
		for _, method := range []harness.Method{harness.FlushMethod, harness.FlushNonce} {
			tp := twoPoint(m, []harness.Point{{CtxReq: 512, Tokens: 512}}, method)
			tp.Client = c
			_, err := tp.Run(context.Background())
			if !errors.Is(err, harness.ErrNoFlush) || !strings.Contains(err.Error(), "--method nonce") {
				t.Errorf("%s over openai: got %v, want ErrNoFlush naming the way out", method, err)
			}
		}
		if reqs, _ := c.Requests(context.Background()); len(reqs) != 0 {
			t.Fatalf("the refused runs sent %d requests, want none", len(reqs))
		}
		tp := twoPoint(m, []harness.Point{{CtxReq: 512, Tokens: 512}}, harness.Naive, harness.NonceMethod)
		tp.Client = c
		rep := run(t, tp)
		// Without /tokenize the prompt is sized from the prompt_tokens two
		// probes reported: near the target, not on it.
		naive := rep.Rows[0]
		if got, want := naive.Verdict.String(), fmt.Sprintf("POISONED: leg b reused %d of %d prompt tokens (cached_tokens)", naive.PromptTokens-1, naive.PromptTokens); got != want {
			t.Errorf("naive over openai: got %q, want %q", got, want)
		}
		if row := rep.Rows[1]; row.Verdict.String() != "ok" || *row.CachedB != 0 || abs(row.PromptTokens-512) > 10 {
			t.Errorf("nonce over openai: %s, cached_b %v, %d tokens; want ok, 0, about 512", row.Verdict, *row.CachedB, row.PromptTokens)
		}
	})
}

// Without --enable-cache-report the OpenAI routes report no cached tokens:
// the checks say reuse is unchecked, and t_b < t_a alone poisons a row.
func TestOpenAIBackendWithoutCacheReport(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The original benchmark's profile: its prefill is dear enough that the cached leg b
		// finishes first.
		m := mocktest.Start(t, api.Config{Profile: mocktest.Profile(t, "kimi-k2.6-rtx6000")})
		tp := twoPoint(m, originalPoints[:1], harness.Naive, harness.NonceMethod)
		tp.Client.Backend = harness.OpenAI
		rep := run(t, tp)
		if rep.Server.SharedFloor != -1 {
			t.Errorf("shared floor: got %d, want -1 (unknown)", rep.Server.SharedFloor)
		}
		naive, nonce := rep.Rows[0].Verdict.String(), rep.Rows[1].Verdict.String()
		if !strings.HasPrefix(naive, "POISONED: t_b < t_a") || !strings.Contains(naive, "cache reuse is unchecked") {
			t.Errorf("naive: %s", naive)
		}
		if !strings.HasPrefix(nonce, "SUSPECT: leg a: the server reports no cached tokens") {
			t.Errorf("nonce: %s", nonce)
		}
	})
}

// vLLM's flush route is /reset_prefix_cache; a server without it (vLLM
// started without VLLM_SERVER_DEV_MODE=1) fails the flush, and the row
// says so. The mock has the route: here it stands in without it.
func TestVLLMFlushRouteMissing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.StartBehind(t, api.Config{Profile: mocktest.Profile(t, "default")}, mocktest.Without("/reset_prefix_cache"))
		tp := twoPoint(m, []harness.Point{{CtxReq: 512, Tokens: 512}}, harness.FlushNonce)
		tp.Client.Backend = harness.VLLM
		tp.Flush = harness.FlushPolicy{Retries: 3}
		row := run(t, tp).Rows[0]
		if got := row.Verdict.String(); !strings.Contains(got, "SUSPECT: flush before leg a failed (1 try): HTTP 404") ||
			!strings.Contains(got, "VLLM_SERVER_DEV_MODE=1") {
			t.Errorf("verdict: %s", got)
		}
	})
}

// Table, CSV and JSON of one small sweep, byte for byte.
func TestReportGolden(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{})
		tp := twoPoint(m, []harness.Point{{CtxReq: 256, Tokens: 256}, {CtxReq: 1024, Tokens: 1100}}, harness.Naive, harness.FlushNonce)
		tp.B = 5
		rep := run(t, tp)
		var table, csv, js bytes.Buffer
		if err := rep.WriteTable(&table); err != nil {
			t.Fatal(err)
		}
		if err := rep.WriteCSV(&csv); err != nil {
			t.Fatal(err)
		}
		if err := rep.WriteJSON(&js); err != nil {
			t.Fatal(err)
		}
		mocktest.Golden(t, "twopoint.txt", table.Bytes())
		mocktest.Golden(t, "twopoint.csv", csv.Bytes())
		mocktest.Golden(t, "twopoint.json", js.Bytes())
		if !strings.HasPrefix(csv.String(), "ctx_req,prompt_tok,t_a,t_b,a,b,b_cached,") {
			t.Errorf("the CSV must start with the calibration columns: %.80s", csv.String())
		}
	})
}

func abs(x int) int { return max(x, -x) }

// A flush refused while another request finishes is retried and then
// accepted: the row is ok and says how many tries it took. (On real SGLang
// the same happens right after any response, for a short while.)
func TestRefusedFlushRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{})
		done := make(chan error, 1)
		go func() {
			// 40 decode rounds of about 4 ms: busy for about 0.17 s.
			_, _, _, err := m.Send("POST", "/generate", `{"text": "busy", "sampling_params": {"max_new_tokens": 40}}`)
			done <- err
		}()
		synctest.Wait()
		tp := twoPoint(m, []harness.Point{{CtxReq: 512, Tokens: 512}}, harness.FlushNonce)
		tp.Flush = harness.FlushPolicy{Retries: 5, RetryWait: 50e6}
		row := run(t, tp).Rows[0]
		if got, want := row.Verdict.String(), "ok (1 of 2 flushes were refused at first and accepted on a retry, after at most 4 tries)"; got != want {
			t.Errorf("verdict: got %q, want %q", got, want)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// Against a server without /sim/ (a real SGLang) the truth columns are
// absent, times are wall seconds, and the checks run the same.
func TestServerWithoutSim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{Profile: mocktest.Profile(t, "kimi-k2.6-rtx6000")})
		h := m.Handler()
		real := mocktest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(r.URL.Path, "/sim/") {
				http.NotFound(w, r)
				return
			}
			h.ServeHTTP(w, r)
		}))
		defer real.Close()
		tp := twoPoint(m, originalPoints[:1], harness.Naive, harness.FlushNonce)
		tp.Client = &harness.Client{HTTP: real.Client, BaseURL: real.URL, Backend: harness.SGLang}
		rep := run(t, tp)
		if rep.Server.Mock != "" || rep.Server.Speedup != 1 {
			t.Fatalf("server: %+v", rep.Server)
		}
		for _, row := range rep.Rows {
			if row.Truth != nil || row.Runs[0].A.Truth != nil {
				t.Errorf("%s: truth %+v without /sim/", row.Method, row.Truth)
			}
		}
		// Without /sim/ the speculative rounds come from the server's own
		// spec_verify_ct, and the accept length of the suggested b from them.
		if !strings.HasPrefix(rep.Rows[0].Verdict.String(), "POISONED: leg b reused 1406 of 1407") ||
			!strings.HasPrefix(rep.Rows[1].Verdict.String(), "SUSPECT: b-a = 16: only 3 speculative rounds") {
			t.Errorf("verdicts: %s / %s", rep.Rows[0].Verdict, rep.Rows[1].Verdict)
		}
		var table bytes.Buffer
		rep.WriteTable(&table)
		if strings.Contains(table.String(), "ttft_err") || !strings.Contains(table.String(), "no /sim/ (no truth columns); times in wall seconds") {
			t.Errorf("table:\n%s", table.String())
		}
	})
}

// A server launched with --api-key gets the key on every route the
// harness uses; without it the run stops at the first request.
func TestAPIKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{APIKey: "secret"})
		tp := twoPoint(m, []harness.Point{{CtxReq: 256, Tokens: 256}}, harness.FlushNonce)
		if _, err := tp.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "HTTP 401") {
			t.Fatalf("without the key: got %v, want HTTP 401", err)
		}
		tp.Client.APIKey = "secret"
		if row := run(t, tp).Rows[0]; row.Verdict.String() != "ok" || row.Truth == nil {
			t.Errorf("with the key: verdict %q, truth %v", row.Verdict, row.Truth)
		}
	})
}

// flushRace answers as real SGLang does right after a response: a flush
// that directly follows a /generate is refused with SGLang's text (its
// overlap scheduler is not idle yet); the next one goes through.
func flushRace(h http.Handler) http.Handler {
	var mu sync.Mutex
	afterResponse := false
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		refuse := r.URL.Path == "/flush_cache" && afterResponse
		switch r.URL.Path {
		case "/generate":
			afterResponse = true
		case "/flush_cache":
			afterResponse = false
		}
		mu.Unlock()
		if refuse {
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, "Flush cache failed.\n")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Against SGLang's flush race: a harness that retries is ok and says so;
// the script that tries once reports SGLang's text, and its unflushed leg
// b is named for what it is.
func TestFlushRace(t *testing.T) {
	for _, tt := range []struct {
		retries int
		want    string
	}{
		{1, "ok (2 of 2 flushes were refused at first and accepted on a retry, after at most 2 tries)"},
		{0, `POISONED: leg b reused 511 of 512 prompt tokens (cached_tokens); flush before leg a refused (1 try): HTTP 400 "Flush cache failed."; flush before leg b refused (1 try): HTTP 400 "Flush cache failed."`},
	} {
		synctest.Test(t, func(t *testing.T) {
			m := mocktest.Start(t, api.Config{})
			srv := mocktest.NewServer(flushRace(m.Handler()))
			defer srv.Close()
			tp := twoPoint(m, []harness.Point{{CtxReq: 512, Tokens: 512}}, harness.FlushMethod)
			tp.Client = &harness.Client{HTTP: srv.Client, BaseURL: srv.URL, Backend: harness.SGLang}
			tp.Flush = harness.FlushPolicy{Retries: tt.retries, RetryWait: 1e6}
			if got := run(t, tp).Rows[0].Verdict.String(); got != tt.want {
				t.Errorf("%d retries: got %q, want %q", tt.retries, got, tt.want)
			}
		})
	}
}

// A script that flushes only between its legs is clean on a fresh server;
// run again on the same server, its leg a finds the prompt and output the
// last leg b left in the cache: t_a is a cached TTFT, t_b a cold one, and
// the decode figure comes out defined and too low (the prefill is in t_b - t_a). The verdict names
// leg a's reuse. Validation refuses the option without a flush method.
func TestFlushOnlyBetweenLegs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{})
		tp := twoPoint(m, []harness.Point{{CtxReq: 1024, Tokens: 1024}}, harness.FlushMethod)
		tp.FlushOnlyBetweenLegs = true
		first := run(t, tp).Rows[0]
		if first.Verdict.String() != "ok" || first.Runs[0].A.Flush != nil || first.Runs[0].B.Flush == nil {
			t.Fatalf("first run: verdict %q, flush a %v, flush b %v; want ok, none before a, one before b",
				first.Verdict, first.Runs[0].A.Flush, first.Runs[0].B.Flush)
		}
		second := run(t, tp).Rows[0]
		want := "POISONED: leg a reused 1023 of 1024 prompt tokens (cached_tokens)"
		if got := second.Verdict.String(); got != want {
			t.Errorf("second run: verdict %q, want %q", got, want)
		}
		if second.DecodeTPS == nil || *second.Truth.DecodeBias > -0.2 {
			t.Errorf("second run: decode %v, bias %v; want defined and more than 20 %% low", *second.DecodeTPS, *second.Truth.DecodeBias)
		}
		var buf bytes.Buffer
		if err := (&harness.Report{Method: "twopoint", Rows: []harness.Row{second}}).WriteTable(&buf); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(buf.String(), "method flush: POST /flush_cache between the legs only (none before leg a), same prompt") {
			t.Errorf("table title: got\n%s", buf.String())
		}
		tp.Methods = []harness.Method{harness.NonceMethod}
		if _, err := tp.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "sends no flush") {
			t.Errorf("nonce with flush only between legs: got %v, want a refusal", err)
		}
	})
}

// A flush timeout that is not a number of seconds is refused before anything
// is sent (NaN passes a plain < 0 check).
func TestFlushTimeoutMustBeANumber(t *testing.T) {
	for _, timeout := range []float64{math.NaN(), math.Inf(1), -1} {
		tp := &harness.TwoPoint{Points: []harness.Point{{CtxReq: 512, Tokens: 512}}, A: 1, B: 17, Repeat: 1,
			Methods: []harness.Method{harness.FlushNonce}, NoncePosition: harness.NonceStart,
			Options: harness.Options{Flush: harness.FlushPolicy{Timeout: timeout}}}
		if err := tp.Validate(); err == nil || !strings.Contains(err.Error(), "timeout a number") {
			t.Errorf("timeout %v: got %v, want it refused", timeout, err)
		}
	}
}

// On a server with large pages whose OpenAI routes report null for 0
// cached tokens, the floor probe still learns that the server reports
// them: its repeat reuses whole pages.
func TestSharedFloorWithLargePages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mocktest.Profile(t, "default")
		p.PageSize = 64
		m := mocktest.Start(t, api.Config{Profile: p, EnableCacheReport: true})
		tp := twoPoint(m, []harness.Point{{CtxReq: 512, Tokens: 512}}, harness.NonceMethod)
		tp.Client.Backend = harness.OpenAI
		rep := run(t, tp)
		if rep.Server.SharedFloor != 0 || rep.Rows[0].Verdict.String() != "ok" || rep.Rows[0].CachedB == nil {
			t.Fatalf("got floor %d, verdict %q; want floor 0 (the server reports cached tokens) and ok", rep.Server.SharedFloor, rep.Rows[0].Verdict)
		}
	})
}

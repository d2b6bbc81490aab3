package harness_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglmock/sglmock/harness"
	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
)

// proxied starts a mock and the recording proxy in front of it.
func proxied(t *testing.T, cfg api.Config) (*mocktest.Mock, *harness.Recorder, *mocktest.Server) {
	t.Helper()
	m := mocktest.Start(t, cfg)
	rec, err := harness.NewRecorder(m.URL, m.HTTP.Transport)
	if err != nil {
		t.Fatal(err)
	}
	ps := mocktest.NewServer(rec)
	t.Cleanup(ps.Close)
	return m, rec, ps
}

func auditUpstream(t *testing.T, rec *harness.Recorder, m *mocktest.Mock, opt harness.AuditOptions) *harness.AuditReport {
	t.Helper()
	next := counter()
	opt.NewID = func() string { return "upstream-" + next() }
	rep, err := harness.AuditUpstream(context.Background(), rec, client(m), opt)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// verdicts are each request's rid, pattern and level.
func verdicts(rep *harness.AuditReport) []string {
	var out []string
	for _, r := range rep.Requests {
		out = append(out, fmt.Sprintf("%s %s %s", r.RID, r.Pattern, r.Verdict.Level()))
	}
	return out
}

// Through the recording proxy, a run gets the same verdicts from the
// server's own cache reports as the mock gives from its truth: the
// warm-up's repeat, the near-repeat, the shared prefixes of a
// shared-system-prompt dataset under --allow-shared-prefix auto. Its
// impacts come from a prefill cost fitted to the proxy's timings (exact on
// virtual time, so the fit finds the profile's cost per token).
func TestProxyGivesTheMocksVerdicts(t *testing.T) {
	streamed := func(l load) load { l.stream = true; return l }
	tests := []struct {
		name string
		load load
		opt  harness.AuditOptions
		// fit: enough requests for a prefill cost to be fitted to their
		// timings.
		fit bool
	}{
		{"bench_serving warm-up", streamed(load{route: "/generate", warmup: true, prompts: randomPrompts(20, 1), output: 64}), harness.AuditOptions{}, true},
		{"vLLM test prompt on completions", streamed(load{route: "/v1/completions", warmup: true, prompts: randomPrompts(20, 2), output: 32}), harness.AuditOptions{}, true},
		{"shared system prompts, auto", streamed(load{route: "/generate", warmup: true, prompts: sharedPrefixPrompts(2, 4), output: 16}),
			harness.AuditOptions{AllowSharedPrefix: harness.SharedPrefixAllowance{Auto: true}}, true},
		{"shared system prompts, 0", streamed(load{route: "/generate", warmup: true, prompts: sharedPrefixPrompts(2, 4), output: 16}), harness.AuditOptions{}, true},
		{"suffix nonce", streamed(load{route: "/generate", prompts: []string{randomPrompts(1, 5)[0] + " Qwxzy Vbnmk", randomPrompts(1, 5)[0] + " Plokij Uhygt"}, output: 16}),
			harness.AuditOptions{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m, rec, ps := proxied(t, api.Config{EnableCacheReport: true})
				tt.load.run(t, ps)
				direct := audit(t, m, tt.opt)
				through := auditUpstream(t, rec, m, tt.opt)
				if got, want := verdicts(through), verdicts(direct); !slices.Equal(got, want) {
					t.Fatalf("through the proxy %q\nagainst the mock %q\n%s", got, want, text(t, through))
				}
				if fitted := through.ImpactFrom == harness.ImpactTimingFit; !through.Checked || fitted != tt.fit || fitted != (through.CacheEffect != nil) {
					t.Fatalf("checked %v, impact from %s, effect %v: want checked, fitted %v\n%s", through.Checked, through.ImpactFrom, through.CacheEffect, tt.fit, text(t, through))
				}
				for i, r := range through.Requests {
					d := direct.Requests[i]
					if r.PromptTokens != d.PromptTokens || r.CachedTokens != d.CachedTokens || r.Route != d.Route || *r.TTFT != *d.TTFT || r.E2E != d.E2E {
						t.Errorf("%s: through the proxy %d/%d tokens on %s, ttft %v, e2e %v; the mock's truth %d/%d on %s, %v, %v",
							r.RID, r.CachedTokens, r.PromptTokens, r.Route, *r.TTFT, r.E2E, d.CachedTokens, d.PromptTokens, d.Route, *d.TTFT, d.E2E)
					}
				}
			})
		})
	}
}

// A server that reports no cached tokens (SGLang's OpenAI routes without
// --enable-cache-report) leaves the run unchecked, naming the flag.
func TestProxyServerWithoutCacheReport(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, rec, ps := proxied(t, api.Config{})
		load{route: "/v1/completions", warmup: true, prompts: randomPrompts(4, 1), output: 8}.run(t, ps)
		rep := auditUpstream(t, rec, m, harness.AuditOptions{})
		want := "SUSPECT: 5 of 5 requests came back without cached_tokens, so their reuse was not checked: SGLang reports them in /generate's meta_info, and on its OpenAI routes only when started with --enable-cache-report"
		if rep.Checked || !strings.HasPrefix(rep.Verdict.String(), want) || rep.Floors[0].Floor != -1 {
			t.Fatalf("checked %v, floors %+v, verdict %q: want unchecked and %q", rep.Checked, rep.Floors, rep.Verdict, want)
		}
		// Nothing was checked of any request, the warm-up's repeat
		// included: each is unchecked, in the JSON and in the table.
		for _, r := range rep.Requests {
			if got := r.Verdict.String(); got != "unchecked: the server reported no cached tokens for it: its reuse was not checked" {
				t.Errorf("%s: %q, want unchecked", r.RID, got)
			}
		}
		var js bytes.Buffer
		if err := rep.WriteJSON(&js); err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(js.String(), `"text": "unchecked: `); n != 5 || strings.Contains(js.String(), `"level": "ok"`) {
			t.Errorf("the JSON has %d requests unchecked, want 5 and none ok:\n%s", n, js.String())
		}
		if out := text(t, rep); strings.Count(out, "/v1/completions") < 5 || !strings.Contains(out, " unchecked\n") {
			t.Errorf("the table does not list the 5 unchecked requests:\n%s", out)
		}
	})
}

// A stream passes through the proxy event by event: the upstream sends
// its second event only once the client has the first, which a buffering
// proxy would never deliver (the bubble would deadlock).
func TestProxyStreamsUnbuffered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		got := make(chan struct{})
		upstream := mocktest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, `data: {"text": "a", "meta_info": {"id": "x", "prompt_tokens": 5, "completion_tokens": 1, "cached_tokens": 0}}`+"\n\n")
			w.(http.Flusher).Flush()
			<-got
			io.WriteString(w, `data: {"text": "ab", "meta_info": {"id": "x", "prompt_tokens": 5, "completion_tokens": 2, "cached_tokens": 0}}`+"\n\ndata: [DONE]\n\n")
		}))
		defer upstream.Close()
		rec, err := harness.NewRecorder(upstream.URL, upstream.Transport)
		if err != nil {
			t.Fatal(err)
		}
		ps := mocktest.NewServer(rec)
		defer ps.Close()
		resp, err := ps.Client.Post(ps.URL+"/generate", "application/json", strings.NewReader(`{"text": "hello", "stream": true}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		if line, err := br.ReadString('\n'); err != nil || !strings.Contains(line, `"completion_tokens": 1`) {
			t.Fatalf("first line %q, %v", line, err)
		}
		close(got)
		rest, _ := io.ReadAll(br)
		if !strings.Contains(string(rest), "[DONE]") {
			t.Fatalf("rest of the stream: %q", rest)
		}
	})
}

// An answer line past the proxy's bound is forwarded whole but not read:
// its request is SUSPECT, never a verdict on a guess.
func TestProxyBoundsWhatItReads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		long := strings.Repeat("x", 5<<20)
		upstream := mocktest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			if !strings.Contains(string(b), "hello") {
				// A floor probe.
				io.WriteString(w, `{"text": "a", "meta_info": {"prompt_tokens": 800, "completion_tokens": 1, "cached_tokens": 0}}`)
				return
			}
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, `data: {"text": "`+long+`", "meta_info": {"prompt_tokens": 5, "completion_tokens": 1, "cached_tokens": 0}}`+"\n\ndata: [DONE]\n\n")
		}))
		defer upstream.Close()
		rec, err := harness.NewRecorder(upstream.URL, upstream.Transport)
		if err != nil {
			t.Fatal(err)
		}
		ps := mocktest.NewServer(rec)
		defer ps.Close()
		code, body, _ := ps.Do(t, "POST", "/generate", `{"rid": "big", "text": "hello", "stream": true}`)
		if code != 200 || len(body) < len(long) {
			t.Fatalf("got %d and %d bytes, want the whole stream", code, len(body))
		}
		rep, err := harness.AuditUpstream(context.Background(), rec, &harness.Client{HTTP: upstream.Client, BaseURL: upstream.URL, Backend: harness.SGLang}, harness.AuditOptions{NewID: counter()})
		if err != nil {
			t.Fatal(err)
		}
		want := "unchecked: its answer could not be read (HTTP 200: compressed, or a line or body past the proxy's bound)"
		if got := rep.Requests[0].Verdict.String(); got != want || rep.Checked {
			t.Fatalf("got %q (checked %v), want %q, unchecked", got, rep.Checked, want)
		}
	})
}

// Counts no server can report are SUSPECT through the proxy too, with the
// numbers, and leave the run unchecked.
func TestProxyImpossibleCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		upstream := mocktest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			if strings.Contains(string(b), "hello") {
				io.WriteString(w, `{"text": "a", "meta_info": {"id": "odd", "prompt_tokens": 100, "completion_tokens": 1, "cached_tokens": 1000000000}}`)
				return
			}
			io.WriteString(w, `{"text": "a", "meta_info": {"prompt_tokens": 800, "completion_tokens": 1, "cached_tokens": 0}}`)
		}))
		defer upstream.Close()
		rec, err := harness.NewRecorder(upstream.URL, upstream.Transport)
		if err != nil {
			t.Fatal(err)
		}
		ps := mocktest.NewServer(rec)
		defer ps.Close()
		ps.Do(t, "POST", "/generate", `{"text": "hello"}`)
		rep, err := harness.AuditUpstream(context.Background(), rec, &harness.Client{HTTP: upstream.Client, BaseURL: upstream.URL, Backend: harness.SGLang}, harness.AuditOptions{NewID: counter()})
		if err != nil {
			t.Fatal(err)
		}
		want := "SUSPECT: the server reported impossible counts: cached_tokens 1000000000 of a 100-token prompt"
		if got := rep.Requests[0].Verdict.String(); got != want || rep.Requests[0].RID != "odd" || rep.Checked {
			t.Fatalf("%s: got %q, checked %v; want %q, unchecked", rep.Requests[0].RID, got, rep.Checked, want)
		}
	})
}

// A vLLM that could not reset its prefix cache answers 200 {"success":
// false}, and a server that answers a flush with megabytes says nothing
// to take at its word: the proxy records either as a refused flush, as
// bench's own flushes do, and the repeat it let through says so.
func TestProxyRefusedResetWithStatus200(t *testing.T) {
	for _, tt := range []struct {
		name    string
		answer  string
		outcome string
	}{
		{"success false", `{"success": false}`, `HTTP 200 {"success": false}`},
		{"an answer of 2 MiB", strings.Repeat("x", 2<<20), "HTTP 200 " + strings.Repeat("x", 64) + "... (2097152 bytes: longer than any flush answer can be)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := mocktest.StartBehind(t, api.Config{}, func(h http.Handler) http.Handler {
					return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						if r.URL.Path == "/reset_prefix_cache" {
							io.WriteString(w, tt.answer)
							return
						}
						h.ServeHTTP(w, r)
					})
				})
				rec, err := harness.NewRecorder(m.URL, m.HTTP.Transport)
				if err != nil {
					t.Fatal(err)
				}
				ps := mocktest.NewServer(rec)
				defer ps.Close()
				prompt := strings.Repeat("the same prompt of many words ", 60)
				send := func(rid string) {
					body := fmt.Sprintf(`{"rid": %q, "text": %q, "sampling_params": {"max_new_tokens": 4}}`, rid, prompt)
					if code, resp, _ := ps.Do(t, "POST", "/generate", body); code != 200 {
						t.Fatalf("%d %s", code, resp)
					}
				}
				send("warmup")
				if code, resp, _ := ps.Do(t, "POST", "/reset_prefix_cache", ""); code != 200 {
					t.Fatalf("reset: %d %.100s", code, resp)
				}
				send("measured")
				rep := auditUpstream(t, rec, m, harness.AuditOptions{})
				if len(rep.Flushes) != 1 || rep.Flushes[0].OK || rep.Flushes[0].Outcome != tt.outcome {
					t.Fatalf("flushes %+v: want one refused, %q", rep.Flushes, tt.outcome)
				}
				if v := rep.Requests[1].Verdict.String(); !strings.Contains(v, `the flush between them was refused (`) {
					t.Errorf("measured: %q, want the refused flush named", v)
				}
			})
		})
	}
}

// concurrentLoad sends the load's warm-up, then its prompts from workers
// at once, as a load tool at --max-concurrency does.
func concurrentLoad(t *testing.T, s server, l load, workers int) {
	t.Helper()
	send := func(prompt, rid string, output int) {
		if code, body, _ := s.Do(t, "POST", l.route, l.body(prompt, rid, output)); code != 200 {
			t.Errorf("%s: %d %s", rid, code, body)
		}
	}
	send(l.prompts[0], "warmup", min(l.output, 32))
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				send(l.prompts[i], fmt.Sprintf("req-%02d", i), l.output)
			}
		})
	}
	for i := range l.prompts {
		next <- i
	}
	close(next)
	wg.Wait()
}

// Under queueing (4 requests in flight at once) a TTFT holds the wait in
// the queue and the batch it shared, which a fit would put on the prompt's
// tokens: no request after the first met an idle server, so no cost is
// fitted from them and the impact is the share of the prompt the cache
// served, said so. With the server's own prefill times (SGLang's meta_info
// under --enable-metrics) the fit is made from each prefill batch, and
// the warm-up's repeat comes within a few points of the model's impact
// (the held-out fit from every TTFT was 4 times off).
func TestProxyFitUnderQueueing(t *testing.T) {
	for _, metrics := range []bool{false, true} {
		t.Run(fmt.Sprint("metrics ", metrics), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := api.Config{Profile: mocktest.Profile(t, "llama-8b-eagle3-h100"), EnableMetrics: metrics, EnableCacheReport: true}
				m, rec, ps := proxied(t, cfg)
				concurrentLoad(t, ps, load{route: "/generate", stream: true, prompts: randomPrompts(20, 1), output: 32}, 4)
				rep := auditUpstream(t, rec, m, harness.AuditOptions{})
				model := request(t, audit(t, m, harness.AuditOptions{}), "req-00")
				r := request(t, rep, "req-00")
				if !metrics {
					want := "no prefill cost could be fitted: 1 of 21 streamed requests met an idle server with cached tokens reported, where 3 of two sizes computed or more are needed"
					if rep.ImpactFrom != harness.ImpactTokenShare || !strings.HasPrefix(rep.ImpactDetail, want) || r.ImpactRange != nil {
						t.Errorf("impact from %s (%s), range %v; want the token share: %q", rep.ImpactFrom, rep.ImpactDetail, r.ImpactRange, want)
					}
					return
				}
				if rep.ImpactFrom != harness.ImpactTimingFit || !strings.Contains(rep.ImpactDetail, "fitted to the server's own prefill times (meta_info, --enable-metrics) of ") {
					t.Fatalf("impact from %s: %s", rep.ImpactFrom, rep.ImpactDetail)
				}
				if r.Pattern != harness.Repeat || r.Verdict.Level() != harness.Poisoned || math.Abs(r.Impact-model.Impact) > 10 || r.ImpactRange == nil {
					t.Errorf("req-00: %s %s, impact %.1f %% (range %v), the model's %.1f %%", r.Pattern, r.Verdict.Level(), r.Impact, r.ImpactRange, model.Impact)
				}
			})
		})
	}
}

// Without the server's times, the fit is made from the requests that met
// an idle server only, and says how many: a sequential run with a burst
// of four at once at its end fits from the warm-up and the ten sent one at
// a time.
func TestProxyFitFromIdleRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, rec, ps := proxied(t, api.Config{EnableCacheReport: true})
		prompts := randomPrompts(14, 2)
		load{route: "/generate", stream: true, warmup: true, prompts: prompts[:10], output: 8}.run(t, ps)
		burst := load{route: "/generate", stream: true, output: 8}
		var wg sync.WaitGroup
		for i, p := range prompts[10:] {
			wg.Go(func() { ps.Do(t, "POST", burst.route, burst.body(p, fmt.Sprintf("burst-%d", i), 8)) })
		}
		wg.Wait()
		rep := auditUpstream(t, rec, m, harness.AuditOptions{})
		if want := "a computed prompt token and "; rep.ImpactFrom != harness.ImpactTimingFit || !strings.Contains(rep.ImpactDetail, want) ||
			!strings.HasSuffix(rep.ImpactDetail, "fitted to the TTFT the proxy saw of 11 of 15 streamed requests, those that met an idle server") {
			t.Errorf("impact from %s: %s", rep.ImpactFrom, rep.ImpactDetail)
		}
	})
}

// A reuse whose impact is within the fit's error of --min-impact is
// neither POISONED nor ok: it is SUSPECT as uncertain, and leaves the run
// unchecked (exit 3) rather than passing or failing it.
func TestProxyImpactWithinTheFitsError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, rec, ps := proxied(t, api.Config{Profile: mocktest.Profile(t, "llama-8b-eagle3-h100"), EnableMetrics: true, EnableCacheReport: true})
		concurrentLoad(t, ps, load{route: "/generate", stream: true, prompts: randomPrompts(20, 1), output: 32}, 4)
		r := request(t, auditUpstream(t, rec, m, harness.AuditOptions{}), "req-00")
		if r.ImpactRange == nil || r.ImpactRange[0] >= r.Impact || r.ImpactRange[1] <= r.Impact {
			t.Fatalf("req-00: impact %v, range %v", r.Impact, r.ImpactRange)
		}
		// Another audit of the same recording, with floor probes of its own.
		next := counter()
		rep, err := harness.AuditUpstream(context.Background(), rec, client(m), harness.AuditOptions{MinImpact: r.Impact, NewID: func() string { return "again-" + next() }})
		if err != nil {
			t.Fatal(err)
		}
		u := request(t, rep, "req-00")
		want := fmt.Sprintf("; by the timing fit's 95 %% interval %.1f-%.1f %%, across --min-impact %s %%: uncertain", r.ImpactRange[0], r.ImpactRange[1], strconv.FormatFloat(r.Impact, 'g', -1, 64))
		if !u.Uncertain || u.Material || u.Verdict.Level() != harness.Suspect || !strings.HasSuffix(u.Verdict.String(), want) {
			t.Errorf("req-00 at --min-impact %v: %q, want SUSPECT ending %q", r.Impact, u.Verdict, want)
		}
		if rep.Checked || rep.Verdict.Level() != harness.Suspect || !strings.Contains(rep.Verdict.String(), "1 request reused a prefix whose impact is within the timing fit's error") {
			t.Errorf("run: checked %v, %q", rep.Checked, rep.Verdict)
		}
	})
}

// A server that stops answering once the command is done does not hold
// the audit: its floor probes get 10 s in all, past which the floors are
// left unmeasured and the report says so.
func TestProxyDeadUpstreamEndsTheAudit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dead, stop := false, make(chan struct{})
		upstream := mocktest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if dead {
				select { // accepts, never answers
				case <-r.Context().Done():
				case <-stop:
				}
				return
			}
			io.ReadAll(r.Body)
			io.WriteString(w, `{"text": "a", "meta_info": {"id": "x", "prompt_tokens": 10, "completion_tokens": 1, "cached_tokens": 0}}`)
		}))
		defer upstream.Close()
		rec := recordOne(t, upstream)
		dead = true
		start := time.Now()
		rep, err := harness.AuditUpstream(context.Background(), rec, &harness.Client{HTTP: upstream.Client, BaseURL: upstream.URL, Backend: harness.SGLang},
			harness.AuditOptions{NewID: counter()})
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took != 10*time.Second || rep.Checked || !strings.Contains(rep.Verdict.String(), "did not answer audit's floor probes within 10s") {
			t.Fatalf("took %v, checked %v, verdict %q; want 10 s and the unmeasured floors said", took, rep.Checked, rep.Verdict.String())
		}
		close(stop)
	})
}

// A floor probe the server refuses leaves the floors unmeasured, said in
// the report, instead of ending the audit without one.
func TestProxyFailedProbeKeepsTheReport(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		probing := false
		upstream := mocktest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.ReadAll(r.Body)
			if probing {
				http.Error(w, "no", http.StatusInternalServerError)
				return
			}
			io.WriteString(w, `{"text": "a", "meta_info": {"id": "x", "prompt_tokens": 10, "completion_tokens": 1, "cached_tokens": 0}}`)
		}))
		defer upstream.Close()
		rec := recordOne(t, upstream)
		probing = true
		rep, err := harness.AuditUpstream(context.Background(), rec, &harness.Client{HTTP: upstream.Client, BaseURL: upstream.URL, Backend: harness.SGLang},
			harness.AuditOptions{NewID: counter()})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Requests) != 1 || rep.Checked || !strings.Contains(rep.Verdict.String(), "audit's floor probes failed (") {
			t.Fatalf("%d requests, checked %v, verdict %q; want the request reported and the failed probes said", len(rep.Requests), rep.Checked, rep.Verdict.String())
		}
	})
}

// recordOne puts the recording proxy in front of upstream and sends one
// request through it.
func recordOne(t *testing.T, upstream *mocktest.Server) *harness.Recorder {
	t.Helper()
	rec, err := harness.NewRecorder(upstream.URL, upstream.Transport)
	if err != nil {
		t.Fatal(err)
	}
	ps := mocktest.NewServer(rec)
	t.Cleanup(ps.Close)
	if code, body, _ := ps.Do(t, "POST", "/generate", `{"rid": "a", "text": "hello"}`); code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	return rec
}

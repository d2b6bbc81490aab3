package harness_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
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
		want := "SUSPECT: its answer could not be read (HTTP 200: compressed, or a line or body past the proxy's bound)"
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

package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
	"github.com/sglmock/sglmock/sim"
)

// fakeSim is a server that says it is sglmock and reports what it is given
// under /sim/requests.
func fakeSim(requests string) http.Handler {
	mux := http.NewServeMux()
	answer := func(path, body string) {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) })
	}
	answer("/sim/profile", `{"name": "fake", "speedup": 1, "profile": {}}`)
	answer("/sim/flushes", `[]`)
	answer("/sim/stats", `{"requests": 3}`)
	answer("/generate", `{"text": "x", "meta_info": {"prompt_tokens": 800, "cached_tokens": 0, "completion_tokens": 1}}`)
	answer("/sim/requests/", `{"cached_tokens": 0}`)
	mux.HandleFunc("/sim/requests", func(w http.ResponseWriter, r *http.Request) {
		if requests == "endless" {
			w.Write([]byte("["))
			for {
				if _, err := w.Write([]byte(strings.Repeat(" ", 4096))); err != nil {
					return
				}
			}
		}
		io.WriteString(w, requests)
	})
	return mux
}

// Counts no server can report are SUSPECT with the numbers, never judged
// as reuse nor counted in the cache's effect, and leave the run unchecked.
func TestAuditImpossibleCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := mocktest.NewServer(fakeSim(`[
			{"rid": "neg-cached", "prompt_tokens": 100, "cached_tokens": -5, "e2e_s": 1},
			{"rid": "huge-cached", "prompt_tokens": 100, "cached_tokens": 1000000000, "e2e_s": 1},
			{"rid": "neg-prompt", "prompt_tokens": -3, "cached_tokens": 0, "e2e_s": 1}]`))
		defer s.Close()
		rep, err := Audit(context.Background(), &Client{HTTP: s.Client, BaseURL: s.URL, Backend: SGLang}, AuditOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := []string{
			"SUSPECT: the server reported impossible counts: cached_tokens -5 of a 100-token prompt",
			"SUSPECT: the server reported impossible counts: cached_tokens 1000000000 of a 100-token prompt",
			"SUSPECT: the server reported impossible counts: prompt_tokens -3",
		}
		for i, r := range rep.Requests {
			if got := r.Verdict.String(); got != want[i] || r.Pattern != "" {
				t.Errorf("%s: got %q (pattern %q), want %q", r.RID, got, r.Pattern, want[i])
			}
		}
		if got := rep.Verdict.String(); got != "SUSPECT: 3 requests carry impossible counts from the server and were not judged" || rep.CacheEffect != nil || rep.Checked {
			t.Errorf("verdict %q, cache effect %+v, checked %v: want SUSPECT, no effect, unchecked (exit 3)", got, rep.CacheEffect, rep.Checked)
		}
	})
}

// A /sim/ answer longer than the bound is an error, not an allocation.
func TestAuditBoundsSimAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := mocktest.NewServer(fakeSim("endless"))
		defer s.Close()
		c := &Client{HTTP: s.Client, BaseURL: s.URL, Backend: SGLang, maxAnswer: 1 << 16}
		_, err := Audit(context.Background(), c, AuditOptions{})
		if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "GET /sim/requests: ") {
			t.Fatalf("got %v, want the bound's error", err)
		}
	})
}

// Past the bound on the request bodies kept for after the run, each body
// is read at once and only its prompt's head kept: a repeat is still
// found by the whole prompt's hash.
func TestProxyPastItsBodyBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{})
		rec, err := NewRecorder(m.URL, m.HTTP.Transport)
		if err != nil {
			t.Fatal(err)
		}
		rec.maxRequestBytes = 0
		ps := mocktest.NewServer(rec)
		defer ps.Close()
		prompt := strings.Repeat("a long shared prompt of many words ", 400)
		for _, rid := range []string{"first", "again"} {
			body := fmt.Sprintf(`{"rid": %q, "text": %q, "stream": true, "sampling_params": {"max_new_tokens": 4}}`, rid, prompt)
			if code, resp, _ := ps.Do(t, "POST", "/generate", body); code != 200 {
				t.Fatalf("%d %s", code, resp)
			}
		}
		rep, err := AuditUpstream(context.Background(), rec, &Client{HTTP: m.Client, BaseURL: m.URL, Backend: SGLang}, AuditOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r := rep.Requests[1]; r.Pattern != Repeat || r.Source != "first" || len(rec.records[1].key) != promptHead {
			t.Fatalf("again: pattern %q from %q, key of %d bytes; want a repeat of first, a key of %d", r.Pattern, r.Source, len(rec.records[1].key), promptHead)
		}
	})
}

// Through the proxy, a measured request whose answer could not be read
// has no times: the tool's figures are put beside the others' only, and
// the report says so, instead of counting it as an E2E of 0.
func TestCompareToolLeavesOutUnreadAnswers(t *testing.T) {
	ttft := 0.1
	req := func(rid string, arrival, e2e float64) AuditRequest {
		r := AuditRequest{RequestSummary: sim.RequestSummary{RID: rid, Arrival: arrival, Finished: arrival + e2e, E2E: e2e, CompletionTokens: 5, PromptTokens: 50}}
		if e2e > 0 {
			r.TTFT = &ttft
		} else {
			r.Finished, r.CompletionTokens, r.PromptTokens = 0, 0, 0 // unread: nothing known
		}
		return r
	}
	rep := &AuditReport{Upstream: "http://gpu:30000", Speedup: 1,
		Requests: []AuditRequest{req("warmup", 0, 1), req("a", 1, 1), req("unread", 2, 0), req("b", 3, 3)}}
	res := &ToolResult{Tool: ToolSGLang, Completed: 3, Figures: map[string]float64{"mean_e2e_latency_ms": 2000, "total_output_tokens": 10}}
	tc, err := CompareTool(context.Background(), nil, rep, "out.jsonl", res)
	if err != nil {
		t.Fatal(err)
	}
	var e2e, output float64
	for _, f := range tc.Figures {
		switch f.Key {
		case "mean_e2e_latency_ms":
			e2e = f.Truth
		case "total_output_tokens":
			output = f.Truth
		}
	}
	if tc.Measured != 2 || e2e != 2000 || output != 10 || !slices.Contains(tc.NotCompared,
		"1 measured request without times or counts to read (an answer the proxy could not read, impossible counts): every figure covers the others only") {
		t.Fatalf("measured %d, mean E2E %v ms, output %v, not compared %q: want 2, 2000, 10 and the unread one said", tc.Measured, e2e, output, tc.NotCompared)
	}
}

// heldWriter passes an answer through and, once its bytes are out, holds
// the handler until released: the client has its whole answer while the
// proxy's handler has not returned.
type heldWriter struct {
	http.ResponseWriter
	out, release chan struct{}
}

func (w heldWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	w.ResponseWriter.(http.Flusher).Flush()
	select {
	case w.out <- struct{}{}:
		<-w.release
	default:
	}
	return n, err
}

func (w heldWriter) Flush() { w.ResponseWriter.(http.Flusher).Flush() }

// A run may end as soon as the client has its last answer, before the
// proxy's handler returns: the request's prompt is recorded by then, so
// that the repeat is found.
func TestProxyRecordsThePromptBeforeTheAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{})
		rec, err := NewRecorder(m.URL, m.HTTP.Transport)
		if err != nil {
			t.Fatal(err)
		}
		out, release := make(chan struct{}), make(chan struct{})
		held := false
		ps := mocktest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if held {
				w = heldWriter{w, out, release}
			}
			rec.ServeHTTP(w, r)
		}))
		defer ps.Close()
		body := `{"text": "the same prompt, twice over", "sampling_params": {"max_new_tokens": 2}}`
		if code, resp, _ := ps.Do(t, "POST", "/generate", body); code != 200 {
			t.Fatalf("%d %s", code, resp)
		}
		held = true
		done := make(chan struct{})
		go func() {
			defer close(done)
			ps.Do(t, "POST", "/generate", body)
		}()
		<-out
		<-done // the client has its whole answer; the handler is held
		got := rec.recording()
		close(release)
		if len(got.records) != 2 || got.records[1].hash == "" || got.records[1].hash != got.records[0].hash {
			t.Fatalf("the second request's prompt hash %q, the first's %q: want it recorded, the same", got.records[1].hash, got.records[0].hash)
		}
	})
}

// Identical prompts in flight together are copies, whichever the server
// served first: the first to arrive may be the one served from the other
// (SGLang queues a request when its tokenization ends), and its reuse is
// never a near-repeat. bench_serving's shape (two copies of the first
// prompt at once, then its measured run starting with that prompt) marks
// both copies as the tool's warm-up.
func TestClassifyCopiesServedInEitherOrder(t *testing.T) {
	req := func(rid string, arrival, finished float64, cached int, from string) AuditRequest {
		return AuditRequest{RequestSummary: sim.RequestSummary{RID: rid, PromptHash: "h0", PromptTokens: 2000, CachedTokens: cached,
			ReusedFrom: from, Arrival: arrival, Finished: finished}, CachedReported: true}
	}
	for _, tt := range []struct {
		name string
		rs   []AuditRequest
	}{
		{"the later served first", []AuditRequest{req("w1", 1.0, 2.0, 1999, "w2"), req("w2", 1.1, 1.9, 0, ""), req("r0", 3, 4, 1999, "w2")}},
		{"the first served first", []AuditRequest{req("w1", 1.0, 1.9, 0, ""), req("w2", 1.1, 2.0, 1999, "w1"), req("r0", 3, 4, 1999, "w1")}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rs := tt.rs
			markWarmUps(rs, 0, nil)
			classify(rs, 1)
			var got []string
			for _, r := range rs {
				got = append(got, fmt.Sprintf("%s %s from %q group %d warm-up %v", r.RID, r.Pattern, r.Source, r.Group, r.WarmUp))
			}
			copy := slices.IndexFunc(rs, func(r AuditRequest) bool { return r.CachedTokens > 0 && r.RID != "r0" })
			other := rs[1-copy].RID
			want := []string{
				fmt.Sprintf("%s  from \"\" group 0 warm-up true", other),
				fmt.Sprintf("%s copies from %q group 2 warm-up true", rs[copy].RID, other),
				"r0 repeat from \"w2\" group 0 warm-up false",
			}
			if copy == 0 {
				want[0], want[1] = want[1], want[0]
			}
			if !slices.Equal(got, want) {
				t.Errorf("got %q\nwant %q", got, want)
			}
		})
	}
}

// flushesBetween says what stood between a reuse and the request it reused:
// no flush, a refused one, one answered 200 that a DP rank refused, or an
// accepted one the reused tier survived (HiCache's storage).
func TestFlushesBetween(t *testing.T) {
	flushed := sim.Flush{At: 2, OK: true, Outcome: sim.OutcomeFlushed}
	busy := sim.Flush{At: 3, Outcome: "busy"}
	rankRefused := sim.Flush{At: 4, OK: true, Outcome: sim.OutcomeFlushed, Ranks: []sim.FlushRank{
		{Rank: 0, OK: true}, {Rank: 1, Outcome: "busy"}}}
	for _, tc := range []struct {
		name string
		fs   []sim.Flush
		want string
	}{
		{"none", nil, "; no flush between"},
		{"outside", []sim.Flush{{At: 9, OK: true}}, "; no flush between"},
		{"accepted", []sim.Flush{flushed}, "; after the flush at 2.000 s, which it survived"},
		{"refused", []sim.Flush{busy}, "; the flush between them was refused (3.000 s: busy)"},
		{"rank refused", []sim.Flush{rankRefused}, "; the flush between them was refused (4.000 s: answered 200, but rank 1 refused it)"},
		{"refused wins", []sim.Flush{flushed, busy}, "; the flush between them was refused (3.000 s: busy)"},
	} {
		if got := flushesBetween(tc.fs, 1, 5); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for the journal's writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Split(strings.TrimSuffix(s.b.String(), "\n"), "\n")
}

// The proxy reads each answer when it ends and keeps only its counts: what
// the answers in flight keep together is bounded (an answer that would
// pass the bound is forwarded, not read), nothing is kept once they end,
// and each request goes to the journal, as one JSON line, as soon as its
// answer has been read.
func TestProxyKeepsAnswersBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		text := strings.Repeat("x", 1<<20)
		hold := make(chan struct{})
		held := false
		upstream := mocktest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			meta := `"meta_info": {"id": "a", "prompt_tokens": 10, "completion_tokens": 5, "cached_tokens": 0}`
			if strings.Contains(string(b), `"stream": true`) {
				w.Header().Set("Content-Type", "text/event-stream")
				for range 3 {
					fmt.Fprintf(w, "data: {\"text\": %q, %s}\n\n", text[:256<<10], meta)
				}
				io.WriteString(w, "data: [DONE]\n\n")
				return
			}
			io.WriteString(w, `{"text": "`+text[:512<<10])
			if held {
				w.(http.Flusher).Flush()
				<-hold
			}
			io.WriteString(w, text[512<<10:]+`", `+meta+`}`)
		}))
		defer upstream.Close()
		rec, err := NewRecorder(upstream.URL, upstream.Transport)
		if err != nil {
			t.Fatal(err)
		}
		rec.answerLimit = 3 << 20
		var journal syncBuffer
		rec.SetJournal(&journal)
		ps := mocktest.NewServer(rec)
		defer ps.Close()
		for i := range 20 {
			body := fmt.Sprintf(`{"rid": "r%d", "text": "prompt %d", "stream": %v}`, i, i, i%2 == 1)
			if code, resp, _ := ps.Do(t, "POST", "/generate", body); code != 200 || len(resp) < 512<<10 {
				t.Fatalf("request %d: %d, %d bytes", i, code, len(resp))
			}
			synctest.Wait()
			if kept := rec.answerBytes.Load(); kept != 0 {
				t.Fatalf("after answer %d: %d bytes kept, want 0", i, kept)
			}
			if lines := journal.lines(); len(lines) != i+1 || !strings.Contains(lines[i], fmt.Sprintf(`"rid":"r%d"`, i)) ||
				!strings.Contains(lines[i], `"prompt_tokens":10,"completion_tokens":5,"cached_tokens":0`) {
				t.Fatalf("after answer %d the journal has %d lines, the last %q; want it written with the counts", i, len(lines), lines[len(lines)-1])
			}
		}
		// Eight whole answers of 1 MiB in flight at once, each holding
		// 2 MiB of buffer once past its first half: the bound takes one.
		held = true
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() { ps.Do(t, "POST", "/generate", fmt.Sprintf(`{"rid": "c%d", "text": "p"}`, i)) })
		}
		synctest.Wait()
		close(hold)
		wg.Wait()
		synctest.Wait()
		got := rec.recording()
		unread := 0
		for _, pr := range got.records[20:] {
			if v := pr.seen(); !v.readable {
				unread++
				if !strings.Contains(v.unread, "past the proxy's bound") {
					t.Errorf("%s: unread for %q", v.rid, v.unread)
				}
			}
		}
		if peak := rec.answerPeak.Load(); peak > rec.answerLimit || unread == 0 || unread == 8 || rec.answerBytes.Load() != 0 {
			t.Fatalf("peak %d bytes kept (bound %d), %d of 8 unread, %d kept after; want the bound kept, some read and some not, nothing kept after",
				peak, rec.answerLimit, unread, rec.answerBytes.Load())
		}
	})
}

// A request that arrived while the poisoned request's longer prefill would
// still have run would have waited for the rest of it: arriving 1 s into
// the 2 s it saved, its TTFT and E2E would have been 1 s longer, and the
// run's impact, an upper bound, counts it (the mean TTFT 66.7 % lower,
// not 57.1 %).
func TestRunImpactCountsArrivalsDuringTheSavedPrefill(t *testing.T) {
	ttft := func(x float64) *float64 { return &x }
	rs := []AuditRequest{
		{RequestSummary: sim.RequestSummary{RID: "poisoned", Arrival: 0, TTFT: ttft(1), E2E: 2}, Saved: 2},
		{RequestSummary: sim.RequestSummary{RID: "later", Arrival: 2, TTFT: ttft(0.5), E2E: 1}},
	}
	rs[0].Verdict.add(Poisoned, "a repeat")
	ri := runImpact(rs, 1)
	// As run: TTFT 1 and 0.5, E2E 2 and 1; without the reuse 3 and 1.5,
	// 4 and 2.
	if ri == nil || fmt.Sprintf("%.4f %.4f", ri.TTFT.Mean, ri.E2E.Mean) != fmt.Sprintf("%.4f %.4f", 100*1.5/2.25, 100*3.0/6) {
		t.Fatalf("run impact %+v: want the mean TTFT %.1f %% lower and the mean E2E %.1f %%", ri, 100*1.5/2.25, 100*3.0/6)
	}
}

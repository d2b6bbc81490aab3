package harness_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglmock/sglmock/harness"
	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/engine"
	"github.com/sglmock/sglmock/mockserver/mocktest"
)

// dpMock is the default profile on two DP ranks, with DP attention or
// without, and SGLang's overlap window off.
func dpMock(t *testing.T, attention bool) *mocktest.Mock {
	p := mocktest.Profile(t, "default")
	p.DPSize, p.EnableDPAttention, p.FlushBusyAfterFinishS = 2, attention, 0
	if attention {
		p.TPSize = 2
	}
	return mocktest.Start(t, api.Config{Profile: p})
}

// busy keeps DP rank r decoding, with a request of the server's own
// client, until the test aborts it.
func busy(t *testing.T, m *mocktest.Mock, r int) *engine.Stream {
	t.Helper()
	ids := make([]int32, 50)
	for i := range ids {
		ids[i] = int32(900 + i)
	}
	st, err := m.Engine().Submit(engine.Request{InputIDs: ids, MaxNewTokens: 30000, RoutedDPRank: &r})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	return st
}

// The naive method on two ranks: round robin puts leg b on the other rank,
// so it is cold and its figures are the truth; the row is SUSPECT all the
// same, for the next run may put both legs on one rank. The floor probes,
// pinned to rank 0, do not move the round robin: leg a takes rank 0.
func TestNaiveColdByPlacementIsNotClean(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := dpMock(t, true)
		rep := run(t, twoPoint(m, []harness.Point{{CtxReq: 1000, Tokens: 1000}}, harness.Naive, harness.FlushNonce))
		if rep.Server.DPRanks != 2 {
			t.Fatalf("server: %+v, want 2 DP ranks", rep.Server)
		}
		naive, fixed := rep.Rows[0], rep.Rows[1]
		a, b := naive.Runs[0].A.DPRank, naive.Runs[0].B.DPRank
		if a == nil || b == nil || *a != 0 || *b != 1 || *naive.CachedB != 0 {
			t.Fatalf("naive legs on ranks %v and %v, cached_b %v; want 0, 1 and cold", a, b, *naive.CachedB)
		}
		want := "SUSPECT: leg b ran on rank 1, leg a on rank 0: cold by placement, not by method (one more request between them, " +
			"from any client, puts both on one rank and poisons the row; use a nonce, or a flush)"
		if got := naive.Verdict.String(); got != want || *naive.Truth.DecodeErr != 0 {
			t.Fatalf("naive: %q (decode_err %v), want %q", got, *naive.Truth.DecodeErr, want)
		}
		// Leg b's placement moves the decode rate only: leg a gives TTFT
		// and the prefill rate whichever rank leg b ran on.
		fv := naive.FigureVerdicts
		if fv.TTFT.Level != harness.OK || fv.Prefill.Level != harness.OK || fv.Decode.Level != harness.Suspect {
			t.Errorf("naive figures: ttft %s, prefill %s, decode %s; want ok, ok, SUSPECT", fv.TTFT.Level, fv.Prefill.Level, fv.Decode.Level)
		}
		if got := fixed.Verdict.String(); got != "ok" {
			t.Fatalf("flush+nonce: %q, want ok", got)
		}
		// The floor probes ran on rank 0 only.
		for _, tr := range m.Engine().Truths() {
			if strings.HasPrefix(tr.RID, "floor-") && tr.DPRank != 0 {
				t.Fatalf("floor probe %s ran on rank %d", tr.RID, tr.DPRank)
			}
		}
	})
}

// Against a server that runs several ranks and says where a request ran
// (meta_info.dp_rank), the rank is read from the answer; on one rank there
// is none.
func TestGenerationReadsTheRank(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, tc := range []struct {
			m    *mocktest.Mock
			want []string
		}{{dpMock(t, false), []string{"0", "1", "0"}}, {mocktest.Start(t, api.Config{}), []string{"<nil>", "<nil>", "<nil>"}}} {
			c := client(tc.m)
			for i, want := range tc.want {
				g, err := c.Generate(context.Background(), harness.Prompt{Text: fmt.Sprintf("prompt %d", i)}, 1, "", false)
				if err != nil {
					t.Fatal(err)
				}
				got := "<nil>"
				if g.DPRank != nil {
					got = fmt.Sprint(*g.DPRank)
				}
				if got != want {
					t.Fatalf("request %d: rank %s, want %s", i+1, got, want)
				}
			}
		}
	})
}

// A flush that rank 0 takes while rank 1, busy, refuses is answered 200
// (SGLang answers with the first rank's answer); the harness checks every
// rank's answer in /sim/flushes and counts it refused, and leg b, which
// runs on rank 1, reuses what the flush left there.
func TestFlushIsVerifiedOnEveryRank(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := dpMock(t, false)
		tp := twoPoint(m, []harness.Point{{CtxReq: 500, Tokens: 500}}, harness.FlushMethod)
		tp.Flush = harness.FlushPolicy{Retries: 1, RetryWait: 100 * time.Millisecond}
		run(t, tp) // the prompt is now cached on both ranks
		load := busy(t, m, 1)
		tp.NewID = counter()
		rep := run(t, tp)
		load.Abort()
		row := rep.Rows[0]
		f := row.Runs[0].B.Flush
		last := f.Attempts[len(f.Attempts)-1]
		if len(f.Attempts) != 2 || last.Status != 200 || f.OK() || len(last.RefusedRanks) != 1 {
			t.Fatalf("flush before b: %+v", f)
		}
		for _, want := range []string{
			"flush before leg b answered HTTP 200 (the first DP rank's answer) but refused by rank 1 (Cache not flushed because there are pending requests; 1 running, 0 queued) (2 tries): those ranks' caches were not flushed",
			"leg b reused 499 of 500 prompt tokens (cached_tokens)",
		} {
			if !strings.Contains(row.Verdict.String(), want) {
				t.Fatalf("verdict %q lacks %q", row.Verdict.String(), want)
			}
		}
	})
}

// The audit reads each request's rank: a repeat that was cold only because
// it ran on another rank than the request it repeats is SUSPECT, and so is
// the run; a flush that a rank refused counts as refused.
func TestAuditColdByPlacement(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := dpMock(t, true)
		for _, rid := range []string{"first", "again"} {
			if code, body, _ := m.Do(t, "POST", "/generate", fmt.Sprintf(`{"text": %q, "rid": %q, "sampling_params": {"max_new_tokens": 4}}`,
				strings.Repeat("the same words again ", 100), rid)); code != 200 {
				t.Fatalf("%s: %d %s", rid, code, body)
			}
		}
		load := busy(t, m, 1)
		m.Do(t, "POST", "/flush_cache", "")
		load.Abort()
		rep := audit(t, m, harness.AuditOptions{})
		again := request(t, rep, "again")
		want := "SUSPECT: repeats rid first's prompt but ran on DP rank 1, rid first on rank 0: cold by placement, not by method"
		if got := again.Verdict.String(); got != want || *again.DPRank != 1 {
			t.Fatalf("again: %q (rank %v), want %q", got, again.DPRank, want)
		}
		for _, want := range []string{"1 requests repeated an earlier prompt and were cold only because the DP controller put them on another rank",
			"1 of 1 flushes were refused"} {
			if !strings.Contains(rep.Verdict.String(), want) {
				t.Fatalf("run verdict %q lacks %q", rep.Verdict.String(), want)
			}
		}
	})
}

// DPRanks reads /server_info's dp_size; a server without the route, or
// another backend, runs one.
func TestDPRanks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mocktest.Profile(t, "default")
		p.DPSize = 3
		for _, tc := range []struct {
			c    *harness.Client
			want int
		}{
			{client(mocktest.Start(t, api.Config{Profile: p})), 3},
			{client(mocktest.Start(t, api.Config{})), 1},
			{client(mocktest.StartBehind(t, api.Config{Profile: p}, mocktest.Without("/server_info"))), 1},
			{&harness.Client{BaseURL: "http://never.asked", Backend: harness.VLLM}, 1},
		} {
			got, err := tc.c.DPRanks(context.Background())
			if err != nil || got != tc.want {
				t.Fatalf("%s: got %d, %v; want %d", tc.c.BaseURL, got, err, tc.want)
			}
		}
	})
}

// Through the recording proxy in front of a real server, the rank comes
// from meta_info.dp_rank: the repeat on the other rank is SUSPECT there too.
func TestAuditUpstreamReadsTheRank(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mocktest.Profile(t, "default")
		p.DPSize, p.TPSize, p.EnableDPAttention = 2, 2, true
		m, rec, ps := proxied(t, api.Config{Profile: p})
		for _, rid := range []string{"first", "again"} {
			if code, body, _ := ps.Do(t, "POST", "/generate", fmt.Sprintf(`{"text": %q, "rid": %q, "sampling_params": {"max_new_tokens": 4}}`,
				strings.Repeat("the same words again ", 100), rid)); code != 200 {
				t.Fatalf("%s: %d %s", rid, code, body)
			}
		}
		rep := auditUpstream(t, rec, m, harness.AuditOptions{})
		again := request(t, rep, "again")
		if got := again.Verdict.String(); !strings.Contains(got, "cold by placement, not by method") || *again.DPRank != 1 {
			t.Fatalf("again: %q (rank %v), want cold by placement on rank 1", got, again.DPRank)
		}
	})
}

// Through the proxy, a server of two ranks that does not say which ran
// each request (no meta_info.dp_rank) leaves a cold repeat unplaced: it may
// be cold by placement, and neither it nor the run is ok.
func TestAuditUpstreamRankUnknown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mocktest.Profile(t, "default")
		p.DPSize, p.TPSize, p.EnableDPAttention = 2, 2, true
		m := mocktest.StartBehind(t, api.Config{Profile: p}, hideRank)
		rec, err := harness.NewRecorder(m.URL, m.HTTP.Transport)
		if err != nil {
			t.Fatal(err)
		}
		ps := mocktest.NewServer(rec)
		t.Cleanup(ps.Close)
		for _, rid := range []string{"first", "again"} {
			if code, body, _ := ps.Do(t, "POST", "/generate", fmt.Sprintf(`{"text": %q, "rid": %q, "sampling_params": {"max_new_tokens": 4}}`,
				strings.Repeat("the same words again ", 100), rid)); code != 200 {
				t.Fatalf("%s: %d %s", rid, code, body)
			}
		}
		rep := auditUpstream(t, rec, m, harness.AuditOptions{})
		again := request(t, rep, "again")
		want := "SUSPECT: repeats rid first's prompt, and the server runs 2 DP ranks without saying which ran each: it may be cold by placement, not by method"
		if got := again.Verdict.String(); got != want || again.DPRank != nil || again.CachedTokens != again.Floor {
			t.Fatalf("again: %q (rank %v, cached %d, floor %d), want %q", got, again.DPRank, again.CachedTokens, again.Floor, want)
		}
		const run = "1 requests repeated an earlier prompt and were cold, on a server of 2 DP ranks that does not say which ran each"
		if rep.DPRanks != 2 || rep.Verdict.Level() != harness.Suspect || !strings.Contains(rep.Verdict.String(), run) {
			t.Fatalf("run: %d ranks, %q; want 2 and SUSPECT with %q", rep.DPRanks, rep.Verdict, run)
		}
	})
}

// hideRank drops meta_info.dp_rank from /generate's answers, as a server
// that does not report it.
func hideRank(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/generate" {
			h.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		maps.Copy(w.Header(), rec.Header())
		w.Header().Del("Content-Length")
		w.WriteHeader(rec.Code)
		w.Write(regexp.MustCompile(`"dp_rank":\s*\d+,?`).ReplaceAll(rec.Body.Bytes(), nil))
	})
}

package harness_test

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/sglmock/sglmock/harness"
	"github.com/sglmock/sglmock/internal/norace"
	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
)

func streamRun(t *testing.T, m *mocktest.Mock, points []harness.Point, maxNew int) *harness.Report {
	t.Helper()
	return run(t, &harness.Stream{Client: client(m), Points: points, MaxNewTokens: maxNew, Options: harness.Options{NewID: counter()}})
}

// On the EAGLE3 profile (mean accept length 2.97) an event carries about
// three tokens: the token-weighted rate is exactly the truth of the request
// sent, while a per-event ITL is off by the tokens per event. 511 tokens
// span some 176 rounds, whose scatter leaves one request's decode known to
// ±5.6 % only: SUSPECT, with the --max-new-tokens that narrows it, at which
// the verdict has only the events to say.
func TestStreamOnEagle3(t *testing.T) {
	norace.Skip(t, "checks the stream method's figures")
	synctest.Test(t, func(t *testing.T) {
		p := mocktest.Profile(t, "llama-8b-eagle3-h100")
		p.FlushBusyAfterFinishS = 0 // no overlap flush window: this run never retries its flush
		m := mocktest.Start(t, api.Config{Profile: p})
		rep := streamRun(t, m, []harness.Point{{CtxReq: 1024, Tokens: 1024}, {CtxReq: 8192, Tokens: 8192}}, 512)
		for _, row := range rep.Stream {
			tr := row.Truth
			if math.Abs(*tr.DecodeErr) > 1e-12 || tr.TTFTErr != 0 {
				t.Errorf("ctx %d: errors against truth: decode %g, TTFT %g; want 0", row.CtxReq, *tr.DecodeErr, tr.TTFTErr)
			}
			if math.Abs(row.TokensPerEvent-2.97)/2.97 > 0.05 {
				t.Errorf("ctx %d: %.3f tokens per event, want about the mean accept length 2.97", row.CtxReq, row.TokensPerEvent)
			}
			// The per-event ITL is the true time per token times the tokens
			// per event.
			if got, want := row.EventITLErr, row.TokensPerEvent-1; math.Abs(got-want) > 1e-9 {
				t.Errorf("ctx %d: per-event ITL error %g, want %g", row.CtxReq, got, want)
			}
			if v := row.Verdict.String(); !strings.HasPrefix(v, "SUSPECT: the 511 tokens after the first span about 1") ||
				!strings.Contains(v, " speculative rounds of 2.") || !strings.Contains(v, "; events carry ") || row.Suggested == nil || row.Suggested.B <= 512 {
				t.Errorf("ctx %d: verdict %q, suggested %+v; want the scatter SUSPECT with a larger --max-new-tokens", row.CtxReq, v, row.Suggested)
			}
			if *row.Cached != 0 || row.PromptTokens != row.CtxReq {
				t.Errorf("ctx %d: cached %d, prompt %d", row.CtxReq, *row.Cached, row.PromptTokens)
			}
		}
		var table bytes.Buffer
		if err := rep.WriteTable(&table); err != nil {
			t.Fatal(err)
		}
		mocktest.Golden(t, "stream.txt", table.Bytes())
		for _, row := range rep.Stream {
			again := streamRun(t, m, []harness.Point{{CtxReq: row.CtxReq, Tokens: row.CtxReq}}, row.Suggested.B).Stream[0]
			if v := again.Verdict.String(); !strings.HasPrefix(v, "ok (events carry ") {
				t.Errorf("ctx %d at --max-new-tokens %d: verdict %q, want ok", row.CtxReq, row.Suggested.B, v)
			}
		}
	})
}

// Without speculative decoding one event is one token: the per-event ITL
// is right, and the verdict has nothing to say.
func TestStreamOneTokenPerEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{})
		row := streamRun(t, m, []harness.Point{{CtxReq: 2048, Tokens: 2048}}, 64).Stream[0]
		if row.TokensPerEvent != 1 || row.EventITLErr != 0 || row.Verdict.String() != "ok" || row.Events != 64 {
			t.Errorf("got %.2f tokens per event, ITL error %g, %d events, verdict %q; want 1, 0, 64, ok",
				row.TokensPerEvent, row.EventITLErr, row.Events, row.Verdict)
		}
	})
}

// The stream method over the OpenAI routes reads the token counts from
// continuous usage stats.
func TestStreamOpenAI(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{Profile: mocktest.Profile(t, "llama-8b-eagle3-h100"), EnableCacheReport: true})
		st := &harness.Stream{Client: client(m), Points: []harness.Point{{CtxReq: 1024, Tokens: 1024}}, MaxNewTokens: 128,
			Options: harness.Options{NewID: counter()}}
		st.Client.Backend = harness.OpenAI
		rep, err := st.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		row := rep.Stream[0]
		if math.Abs(*row.Truth.DecodeErr) > 1e-12 || row.TokensPerEvent < 2 || row.Verdict.Level() != harness.OK {
			t.Errorf("decode error %g, %.2f tokens per event, verdict %q", *row.Truth.DecodeErr, row.TokensPerEvent, row.Verdict)
		}
	})
}

package engine

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// A stream whose client leaves at L is aborted at L+2s (SGLang's abort
// task sleeps 2 s): the decode round running then ends it, with that
// round's token, and until then it keeps the server busy.
func TestDisconnectedStreamIsAbortedTwoSecondsLater(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := startEngine(t, Config{Profile: loadProfile(t, "default")})
		defer e.Close()
		a := submit(t, e, Request{RID: "a", InputIDs: prompt(1, 1000), MaxNewTokens: 5000})
		readUntil(t, a, 3)
		time.Sleep(100 * time.Millisecond)
		left := e.Now()
		a.Disconnect(true)
		time.Sleep(time.Second)
		if st := e.Stats(); st.Running != 1 || st.Aborted != 0 {
			t.Fatalf("1 s after the client left: running %d, aborted %d, want it running", st.Running, st.Aborted)
		}
		evs := drain(t, a)
		last := evs[len(evs)-1]
		tr := last.Truth
		due := left + 2*time.Second
		r := tr.Rounds[len(tr.Rounds)-1]
		if last.Finish.Reason != FinishAbort || r.Start > due || r.Start+r.Duration < due || tr.Finished != r.Start+r.Duration || len(last.Tokens) != 1 {
			t.Fatalf("left at %v: finished %v (%s) after round [%v, +%v] with %d tokens in the last event; want the round running at %v, with its token",
				left, tr.Finished, last.Finish.Reason, r.Start, r.Duration, len(last.Tokens), due)
		}
		checkDrained(t, e)
	})
}

// A client waiting for one response is noticed gone when its 4 s wait on
// the request times out (4 s after its arrival, and every 4 s after) or
// when the scheduler sends it an output (every 50 tokens), whichever
// comes first.
func TestDisconnectedWaitingClient(t *testing.T) {
	t.Run("queued: the wait times out", func(t *testing.T) {
		for _, tt := range []struct{ left, want time.Duration }{
			{time.Second, 4 * time.Second},
			{4 * time.Second, 4 * time.Second},
			{4500 * time.Millisecond, 8 * time.Second},
		} {
			synctest.Test(t, func(t *testing.T) {
				p := loadProfile(t, "default")
				p.MaxRunningRequests = 1
				e := startEngine(t, Config{Profile: p})
				defer e.Close()
				submit(t, e, Request{RID: "a", InputIDs: prompt(1, 1000), MaxNewTokens: 10000})
				b := submit(t, e, Request{RID: "b", InputIDs: prompt(2, 100), MaxNewTokens: 10})
				time.Sleep(tt.left)
				b.Disconnect(false)
				evs := drain(t, b)
				if tr := evs[len(evs)-1].Truth; len(evs) != 1 || tr.Finish.Reason != FinishAbort || tr.Finished != tt.want {
					t.Fatalf("queued, left at %v: %d events, finished %v (%s), want an abort at %v", tt.left, len(evs), tr.Finished, tr.Finish.Reason, tt.want)
				}
			})
		}
	})
	t.Run("running: the next 50-token output", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := startEngine(t, Config{Profile: loadProfile(t, "default")})
			defer e.Close()
			a := submit(t, e, Request{RID: "a", InputIDs: prompt(1, 1000), MaxNewTokens: 5000})
			evs := readUntil(t, a, 60)
			a.Disconnect(false)
			evs = append(evs, drain(t, a)...)
			last := evs[len(evs)-1]
			at100 := evs[99] // the event that made 100 tokens
			if last.Finish.Reason != FinishAbort || last.CompletionTokens != 100 || at100.CompletionTokens != 100 || last.At != at100.At {
				t.Fatalf("left after 60 tokens: aborted at %v with %d tokens; want at the 100-token output (%v)", last.At, last.CompletionTokens, at100.At)
			}
			checkDrained(t, e)
		})
	})
}

// SGLang's scheduler stops a request in chunked prefill at its next step
// (process_pending_chunked_abort): the chunk in flight when the abort
// comes completes, and no later chunk runs.
func TestDisconnectDuringChunkedPrefill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := startEngine(t, Config{Profile: loadProfile(t, "kimi-k2.6-rtx6000")})
		defer e.Close()
		a := submit(t, e, Request{RID: "a", InputIDs: prompt(1, 45507), MaxNewTokens: 10}) // 16384-token chunks, ~7 s each
		time.Sleep(time.Second)
		a.Disconnect(true)
		evs := drain(t, a)
		tr := evs[0].Truth
		c := tr.Prefill[0]
		if len(evs) != 1 || tr.Finish.Reason != FinishAbort || len(tr.Prefill) != 1 || tr.Finished != c.Start+c.Duration || tr.CompletionTokens != 0 {
			t.Fatalf("aborted at 3 s while its first chunk ran: %d events, %d chunks, finished %v, %d tokens; want one chunk, finished at its end %v",
				len(evs), len(tr.Prefill), tr.Finished, tr.CompletionTokens, c.Start+c.Duration)
		}
		checkDrained(t, e)
	})
}

// /abort_request as SGLang's: the rid must be active, and every active
// request whose rid starts with it is aborted; a request in a batch ends
// with "Aborted" after its step in flight, a queued one with "Abort in
// waiting queue" at once.
func TestAbortMatchesRIDPrefixes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := loadProfile(t, "default")
		p.MaxRunningRequests = 1
		e := startEngine(t, Config{Profile: p})
		defer e.Close()
		streams := map[string]*Stream{}
		for i, rid := range []string{"job", "job-2", "jobless", "other"} {
			streams[rid] = submit(t, e, Request{RID: rid, InputIDs: prompt(int32(i), 100), MaxNewTokens: 1000})
		}
		time.Sleep(100 * time.Millisecond)
		if e.Abort("jo") {
			t.Fatal(`Abort("jo"): no request has that rid, want false`)
		}
		if !e.Abort("job") {
			t.Fatal(`Abort("job"): want true`)
		}
		last := func(rid string) Event {
			evs := drain(t, streams[rid])
			return evs[len(evs)-1]
		}
		if ev := last("job"); ev.Finish.Reason != FinishAbort || ev.Finish.Message != AbortedMessage || ev.Finish.InWaitingQueue || len(ev.Tokens) != 1 {
			t.Fatalf("running job: %+v with %d tokens, want Aborted after its step, with that step's token", ev.Finish, len(ev.Tokens))
		}
		for _, rid := range []string{"job-2", "jobless"} {
			ev := last(rid)
			if ev.Finish.Message != WaitingQueueMessage || !ev.Finish.InWaitingQueue || ev.Truth.Finished != 100*time.Millisecond {
				t.Fatalf("queued %s: %+v at %v, want aborted in the waiting queue at 100ms", rid, ev.Finish, ev.Truth.Finished)
			}
		}
		if st := e.Stats(); st.Aborted != 3 {
			t.Fatalf("after aborting job*: %d aborted, want 3", st.Aborted)
		}
		e.AbortAll()
		if ev := last("other"); ev.Finish.Message != AbortedMessage {
			t.Fatalf("abort_all: other ended %+v", ev.Finish)
		}
		checkDrained(t, e)
	})
}

// An abort that comes while a chunk other than the last runs (SGLang PR
// #28086, process_pending_chunked_abort): no later chunk runs, the chunk in
// flight is freed without being cached, and the chunks that finished stay
// cached. Kimi prefills a 45507-token prompt in 16384-token chunks; aborted
// during its second chunk, a resend reuses the first chunk only. Before
// the PR (0.5.12) abort_request only sets to_finish on the request: every
// chunk runs, the last one samples a token, and the request finishes
// aborted with its whole prompt cached, so a resend reuses 45506 tokens.
func TestAbortDuringChunkedPrefill(t *testing.T) {
	for _, tc := range []struct {
		release           string
		chunks            []int
		completion, cache int
		resend            int
	}{
		{"0.5.18", []int{16384, 16384}, 0, 16384, 16384},
		{"0.5.12", []int{16384, 16384, 12739}, 1, 45507, 45506},
	} {
		t.Run(tc.release, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := loadProfile(t, "kimi-k2.6-rtx6000")
				p.SGLangVersion = tc.release
				e := startEngine(t, Config{Profile: p})
				defer e.Close()
				ids := prompt(1, 45507)
				a := submit(t, e, Request{RID: "a", InputIDs: ids, MaxNewTokens: 10})
				time.Sleep(8 * time.Second) // the first chunk ends at 5.97 s, the second at 14.8 s
				if !e.Abort("a") {
					t.Fatal("a was not active")
				}
				evs := drain(t, a)
				tr := evs[len(evs)-1].Truth
				var chunks []int
				for _, c := range tr.Prefill {
					chunks = append(chunks, c.Tokens)
				}
				if !slices.Equal(chunks, tc.chunks) || tr.Finish.Reason != FinishAbort || tr.Finish.Message != AbortedMessage ||
					tr.CompletionTokens != tc.completion {
					t.Fatalf("aborted during chunk 2: chunks %v, finish %+v, %d tokens; want %v, Aborted, %d",
						chunks, tr.Finish, tr.CompletionTokens, tc.chunks, tc.completion)
				}
				if st := e.Stats(); st.CacheTokens != tc.cache {
					t.Fatalf("cache after the abort: %d tokens, want %d", st.CacheTokens, tc.cache)
				}
				again, _ := run(t, e, Request{RID: "again", InputIDs: ids, MaxNewTokens: 1})
				if again.CachedTokens != tc.resend {
					t.Fatalf("resend: cached %d, want %d", again.CachedTokens, tc.resend)
				}
				checkDrained(t, e)
			})
		})
	}
}

// A closing engine ends a request it would keep prefilling after an abort.
func TestCloseEndsAnAbortedChunkedPrefillBeforePR28086(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := loadProfile(t, "kimi-k2.6-rtx6000")
		p.SGLangVersion = "0.5.12"
		e := startEngine(t, Config{Profile: p})
		a := submit(t, e, Request{RID: "a", InputIDs: prompt(1, 45507), MaxNewTokens: 10})
		time.Sleep(8 * time.Second)
		e.Abort("a")
		e.Close()
		evs := drain(t, a)
		if fin := evs[len(evs)-1].Finish; fin == nil || fin.Reason != FinishAbort {
			t.Fatalf("closed: last event %+v, want an abort", fin)
		}
	})
}

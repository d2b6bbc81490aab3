package api_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
)

// timedStream is a streaming response: when its status line arrived, and
// each SSE event's payload with its arrival time, measured from the send.
type timedStream struct {
	resp    *http.Response
	headers time.Duration
	events  []string
	at      []time.Duration
}

// postStream sends a JSON POST and reads the whole response, timing the
// status line and every "data: " line on the (virtual) clock.
func postStream(t *testing.T, ts *mocktest.Mock, path, body string) timedStream {
	t.Helper()
	req, _ := http.NewRequest("POST", ts.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := ts.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	s := timedStream{resp: resp, headers: time.Since(start)}
	r := bufio.NewReader(resp.Body)
	for {
		line, err := r.ReadString('\n')
		if p, ok := strings.CutPrefix(line, "data: "); ok {
			s.events = append(s.events, strings.TrimSuffix(p, "\n"))
			s.at = append(s.at, time.Since(start))
		}
		if err == io.EOF {
			return s
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// An OpenAI stream sends nothing, not even its status line, before the
// first output event; a chat's role chunk goes out with the first content.
func TestOpenAIStreamStartsWithTheFirstToken(t *testing.T) {
	for _, path := range []string{"/v1/chat/completions", "/v1/completions"} {
		t.Run(path, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ts := mocktest.Start(t, api.Config{})
				prompt := ids(60, 2000)
				field := "prompt"
				if strings.Contains(path, "chat") {
					field = "input_ids"
				}
				_, at := expectedOutput(ts.Engine().Profile(), prompt, 3)
				s := postStream(t, ts, path, fmt.Sprintf(`{%q: %s, "messages": [{"role": "user", "content": "x"}], "max_tokens": 3, "stream": true}`, field, jsonOf(prompt)))
				if s.resp.StatusCode != 200 || s.headers != at[0] {
					t.Fatalf("status %d at %v, want 200 exactly at the first token, %v", s.resp.StatusCode, s.headers, at[0])
				}
				if s.at[0] != at[0] {
					t.Fatalf("first event at %v, want %v", s.at[0], at[0])
				}
				if path == "/v1/chat/completions" {
					if !strings.Contains(s.events[0], `"role":"assistant"`) || s.at[1] != at[0] || !strings.Contains(s.events[1], `"content":`) {
						t.Fatalf("want the role chunk and the first content together at %v: %v %q", at[0], s.at[:2], s.events[:2])
					}
				}
			})
		})
	}
}

// A stream refused before its first output gets the 400 a non-stream
// request gets, not an event stream.
func TestOpenAIStreamRefusal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mocktest.Profile(t, "default")
		p.ContextLength = 1000
		ts := mocktest.Start(t, api.Config{Profile: p})
		long := jsonOf(ids(61, 1000))
		for _, path := range []string{"/v1/completions", "/v1/chat/completions"} {
			field := "prompt"
			if strings.Contains(path, "chat") {
				field = "input_ids"
			}
			body := fmt.Sprintf(`{%q: %s, "messages": [{"role": "user", "content": "x"}], "max_tokens": 3`, field, long)
			_, want, _ := ts.Do(t, "POST", path, body+"}")
			code, got, resp := ts.Do(t, "POST", path, body+`, "stream": true}`)
			if code != 400 || got != want || resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("%s: refused stream got %d %q %s, want 400 application/json %s", path, code, resp.Header.Get("Content-Type"), got, want)
			}
		}
	})
}

// An OpenAI stream whose request is aborted mid-way (here by the server
// closing) ends as SGLang's does for an abort without an HTTP status: a
// last chunk with finish_reason "abort", then [DONE]; no error event.
func TestOpenAIStreamEndsOnAbort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{})
		req, _ := http.NewRequest("POST", ts.URL+"/v1/completions", strings.NewReader(`{"prompt": "go on", "max_tokens": 10000, "stream": true}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := ts.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		r := bufio.NewReader(resp.Body)
		if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, `data: {"id":`) {
			t.Fatalf("first event: %q %v", line, err)
		}
		ts.Server.Close() // the engine aborts what runs
		rest, _ := io.ReadAll(r)
		got := string(rest)
		if !strings.HasSuffix(got, "data: [DONE]\n\n") || !strings.Contains(got, `"finish_reason":"abort"`) || strings.Contains(got, `"error"`) {
			t.Fatalf("end of the stream:\n%q\nwant a finish_reason abort chunk, then [DONE], and no error event", got)
		}
	})
}

// n > 1 chat streams: every choice's chunks carry its own request's id, and
// the finish chunks follow the last output, as SGLang sends them.
func TestChatStreamParallelChoices(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{})
		s := postStream(t, ts, "/v1/chat/completions", `{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "n": 2, "stream": true}`)
		var finishAt []int
		for i, e := range s.events {
			if strings.Contains(e, `"finish_reason":"length"`) {
				finishAt = append(finishAt, i)
			}
		}
		// role+content, content for each choice (4 content-bearing events,
		// 2 role chunks), then the two finish chunks and [DONE].
		if len(s.events) != 9 || len(finishAt) != 2 || finishAt[0] != 6 || finishAt[1] != 7 {
			t.Fatalf("chat n=2 events:\n%s", strings.Join(s.events, "\n"))
		}
	})
}

// streamText is the text an OpenAI stream's chunks carry, concatenated:
// completions' text, chat's content deltas.
func streamText(t *testing.T, body string) string {
	t.Helper()
	var b strings.Builder
	for _, e := range sseEvents(t, body) {
		if e == "[DONE]" {
			continue
		}
		var ch struct {
			Choices []struct {
				Text  string `json:"text"`
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(e), &ch); err != nil {
			t.Fatalf("chunk %q: %v", e, err)
		}
		for _, c := range ch.Choices {
			b.WriteString(c.Text + c.Delta.Content)
		}
	}
	return b.String()
}

// A stream's deltas add up to the non-streamed answer's text, trimmed as
// it is at a stop token (unless no_stop_trim) or kept whole, over a long
// output.
func TestStreamTextIsTheAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{})
		prompt := ids(3, 20)
		toks, _ := expectedOutput(ts.Engine().Profile(), prompt, 600)
		stop := toks[500]
		end := slices.Index(toks, stop)
		for _, tc := range []struct {
			extra string
			want  string
		}{
			{``, builtinTok.Decode(toks, false)},
			{fmt.Sprintf(`, "stop_token_ids": [%d]`, stop), builtinTok.Decode(toks[:end], false)},
			{fmt.Sprintf(`, "stop_token_ids": [%d], "no_stop_trim": true`, stop), builtinTok.Decode(toks[:end+1], false)},
		} {
			for _, path := range []string{"/v1/completions", "/v1/chat/completions"} {
				body := fmt.Sprintf(`{"prompt": %s, "input_ids": %s, "max_tokens": 600%s`, jsonOf(prompt), jsonOf(prompt), tc.extra)
				_, plain, _ := ts.Do(t, "POST", path, body+"}")
				var answer struct {
					Choices []struct {
						Text    string `json:"text"`
						Message struct {
							Content string `json:"content"`
						} `json:"message"`
					} `json:"choices"`
				}
				if err := json.Unmarshal([]byte(plain), &answer); err != nil || len(answer.Choices) != 1 {
					t.Fatalf("%s%s: %v %s", path, tc.extra, err, plain)
				}
				if got := answer.Choices[0].Text + answer.Choices[0].Message.Content; got != tc.want {
					t.Fatalf("%s%s: answered %q, want %q", path, tc.extra, got, tc.want)
				}
				_, streamed, _ := ts.Do(t, "POST", path, body+`, "stream": true}`)
				if got := streamText(t, streamed); got != tc.want {
					t.Fatalf("%s%s: streamed %q, want %q", path, tc.extra, got, tc.want)
				}
			}
		}
		mocktest.CheckIdle(t, ts.Engine())
	})
}

// heldWriter is a ResponseWriter whose first write of bytes waits for
// release, and that records every write of bytes.
type heldWriter struct {
	header  http.Header
	release chan struct{}
	writes  []string
}

func (w *heldWriter) Header() http.Header { return w.header }
func (w *heldWriter) WriteHeader(int)     {}
func (w *heldWriter) Flush()              {}

func (w *heldWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if len(w.writes) == 0 {
		<-w.release
	}
	w.writes = append(w.writes, string(p))
	return len(p), nil
}

// Events the engine delivered while the handler was still writing leave
// together, in one write that ends with [DONE]: here the first event's
// write blocks while the engine runs the rest of the request.
func TestStreamCoalescesReadyEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{})
		for _, path := range []string{"/v1/completions", "/generate"} {
			body := `{"prompt": "count", "text": "count", "max_tokens": 40, "sampling_params": {"max_new_tokens": 40}, "stream": true}`
			req := httptest.NewRequest("POST", path, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			w := &heldWriter{header: http.Header{}, release: make(chan struct{})}
			done := make(chan struct{})
			go func() {
				ts.Handler().ServeHTTP(w, req)
				close(done)
			}()
			time.Sleep(time.Minute) // virtual: the handler waits in its first write while the request runs to its end
			if st := ts.Engine().Stats(); !st.Idle {
				t.Fatalf("%s: the engine still runs the request", path)
			}
			close(w.release)
			<-done
			events := sseEvents(t, strings.Join(w.writes, ""))
			if len(w.writes) != 2 || len(events) != 41 || !strings.HasSuffix(w.writes[1], "data: [DONE]\n\n") {
				t.Fatalf("%s: %d writes of %d events, want the first event, then the other 39 and [DONE] in one write", path, len(w.writes), len(events))
			}
		}
	})
}

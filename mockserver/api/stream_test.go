package api_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"sglmock/mockserver/api"
	"sglmock/mockserver/mocktest"
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

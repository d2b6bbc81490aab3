package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/engine"
	"github.com/sglmock/sglmock/mockserver/mocktest"
	"github.com/sglmock/sglmock/sim"
)

// generateIDs is a /generate body of ten prompt tokens asking for out
// tokens, whose answer budget cost is its write buffer (64 KiB), its
// prompt twice (4 bytes a token) and its output (128 bytes a token).
func generateIDs(rid string, out int) (body string, cost int64) {
	return fmt.Sprintf(`{"rid": %q, "input_ids": [1100, 1101, 1102, 1103, 1104, 1105, 1106, 1107, 1108, 1109], "sampling_params": {"max_new_tokens": %d}}`, rid, out),
		65536 + 2*10*4 + int64(out)*128
}

// A generation request that does not fit the answer budget waits, first
// come first served, until the one holding it is answered, as SGLang's
// queue waits behind a full batch; the budget is never passed, and the
// wait counts as the request's queue time.
func TestAnswerBudgetQueues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bodyA, cost := generateIDs("a", 1000)
		bodyB, _ := generateIDs("b", 1000)
		m := mocktest.Start(t, api.Config{AnswerBudgetBytes: cost + cost/2, EnableMetrics: true})
		done := make(chan string, 2)
		for _, body := range []string{bodyA, bodyB} {
			go func() {
				code, resp, _ := m.Do(t, "POST", "/generate", body)
				done <- fmt.Sprint(code, " ", resp[:min(len(resp), 40)])
			}()
			synctest.Wait()
		}
		st := simStats(t, m).Memory
		if st.AnswerBytes != cost || st.AnswersWaiting != 1 || st.AnswersWaited != 1 {
			t.Fatalf("while a runs: got %+v, want %d bytes held and b waiting", st, cost)
		}
		if _, metrics, _ := m.Do(t, "GET", "/metrics", ""); !strings.Contains(metrics, "sglmock:answer_budget_waiting{") ||
			!strings.Contains(metrics, fmt.Sprintf(`sglmock:answer_budget_held_bytes{model_name="sglmock/small-1b"} %d`, cost)) {
			t.Fatalf("/metrics does not show the budget:\n%s", grepLines(metrics, "budget"))
		}
		for range 2 {
			if got := <-done; !strings.HasPrefix(got, "200 ") {
				t.Fatalf("got %s, want 200", got)
			}
		}
		a, b := truthOf(t, m, "a"), truthOf(t, m, "b")
		if b.Arrival != a.Arrival || b.QueueTime() < a.E2E() {
			t.Errorf("b arrived at %v with a and was admitted after %v; want it queued until a (E2E %v) was answered", b.Arrival, b.QueueTime(), a.E2E())
		}
		st = simStats(t, m).Memory
		if st.AnswerBytes != 0 || st.AnswerPeak != cost || st.AnswersWaiting != 0 {
			t.Errorf("after: got %+v, want nothing held and a peak of one request (%d)", st, cost)
		}
		mocktest.CheckIdle(t, m.Engine())
	})
}

// A client that leaves while its request waits for room is gone from the
// queue: the next in line gets its turn, and nothing is held for it.
func TestAnswerBudgetWaiterLeaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bodyA, cost := generateIDs("a", 1000)
		m := mocktest.Start(t, api.Config{AnswerBudgetBytes: cost})
		go m.Do(t, "POST", "/generate", bodyA)
		synctest.Wait()
		ctx, cancel := context.WithCancel(context.Background())
		left := make(chan error)
		go func() {
			bodyB, _ := generateIDs("b", 10)
			req, _ := http.NewRequestWithContext(ctx, "POST", m.URL+"/generate", strings.NewReader(bodyB))
			_, err := m.Client.Do(req)
			left <- err
		}()
		synctest.Wait()
		if st := simStats(t, m).Memory; st.AnswersWaiting != 1 {
			t.Fatalf("got %d waiting, want b", st.AnswersWaiting)
		}
		cancel()
		<-left
		synctest.Wait()
		if st := simStats(t, m).Memory; st.AnswersWaiting != 0 || st.AnswerBytes != cost {
			t.Fatalf("after b left: got %+v, want only a held", st)
		}
		bodyC, _ := generateIDs("c", 10)
		if code, body, _ := m.Do(t, "POST", "/generate", bodyC); code != 200 {
			t.Fatalf("c: got %d %s", code, body)
		}
		if _, ok := m.Engine().Truth("b"); ok {
			t.Error("b ran; its client left while it waited")
		}
		mocktest.CheckIdle(t, m.Engine())
	})
}

// A reader that reads its complete answer slowly but steadily (never
// stalled) while another request waits for room is cut off pinnedGrace
// (10 s) after its answer was seen complete, at the waiter's next look
// (once a second); the waiter then runs.
func TestPinnedReaderIsCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bodyA, cost := generateIDs("a", 8000)
		m := mocktest.Start(t, api.Config{AnswerBudgetBytes: cost + 1000})
		conn, err := m.HTTP.Dial()
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		start := time.Now()
		fmt.Fprintf(conn, "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(bodyA), bodyA)
		read := make(chan int64)
		go func() {
			// 4 KiB a second: a 64 KiB write takes 16 s, within the stall
			// timeout.
			var n int64
			buf := make([]byte, 4096)
			for {
				k, err := io.ReadFull(conn, buf)
				n += int64(k)
				if err != nil {
					read <- n
					return
				}
				time.Sleep(time.Second)
			}
		}()
		synctest.Wait()
		bodyB, _ := generateIDs("b", 10)
		answered := make(chan int)
		go func() {
			code, _, _ := m.Do(t, "POST", "/generate", bodyB)
			answered <- code
		}()
		var a *engine.Truth
		for ok := false; !ok; a, ok = m.Engine().Truth("a") {
			time.Sleep(10 * time.Millisecond) // virtual: until a has finished and its answer is being read
		}
		// b looks once a second from start; a is seen complete at the
		// first look at or after its end, and cut 10 s later.
		seen := a.E2E().Truncate(time.Second) + time.Second
		cutAt := seen + 10*time.Second
		time.Sleep(cutAt - time.Since(start) - time.Millisecond)
		synctest.Wait()
		if st := simStats(t, m).Memory; st.ReadersCut != 0 || st.AnswersWaiting != 1 {
			t.Fatalf("1 ms before the cut: got %+v, want b waiting, a reading", st)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if code := <-answered; code != 200 {
			t.Fatalf("b: got %d, want 200 once a was cut", code)
		}
		got := <-read
		st := simStats(t, m).Memory
		if st.ReadersCut != 1 || st.AnswerPeak != cost {
			t.Fatalf("after the cut: got %+v, want one reader cut and the budget never passed", st)
		}
		t.Logf("a's client read %d bytes before it was cut at %v", got, cutAt)
		mocktest.CheckIdle(t, m.Engine())
	})
}

// Bodies in flight are bounded server-wide: a request whose declared body
// does not fit next to those being read gets 503 with Retry-After before a
// byte of it is read, counted; the first body's hold is released when its
// request is answered.
func TestBodyBudgetRefusesBeforeReading(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{BodyBudgetBytes: 2000})
		conn, err := m.HTTP.Dial()
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		// 800 bytes declared, 10 sent: 1312 bytes held (the buffer has
		// 512 more).
		go fmt.Fprintf(conn, "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 800\r\n\r\n{\"text\": ")
		synctest.Wait()
		if st := simStats(t, m).Memory; st.BodyBytes != 800+512 {
			t.Fatalf("got %d body bytes held, want 1312", st.BodyBytes)
		}
		body := `{"text": "` + strings.Repeat("a", 400) + `"}`
		code, resp, h := m.Do(t, "POST", "/generate", body)
		if code != 503 || h.Header.Get("Retry-After") != "1" || !strings.Contains(resp, "--body-budget-bytes") {
			t.Fatalf("got %d %s (Retry-After %q), want 503 naming the budget", code, resp, h.Header.Get("Retry-After"))
		}
		st := simStats(t, m).Memory
		if st.BodiesRefused != 1 || st.BodyPeak != 800+512 {
			t.Fatalf("got %+v, want one refusal, the budget never passed", st)
		}
		conn.Close()
		synctest.Wait()
		if code, resp, _ := m.Do(t, "POST", "/generate", body); code != 200 {
			t.Fatalf("once the first body is gone: got %d %s", code, resp)
		}
		if st := simStats(t, m).Memory; st.BodyBytes != 0 {
			t.Fatalf("got %d body bytes held after every request, want 0", st.BodyBytes)
		}
		mocktest.CheckIdle(t, m.Engine())
	})
}

// A body without Content-Length is charged as its buffer grows, and refused
// with 503 the moment a growth would pass the budget, the rest unread.
func TestBodyBudgetChunked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{BodyBudgetBytes: 1 << 20})
		// Half the budget held by a body that is still arriving.
		held, err := m.HTTP.Dial()
		if err != nil {
			t.Fatal(err)
		}
		defer held.Close()
		go fmt.Fprintf(held, "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", 512<<10)
		synctest.Wait()
		conn, err := m.HTTP.Dial()
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		go func() {
			fmt.Fprintf(conn, "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
			chunk := strings.Repeat("a", 64<<10)
			for range 64 { // 4 MiB, past the budget
				if _, err := fmt.Fprintf(conn, "%x\r\n%s\r\n", len(chunk), chunk); err != nil {
					return
				}
			}
		}()
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 503 {
			t.Fatalf("got %d, want 503", resp.StatusCode)
		}
		// The buffer doubled from 64 KiB to 256 KiB; its growth to 512 KiB
		// did not fit beside the other body.
		st := simStats(t, m).Memory
		if want := int64(512<<10+512) + 256<<10; st.BodiesRefused != 1 || st.BodyPeak != want {
			t.Fatalf("got %+v, want one refusal and a peak of %d bytes", st, want)
		}
	})
}

// Rendering holds its prompts' token ids beside its body, counted in the
// body budget: a render whose ids do not fit beside the bodies in flight
// is refused with 503.
func TestRenderCountsItsTokenIDs(t *testing.T) {
	prompt := `"` + strings.Repeat("a ", 2000) + `"`
	body := `{"prompt": [` + strings.Repeat(prompt+",", 9) + prompt + `]}`
	// Each prompt is 2000 tokens and the profile's BOS.
	ids := int64(10 * 2001 * 4)
	for _, tt := range []struct {
		name   string
		budget int64
		code   int
	}{
		{"room for the ids", 1<<10 + 512 + int64(len(body)) + 512 + ids, 200},
		{"room for half the ids", 1<<10 + 512 + int64(len(body)) + 512 + ids/2, 503},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := mocktest.Start(t, api.Config{BodyBudgetBytes: tt.budget})
				held, err := m.HTTP.Dial() // 1 KiB of another body, arriving
				if err != nil {
					t.Fatal(err)
				}
				defer held.Close()
				go fmt.Fprintf(held, "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1024\r\n\r\n{")
				synctest.Wait()
				code, resp, _ := m.Do(t, "POST", "/v1/completions/render", body)
				if code != tt.code {
					t.Fatalf("got %d %.200s, want %d", code, resp, tt.code)
				}
				st := simStats(t, m).Memory
				if tt.code == 200 && st.BodyPeak != tt.budget {
					t.Errorf("got a peak of %d body bytes, want the other body, the render's and 4 bytes for each of its ids: %d", st.BodyPeak, tt.budget)
				}
				if st.BodyBytes != 1024+512 {
					t.Errorf("got %d body bytes held after the render, want the other body's 1536", st.BodyBytes)
				}
			})
		})
	}
}

func truthOf(t *testing.T, m *mocktest.Mock, rid string) *engine.Truth {
	t.Helper()
	tr, ok := m.Engine().Truth(rid)
	if !ok {
		t.Fatalf("no truth for %s", rid)
	}
	return tr
}

func grepLines(s, word string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, word) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// A refused body is thrown away as it arrives after the 503 went out, so
// that a client that sends its whole body before reading (Python's
// http.client) gets the 503, not a connection reset under its feet;
// nothing of it is held. Real TCP, which is what this is about: a server
// that closed the connection with 16 MiB unread would reset it.
func TestBodyBudgetRefusalIsReadable(t *testing.T) {
	srv, err := api.New(api.Config{Profile: mocktest.Profile(t, "default"), BodyBudgetBytes: 1 << 20, BodyTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	srv.MarkReady()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := srv.HTTPServer()
	go hs.Serve(ln)
	defer hs.Close()
	held, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	fmt.Fprintf(held, "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", 768<<10)
	base := "http://" + ln.Addr().String()
	for deadline := time.Now().Add(10 * time.Second); memoryOf(t, base).BodyBytes != 768<<10+512; {
		if time.Now().After(deadline) {
			t.Fatal("the first body was not charged within 10 s")
		}
		runtime.Gosched()
	}
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"text": "` + strings.Repeat("a", 16<<20) + `"}`
	if _, err := fmt.Fprintf(conn, "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
		t.Fatalf("sending the whole body: %v", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("after sending the whole body: %v %v, want 503 with Retry-After", resp, err)
	}
	if st := memoryOf(t, base); st.BodiesRefused != 1 || st.BodyPeak != 768<<10+512 {
		t.Fatalf("got %+v, want one refusal and only the first body held", st)
	}
}

// memoryOf is a real server's /sim/stats memory.
func memoryOf(t *testing.T, base string) sim.Memory {
	t.Helper()
	resp, err := http.Get(base + "/sim/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st sim.Stats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st.Memory
}

package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestRoundTrip reads answers with a Content-Length, in chunks and with an
// error status one after another on one keep-alive connection.
func TestRoundTrip(t *testing.T) {
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		body, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/length":
			w.Header().Set("Content-Length", fmt.Sprint(len(body)))
			w.Write(body)
		case "/chunks":
			for i := range 3 {
				fmt.Fprintf(w, "data: %d\n\n", i)
				w.(http.Flusher).Flush()
			}
		default:
			http.Error(w, "no such path", http.StatusBadRequest)
		}
	}))
	defer srv.Close()
	nc, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c := newConn(nc)
	for _, tc := range []struct {
		path string
		want int
	}{{"/length", 200}, {"/chunks", 200}, {"/other", 400}, {"/length", 200}} {
		s, err := newServer(srv.URL, tc.path, `{"prompt": "p"}`)
		if err != nil {
			t.Fatal(err)
		}
		status, err := c.roundTrip(s.req)
		if err != nil || status != tc.want {
			t.Fatalf("%s: got status %d, error %v; want %d", tc.path, status, err, tc.want)
		}
	}
	if got := requests.Load(); got != 4 {
		t.Fatalf("the server got %d requests, want 4", got)
	}
}

// TestLoadCountsEveryRequest: a load of n requests sends exactly n, and an
// error status fails it.
func TestLoadCountsEveryRequest(t *testing.T) {
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		io.Copy(io.Discard, r.Body)
		if strings.HasSuffix(r.URL.Path, "/bad") {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte(`{"choices": []}`))
	}))
	defer srv.Close()
	s, err := newServer(srv.URL, "/v1/completions", requestBody("m", prompt(5), 16, false, true))
	if err != nil {
		t.Fatal(err)
	}
	if rps, err := s.load(100, 8); err != nil || rps <= 0 {
		t.Fatalf("got %v requests/s, error %v", rps, err)
	}
	if got := requests.Load(); got != 100 {
		t.Fatalf("the server got %d requests, want 100", got)
	}
	bad, _ := newServer(srv.URL, "/bad", "{}")
	if _, err := bad.load(10, 2); err == nil || !strings.Contains(err.Error(), "status 503") {
		t.Fatalf("got error %v, want status 503", err)
	}
}

func TestRequestBody(t *testing.T) {
	for _, tc := range []struct {
		stream, ignoreEOS bool
		want              string
	}{
		{false, false, `{"model": "m", "prompt": "the lazy boxing", "max_tokens": 16, "stream": false}`},
		{true, true, `{"model": "m", "prompt": "the lazy boxing", "max_tokens": 16, "stream": true, "ignore_eos": true}`},
	} {
		if got := requestBody("m", prompt(3), 16, tc.stream, tc.ignoreEOS); got != tc.want {
			t.Errorf("got %s, want %s", got, tc.want)
		}
	}
	if _, err := newServer("localhost:80", "/v1/completions", "{}"); err == nil {
		t.Error("a base URL without a scheme: got no error")
	}
}

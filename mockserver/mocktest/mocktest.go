package mocktest

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/engine"
	"github.com/sglmock/sglmock/mockserver/profile"
)

// Host is the host name the in-memory server answers on.
const Host = "sglmock.test:30000"

// Listener is an in-memory net.Listener: DialContext hands the server end
// of a net.Pipe to Accept and returns the client end.
type Listener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

// NewListener returns an open Listener.
func NewListener() *Listener {
	return &Listener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

// Accept waits for the next DialContext.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// Close stops Accept and DialContext; connections already made stay open.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

// Addr is a fixed pipe address.
func (l *Listener) Addr() net.Addr { return pipeAddr{} }

// DialContext connects to the listener, whatever the address; it has the
// signature http.Transport.DialContext wants.
func (l *Listener) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.closed:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return Host }

// Server is an http.Handler served over a Listener, like an
// httptest.Server without sockets.
type Server struct {
	// URL is the base URL, "http://sglmock.test:30000".
	URL string
	// Client talks to the server through the pipe listener.
	Client    *http.Client
	Transport *http.Transport
	listener  *Listener
	http      *http.Server
}

// NewServer serves h until Close.
func NewServer(h http.Handler) *Server { return NewHTTPServer(&http.Server{Handler: h}) }

// NewHTTPServer runs hs, with its timeouts and hooks, until Close.
func NewHTTPServer(hs *http.Server) *Server {
	l := NewListener()
	go hs.Serve(l)
	tr := &http.Transport{DialContext: l.DialContext}
	return &Server{URL: "http://" + Host, Client: &http.Client{Transport: tr}, Transport: tr, listener: l, http: hs}
}

// Dial opens a raw connection to the server, for tests that write bytes
// themselves.
func (s *Server) Dial() (net.Conn, error) {
	return s.listener.DialContext(context.Background(), "pipe", Host)
}

// Close closes idle client connections, the HTTP server and the listener.
func (s *Server) Close() {
	s.Transport.CloseIdleConnections()
	s.http.Close()
	s.listener.Close()
}

// Mock is an sglmock api.Server, ready, behind an in-memory Server.
type Mock struct {
	*api.Server
	HTTP *Server
	// URL and Client are HTTP's, for short.
	URL    string
	Client *http.Client
}

// FreePort returns a loopback TCP port nothing listens on, for the few
// tests that need a real socket at a known port.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Profile loads a built-in profile or fails the test.
func Profile(t testing.TB, name string) *profile.Profile {
	t.Helper()
	p, err := profile.Load(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Start starts a ready mock (no warmup request: the cache starts empty) and
// stops it when the test ends. Call it inside a synctest bubble, whose
// cleanups run before the bubble ends. A nil cfg.Profile means "default"
// with SGLang's overlap scheduler off (flush_busy_after_finish_s 0, as
// --disable-overlap-schedule): the server is idle for a flush the moment a
// response is out, so a test meets the flush race only when it asks for
// it, with Profile(t, "default") as served or a window of its own.
func Start(t testing.TB, cfg api.Config) *Mock {
	t.Helper()
	return StartBehind(t, cfg, nil)
}

// StartBehind is Start with the mock's handler wrapped by wrap (nil: none):
// a server that lacks a route, or answers one its own way.
func StartBehind(t testing.TB, cfg api.Config, wrap func(http.Handler) http.Handler) *Mock {
	t.Helper()
	if cfg.Profile == nil {
		cfg.Profile = Profile(t, "default")
		cfg.Profile.FlushBusyAfterFinishS = 0
	}
	if cfg.Args.Host == "" {
		// The server's own name: the state-changing routes accept it.
		cfg.Args.Host, _, _ = net.SplitHostPort(Host)
	}
	s, err := api.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.MarkReady()
	h := s.HTTPServer()
	if wrap != nil {
		h.Handler = wrap(h.Handler)
	}
	hs := NewHTTPServer(h)
	m := &Mock{Server: s, HTTP: hs, URL: hs.URL, Client: hs.Client}
	t.Cleanup(m.Close)
	return m
}

// Without wraps a handler (StartBehind's wrap) so that it answers path 404
// with SGLang's body, as a server without that route does.
func Without(path string) func(http.Handler) http.Handler {
	return func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == path {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusNotFound)
				io.WriteString(w, `{"detail":"Not Found"}`)
				return
			}
			h.ServeHTTP(w, r)
		})
	}
}

// Close stops the HTTP server and the engine. Start registers it as a
// cleanup; calling it earlier is fine.
func (m *Mock) Close() {
	m.HTTP.Close()
	m.Server.Close()
}

// Do sends a request to the mock; see Server.Do.
func (m *Mock) Do(t testing.TB, method, path, body string, header ...string) (int, string, *http.Response) {
	t.Helper()
	return m.HTTP.Do(t, method, path, body, header...)
}

// Send sends a request to the mock; see Server.Send.
func (m *Mock) Send(method, path, body string, header ...string) (int, string, *http.Response, error) {
	return m.HTTP.Send(method, path, body, header...)
}

// Do sends a request (a JSON body when body is not empty, and header as
// name, value pairs) and returns the status, the body and the response,
// failing the test on a transport error.
func (s *Server) Do(t testing.TB, method, path, body string, header ...string) (int, string, *http.Response) {
	t.Helper()
	code, b, resp, err := s.Send(method, path, body, header...)
	if err != nil {
		t.Fatal(err)
	}
	return code, b, resp
}

// Send is Do for goroutines other than the test's: it returns errors.
func (s *Server) Send(method, path, body string, header ...string) (int, string, *http.Response, error) {
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.URL+path, r)
	if err != nil {
		return 0, "", nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		if strings.EqualFold(header[i], "Host") {
			req.Host = header[i+1] // net/http sends req.Host, not a Host header
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := s.Client.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp, err
}

// CheckIdle fails the test unless the engine holds nothing: no request, no
// lock, no KV in use, and every slot free or in the (unlocked) cache.
func CheckIdle(t testing.TB, e *engine.Engine) {
	t.Helper()
	st := e.Stats()
	if !st.Idle || st.CacheProtected != 0 || st.KVUsed != 0 || st.KVFree+st.CacheTokens != st.KVCapacity {
		t.Fatalf("engine not idle: idle %v, running %d, queued %d, protected %d, KV used %d, free %d, cache %d of %d",
			st.Idle, st.Running, st.Queued, st.CacheProtected, st.KVUsed, st.KVFree, st.CacheTokens, st.KVCapacity)
	}
}

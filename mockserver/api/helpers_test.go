package api

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/gin-gonic/gin"

	"sglmock/mockserver/engine"
	"sglmock/mockserver/profile"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.ReleaseMode)
	os.Exit(m.Run())
}

// pipeListener is an in-memory net.Listener: Dial hands the server end of a
// net.Pipe to Accept. Inside a synctest bubble the whole net/http stack then
// runs on virtual time.
type pipeListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

func (l *pipeListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
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
func (pipeAddr) String() string  { return "sglmock.test:30000" }

// testServer is a Server behind an in-memory listener.
type testServer struct {
	*Server
	client    *http.Client
	transport *http.Transport
	base      string
}

func loadProfile(t *testing.T, name string) *profile.Profile {
	t.Helper()
	p, err := profile.Load(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// startServer starts a ready server; it must be called inside a synctest
// bubble, and the returned stop must run before the bubble ends.
func startServer(t *testing.T, cfg Config) (*testServer, func()) {
	t.Helper()
	if cfg.Profile == nil {
		cfg.Profile = loadProfile(t, "default")
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.MarkReady()
	l := newPipeListener()
	hs := &http.Server{Handler: s.Handler()}
	go hs.Serve(l)
	tr := &http.Transport{DialContext: l.dial}
	ts := &testServer{Server: s, client: &http.Client{Transport: tr}, transport: tr, base: "http://sglmock.test:30000"}
	return ts, func() {
		tr.CloseIdleConnections()
		hs.Close()
		l.Close()
		s.Close()
	}
}

// do sends a request and returns the status, the body and the response.
func (ts *testServer) do(t *testing.T, method, path, body string, header ...string) (int, string, *http.Response) {
	t.Helper()
	code, b, resp, err := ts.send(method, path, body, header...)
	if err != nil {
		t.Fatal(err)
	}
	return code, b, resp
}

// send is do for goroutines other than the test's: it returns errors.
func (ts *testServer) send(method, path, body string, header ...string) (int, string, *http.Response, error) {
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, ts.base+path, r)
	if err != nil {
		return 0, "", nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := ts.client.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp, err
}

// checkIdle asserts the engine holds nothing: no request, no lock, and no
// KV beyond the (unlocked) cache.
func checkIdle(t *testing.T, e *engine.Engine) {
	t.Helper()
	st := e.Stats()
	if !st.Idle || st.CacheProtected != 0 || st.KVUsed != st.CacheTokens {
		t.Fatalf("engine not idle: idle %v, running %d, queued %d, protected %d, KV used %d, cache %d",
			st.Idle, st.Running, st.Queued, st.CacheProtected, st.KVUsed, st.CacheTokens)
	}
}

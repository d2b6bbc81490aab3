package api

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// Connection limits keep a slow or idle client from holding memory and
// sockets forever. They are wall-clock network timeouts, not simulated
// time: a connection is a real resource at any speedup.

// HTTPServer returns an http.Server for the handler with the configured
// connection limits: ReadHeaderTimeout for a request's headers, IdleTimeout
// for a kept-alive connection between requests. There is no write timeout:
// a long stream must not be cut. The body's limits (BodyTimeout, for each
// wait and for the whole body) apply in the handler.
func (s *Server) HTTPServer() *http.Server {
	return &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		ConnContext:       noDelay,
	}
}

// noDelay sets TCP_NODELAY on every accepted connection, so small SSE
// events leave at once (Go's default, made explicit).
func noDelay(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	return ctx
}

// progressBody is a request body that must keep arriving: each read may
// wait at most timeout for bytes, and the whole body must come within
// timeout plus one second per minBodyRate bytes received, so a client that
// declares a large body and trickles it (one byte a minute) or stops is cut
// off instead of holding the handler. A client sending at minBodyRate or
// faster never meets the overall deadline.
type progressBody struct {
	io.ReadCloser
	rc       *http.ResponseController
	timeout  time.Duration
	start    time.Time // the first read
	received int64
}

// minBodyRate is the slowest average pace, in bytes per second, at which a
// request body may arrive after its first timeout.
const minBodyRate = 1 << 20

// bodyTimeoutError is a body cut off at a deadline: overall is the
// whole-body deadline, else the wait for more bytes.
type bodyTimeoutError struct {
	err     error
	overall bool
}

func (e *bodyTimeoutError) Error() string { return e.err.Error() }
func (e *bodyTimeoutError) Unwrap() error { return e.err }

func (b *progressBody) Read(p []byte) (int, error) {
	now := time.Now()
	if b.start.IsZero() {
		b.start = now
	}
	deadline := now.Add(b.timeout)
	overall := b.start.Add(b.timeout + time.Duration(b.received)*time.Second/minBodyRate)
	cappedByOverall := overall.Before(deadline)
	if cappedByOverall {
		deadline = overall
	}
	b.rc.SetReadDeadline(deadline)
	n, err := b.ReadCloser.Read(p)
	b.received += int64(n)
	switch {
	case err == io.EOF:
		// The body is complete: the connection's own reads (the next
		// request, or noticing a client that leaves mid-stream) have no
		// deadline. After a timeout the deadline stays, so the server does
		// not wait again for the rest of the body before closing.
		b.rc.SetReadDeadline(time.Time{})
	case errors.Is(err, os.ErrDeadlineExceeded):
		err = &bodyTimeoutError{err: err, overall: cappedByOverall}
	}
	return n, err
}

// limitBody bounds the request body's size and pace; readers past the size
// get a *http.MaxBytesError and readers past the pace a deadline error,
// which readBody turns into 413 and 408. The body's hold on the body
// budget (readBody) is released when the handlers return (router).
func (s *Server) limitBody(c *exchange) {
	if c.Request.ContentLength > s.cfg.MaxBodyBytes {
		writeTooLarge(c, s.cfg.MaxBodyBytes)
		c.Abort()
		return
	}
	body := c.Request.Body
	if s.cfg.BodyTimeout > 0 {
		body = &progressBody{ReadCloser: body, rc: http.NewResponseController(c.Writer), timeout: s.cfg.BodyTimeout}
	}
	c.Request.Body = http.MaxBytesReader(c.Writer, body, s.cfg.MaxBodyBytes)
}

// writeReadError answers a body that could not be read: too large, too
// slow, or cut off.
func (s *Server) writeReadError(c *exchange, err error) {
	var tooLarge *http.MaxBytesError
	var slow *bodyTimeoutError
	switch {
	case errors.As(err, &tooLarge):
		writeTooLarge(c, tooLarge.Limit)
	case errors.As(err, &slow):
		c.Header("Connection", "close")
		msg := fmt.Sprintf("Request body timeout: no bytes arrived for %v.", s.cfg.BodyTimeout)
		if slow.overall {
			msg = fmt.Sprintf("Request body timeout: the body arrived slower than %d bytes/s after its first %v.", minBodyRate, s.cfg.BodyTimeout)
		}
		writeJSON(c, http.StatusRequestTimeout, errorObject(msg, "Request Timeout", 408))
	default:
		writeValidationError(c, "could not read the request body: "+err.Error())
	}
}

// authenticate checks --api-key as SGLang does: health checks and metrics
// are open, everything else needs the bearer token. The comparison takes
// the same time whatever the token, so it leaks nothing of the key.
func (s *Server) authenticate(c *exchange) {
	if s.cfg.APIKey == "" || c.Request.Method == http.MethodOptions {
		return
	}
	path := c.Request.URL.Path
	if strings.HasPrefix(path, "/health") || strings.HasPrefix(path, "/metrics") {
		return
	}
	got := []byte(c.GetHeader("Authorization"))
	want := []byte("Bearer " + s.cfg.APIKey)
	if subtle.ConstantTimeCompare(got, want) != 1 {
		writeJSON(c, http.StatusUnauthorized, jsonObject{"error": "Unauthorized"})
		c.Abort()
	}
}

// sameOriginOnly guards the routes that change server state (flushing the
// cache, aborting requests) against web pages: a page the user visits
// could otherwise send them from the browser to a server on localhost.
// Browsers mark a request from another site with Sec-Fetch-Site or Origin;
// command-line clients and benchmark scripts send neither. A page that
// rebinds its own domain to this server's address (DNS rebinding) sends
// same-origin requests, still marked as a browser's, so a browser's
// request must also name a Host the server answers to: an IP address, a
// loopback name (localhost, *.localhost), the configured --host or the
// machine's own host name, never another domain. A client that is no
// browser may name the server as it likes (a Kubernetes service name).
// The server never sends CORS headers, so no other site may read a
// response either.
func (s *Server) sameOriginOnly(c *exchange) {
	r := c.Request
	site := r.Header.Get("Sec-Fetch-Site")
	origin := r.Header.Get("Origin")
	ok := site == "" || site == "same-origin" || site == "none"
	if origin != "" {
		u, err := url.Parse(origin)
		ok = ok && err == nil && u.Host == r.Host
	}
	if !ok {
		from := origin
		if from == "" {
			from = "Sec-Fetch-Site: " + site
		}
		s.refuseStateChange(c, fmt.Sprintf(
			"Cross-origin request refused: %s changes the server's state and takes no requests from web pages of other sites (%s).",
			r.URL.Path, clip(from)))
		return
	}
	if (site != "" || origin != "") && !s.knownHost(r.Host) {
		s.refuseStateChange(c, fmt.Sprintf(
			"Host refused: %s changes the server's state and is served to a browser only under an IP address, a loopback name or the server's own name (--host %q), not under Host %q, which a web page could have rebound to this server.",
			r.URL.Path, s.args.Host, clip(r.Host)))
	}
}

func (s *Server) refuseStateChange(c *exchange, message string) {
	writeJSON(c, http.StatusForbidden, errorObject(message, "Forbidden", 403))
	c.Abort()
}

// knownHost reports whether a request's Host names this server in a way
// no other site's page can: an IP literal, a loopback name, the configured
// host or the machine's host name. An empty Host (HTTP/1.0) names no site.
func (s *Server) knownHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	switch {
	case host == "":
		return true
	case net.ParseIP(host) != nil:
		return true
	case host == "localhost" || strings.HasSuffix(host, ".localhost"):
		return true
	case s.args.Host != "" && strings.EqualFold(host, s.args.Host):
		return true
	}
	name, err := os.Hostname()
	return err == nil && strings.EqualFold(host, name)
}

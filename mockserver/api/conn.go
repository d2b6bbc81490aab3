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

	"github.com/gin-gonic/gin"
)

// Connection limits keep a slow or idle client from holding memory and
// sockets forever. They are wall-clock network timeouts, not simulated
// time: a connection is a real resource at any speedup.

// HTTPServer returns an http.Server for the handler with the configured
// connection limits: ReadHeaderTimeout for a request's headers, IdleTimeout
// for a kept-alive connection between requests. There is no write timeout:
// a long stream must not be cut. The body's limit (BodyTimeout) applies per
// read, in the handler.
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
// wait at most timeout for bytes, so a client that declares a large body
// and trickles it (or stops) is cut off instead of holding the handler.
type progressBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	timeout time.Duration
}

func (b *progressBody) Read(p []byte) (int, error) {
	b.rc.SetReadDeadline(time.Now().Add(b.timeout))
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		// The body is complete: the connection's own reads (the next
		// request, or noticing a client that leaves mid-stream) have no
		// deadline. After a timeout the deadline stays, so the server does
		// not wait again for the rest of the body before closing.
		b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// limitBody bounds the request body's size and pace; readers past the size
// get a *http.MaxBytesError and readers past the pace a deadline error,
// which readBody turns into 413 and 408.
func (s *Server) limitBody(c *gin.Context) {
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
func (s *Server) writeReadError(c *gin.Context, err error) {
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		writeTooLarge(c, tooLarge.Limit)
	case errors.Is(err, os.ErrDeadlineExceeded):
		c.Header("Connection", "close")
		writeJSON(c, http.StatusRequestTimeout, errorObject(fmt.Sprintf(
			"Request body timeout: no bytes arrived for %v.", s.cfg.BodyTimeout), "Request Timeout", 408))
	default:
		writeValidationError(c, "could not read the request body: "+err.Error())
	}
}

// authenticate checks --api-key as SGLang does: health checks and metrics
// are open, everything else needs the bearer token. The comparison takes
// the same time whatever the token, so it leaks nothing of the key.
func (s *Server) authenticate(c *gin.Context) {
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
		writeJSON(c, http.StatusUnauthorized, gin.H{"error": "Unauthorized"})
		c.Abort()
	}
}

// sameOriginOnly guards the routes that change server state (flushing the
// cache, aborting requests) against other web sites: a page the user
// visits could otherwise send them from the browser to a server on
// localhost. Browsers mark such requests with Sec-Fetch-Site or Origin;
// command-line clients and benchmark scripts send neither. The server never
// sends CORS headers, so no other site may read a response either.
func sameOriginOnly(c *gin.Context) {
	r := c.Request
	site := r.Header.Get("Sec-Fetch-Site")
	origin := r.Header.Get("Origin")
	ok := site == "" || site == "same-origin" || site == "none"
	if origin != "" {
		u, err := url.Parse(origin)
		ok = ok && err == nil && u.Host == r.Host
	}
	if ok {
		return
	}
	from := origin
	if from == "" {
		from = "Sec-Fetch-Site: " + site
	}
	writeJSON(c, http.StatusForbidden, errorObject(fmt.Sprintf(
		"Cross-origin request refused: %s changes the server's state and takes no requests from web pages of other sites (%s).",
		r.URL.Path, from), "Forbidden", 403))
	c.Abort()
}

package api

import (
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
)

// The router dispatches by method and path, runs the middleware before
// every answer (an unknown route's and a redirect's too), holds a chosen
// status until the handlers end, redirects a path that exists only with
// its trailing slash toggled (307, as FastAPI's redirect_slashes), lists the methods of a
// path asked with another (405 with Allow), and answers a panic with 500.
// A query key given twice counts with its last value, as in Starlette.
func TestRouter(t *testing.T) {
	r := newRouter()
	var trail []string
	r.middleware = []handlerFunc{func(c *exchange) {
		trail = append(trail, "mw "+c.Request.URL.Path)
		if c.GetHeader("X-Refuse") != "" {
			c.Data(http.StatusUnauthorized, "text/plain", []byte("refused"))
			c.Abort()
		}
	}}
	r.notFound = func(c *exchange) { c.Data(http.StatusNotFound, "text/plain", []byte("none")) }
	r.methodNotAllowed = func(c *exchange) { c.Data(http.StatusMethodNotAllowed, "text/plain", []byte("method")) }
	r.onPanic = (&Server{cfg: Config{Logger: slog.New(slog.DiscardHandler)}}).recovered
	r.handle([]string{"GET", "POST"}, "/a", func(c *exchange) { c.Data(http.StatusOK, "text/plain", []byte("a "+c.Query("q"))) })
	r.handle([]string{"GET"}, "/held", func(c *exchange) {
		c.Status(http.StatusAccepted)
		c.Header("X-After", "set after the status")
	})
	r.handle([]string{"GET"}, "/one/:id", func(c *exchange) {
		c.Data(http.StatusOK, "text/plain", []byte("id="+c.Param("id")+" other="+c.Param("x")))
	})
	r.handle([]string{"GET"}, "/rest/*name", func(c *exchange) { c.Data(http.StatusOK, "text/plain", []byte("name="+c.Param("name"))) })
	r.handle([]string{"GET"}, "/panic", func(c *exchange) { panic(errors.New("boom")) })
	r.handle([]string{"GET"}, "/abort", func(c *exchange) { panic(http.ErrAbortHandler) })
	r.handle([]string{"GET"}, "/midway", func(c *exchange) {
		c.Data(http.StatusOK, "text/event-stream", []byte("data: {}\n\n"))
		panic(errors.New("boom"))
	})

	tests := []struct {
		method, target, header string
		code                   int
		body, location, allow  string
	}{
		{"GET", "/a?q=1", "", 200, "a 1", "", ""},
		{"POST", "/a", "", 200, "a ", "", ""},
		{"GET", "/a?q=1&q=2", "", 200, "a 2", "", ""},
		{"GET", "/a", "X-Refuse", 401, "refused", "", ""},
		{"GET", "/nope", "X-Refuse", 401, "refused", "", ""},
		{"GET", "/nope", "", 404, "none", "", ""},
		{"DELETE", "/a", "", 405, "method", "", "GET, POST"},
		{"GET", "/a/?q=1", "", 307, "", "/a?q=1", ""},
		{"POST", "/a/", "", 307, "", "/a", ""},
		{"POST", "/a/", "X-Refuse", 401, "refused", "", ""},
		{"GET", "/held", "", 202, "", "", ""},
		{"GET", "/one/x1", "", 200, "id=x1 other=", "", ""},
		{"GET", "/one/x1/y", "", 404, "none", "", ""},
		{"GET", "/one/", "", 404, "none", "", ""},
		{"GET", "/rest/x/y", "", 200, "name=x/y", "", ""},
		{"GET", "/rest/", "", 200, "name=", "", ""},
		{"GET", "/panic", "", 500, `{"object":"error","message":"boom","type":"Internal Server Error","param":null,"code":500}`, "", ""},
	}
	for _, tt := range tests {
		trail = nil
		req := httptest.NewRequest(tt.method, tt.target, nil)
		if tt.header != "" {
			req.Header.Set(tt.header, "1")
		}
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		body := w.Body.String()
		if tt.code == 307 {
			body = "" // http.Redirect's own link
		}
		if w.Code != tt.code || body != tt.body || w.Header().Get("Location") != tt.location || w.Header().Get("Allow") != tt.allow {
			t.Errorf("%s %s: got %d %q Location %q Allow %q, want %d %q %q %q", tt.method, tt.target,
				w.Code, body, w.Header().Get("Location"), w.Header().Get("Allow"), tt.code, tt.body, tt.location, tt.allow)
		}
		if len(trail) != 1 {
			t.Errorf("%s %s: the middleware ran %d times, want once", tt.method, tt.target, len(trail))
		}
		if tt.target == "/held" && w.Header().Get("X-After") == "" {
			t.Errorf("a header set after the status did not go out: %v", w.Header())
		}
	}
	// A handler's http.ErrAbortHandler goes on to net/http, which closes
	// the connection; so does a panic after the answer began, which a
	// clean end would pass off as the whole answer.
	for _, path := range []string{"/abort", "/midway"} {
		func() {
			defer func() {
				if err := recover(); err != http.ErrAbortHandler {
					t.Errorf("%s: got %v from the router, want http.ErrAbortHandler", path, err)
				}
			}()
			r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", path, nil))
		}()
	}
}

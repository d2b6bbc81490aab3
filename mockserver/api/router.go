package api

import (
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// exchange is one request as its handlers see it: the request, a response
// writer that holds the status until the first byte goes out (so a handler
// may still set headers after choosing it), the route's parameter, and the
// simulated time its body had arrived.
type exchange struct {
	Writer  *responseWriter
	Request *http.Request
	// param is the value of the route's one parameter (a rid, a model
	// name), named paramName.
	paramName, param string
	query            url.Values
	aborted          bool
	// received is the simulated time the body had arrived (readBody);
	// hasReceived says it was read.
	received    time.Duration
	hasReceived bool
	// bodyHold is the request's hold on the body budget (readBody), nil
	// before its body is read; the router releases it when the handlers
	// return.
	bodyHold *budgetHold
}

// handlerFunc handles an exchange; one that has answered and must stop the
// handlers after it calls Abort.
type handlerFunc func(*exchange)

// jsonObject is a JSON object written from Go values.
type jsonObject = map[string]any

// Param is the value of the route's parameter name ("" if the route has
// none of that name).
func (c *exchange) Param(name string) string {
	if name != c.paramName {
		return ""
	}
	return c.param
}

// GetQuery is the query parameter's last value and whether it was given:
// a key given twice counts with its last value, as Starlette's
// QueryParams, which FastAPI reads a scalar parameter from, keeps it.
func (c *exchange) GetQuery(name string) (string, bool) {
	if c.query == nil {
		c.query = c.Request.URL.Query()
	}
	v, ok := c.query[name]
	if !ok || len(v) == 0 {
		return "", false
	}
	return v[len(v)-1], true
}

// Query is the query parameter's last value, "" when not given.
func (c *exchange) Query(name string) string {
	v, _ := c.GetQuery(name)
	return v
}

// GetHeader is the request header's first value.
func (c *exchange) GetHeader(name string) string { return c.Request.Header.Get(name) }

// Header sets a response header; an empty value removes it.
func (c *exchange) Header(name, value string) {
	if value == "" {
		c.Writer.Header().Del(name)
		return
	}
	c.Writer.Header().Set(name, value)
}

// Status sets the response's status; it goes out with the first byte of
// the body, or when the handlers return.
func (c *exchange) Status(code int) { c.Writer.WriteHeader(code) }

// Abort stops the handlers after the current one.
func (c *exchange) Abort() { c.aborted = true }

// Data answers status with body, as contentType unless a handler set one.
func (c *exchange) Data(status int, contentType string, body []byte) {
	if len(c.Writer.Header()["Content-Type"]) == 0 {
		c.Writer.Header()["Content-Type"] = []string{contentType}
	}
	c.Status(status)
	c.Writer.Write(body)
}

// responseWriter holds the status a handler chose until the first byte of
// the body, a flush, or the end of the handlers sends it; a status chosen
// after that is ignored, as net/http would ignore it.
type responseWriter struct {
	http.ResponseWriter
	status  int
	written bool
}

func (w *responseWriter) WriteHeader(code int) {
	if !w.written && code > 0 {
		w.status = code
	}
}

// writeHeaderNow sends the status and headers if they have not gone out.
func (w *responseWriter) writeHeaderNow() {
	if !w.written {
		w.written = true
		w.ResponseWriter.WriteHeader(w.status)
	}
}

func (w *responseWriter) Write(b []byte) (int, error) {
	w.writeHeaderNow()
	return w.ResponseWriter.Write(b)
}

func (w *responseWriter) WriteString(s string) (int, error) {
	w.writeHeaderNow()
	return io.WriteString(w.ResponseWriter, s)
}

// FlushError sends what is buffered, status and headers first; http's
// ResponseController and stallGuard flush through it and see its error.
func (w *responseWriter) FlushError() error {
	w.writeHeaderNow()
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap gives http.ResponseController the connection's writer, for its
// read and write deadlines.
func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// route is one path's handlers by method.
type route map[string][]handlerFunc

// paramRoute serves the paths under prefix, whose remainder is the
// parameter name: one path segment, or with rest the whole remainder,
// slashes included.
type paramRoute struct {
	prefix, name string
	rest         bool
	route        route
}

// router dispatches requests by exact path, or by a path prefix whose
// remainder is a parameter. The middleware runs first for every request,
// an unknown route's and method's too, then the route's handlers, or
// notFound (404) or methodNotAllowed (405, with an Allow header). A path
// that exists only with its trailing slash added or removed is redirected
// there with 307, after the middleware, as SGLang's FastAPI router
// (redirect_slashes) does. A
// handler's panic is logged by onPanic, which answers it if nothing was
// written yet.
type router struct {
	exact            map[string]route
	params           []paramRoute
	middleware       []handlerFunc
	notFound         handlerFunc
	methodNotAllowed handlerFunc
	onPanic          func(c *exchange, err any)
}

func newRouter() *router { return &router{exact: map[string]route{}} }

// handle serves path's methods with handlers. A path ending in /:NAME
// takes one segment as the parameter NAME, one ending in /*NAME the rest
// of the path.
func (r *router) handle(methods []string, path string, handlers ...handlerFunc) {
	rt := r.exact[path]
	if i := strings.LastIndexByte(path, '/'); i >= 0 && len(path) > i+1 && (path[i+1] == ':' || path[i+1] == '*') {
		prefix, name, rest := path[:i+1], path[i+2:], path[i+1] == '*'
		k := slices.IndexFunc(r.params, func(p paramRoute) bool { return p.prefix == prefix })
		if k < 0 {
			r.params = append(r.params, paramRoute{prefix: prefix, name: name, rest: rest, route: route{}})
			k = len(r.params) - 1
		}
		rt = r.params[k].route
	} else if rt == nil {
		rt = route{}
		r.exact[path] = rt
	}
	for _, m := range methods {
		rt[m] = handlers
	}
}

// lookup finds path's route and its parameter.
func (r *router) lookup(path string) (rt route, name, param string) {
	if rt, ok := r.exact[path]; ok {
		return rt, "", ""
	}
	for _, p := range r.params {
		v, ok := strings.CutPrefix(path, p.prefix)
		if ok && (p.rest || v != "" && !strings.Contains(v, "/")) {
			return p.route, p.name, v
		}
	}
	return nil, "", ""
}

func (r *router) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	c := &exchange{Writer: &responseWriter{ResponseWriter: w, status: http.StatusOK}, Request: req}
	defer func() {
		c.bodyHold.release()
		if err := recover(); err != nil {
			r.onPanic(c, err)
		}
	}()
	path := req.URL.Path
	rt, name, param := r.lookup(path)
	if handlers := rt[req.Method]; handlers != nil {
		c.paramName, c.param = name, param
		r.run(c, handlers...)
		c.Writer.writeHeaderNow()
		return
	}
	if rt == nil && path != "/" && req.Method != http.MethodConnect {
		toggled := path + "/"
		if strings.HasSuffix(path, "/") {
			toggled = path[:len(path)-1]
		}
		if other, _, _ := r.lookup(toggled); other != nil {
			u := *req.URL
			u.Path = toggled
			// Behind the middleware, as Starlette's router is behind
			// SGLang's: a request without the API key gets 401, not 307.
			r.run(c, func(c *exchange) { http.Redirect(c.Writer, req, u.RequestURI(), http.StatusTemporaryRedirect) })
			c.Writer.writeHeaderNow()
			return
		}
	}
	if rt != nil {
		allowed := make([]string, 0, len(rt))
		for m := range rt {
			allowed = append(allowed, m)
		}
		slices.Sort(allowed)
		c.Writer.Header().Set("Allow", strings.Join(allowed, ", "))
		c.Writer.status = http.StatusMethodNotAllowed
		r.run(c, r.methodNotAllowed)
	} else {
		c.Writer.status = http.StatusNotFound
		r.run(c, r.notFound)
	}
	c.Writer.writeHeaderNow()
}

// run runs the middleware, then handlers, until one aborts.
func (r *router) run(c *exchange, handlers ...handlerFunc) {
	for _, chain := range [][]handlerFunc{r.middleware, handlers} {
		for _, h := range chain {
			h(c)
			if c.aborted {
				return
			}
		}
	}
}

package api

import (
	"fmt"
	"net/http"
	"strings"
	"unicode/utf16"

	"github.com/gin-gonic/gin"
)

// sse writes Server-Sent Events: "data: " + payload + "\n\n". add buffers
// an event and flush writes the buffered events at once, so events SGLang
// yields back to back (a chat's role chunk and its first content) leave
// together.
type sse struct {
	c       *gin.Context
	started bool
	buf     []byte
}

// start sets the status and headers; they go out with the first flush.
func (w *sse) start() {
	if w.started {
		return
	}
	w.started = true
	h := w.c.Writer.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	w.c.Status(http.StatusOK)
}

// open sends the status line and headers now.
func (w *sse) open() error {
	w.start()
	return w.flush()
}

func (w *sse) add(payload []byte) {
	w.buf = append(w.buf, "data: "...)
	w.buf = append(w.buf, payload...)
	w.buf = append(w.buf, "\n\n"...)
}

func (w *sse) flush() error {
	w.start()
	_, err := w.c.Writer.Write(w.buf)
	w.buf = w.buf[:0]
	if err != nil {
		return err
	}
	w.c.Writer.Flush()
	return nil
}

func (w *sse) data(payload []byte) error {
	w.add(payload)
	return w.flush()
}

func (w *sse) done() error { return w.data([]byte("[DONE]")) }

// streamError is a streaming /generate's answer to a request refused
// inside SGLang's generator: one error event, then [DONE].
func streamError(w *sse, message string) {
	w.data(marshal(gin.H{"error": gin.H{"message": message}}))
	w.done()
}

// streamingError is the payload of an OpenAI stream's error event, as
// SGLang's create_streaming_error_response writes it: the ErrorResponse
// under "error", by Python's json.dumps (a space after each separator,
// non-ASCII escaped).
func streamingError(message, typ string, code int) []byte {
	return fmt.Appendf(nil, `{"error": {"object": "error", "message": %s, "type": %s, "param": null, "code": %d}}`,
		pyString(message), pyString(typ), code)
}

// statusName is Python's HTTPStatus(code).name, the error type SGLang gives
// an abort's error event: 400 is "BAD_REQUEST".
func statusName(code int) string {
	return strings.ToUpper(strings.ReplaceAll(http.StatusText(code), " ", "_"))
}

// pyString quotes s as Python's json.dumps does with ensure_ascii: control
// characters and everything past ASCII as \u escapes (UTF-16 surrogate
// pairs beyond the BMP).
func pyString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r < 0x20 || r > 0x7e && r != 0x7f:
			if r > 0xffff {
				hi, lo := utf16.EncodeRune(r)
				fmt.Fprintf(&b, `\u%04x\u%04x`, hi, lo)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

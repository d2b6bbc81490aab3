package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"unicode/utf8"

	"github.com/sglmock/sglmock/mockserver/engine"
	"github.com/sglmock/sglmock/sim"
)

// Errors and SGLang's answers. A request's error is either a malformed body
// (errMalformed: FastAPI's validation error, which SGLang answers 400 with
// the validation envelope) or a refusal, answered 400 in the endpoint's own
// envelope; the text of both is SGLang's message. writeRefusal maps them to
// the wire, and flushMessage maps the engine's flush outcomes to SGLang's
// text.

// errMalformed is the kind of every malformed-body error (malformed).
var errMalformed = errors.New("api: malformed request body")

// malformedError is a malformed body, with the validation message.
type malformedError struct{ message string }

func (e malformedError) Error() string        { return e.message }
func (e malformedError) Is(target error) bool { return target == errMalformed }

// malformed is a malformed-body error with a formatted message.
func malformed(format string, args ...any) error {
	return malformedError{fmt.Sprintf(format, args...)}
}

// refusal is a refusal whose message is fixed.
type refusal string

func (r refusal) Error() string { return string(r) }

// The fixed refusals of /generate, with SGLang's messages.
var (
	errNoInput       = refusal("Either text, input_ids or input_embeds should be provided.")
	errInputEmbeds   = refusal("input_embeds is not supported by sglmock: send text or input_ids.")
	errEmptyBatch    = refusal("The batch is empty.")
	errRIDNotList    = refusal("The rid should be a list for batch processing.")
	errUnequalCopies = refusal("The parallel_sample_num should be the same for all samples in sample params.")
)

// The OpenAI routes' refusals of an empty input, with SGLang's messages
// (the _validate_request of serving_completions.py and serving_chat.py).
var (
	errEmptyPrompt   = refusal("Prompt cannot be empty")
	errEmptyMessages = refusal("Messages cannot be empty.")
)

// envelope is the shape of an endpoint's refusals.
type envelope int

const (
	generateEnvelope envelope = iota // {"error": {"message": ...}}
	openAIEnvelope                   // the ErrorResponse, type BadRequestError
)

// writeRefusal answers a request that err refused: 400, with the
// validation envelope for a malformed body and the endpoint's own for any
// other error (an engine's InvalidRequestError included).
func writeRefusal(c *exchange, env envelope, err error) {
	switch ctxErr := c.Request.Context().Err(); {
	case ctxErr != nil && errors.Is(err, ctxErr):
		// The client left while its request was tokenized or waited:
		// nobody reads an answer.
	case errors.Is(err, errMalformed):
		writeValidationError(c, err.Error())
	case env == openAIEnvelope:
		writeOpenAIError(c, err.Error())
	default:
		writeGenerateError(c, err.Error())
	}
}

// flushMessage is SGLang's text for a flush's outcome, as /sim/flushes
// reports it: its scheduler's message, or "flushed".
func flushMessage(err error) string {
	switch {
	case err == nil:
		return sim.OutcomeFlushed
	case errors.Is(err, engine.ErrFlushLockstep):
		return "Cache not flushed because there are pending requests. (Another DP rank runs, and this one runs idle batches in lockstep with it.)"
	case errors.Is(err, engine.ErrFlushSettling):
		return "Cache not flushed because there are pending requests. (The last batch is still settling: flush_busy_after_finish_s.)"
	case errors.Is(err, engine.ErrFlushBusy):
		return "Cache not flushed because there are pending requests."
	case errors.Is(err, engine.ErrFlushTimeout):
		return "Timed out waiting for idle state."
	case errors.Is(err, engine.ErrFlushInProgress):
		return "Another flush_cache is already in progress."
	}
	return err.Error()
}

// flushReply is /flush_cache's status and body for a flush's outcome
// (http_server.py: the scheduler's message, or "Flush cache failed.\n"
// when it has none, as for a busy server).
func flushReply(err error) (int, string) {
	switch {
	case err == nil:
		return http.StatusOK, flushedText
	case errors.Is(err, engine.ErrFlushTimeout), errors.Is(err, engine.ErrFlushInProgress):
		return http.StatusBadRequest, flushMessage(err)
	default:
		return http.StatusBadRequest, "Flush cache failed.\n"
	}
}

// schedulerAbort is a request SGLang's scheduler aborts with an HTTP
// status: a prompt the scheduler refuses (engine.InvalidRequestError with
// Scheduler; 400) or the out-of-memory abort of a decode batch's last
// request (a finish with StatusCode 500).
type schedulerAbort struct {
	message string
	status  int
}

// schedulerRefusal reports whether err is a refusal of SGLang's scheduler,
// which answers it after queueing the request, not before.
func schedulerRefusal(err error) (schedulerAbort, bool) {
	var ire *engine.InvalidRequestError
	if errors.As(err, &ire) && ire.Scheduler {
		return schedulerAbort{ire.Message, http.StatusBadRequest}, true
	}
	return schedulerAbort{}, false
}

// abortWithStatus finds an output that ended in an abort with an HTTP
// status, which SGLang's tokenizer manager turns into an error
// (_handle_abort_finish_reason).
func abortWithStatus(outs []*output) (schedulerAbort, bool) {
	for _, o := range outs {
		if f := o.last.Finish; f != nil && f.StatusCode != 0 {
			return schedulerAbort{f.Message, f.StatusCode}, true
		}
	}
	return schedulerAbort{}, false
}

// writeDetail answers a request whose output ended in a 500 or 503
// abort: SGLang's tokenizer manager raises FastAPI's HTTPException, whose
// body is {"detail": message}.
func writeDetail(c *exchange, a schedulerAbort) {
	writeJSON(c, a.status, jsonObject{"detail": a.message})
}

// statusNames are Python's HTTPStatus names, which an OpenAI stream's error
// event gives as its type.
var statusNames = map[int]string{
	http.StatusBadRequest:          "BAD_REQUEST",
	http.StatusInternalServerError: "INTERNAL_SERVER_ERROR",
	http.StatusServiceUnavailable:  "SERVICE_UNAVAILABLE",
}

// streamErrorEvent is the data of an OpenAI stream's error event for an
// abort with a status (serving_chat.py and serving_completions.py; the
// text of serving_base.py's create_streaming_error_response, which
// json.dumps writes: spaces after the separators, non-ASCII escaped).
func streamErrorEvent(a schedulerAbort) []byte {
	b := []byte(`{"error": {"object": "error", "message": `)
	b = appendPythonString(b, a.message)
	b = append(b, `, "type": `...)
	b = appendPythonString(b, statusNames[a.status])
	b = append(b, `, "param": null, "code": `...)
	b = strconv.AppendInt(b, int64(a.status), 10)
	return append(b, "}}"...)
}

// appendPythonString appends s as Python's json.dumps writes a string
// (ensure_ascii): ASCII as it is but the quote, the backslash and control
// characters; everything else as \uXXXX escapes, in UTF-16.
func appendPythonString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	u := func(b []byte, r rune) []byte {
		return append(b, '\\', 'u', hex[r>>12&15], hex[r>>8&15], hex[r>>4&15], hex[r&15])
	}
	b = append(b, '"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b = append(b, '\\', byte(r))
		case r == '\n':
			b = append(b, `\n`...)
		case r == '\r':
			b = append(b, `\r`...)
		case r == '\t':
			b = append(b, `\t`...)
		case r == '\b':
			b = append(b, `\b`...)
		case r == '\f':
			b = append(b, `\f`...)
		case r < 0x20 || r == utf8.RuneError:
			b = u(b, r)
		case r < 0x7f:
			b = append(b, byte(r))
		case r > 0xffff:
			r -= 0x10000
			b = u(u(b, 0xd800+r>>10), 0xdc00+r&0x3ff)
		default:
			b = u(b, r)
		}
	}
	return append(b, '"')
}

// maxEcho bounds the bytes of a client's value that an error message
// repeats: a 1 MB model name gets a short 404, not a 1 MB one.
const maxEcho = 256

// clip is a client's value as an error message repeats it: whole up to
// maxEcho bytes, else its first maxEcho bytes (whole characters) and its
// length.
func clip(s string) string {
	if len(s) <= maxEcho {
		return s
	}
	cut := maxEcho
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s... (%d bytes)", s[:cut], len(s))
}

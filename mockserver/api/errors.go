package api

import (
	"errors"
	"fmt"
	"net/http"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

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

// envelope is the shape of an endpoint's refusals.
type envelope int

const (
	generateEnvelope envelope = iota // {"error": {"message": ...}}
	openAIEnvelope                   // the ErrorResponse, type BadRequestError
)

// writeRefusal answers a request that err refused: 400, with the
// validation envelope for a malformed body and the endpoint's own for any
// other error (an engine's InvalidRequestError included).
func writeRefusal(c *gin.Context, env envelope, err error) {
	switch {
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

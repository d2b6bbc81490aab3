package api

import (
	"strconv"
)

// The chunks of an OpenAI stream, written without reflection: a stream
// sends one per output event, so their cost is the stream's. Each writer
// gives exactly the bytes marshal gives for the same value (see
// TestChunkWritersAreMarshal), writing the common shapes itself (no
// logprobs, no usage, text that needs no escaping) and handing the others
// to marshal.

// appendCompletionChunk appends marshal(streamChunk{..., Choices:
// []any{*c}, Usage: u}) to b.
func appendCompletionChunk(b []byte, id, object string, created int64, model string, c *completionChoice, u *usage) []byte {
	if c.Logprobs != nil || u != nil || !plainJSON(id) || !plainJSON(object) || !plainJSON(model) || !plainJSON(c.Text) ||
		!finishIsPlain(c.FinishReason, c.MatchedStop) {
		return append(b, marshal(streamChunk{ID: id, Object: object, Created: created, Model: model, Choices: []any{*c}, Usage: u})...)
	}
	b = appendChunkHead(b, id, object, created, model, c.Index)
	b = append(b, `,"text":"`...)
	b = append(b, c.Text...)
	b = append(b, `","logprobs":null`...)
	b = appendFinish(b, c.FinishReason, c.MatchedStop)
	return append(b, `}],"usage":null}`...)
}

// appendChatChunk appends marshal(openAIResponse{..., Choices:
// []any{*c}, Usage: u}) to b: no metadata, and "usage" only when set.
func appendChatChunk(b []byte, id, object string, created int64, model string, c *chatChunkChoice, u *usage) []byte {
	d := c.Delta
	if c.Logprobs != nil || u != nil || d.ReasoningContent != nil || !plainJSON(id) || !plainJSON(object) || !plainJSON(model) ||
		!plainJSON(d.Role) || (d.Content != nil && !plainJSON(*d.Content)) || !finishIsPlain(c.FinishReason, c.MatchedStop) {
		return append(b, marshal(openAIResponse{ID: id, Object: object, Created: created, Model: model, Choices: []any{*c}, Usage: u})...)
	}
	b = appendChunkHead(b, id, object, created, model, c.Index)
	b = append(b, `,"delta":{"reasoning_content":null`...)
	if d.Role != "" {
		b = append(b, `,"role":"`...)
		b = append(b, d.Role...)
		b = append(b, '"')
	}
	if d.Content != nil {
		b = append(b, `,"content":"`...)
		b = append(b, *d.Content...)
		b = append(b, '"')
	}
	b = append(b, `},"logprobs":null`...)
	b = appendFinish(b, c.FinishReason, c.MatchedStop)
	return append(b, `}]}`...)
}

// appendChunkHead appends a chunk's fields up to its choice's index.
func appendChunkHead(b []byte, id, object string, created int64, model string, index int) []byte {
	b = append(b, `{"id":"`...)
	b = append(b, id...)
	b = append(b, `","object":"`...)
	b = append(b, object...)
	b = append(b, `","created":`...)
	b = strconv.AppendInt(b, created, 10)
	b = append(b, `,"model":"`...)
	b = append(b, model...)
	b = append(b, `","choices":[{"index":`...)
	return strconv.AppendInt(b, int64(index), 10)
}

// finishIsPlain reports whether appendFinish writes reason and matched.
func finishIsPlain(reason, matched any) bool {
	if r, ok := reason.(string); reason != nil && (!ok || !plainJSON(r)) {
		return false
	}
	switch m := matched.(type) {
	case nil, int32:
		return true
	case string:
		return plainJSON(m)
	}
	return false
}

// appendFinish appends a choice's finish_reason and matched_stop, as
// openAIFinish gives them, when finishIsPlain.
func appendFinish(b []byte, reason, matched any) []byte {
	b = append(b, `,"finish_reason":`...)
	if reason == nil {
		b = append(b, "null"...)
	} else {
		b = append(append(append(b, '"'), reason.(string)...), '"')
	}
	b = append(b, `,"matched_stop":`...)
	switch m := matched.(type) {
	case nil:
		b = append(b, "null"...)
	case int32:
		b = strconv.AppendInt(b, int64(m), 10)
	case string:
		b = append(append(append(b, '"'), m...), '"')
	}
	return b
}

// plainJSON reports whether s is written in JSON as it is between quotes:
// printable ASCII without a quote or a backslash.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

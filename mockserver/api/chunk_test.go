package api

import (
	"bytes"
	"fmt"
	"testing"
)

// The chunk writers give marshal's bytes for every shape a stream sends,
// the ones they write themselves and the ones they hand to marshal.
func TestChunkWritersAreMarshal(t *testing.T) {
	texts := []string{"", " plain words", `a "quote"`, `back\slash`, "tab\tand\nnewline", "<html> & more", "naïve ✓", "\x7f", "bad \xff utf-8"}
	finishes := []struct{ reason, matched any }{
		{nil, nil}, {"length", nil}, {"abort", nil}, {"stop", int32(7)}, {"stop", "END"}, {"stop", `"q"`},
	}
	logprobs := []any{nil, map[string]any{"content": []int{}}}
	usages := []*usage{nil, {PromptTokens: 3, TotalTokens: 5, CompletionTokens: 2}}
	heads := []struct{ id, model string }{{"0123abcd", "default"}, {`i"d`, "m\u2028"}}
	n := 0
	for _, h := range heads {
		for _, text := range texts {
			for _, f := range finishes {
				for _, lp := range logprobs {
					for _, u := range usages {
						c := completionChoice{Index: 2, Text: text, Logprobs: lp, FinishReason: f.reason, MatchedStop: f.matched}
						got := appendCompletionChunk([]byte("prefix"), h.id, "text_completion", 1700000000, h.model, &c, u)
						want := append([]byte("prefix"), marshal(streamChunk{ID: h.id, Object: "text_completion", Created: 1700000000,
							Model: h.model, Choices: []any{c}, Usage: u})...)
						if !bytes.Equal(got, want) {
							t.Fatalf("completion chunk %+v, usage %v:\ngot  %s\nwant %s", c, u, got, want)
						}
						for _, role := range []string{"", "assistant"} {
							for _, content := range []*string{nil, &text} {
								for _, reasoning := range []*string{nil, &text} {
									c := chatChunkChoice{Index: 1, Delta: chatDelta{ReasoningContent: reasoning, Role: role, Content: content},
										Logprobs: lp, FinishReason: f.reason, MatchedStop: f.matched}
									got := appendChatChunk(nil, h.id, "chat.completion.chunk", 1700000001, h.model, &c, u)
									want := marshal(openAIResponse{ID: h.id, Object: "chat.completion.chunk", Created: 1700000001,
										Model: h.model, Choices: []any{c}, Usage: u})
									if !bytes.Equal(got, want) {
										t.Fatalf("chat chunk %s, usage %v:\ngot  %s\nwant %s", fmt.Sprintf("%+v", c), u, got, want)
									}
									n++
								}
							}
						}
					}
				}
			}
		}
	}
	if n < 1000 {
		t.Fatalf("compared %d chat chunks, want every combination", n)
	}
}

// A plain chunk, as nearly every event of a stream is, is written without
// marshal: it allocates nothing.
func TestPlainChunksAllocateNothing(t *testing.T) {
	buf := make([]byte, 0, 1024)
	text := " words"
	comp := completionChoice{Index: 0, Text: text, FinishReason: "stop", MatchedStop: int32(9)}
	chat := chatChunkChoice{Index: 0, Delta: chatDelta{Role: "assistant", Content: &text}}
	allocs := testing.AllocsPerRun(100, func() {
		appendCompletionChunk(buf[:0], "0123abcd", "text_completion", 1, "default", &comp, nil)
		appendChatChunk(buf[:0], "0123abcd", "chat.completion.chunk", 1, "default", &chat, nil)
	})
	if allocs != 0 {
		t.Fatalf("got %v allocations a pair of chunks, want 0", allocs)
	}
}

package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/sglmock/sglmock/mockserver/engine"
	"github.com/sglmock/sglmock/mockserver/tokenizer"
)

// streamedBytes runs encode into a sink that hands on answerChunk at a
// time, checking that no piece handed on passes a chunk and an element,
// that the count encodedSize gives is the bytes, and that the two passes
// agree.
func streamedBytes(t *testing.T, encode func(*jsonSink)) []byte {
	t.Helper()
	var out bytes.Buffer
	largest := 0
	j := &jsonSink{out: func(b []byte) error {
		largest = max(largest, len(b))
		out.Write(b)
		return nil
	}}
	encode(j)
	j.emit()
	if n := encodedSize(nil, encode); n != int64(out.Len()) {
		t.Fatalf("encodedSize counts %d bytes, the encoding gives %d", n, out.Len())
	}
	// A piece is a chunk and at most what one element or one string piece
	// adds past it.
	if largest > answerChunk+64<<10 {
		t.Fatalf("a piece of %d bytes was handed on; want at most about %d", largest, answerChunk)
	}
	return out.Bytes()
}

// fakeOutput is an output of n tokens drawn by r, including bytes JSON
// escapes (quotes, backslashes, control bytes, <, >, &) and bytes that are
// not UTF-8, as a finished request would hold it.
func fakeOutput(t *testing.T, r *rand.Rand, tok *tokenizer.Tokenizer, n int, lp logprobParams, finish *engine.Finish) *output {
	t.Helper()
	prompt := make([]int32, 3+r.IntN(300))
	for i := range prompt {
		prompt[i] = int32(1024 + r.IntN(5000))
	}
	it := item{req: engine.Request{InputIDs: prompt}, logprobs: lp, index: r.IntN(5)}
	o := &output{tok: tok, item: it, rid: "rid-\"<&>", wall: func(d time.Duration) time.Time { return time.Unix(1700000000, 0).Add(d) }}
	ids := make([]int32, n)
	for i := range ids {
		switch r.IntN(4) {
		case 0:
			ids[i] = int32(r.IntN(256)) // a byte: '"', '\\', '<', 0x80..0xff
		default:
			ids[i] = int32(1024 + r.IntN(20000))
		}
	}
	ev := engine.Event{Tokens: ids, CompletionTokens: n, PromptTokens: len(prompt), CachedTokens: r.IntN(3), Finish: finish,
		Truth: &engine.Truth{Arrival: time.Second, Finished: 3 * time.Second, FirstToken: 2 * time.Second, Prefilled: true}}
	o.add(ev)
	if f := finish; f != nil && f.MatchedString != nil {
		f.MatchedAt = len(o.text) / 2
	}
	return o
}

// The answers written as they are encoded are exactly the answers
// marshalled whole, whatever their outputs hold: /generate's result
// objects, the completions and chat answers (echo and logprobs included)
// and the render endpoints' prompts.
// envelopes are completions answers' fields around the choices: usage with
// and without details, metadata and sglext there or not, strings to escape.
var envelopes = func() []openAIResponse {
	storage, backend := 5, "file"
	return []openAIResponse{
		{ID: "id\"1", Created: 17, Model: "m<1>", Usage: &usage{PromptTokens: 3, TotalTokens: 5, CompletionTokens: 2},
			Metadata: &metadata{WeightVersion: weightVersion}},
		{ID: "0123abcd", Created: 1796415696, Model: "sglmock/small-1b",
			Usage:    &usage{PromptTokens: 116, TotalTokens: 132, CompletionTokens: 16, PromptTokensDetails: &promptTokensDetails{CachedTokens: 100}, ReasoningTokens: 4},
			Metadata: &metadata{WeightVersion: "v\u2028\t2"},
			Sglext:   &sglext{CachedTokensDetails: &cachedTokensDetails{Device: 1, Host: 2, Storage: &storage, StorageBackend: &backend}}},
		{ID: "é\x01\xff", Created: -1, Model: ""},
		{ID: "x", Created: 0, Model: "m", Sglext: &sglext{}},
	}
}()

func TestStreamedAnswersAreMarshal(t *testing.T) {
	tok, err := tokenizer.Builtin(tokenizer.BuiltinOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	stop, tokenStop := "\"<stop>", int32(7)
	finishes := []*engine.Finish{
		nil,
		{Reason: engine.FinishLength, Length: 9},
		{Reason: engine.FinishStop, MatchedString: &stop},
		{Reason: engine.FinishStop, MatchedToken: &tokenStop},
		{Reason: engine.FinishAbort, Message: "Aborted"},
	}
	logprobs := []logprobParams{
		{},
		{on: true, start: -1},
		{on: true, start: 0, top: 3, text: true},
		{on: true, start: 2, top: 20},
		{on: true, start: 0, top: 1, text: true},
	}
	for trial := range 40 {
		lp := logprobs[trial%len(logprobs)]
		n := []int{0, 1, 7, 3000, 9000}[r.IntN(5)]
		o := fakeOutput(t, r, tok, n, lp, finishes[trial%len(finishes)])
		name := fmt.Sprintf("trial %d (%d tokens, logprobs %+v)", trial, n, lp)
		for _, withIndex := range []bool{false, true} {
			got := streamedBytes(t, func(j *jsonSink) { encodeGenerate(j, o, withIndex) })
			if want := marshal(o.response(withIndex)); !bytes.Equal(got, want) {
				t.Fatalf("%s: /generate, index %v:\n got %.300s\nwant %.300s", name, withIndex, diffAt(got, want), diffAt(want, got))
			}
		}
		outs := []*output{o, fakeOutput(t, r, tok, r.IntN(50), lp, finishes[0])}
		for _, chat := range []bool{false, true} {
			run := &openAIRun{chat: chat, object: "text_completion"}
			if !chat && trial%2 == 0 {
				run.echo = func(i int) string { return fmt.Sprintf("echoed \"prompt\" <%d> é", i) }
			}
			resp := envelopes[trial%len(envelopes)]
			resp.Object = run.object
			got := streamedBytes(t, func(j *jsonSink) { run.encodeAnswer(j, resp, outs) })
			resp.Choices = run.choices(outs)
			if want := marshal(resp); !bytes.Equal(got, want) {
				t.Fatalf("%s: chat %v, echo %v:\n got %.300s\nwant %.300s", name, chat, run.echo != nil, diffAt(got, want), diffAt(want, got))
			}
		}
		salt := "s\"alt"
		rendered := renderedPrompt{RequestID: "cmpl-1", TokenIDs: o.ids, SamplingParams: map[string]any{"max_tokens": 3, "stop": []string{"<x>"}},
			Model: "m", CacheSalt: &salt}
		got := streamedBytes(t, func(j *jsonSink) { encodeRendered(j, &rendered) })
		if want := marshal(rendered); !bytes.Equal(got, want) {
			t.Fatalf("%s: render:\n got %.300s\nwant %.300s", name, diffAt(got, want), diffAt(want, got))
		}
	}
}

// diffAt is b from a little before where it first differs from other.
func diffAt(b, other []byte) []byte {
	i := 0
	for i < len(b) && i < len(other) && b[i] == other[i] {
		i++
	}
	return b[max(i-60, 0):]
}

// appendJSONFloat writes a float64 exactly as marshal does.
func TestAppendJSONFloatIsMarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	floats := []float64{0, -0.0, 1, -1, 1e-6, 9.99e-7, 1e-7, 1e21, 9.99e20, 123456789, 1e-300, math.MaxFloat64, math.SmallestNonzeroFloat64, -14.5}
	for range 10000 {
		floats = append(floats, math.Log(r.Float64()), r.NormFloat64()*math.Pow(10, float64(r.IntN(60)-30)))
	}
	for _, f := range floats {
		if got, want := appendJSONFloat(nil, f), marshal(f); !bytes.Equal(got, want) {
			t.Fatalf("%s: got %s, want %s", strconv.FormatFloat(f, 'g', -1, 64), got, want)
		}
	}
}

// marshal writes a negative exponent with two digits, as Python's
// json.dumps does, and leaves the text of strings as it is.
func TestMarshalPadsExponents(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want string
	}{
		{1.07585e-8, `1.07585e-08`},
		{[]float64{-1e-7, 9e-9, 1e-10, 1e21, 1e-6}, `[-1e-07,9e-09,1e-10,1e+21,0.000001]`},
		{map[string]any{"1e-7": "x 1e-7 \" 2e-8", "y": 3e-7}, `{"1e-7":"x 1e-7 \" 2e-8","y":3e-07}`},
		{"e-5", `"e-5"`},
		{json.RawMessage(`[1e-7,"1e-7"]`), `[1e-07,"1e-7"]`},
	} {
		if got := string(marshal(tc.v)); got != tc.want {
			t.Errorf("marshal(%#v): got %s, want %s", tc.v, got, tc.want)
		}
	}
}

// choices are the answer's choices, one per output, as structs: marshalled
// with the response, they are the bytes encodeAnswer must give.
func (r *openAIRun) choices(outs []*output) []any {
	choices := make([]any, len(outs))
	for i, o := range outs {
		reason, matched := openAIFinish(o.last.Finish)
		text := string(o.visibleText())
		if r.echo != nil {
			text = r.echo(i) + text
		}
		if r.chat {
			choices[i] = chatChoice{Index: i, Message: chatMessageOut{Role: "assistant", Content: text}, Logprobs: r.logprobs(o, 0, false),
				FinishReason: reason, MatchedStop: matched}
		} else {
			choices[i] = completionChoice{Index: i, Text: text, Logprobs: r.logprobs(o, 0, r.echo != nil), FinishReason: reason, MatchedStop: matched}
		}
	}
	return choices
}

// TestEncodeWhole: a short answer is encoded whole into one buffer, and one
// that passes answerChunk after all (short only estimates) comes whole too.
func TestEncodeWhole(t *testing.T) {
	for _, n := range []int{0, 10, answerChunk - 1, answerChunk, 3*answerChunk + 7} {
		text := bytes.Repeat([]byte("ab"), n/2+1)[:n]
		encode := func(j *jsonSink) {
			j.rawString(`{"text":`)
			j.str(text)
			j.rawString("}")
		}
		got, w := encodeWhole(encode)
		if want := streamedBytes(t, encode); !bytes.Equal(got, want) {
			t.Errorf("%d bytes of text: got %d bytes %.40q, want %d bytes %.40q", n, len(got), got, len(want), want)
		}
		w.done()
	}
}

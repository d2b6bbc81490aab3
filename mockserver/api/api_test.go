package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
	"github.com/sglmock/sglmock/mockserver/profile"
	"github.com/sglmock/sglmock/mockserver/tokenizer"
	"github.com/sglmock/sglmock/sim"
)

func ids(from, n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(2000 + from + i*37)
	}
	return out
}

// jsonOf renders v as the server does: compact, without HTML escaping.
func jsonOf(v any) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// builtinTok and withBOS are the built-in tokenizer as a profile without
// and with add_bos_token makes it.
var builtinTok, withBOS = builtin(tokenizer.BuiltinOptions{}), builtin(tokenizer.BuiltinOptions{AddBOS: true})

func builtin(o tokenizer.BuiltinOptions) *tokenizer.Tokenizer {
	t, err := tokenizer.Builtin(o)
	if err != nil {
		panic(err)
	}
	return t
}

// expectedOutput is what the mock generates for a prompt: the tokens, and
// the simulated time of each, for a lone request on an idle server.
func expectedOutput(p *profile.Profile, prompt []int32, n int) ([]int32, []time.Duration) {
	h := tokenizer.PromptHash(prompt)
	var toks []int32
	var at []time.Duration
	t := profile.Duration(p.PrefillChunkSeconds(0, len(prompt)))
	for i := range n {
		if i > 0 {
			t += profile.Duration(p.DecodeRoundSeconds(1, len(prompt)+i))
		}
		toks = append(toks, builtinTok.OutputToken(h, i))
		at = append(at, t)
	}
	return toks, at
}

// generateResponse is the part of a /generate result the tests read.
type generateResponse struct {
	Text      string  `json:"text"`
	OutputIDs []int32 `json:"output_ids"`
	MetaInfo  struct {
		ID                 string   `json:"id"`
		FinishReason       any      `json:"finish_reason"`
		PromptTokens       int      `json:"prompt_tokens"`
		CompletionTokens   int      `json:"completion_tokens"`
		CachedTokens       int      `json:"cached_tokens"`
		SpecVerifyCt       *int     `json:"spec_verify_ct"`
		SpecAcceptLength   *float64 `json:"spec_accept_length"`
		SpecAcceptedDrafts *int     `json:"spec_accepted_drafts"`
		SpecProposedDrafts *int     `json:"spec_proposed_drafts"`
	} `json:"meta_info"`
	Index *int `json:"index"`
}

func TestGenerateNonStreamBytes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{})
		prompt := ids(0, 100)
		start := time.Now()
		code, body, resp := ts.Do(t, "POST", "/generate",
			fmt.Sprintf(`{"input_ids": %s, "sampling_params": {"max_new_tokens": 3, "temperature": 0}, "rid": "r1", "unknown_field": [1]}`, jsonOf(prompt)))
		took := time.Since(start)
		toks, at := expectedOutput(ts.Engine().Profile(), prompt, 3)
		if code != 200 {
			t.Fatalf("got %d %s, want 200", code, body)
		}
		mocktest.Golden(t, "generate/response.json", []byte(body))
		var got generateResponse
		if err := json.Unmarshal([]byte(body), &got); err != nil || got.Text != builtinTok.Decode(toks, false) || !slices.Equal(got.OutputIDs, toks) {
			t.Fatalf("got %s (%v), want the text and ids of %v", body, err, toks)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Fatalf("content type: got %q", ct)
		}
		// SGLang's JSONResponse has a length; the answer is not chunked.
		if resp.ContentLength != int64(len(body)) || len(resp.TransferEncoding) != 0 {
			t.Fatalf("content length %d, transfer encoding %v: want %d and none", resp.ContentLength, resp.TransferEncoding, len(body))
		}
		if took != at[2] {
			t.Fatalf("client latency: got %v, want exactly the modelled %v", took, at[2])
		}
		// A cache hit is all device (GPU) tokens.
		_, body, _ = ts.Do(t, "POST", "/generate", fmt.Sprintf(`{"input_ids": %s, "sampling_params": {"max_new_tokens": 1}}`, jsonOf(prompt)))
		if want := `"cached_tokens":99,"cached_tokens_details":{"device":99,"host":0}`; !strings.Contains(body, want) {
			t.Fatalf("cached request: %s lacks %s", body, want)
		}
	})
}

// A streaming /generate answers with its status line at once, before
// prefill (SGLang returns its StreamingResponse first); the events come out
// of the model's timeline exactly.
func TestGenerateStreamBytesAndTiming(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{})
		prompt := ids(1, 300)
		toks, at := expectedOutput(ts.Engine().Profile(), prompt, 3)
		s := postStream(t, ts, "/generate", fmt.Sprintf(
			`{"input_ids": %s, "sampling_params": {"max_new_tokens": 3}, "rid": "s1", "stream": true}`, jsonOf(prompt)))
		if ct := s.resp.Header.Get("Content-Type"); ct != "text/event-stream; charset=utf-8" || s.resp.StatusCode != 200 {
			t.Fatalf("got %d, content type %q", s.resp.StatusCode, ct)
		}
		if s.headers != 0 {
			t.Fatalf("status line at %v, want it at once, before the %v prefill", s.headers, at[0])
		}
		mocktest.Golden(t, "generate/stream.txt", []byte(strings.Join(s.events, "\n")+"\n"))
		for k := range 3 {
			var ev generateResponse
			if err := json.Unmarshal([]byte(s.events[k]), &ev); err != nil || !slices.Equal(ev.OutputIDs, toks[:k+1]) {
				t.Fatalf("event %d: %s (%v), want the ids %v", k+1, s.events[k], err, toks[:k+1])
			}
		}
		// The first event comes out of prefill; each later one a round after.
		for k := range 3 {
			if s.at[k] != at[k] {
				t.Fatalf("event %d arrived at %v, want exactly %v", k+1, s.at[k], at[k])
			}
		}
		// A stream refused after its headers went out gets one error event.
		s = postStream(t, ts, "/generate", `{"text": "x", "input_ids": [1], "stream": true}`)
		if s.resp.StatusCode != 200 || s.headers != 0 || len(s.events) != 2 ||
			s.events[0] != `{"error":{"message":"Either text, input_ids or input_embeds should be provided."}}` {
			t.Fatalf("refused stream: %d at %v, %q", s.resp.StatusCode, s.headers, s.events)
		}
	})
}

func TestStreamIntervalAndSpeculativeBursts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{Profile: mocktest.Profile(t, "llama-8b-eagle3-h100")})
		_, before, _ := ts.Do(t, "GET", "/server_info", "")
		if strings.Contains(before, "avg_spec_accept_length") {
			t.Fatal("avg_spec_accept_length must be absent before any speculative round")
		}
		_, body, _ := ts.Do(t, "POST", "/generate", `{"text": "Tell me a story.", "sampling_params": {"max_new_tokens": 60}, "stream": true, "rid": "spec"}`)
		events := sseEvents(t, body)
		var prev, jumps int
		var last generateResponse
		for _, e := range events[:len(events)-1] {
			if err := json.Unmarshal([]byte(e), &last); err != nil {
				t.Fatal(err)
			}
			if last.MetaInfo.CompletionTokens-prev > 1 {
				jumps++
			}
			if len(last.OutputIDs) != last.MetaInfo.CompletionTokens {
				t.Fatalf("cumulative output_ids: %d ids for %d tokens", len(last.OutputIDs), last.MetaInfo.CompletionTokens)
			}
			prev = last.MetaInfo.CompletionTokens
		}
		if jumps == 0 {
			t.Fatal("no event carried several speculative tokens")
		}
		m := last.MetaInfo
		if m.SpecVerifyCt == nil || *m.SpecAcceptLength != 60/float64(*m.SpecVerifyCt) ||
			*m.SpecAcceptedDrafts != 60-1-*m.SpecVerifyCt || *m.SpecProposedDrafts != 3**m.SpecVerifyCt {
			t.Fatalf("spec fields: %s", events[len(events)-2])
		}
		if len(events)-1 != *m.SpecVerifyCt+1 {
			t.Fatalf("got %d events, want one per verify round plus the prefill one (%d)", len(events)-1, *m.SpecVerifyCt+1)
		}
		// SGLang folds the speculative totals in at a decode log, every 40
		// decode batches: after these few rounds there is no average yet.
		if _, after, _ := ts.Do(t, "GET", "/server_info", ""); strings.Contains(after, "avg_spec_accept_length") {
			t.Fatalf("server_info shows avg_spec_accept_length after %d decode rounds, fewer than 40", *m.SpecVerifyCt)
		}
		// stream_interval 4 counts tokens, not rounds: an event goes when
		// the output's length is 1 mod 4, and at the finish.
		_, body, _ = ts.Do(t, "POST", "/generate", `{"text": "Tell me a story.", "sampling_params": {"max_new_tokens": 60, "stream_interval": 4}, "stream": true, "rid": "spec2"}`)
		events = sseEvents(t, body)
		var truth sim.Truth
		_, tb, _ := ts.Do(t, "GET", "/sim/requests/spec2", "")
		if err := json.Unmarshal([]byte(tb), &truth); err != nil {
			t.Fatal(err)
		}
		var want []int
		n := 1 // the prefill's token
		want = append(want, n)
		for _, run := range truth.Rounds {
			for range run.Count {
				if n += run.Gained; n == 60 || n%4 == 1 {
					want = append(want, n)
				}
			}
		}
		var got []int
		for _, e := range events[:len(events)-1] {
			var ev generateResponse
			json.Unmarshal([]byte(e), &ev)
			got = append(got, ev.MetaInfo.CompletionTokens)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("stream_interval 4: events at %v tokens, want %v", got, want)
		}
	})
}

// flushedBody is SGLang's /flush_cache reply on success, spelled out.
const flushedBody = "Cache flushed.\nPlease check backend logs for more details. " +
	"(When there are running or waiting requests, the operation will not be performed.)\n"

// sseEvents splits an SSE body into its data payloads, checking framing.
func sseEvents(t *testing.T, body string) []string {
	t.Helper()
	if !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Fatalf("stream does not end with [DONE]: %q", body[max(0, len(body)-80):])
	}
	var out []string
	for _, part := range strings.SplitAfter(body, "\n\n") {
		if part == "" {
			continue
		}
		if !strings.HasPrefix(part, "data: ") || !strings.HasSuffix(part, "\n\n") || strings.Count(part, "\n") != 2 {
			t.Fatalf("bad SSE framing: %q", part)
		}
		out = append(out, strings.TrimSuffix(strings.TrimPrefix(part, "data: "), "\n\n"))
	}
	return out
}

func TestGenerateBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{})
		code, body, _ := ts.Do(t, "POST", "/generate", `{"text": ["one prompt", "another prompt"], "sampling_params": {"max_new_tokens": 4}, "rid": ["b0", "b1"]}`)
		var list []generateResponse
		if err := json.Unmarshal([]byte(body), &list); code != 200 || err != nil || len(list) != 2 {
			t.Fatalf("batch: got %d %s", code, body)
		}
		if list[0].MetaInfo.ID != "b0" || list[1].MetaInfo.ID != "b1" || list[1].MetaInfo.CompletionTokens != 4 {
			t.Fatalf("batch results out of order or incomplete: %s", body)
		}
		_, body, _ = ts.Do(t, "POST", "/generate", `{"input_ids": [[5000, 5001, 5002], [6000, 6001]], "sampling_params": [{"max_new_tokens": 2}, {"max_new_tokens": 3}], "stream": true}`)
		seen := map[int]int{}
		for _, e := range sseEvents(t, body) {
			if e == "[DONE]" {
				continue
			}
			var ev generateResponse
			json.Unmarshal([]byte(e), &ev)
			if ev.Index == nil {
				t.Fatalf("batch stream event without index: %s", e)
			}
			seen[*ev.Index] = ev.MetaInfo.CompletionTokens
		}
		if seen[0] != 2 || seen[1] != 3 {
			t.Fatalf("batch stream: final tokens per index %v, want 0:2 1:3", seen)
		}
		// n copies of one prompt.
		_, body, _ = ts.Do(t, "POST", "/generate", `{"text": "same", "sampling_params": {"max_new_tokens": 2, "n": 3}}`)
		if err := json.Unmarshal([]byte(body), &list); err != nil || len(list) != 3 {
			t.Fatalf("n=3: got %s", body)
		}
		mocktest.CheckIdle(t, ts.Engine())
	})
}

func TestFlushCacheOverHTTP(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{Profile: mocktest.Profile(t, "default")})
		prompt := jsonOf(ids(2, 500))
		gen := func(rid string) generateResponse {
			_, body, _ := ts.Do(t, "POST", "/generate", fmt.Sprintf(`{"input_ids": %s, "sampling_params": {"max_new_tokens": 1}, "rid": %q}`, prompt, rid))
			var r generateResponse
			if err := json.Unmarshal([]byte(body), &r); err != nil {
				t.Fatal(body)
			}
			return r
		}
		if a, b := gen("a"), gen("b"); a.MetaInfo.CachedTokens != 0 || b.MetaInfo.CachedTokens != 499 {
			t.Fatalf("cached: %d then %d, want 0 then 499", a.MetaInfo.CachedTokens, b.MetaInfo.CachedTokens)
		}
		// Right after a response SGLang's overlap scheduler still holds the
		// last batch for about one decode step (the default profile's 4 ms).
		if code, body, _ := ts.Do(t, "POST", "/flush_cache", ""); code != 400 || body != "Flush cache failed.\n" {
			t.Fatalf("/flush_cache right after a response: got %d %q, want 400 %q", code, body, "Flush cache failed.\n")
		}
		time.Sleep(4 * time.Millisecond)
		for _, method := range []string{"GET", "POST"} {
			code, body, _ := ts.Do(t, method, "/flush_cache", "")
			if code != 200 || body != flushedBody {
				t.Fatalf("%s /flush_cache when idle: got %d %q", method, code, body)
			}
		}
		if c := gen("c"); c.MetaInfo.CachedTokens != 0 {
			t.Fatalf("after flush: cached %d, want 0", c.MetaInfo.CachedTokens)
		}
		// Busy: a long request runs in the background.
		go ts.Send("POST", "/generate", fmt.Sprintf(`{"input_ids": %s, "sampling_params": {"max_new_tokens": 300}}`, jsonOf(ids(3, 400))))
		time.Sleep(50 * time.Millisecond)
		// SGLang's bodies, byte for byte, without a Content-Type.
		tests := []struct {
			query string
			code  int
			body  string
		}{
			{"", 400, "Flush cache failed.\n"},
			{"?timeout=0.01", 400, "Timed out waiting for idle state."},
			{"?timeout=-1", 400, `"type":"Bad Request"`},
			{"?timeout=abc", 400, `"type":"Bad Request"`},
			{"?timeout=60", 200, flushedBody},
		}
		for _, tt := range tests {
			code, body, resp := ts.Do(t, "POST", "/flush_cache"+tt.query, "")
			exact := !strings.HasPrefix(tt.body, `"`)
			if code != tt.code || (exact && body != tt.body) || (!exact && !strings.Contains(body, tt.body)) {
				t.Fatalf("flush%s: got %d %q, want %d with %q", tt.query, code, body, tt.code, tt.body)
			}
			if ct, ok := resp.Header["Content-Type"]; exact && ok {
				t.Fatalf("flush%s: got Content-Type %q, want none", tt.query, ct)
			}
		}
		body := getOK(t, ts, "/sim/flushes")
		var hist []map[string]any
		json.Unmarshal([]byte(body), &hist)
		if len(hist) != 6 || hist[0]["ok"] != false || hist[3]["ok"] != false || hist[5]["ok"] != true {
			t.Fatalf("flush history: %s", body)
		}
		mocktest.CheckIdle(t, ts.Engine())
	})
}

// A flush right after a response, on a profile whose server settles 50 ms
// after a batch, and a flush while another is parked, in SGLang's
// precedence and bytes.
func TestFlushRightAfterAResponseOverHTTP(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mocktest.Profile(t, "default")
		p.FlushBusyAfterFinishS = 0.05
		ts := mocktest.Start(t, api.Config{Profile: p})
		gen := fmt.Sprintf(`{"input_ids": %s, "sampling_params": {"max_new_tokens": 4}}`, jsonOf(ids(2, 500)))
		if code, body, _ := ts.Do(t, "POST", "/generate", gen); code != 200 {
			t.Fatalf("generate: %d %s", code, body)
		}
		if code, body, _ := ts.Do(t, "POST", "/flush_cache", ""); code != 400 || body != "Flush cache failed.\n" {
			t.Fatalf("flush right after a response: got %d %q, want 400 %q", code, body, "Flush cache failed.\n")
		}
		if code, body, _ := ts.Do(t, "POST", "/flush_cache?timeout=1", ""); code != 200 || body != flushedBody {
			t.Fatalf("flush with a timeout right after a response: got %d %q", code, body)
		}
		// A parked flush refuses any new flush first, even one that may not wait.
		go ts.Send("POST", "/generate", fmt.Sprintf(`{"input_ids": %s, "sampling_params": {"max_new_tokens": 300}}`, jsonOf(ids(3, 400))))
		time.Sleep(50 * time.Millisecond)
		parked := make(chan string, 1)
		go func() {
			code, body, _, _ := ts.Send("POST", "/flush_cache?timeout=1000", "")
			parked <- fmt.Sprint(code, " ", body)
		}()
		time.Sleep(10 * time.Millisecond)
		const inProgress = "Another flush_cache is already in progress."
		for _, q := range []string{"", "?timeout=5"} {
			if code, body, _ := ts.Do(t, "POST", "/flush_cache"+q, ""); code != 400 || body != inProgress {
				t.Fatalf("flush%s while one is parked: got %d %q, want 400 %q", q, code, body, inProgress)
			}
		}
		if got, want := <-parked, "200 "+flushedBody; got != want {
			t.Fatalf("parked flush: got %q, want %q", got, want)
		}
		mocktest.CheckIdle(t, ts.Engine())
	})
}

// Under a profile whose tokenizer adds BOS (llama), /tokenize and every
// text prompt begin with it; input_ids are taken as they are.
func TestBOSOverHTTP(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{Profile: mocktest.Profile(t, "llama-8b-eagle3-h100")})
		ids := withBOS.EncodePrompt(nil, "Hello world")
		code, body, _ := ts.Do(t, "POST", "/tokenize", `{"prompt": "Hello world"}`)
		if code != 200 || body != fmt.Sprintf(`{"count":3,"max_model_len":131072,"tokens":%s}`, jsonOf(ids)) || ids[0] != tokenizer.BOS {
			t.Fatalf("/tokenize: %d %s", code, body)
		}
		// add_special_tokens and skip_special_tokens, as SGLang's
		// /tokenize and /detokenize take them.
		code, body, _ = ts.Do(t, "POST", "/tokenize", `{"prompt": "Hello world", "add_special_tokens": false}`)
		if want := fmt.Sprintf(`{"count":2,"max_model_len":131072,"tokens":%s}`, jsonOf(ids[1:])); code != 200 || body != want {
			t.Fatalf("/tokenize without special tokens: got %d %s, want %s", code, body, want)
		}
		for _, tt := range []struct{ skip, want string }{
			{``, `{"text":"Hello world"}`},
			{`, "skip_special_tokens": true`, `{"text":"Hello world"}`},
			{`, "skip_special_tokens": false`, `{"text":"<|begin_of_text|>Hello world"}`},
		} {
			code, body, _ := ts.Do(t, "POST", "/detokenize", fmt.Sprintf(`{"tokens": %s%s}`, jsonOf(ids), tt.skip))
			if code != 200 || body != tt.want {
				t.Fatalf("/detokenize%s: got %d %s, want %s", tt.skip, code, body, tt.want)
			}
		}
		for _, tt := range []struct{ body, want string }{
			{`{"text": "Hello world", "sampling_params": {"max_new_tokens": 1}}`, `"prompt_tokens":3,`},
			{fmt.Sprintf(`{"input_ids": %s, "sampling_params": {"max_new_tokens": 1}}`, jsonOf(builtinTok.Encode(nil, "Hello world"))), `"prompt_tokens":2,`},
		} {
			if code, body, _ := ts.Do(t, "POST", "/generate", tt.body); code != 200 || !strings.Contains(body, tt.want) {
				t.Fatalf("/generate %s: got %d %s, want %s", tt.body, code, body, tt.want)
			}
		}
		code, body, _ = ts.Do(t, "POST", "/v1/completions", `{"model": "m", "prompt": "Hello world", "max_tokens": 1}`)
		if code != 200 || !strings.Contains(body, `"prompt_tokens":3,`) {
			t.Fatalf("/v1/completions: %d %s", code, body)
		}
	})
}

func TestBadInputLeavesNothingBehind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mocktest.Profile(t, "default")
		p.ContextLength = 1000
		ts := mocktest.Start(t, api.Config{Profile: p, MaxBodyBytes: 64 << 10})
		long := jsonOf(ids(0, 1000))
		tests := []struct {
			name, method, path, body string
			header                   []string
			code                     int
			want                     string
		}{
			{"malformed JSON", "POST", "/generate", `{"text": "x"`, nil, 400, `{"object":"error","message":"`},
			{"wrong type", "POST", "/generate", `{"text": "x", "stream": "yes"}`, nil, 400,
				`{"object":"error","message":"Input should be a valid bool: field \"stream\" got a JSON string","type":"Bad Request","param":null,"code":400}`},
			{"wrong type in sampling_params", "POST", "/generate", `{"text": "x", "sampling_params": {"max_new_tokens": "ten"}}`, nil, 400,
				`sampling_params: Input should be a valid int: field \"max_new_tokens\" got a JSON string`},
			{"text and input_ids", "POST", "/generate", `{"text": "x", "input_ids": [1]}`, nil, 400,
				`{"error":{"message":"Either text, input_ids or input_embeds should be provided."}}`},
			{"neither", "POST", "/generate", `{"sampling_params": {}}`, nil, 400,
				`{"error":{"message":"Either text, input_ids or input_embeds should be provided."}}`},
			{"negative max_new_tokens", "POST", "/generate", `{"text": "x", "sampling_params": {"max_new_tokens": -1}}`, nil, 400,
				`{"error":{"message":"max_new_tokens must be at least 0, got -1."}}`},
			{"prompt too long", "POST", "/generate", `{"input_ids": ` + long + `}`, nil, 400,
				`{"error":{"message":"The input (1000 tokens) is longer than the model's context length (1000 tokens)."}}`},
			{"prompt too long, streaming", "POST", "/generate", `{"input_ids": ` + long + `, "stream": true}`, nil, 200,
				"data: {\"error\":{\"message\":\"The input (1000 tokens) is longer than the model's context length (1000 tokens).\"}}\n\ndata: [DONE]\n\n"},
			{"batch with one bad prompt", "POST", "/generate", `{"input_ids": [[1, 2], ` + long + `]}`, nil, 400, `longer than the model's context length`},
			{"empty body", "POST", "/generate", ``, nil, 400, `Field required: the request body is empty`},
			{"n too large", "POST", "/generate", `{"text": "x", "sampling_params": {"n": 1000000000}}`, nil, 400,
				`{"error":{"message":"n must be at most 128, got 1000000000."}}`},
			{"n zero", "POST", "/v1/completions", `{"prompt": "x", "n": 0}`, nil, 400, `n must be at least 1, got 0.`},
			{"one rid for a batch", "POST", "/generate", `{"text": ["a", "b"], "rid": "r"}`, nil, 400,
				`{"error":{"message":"The rid should be a list for batch processing."}}`},
			{"rid list of the wrong length", "POST", "/generate", `{"text": ["a", "b"], "rid": ["r"]}`, nil, 400, `rid: got 1 values for a batch of 2`},
			{"empty batch", "POST", "/generate", `{"text": []}`, nil, 400, `The batch is empty.`},
			{"input_ids out of int32", "POST", "/generate", `{"input_ids": [99999999999]}`, nil, 400, `"type":"Bad Request"`},
			{"v1 without JSON content type", "POST", "/v1/completions", `{"prompt": "x"}`, []string{"Content-Type", "text/plain"}, 400,
				`Unsupported Media Type: Only 'application/json' is allowed`},
			{"v1 max_tokens 0", "POST", "/v1/completions", `{"prompt": "x", "max_tokens": 0}`, nil, 400,
				`{"object":"error","message":"max_tokens must be positive, got 0.","type":"BadRequestError","param":null,"code":400}`},
			{"v1 prompt too long", "POST", "/v1/completions", `{"prompt": ` + long + `}`, nil, 400, `"type":"BadRequestError"`},
			{"v1 missing prompt", "POST", "/v1/completions", `{"model": "m"}`, nil, 400, `prompt: Field required`},
			{"chat with empty messages", "POST", "/v1/chat/completions", `{"messages": []}`, nil, 400,
				`{"object":"error","message":"Messages cannot be empty.","type":"BadRequestError","param":null,"code":400}`},
			{"chat without messages", "POST", "/v1/chat/completions", `{"model": "m"}`, nil, 400, `"message":"messages: Field required","type":"Bad Request"`},
			{"v1 empty prompt", "POST", "/v1/completions", `{"prompt": ""}`, nil, 400,
				`{"object":"error","message":"Prompt cannot be empty","type":"BadRequestError","param":null,"code":400}`},
			{"v1 empty prompt list", "POST", "/v1/completions", `{"prompt": []}`, nil, 400, `"message":"Prompt cannot be empty"`},
			{"v1 prompts all empty", "POST", "/v1/completions", `{"prompt": ["", ""]}`, nil, 400, `"message":"Prompt cannot be empty"`},
			{"v1 token prompts all empty", "POST", "/v1/completions", `{"prompt": [[], [ ]]}`, nil, 400, `"message":"Prompt cannot be empty"`},
			{"chat bad content", "POST", "/v1/chat/completions", `{"messages": [{"role": "user", "content": 5}]}`, nil, 400, `content must be a string`},
			{"chat bad tools", "POST", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "Hi"}], "tools": [1]}`, nil, 400, `tools: Input should be a valid list of tools`},
			{"chat bad tool calls", "POST", "/v1/chat/completions", `{"messages": [{"role": "assistant", "content": "", "tool_calls": "x"}]}`, nil, 400, `messages.0.tool_calls: Input should be`},
			{"chat bad tool choice", "POST", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "Hi"}], "tool_choice": 3}`, nil, 400, `tool_choice: Input should be`},
			{"chat bad name", "POST", "/v1/chat/completions", `{"messages": [{"role": "tool", "content": "a", "name": 7}]}`, nil, 400, `messages.0.name: Input should be a valid string`},
			{"chat bad kwargs", "POST", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "Hi"}], "chat_template_kwargs": [1]}`, nil, 400, `chat_template_kwargs: Input should be a valid dictionary`},
			{"chat bad parts", "POST", "/v1/chat/completions", `{"messages": [{"role": "user", "content": [1, "a"]}]}`, nil, 400, `content must be a string`},
			{"unknown route", "GET", "/nope", ``, nil, 404, `{"detail":"Not Found"}`},
			{"wrong method", "DELETE", "/generate", ``, nil, 405, `{"detail":"Method Not Allowed"}`},
			{"unknown model", "GET", "/v1/models/other", ``, nil, 404, `"code":"model_not_found"`},
			{"body too large", "POST", "/generate", `{"text": "` + strings.Repeat("a", 70<<10) + `"}`, nil, 413, `"code":413`},
			{"bearer None without a key", "GET", "/v1/models", ``, []string{"Authorization", "Bearer None"}, 200, `"object":"list"`},
			{"bad sim query", "GET", "/sim/expect?prompt_tokens=x", ``, nil, 400, `prompt_tokens`},
			{"unknown rid", "GET", "/sim/requests/nope", ``, nil, 404, `no finished request`},
		}
		for _, tt := range tests {
			code, body, _ := ts.Do(t, tt.method, tt.path, tt.body, tt.header...)
			if code != tt.code || !strings.Contains(body, tt.want) {
				t.Errorf("%s: got %d %s\nwant %d containing %s", tt.name, code, body, tt.code, tt.want)
			}
			// A refused batch aborts the prompts it had already queued; an
			// abort lands at the engine's next iteration boundary.
			time.Sleep(time.Second)
			mocktest.CheckIdle(t, ts.Engine())
		}
		if st := ts.Engine().Stats(); st.Requests != st.Aborted || st.Aborted != 1 {
			t.Fatalf("only the refused batch's good prompt ran, aborted: got %d requests, %d aborted", st.Requests, st.Aborted)
		}
	})
}

func TestAPIKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{APIKey: "sk-test"})
		tests := []struct {
			path, auth string
			code       int
		}{
			{"/v1/models", "", 401},
			{"/v1/models", "Bearer wrong", 401},
			{"/v1/models", "Bearer sk-test", 200},
			{"/health", "", 200},
			{"/metrics", "", 404}, // open, but off
			{"/flush_cache", "", 401},
		}
		for _, tt := range tests {
			code, body, _ := ts.Do(t, "GET", tt.path, "", "Authorization", tt.auth)
			if code != tt.code || (code == 401 && body != `{"error":"Unauthorized"}`) {
				t.Errorf("%s with %q: got %d %s, want %d", tt.path, tt.auth, code, body, tt.code)
			}
		}
	})
}

// A client that leaves has its request aborted as SGLang does it: a stream
// 2 s later, a waiting client at its next 50-token output (before its 4 s
// wait times out). Until then the request keeps decoding and the server is
// busy.
func TestDisconnectAbortsTheRequest(t *testing.T) {
	for _, stream := range []bool{true, false} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ts := mocktest.Start(t, api.Config{})
				ctx, cancel := context.WithCancel(context.Background())
				req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/generate", strings.NewReader(fmt.Sprintf(
					`{"input_ids": %s, "sampling_params": {"max_new_tokens": 5000}, "rid": "gone", "stream": %v}`, jsonOf(ids(4, 2000)), stream)))
				const left = 200 * time.Millisecond // virtual: prefilled and decoding
				go func() {
					time.Sleep(left)
					cancel()
				}()
				resp, err := ts.Client.Do(req)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				time.Sleep(time.Second)
				if st := ts.Engine().Stats(); stream && (st.Running != 1 || st.Aborted != 0) {
					t.Fatalf("a second after the stream's client left: running %d, aborted %d; want it still running", st.Running, st.Aborted)
				}
				if code, body, _ := ts.Do(t, "POST", "/flush_cache", ""); stream && code != 400 {
					t.Fatalf("flush while the abandoned stream still runs: %d %s", code, body)
				}
				time.Sleep(2 * time.Second)
				mocktest.CheckIdle(t, ts.Engine())
				code, body, _ := ts.Do(t, "GET", "/sim/requests/gone", "")
				var truth sim.Truth
				if code != 200 || json.Unmarshal([]byte(body), &truth) != nil || truth.FinishReason != "abort" {
					t.Fatalf("truth of the abandoned request: %d %s", code, body)
				}
				// Alone, the request decodes in one run of back-to-back
				// rounds; the cost model gives each round's end.
				if len(truth.Rounds) != 1 {
					t.Fatalf("a lone request decoded in %d runs, want 1: %+v", len(truth.Rounds), truth.Rounds)
				}
				run := truth.Rounds[0]
				p := ts.Engine().Profile()
				ns := func(secs float64) time.Duration { return time.Duration(math.Round(secs * 1e9)) }
				end := ns(run.Start)
				tokens := truth.CompletionTokens - run.Count // before the run
				var wantEnd time.Duration
				for i := range run.Count {
					end += profile.Duration(p.DecodeRoundSeconds(1, run.Context+i))
					tokens++
					if stream && end >= left+2*time.Second || !stream && end >= left && tokens%50 == 0 {
						wantEnd = end
						break
					}
				}
				// A stream is aborted 2 s after its client left and ends
				// with the round running then; a waiting client's request
				// at its first 50-token output after it left.
				if ns(truth.Finished) != wantEnd || ns(run.Start)+ns(run.Duration) != wantEnd || tokens != truth.CompletionTokens {
					t.Fatalf("aborted at %v with %d tokens, want at %v with %d (run %+v)",
						truth.Finished, truth.CompletionTokens, wantEnd.Seconds(), tokens, run)
				}
				if st := ts.Engine().Stats(); st.Aborted != 1 {
					t.Fatalf("aborted counter: got %d, want 1", st.Aborted)
				}
			})
		})
	}
}

func TestHealthAndStates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := api.New(api.Config{Profile: mocktest.Profile(t, "default")})
		if err != nil {
			t.Fatal(err)
		}
		ts := mocktest.NewServer(s.Handler())
		defer func() {
			ts.Close()
			s.Close()
		}()
		check := func(stage, path string, want int) {
			t.Helper()
			if code, _, _ := ts.Do(t, "GET", path, ""); code != want {
				t.Fatalf("%s: %s got %d, want %d", stage, path, code, want)
			}
		}
		check("starting", "/health", 503)
		check("starting", "/health_generate", 503)
		check("starting", "/v1/models", 200)
		if code, _, _ := ts.Do(t, "POST", "/generate", `{"text": "early", "sampling_params": {"max_new_tokens": 1}}`); code != 200 {
			t.Fatalf("starting: /generate got %d, want 200 (SGLang serves it while warming up)", code)
		}
		if err := s.Warmup(context.Background()); err != nil {
			t.Fatal(err)
		}
		check("ready", "/health", 200)
		check("ready", "/health_generate", 200)
		if st := s.Engine().Stats(); st.Requests != 2 || st.CacheTokens == 0 {
			t.Fatalf("the user request and the warmup count (as on SGLang; health checks do not), and the cache is warm: %+v", st)
		}
		s.BeginShutdown()
		check("shutting down", "/health", 503)
		check("shutting down", "/server_info", 200)
		if code, body, _ := ts.Do(t, "POST", "/generate", `{"text": "x"}`); code != 503 || !strings.Contains(body, "shutting down") {
			t.Fatalf("generate while shutting down: %d %s", code, body)
		}
	})
}

func TestInfoEndpoints(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{Profile: mocktest.Profile(t, "kimi-k2.6-rtx6000"), Speedup: 1})
		decode := func(path string) map[string]any { return getJSON(t, ts, path) }
		for _, path := range []string{"/server_info", "/get_server_info"} {
			info := decode(path)
			states, _ := info["internal_states"].([]any)
			if len(states) != 1 || info["version"] != "0.5.18" || info["max_total_num_tokens"] != 420000.0 ||
				info["speculative_algorithm"] != "DDTREE" || info["context_length"] != nil || info["api_key"] != nil ||
				info["disable_overlap_schedule"] != false {
				t.Fatalf("%s: %v", path, info)
			}
			st := states[0].(map[string]any)
			if _, ok := st["last_gen_throughput"]; !ok {
				t.Fatalf("%s: internal_states[0] lacks last_gen_throughput", path)
			}
			if sim := info["sim"].(map[string]any); sim["profile"] != "kimi-k2.6-rtx6000" || sim["speedup"] != 1.0 {
				t.Fatalf("%s: sim %v", path, sim)
			}
		}
		for _, path := range []string{"/model_info", "/get_model_info"} {
			if m := decode(path); m["model_path"] != "moonshotai/Kimi-K2.6" || m["is_generation"] != true {
				t.Fatalf("%s: %v", path, m)
			}
		}
		models := decode("/v1/models")
		card := models["data"].([]any)[0].(map[string]any)
		if card["id"] != "moonshotai/Kimi-K2.6" || card["owned_by"] != "sglang" || card["max_model_len"] != 200000.0 {
			t.Fatalf("/v1/models: %v", models)
		}
		if m := decode("/v1/models/moonshotai/Kimi-K2.6"); m["id"] != "moonshotai/Kimi-K2.6" {
			t.Fatalf("/v1/models/{model}: %v", m)
		}
		if code, body, _ := ts.Do(t, "GET", "/get_load", ""); code != 200 ||
			body != `[{"dp_rank":0,"num_reqs":0,"num_waiting_reqs":0,"num_tokens":0,"num_pending_tokens":0,"ts_tic":0}]` {
			t.Fatalf("/get_load: %d %s", code, body)
		}
		texts := map[string]string{"/start_profile": "Start profiling.\n", "/stop_profile": "Stop profiling. This will take some time.\n"}
		for path, want := range texts {
			for _, m := range []string{"GET", "POST"} {
				if code, body, _ := ts.Do(t, m, path, ""); code != 200 || body != want {
					t.Fatalf("%s %s: %d %q", m, path, code, body)
				}
			}
		}
		if code, _, _ := ts.Do(t, "GET", "/ping", ""); code != 200 {
			t.Fatalf("/ping: %d", code)
		}
		code, body, _ := ts.Do(t, "POST", "/tokenize", `{"prompt": "Hello world"}`)
		if code != 200 || body != fmt.Sprintf(`{"count":2,"max_model_len":200000,"tokens":%s}`, jsonOf(builtinTok.Encode(nil, "Hello world"))) {
			t.Fatalf("/tokenize: %d %s", code, body)
		}
		code, body, _ = ts.Do(t, "POST", "/v1/detokenize", fmt.Sprintf(`{"tokens": %s}`, jsonOf(builtinTok.Encode(nil, "Hello world"))))
		if code != 200 || body != `{"text":"Hello world"}` {
			t.Fatalf("/detokenize: %d %s", code, body)
		}
		exp := decode("/sim/expect?prompt_tokens=45507&cached_tokens=0&completion_tokens=1")
		if ttft := exp["ttft_s"].(float64); ttft < 23.7 || ttft > 23.75 {
			t.Fatalf("/sim/expect: %v", exp)
		}
		if prof := decode("/sim/profile"); prof["name"] != "kimi-k2.6-rtx6000" || prof["speedup"] != 1.0 {
			t.Fatalf("/sim/profile: %v", prof)
		}
	})
}

// /abort_request answers as SGLang does: a running request ends with
// FINISH_ABORT()'s shape, a queued one with the tokenizer manager's
// waiting-queue answer, and abort_all takes the rest.
func TestAbortRequestEndpoint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mocktest.Profile(t, "default")
		p.MaxRunningRequests = 1
		ts := mocktest.Start(t, api.Config{Profile: p})
		done := map[string]chan string{}
		for _, rid := range []string{"x1", "x2", "y"} {
			done[rid] = make(chan string, 1)
			go func() {
				_, body, _, _ := ts.Send("POST", "/generate", fmt.Sprintf(`{"text": "go on", "rid": %q, "sampling_params": {"max_new_tokens": 10000}}`, rid))
				done[rid] <- body
			}()
			time.Sleep(time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond) // virtual: x1 runs, x2 (arrived at 1 ms) and y wait
		// x2 is queued: the tokenizer manager's own answer.
		const queued = `{"text":"","output_ids":[],"meta_info":{"id":"x2","finish_reason":{"type":"abort","message":"Abort in waiting queue"},` +
			`"weight_version":"default","e2e_latency":0.102,"completion_tokens":0}}`
		if code, _, _ := ts.Do(t, "POST", "/abort_request", `{"rid": "x2"}`); code != 200 {
			t.Fatalf("abort_request: %d", code)
		}
		if got := <-done["x2"]; got != queued {
			t.Fatalf("aborted queued request:\n got %s\nwant %s", got, queued)
		}
		ts.Do(t, "POST", "/abort_request", `{"rid": "x1"}`)
		if first := <-done["x1"]; !strings.Contains(first, `"finish_reason":{"type":"abort","message":"Aborted","status_code":null,"err_type":null}`) {
			t.Fatalf("aborted running request body: %s", first)
		}
		ts.Do(t, "POST", "/abort_request", `{"abort_all": true}`)
		<-done["y"]
		synctest.Wait()
		mocktest.CheckIdle(t, ts.Engine())
	})
}

func TestPageSizeAndDisabledCacheOverHTTP(t *testing.T) {
	tests := []struct {
		name    string
		page    int
		disable bool
		want    int
	}{
		{"page 16", 16, false, 96},
		{"radix cache disabled", 1, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := mocktest.Profile(t, "default")
				p.PageSize = tt.page
				ts := mocktest.Start(t, api.Config{Profile: p, DisableRadixCache: tt.disable})
				req := fmt.Sprintf(`{"input_ids": %s, "sampling_params": {"max_new_tokens": 1}}`, jsonOf(ids(5, 100)))
				for i := range 2 {
					code, body, _ := ts.Do(t, "POST", "/generate", req)
					var r generateResponse
					if err := json.Unmarshal([]byte(body), &r); code != 200 || err != nil {
						t.Fatalf("request %d: %d %s (%v)", i+1, code, body, err)
					}
					want := 0 // the first request finds nothing cached
					if i == 1 {
						want = tt.want
					}
					if m := r.MetaInfo; m.PromptTokens != 100 || m.CompletionTokens != 1 || m.CachedTokens != want {
						t.Fatalf("request %d: %d prompt, %d completion, %d cached tokens; want 100, 1, %d",
							i+1, m.PromptTokens, m.CompletionTokens, m.CachedTokens, want)
					}
				}
				if st := ts.Engine().Stats(); tt.disable && st.CacheTokens != 0 {
					t.Fatalf("cache disabled, yet %d tokens are cached", st.CacheTokens)
				}
			})
		})
	}
}

func TestMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{Profile: mocktest.Profile(t, "llama-8b-eagle3-h100"), EnableMetrics: true})
		req := fmt.Sprintf(`{"input_ids": %s, "sampling_params": {"max_new_tokens": 20}}`, jsonOf(ids(6, 300)))
		for range 3 {
			ts.Do(t, "POST", "/generate", req)
		}
		code, body, _ := ts.Do(t, "GET", "/metrics", "")
		if code != 200 {
			t.Fatalf("/metrics: %d", code)
		}
		// The tokenizer manager's metrics carry the model and the engine
		// type; the scheduler's its labels (metrics_collector.py).
		label := `{engine_type="unified",model_name="meta-llama/Llama-3.1-8B-Instruct"}`
		sched := `{engine_type="unified",model_name="meta-llama/Llama-3.1-8B-Instruct",moe_ep_rank="0",pp_rank="0",tp_rank="0"}`
		for _, want := range []string{
			"sglang:prompt_tokens_total" + label + " 900",
			`sglang:cached_tokens_total{cache_source="device",engine_type="unified",model_name="meta-llama/Llama-3.1-8B-Instruct"} 596`, // EAGLE3: bigram keys, 298 per repeat
			"sglang:generation_tokens_total" + label + " 60",
			"sglang:num_requests_total" + label + " 3",
			"sglang:num_aborted_requests_total" + label + " 0",
			`sglang:realtime_tokens_total{engine_type="unified",mode="prefill_cache",model_name="meta-llama/Llama-3.1-8B-Instruct",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 596`,
			// As the last prefill batch logged them: the running batch before
			// it joined, and the third request's 300 prompt tokens in use.
			"sglang:num_running_reqs" + sched + " 0",
			"sglang:num_used_tokens" + sched + " 300\n",
			"sglang:token_usage" + sched + " 0\n",
			"sglang:max_total_num_tokens" + sched + " 600000",
			"sglang:time_to_first_token_seconds_count" + label + " 3",
			"sglang:e2e_request_latency_seconds_count" + label + " 3",
			"sglang:inter_token_latency_seconds_count" + label + " 57",
			"sglang:queue_time_seconds_count" + sched + " 3",
			"sglang:spec_accept_length" + sched,
			"sglang:cache_hit_rate" + sched,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %q", want)
			}
		}
	})
}

// No update is lost under load: 64 concurrent requests, then every counter
// and histogram count is exact.
func TestMetricsUnderConcurrentLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{EnableMetrics: true})
		done := make(chan error, 64)
		for i := range 64 {
			go func() {
				code, _, _, err := ts.Send("POST", "/generate", fmt.Sprintf(`{"input_ids": %s, "sampling_params": {"max_new_tokens": 10}}`, jsonOf(ids(i*1000, 50))))
				if err == nil && code != 200 {
					err = fmt.Errorf("status %d", code)
				}
				done <- err
			}()
		}
		for range 64 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		body := getOK(t, ts, "/metrics")
		label := `{engine_type="unified",model_name="sglmock/small-1b"}`
		for _, want := range []string{
			"sglang:num_requests_total" + label + " 64",
			"sglang:prompt_tokens_total" + label + " 3200",
			"sglang:generation_tokens_total" + label + " 640",
			"sglang:time_to_first_token_seconds_count" + label + " 64",
			"sglang:inter_token_latency_seconds_count" + label + " 576",
		} {
			if !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %q", want)
			}
		}
	})
}

// The OpenAI shapes byte for byte, as golden files. Under synctest the
// clock starts at 2000-01-01 UTC, so "created" is 946684800.
func TestOpenAIBytes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{EnableCacheReport: true})
		prompt := jsonOf(ids(7, 20))
		chat := `"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2`
		for _, tt := range []struct{ golden, path, body string }{
			// Deltas carry "reasoning_content": null; the chat usage chunk
			// keeps "prompt_tokens_details": null.
			{"openai/chat_stream.txt", "/v1/chat/completions", `{"model": "m", ` + chat + `, "stream": true, "stream_options": {"include_usage": true}, "rid": "k1"}`},
			{"openai/chat.json", "/v1/chat/completions", `{"model": "m", ` + chat + `, "rid": "k0"}`},
			{"openai/completion.json", "/v1/completions", `{"model": "m", "prompt": ` + prompt + `, "max_tokens": 2, "rid": "c1"}`},
			// Content chunks carry "usage": null; the usage chunk has no
			// prompt_tokens_details while nothing is cached...
			{"openai/completion_stream.txt", "/v1/completions", `{"model": "m", "prompt": "Once upon", "max_tokens": 2, "stream": true, "stream_options": {"include_usage": true}, "rid": "c2"}`},
			// ...and has them once something is.
			{"openai/completion_stream_cached.txt", "/v1/completions", `{"model": "m", "prompt": "Once upon", "max_tokens": 2, "stream": true, "stream_options": {"include_usage": true}, "rid": "c3"}`},
			{"openai/completion_stream_continuous.txt", "/v1/completions", `{"model": "m", "prompt": ` + prompt + `, "max_tokens": 2, "stream": true, "stream_options": {"continuous_usage_stats": true}, "rid": "c4"}`},
			// return_cached_tokens_details: SGLang's sglext, on the response
			// and, in a stream, as a chunk of its own before the usage chunk.
			{"openai/completion_sglext.json", "/v1/completions", `{"model": "m", "prompt": "Once upon", "max_tokens": 2, "rid": "c5", "return_cached_tokens_details": true}`},
			{"openai/completion_stream_sglext.txt", "/v1/completions", `{"model": "m", "prompt": "Once upon", "max_tokens": 2, "stream": true, "stream_options": {"include_usage": true}, "rid": "c6", "return_cached_tokens_details": true}`},
			{"openai/chat_stream_sglext.txt", "/v1/chat/completions", `{"model": "m", ` + chat + `, "stream": true, "stream_options": {"include_usage": true}, "rid": "k2", "return_cached_tokens_details": true}`},
		} {
			code, body, _ := ts.Do(t, "POST", tt.path, tt.body)
			if code != 200 {
				t.Fatalf("%s: %d %s", tt.golden, code, body)
			}
			if !strings.HasSuffix(body, "\n") {
				body += "\n"
			}
			mocktest.Golden(t, tt.golden, []byte(body))
		}
	})
}

// A zero-cost profile predicts infinite rates; /sim/expect answers null
// for them rather than failing.
func TestSimExpectWithZeroCosts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mocktest.Profile(t, "default")
		p.Prefill, p.Decode = profile.PrefillCost{}, profile.DecodeCost{}
		ts := mocktest.Start(t, api.Config{Profile: p})
		code, body, _ := ts.Do(t, "GET", "/sim/expect?prompt_tokens=100&completion_tokens=10", "")
		var e sim.Expectation
		if err := mocktest.DecodeStrict([]byte(body), &e); code != 200 || err != nil {
			t.Fatalf("zero-cost expectation: %d %s (%v)", code, body, err)
		}
		want := sim.Expectation{PromptTokens: 100, CompletionTokens: 10, DecodeRounds: 9, ExpectedAccept: 1}
		if e != want {
			t.Fatalf("zero-cost expectation: got %+v, want %+v: nothing takes time, both rates null", e, want)
		}
	})
}

// Two servers coexist in one process: nothing is shared between them.
func TestTwoServersCoexist(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := mocktest.Start(t, api.Config{Profile: mocktest.Profile(t, "default")})
		b := mocktest.Start(t, api.Config{Profile: mocktest.Profile(t, "kimi-k2.6-rtx6000"), EnableMetrics: true})
		req := `{"text": "shared prompt text", "sampling_params": {"max_new_tokens": 2}}`
		a.Do(t, "POST", "/generate", req)
		_, body, _ := b.Do(t, "POST", "/generate", req)
		if !strings.Contains(body, `"cached_tokens":0`) {
			t.Fatalf("b must not see a's cache: %s", body)
		}
		_, ma, _ := a.Do(t, "GET", "/v1/models", "")
		_, mb, _ := b.Do(t, "GET", "/v1/models", "")
		if !strings.Contains(ma, "sglmock/small-1b") || !strings.Contains(mb, "moonshotai/Kimi-K2.6") {
			t.Fatalf("models: %s / %s", ma, mb)
		}
		if code, _, _ := a.Do(t, "GET", "/metrics", ""); code != 404 {
			t.Fatalf("a has metrics off: got %d", code)
		}
		if _, m, _ := b.Do(t, "GET", "/metrics", ""); !strings.Contains(m, `sglang:num_requests_total{engine_type="unified",model_name="moonshotai/Kimi-K2.6"} 1`) {
			t.Fatalf("b's metrics count only b's request")
		}
	})
}

// A request aborted while it waits in the queue left the queue then: its
// queue time is the wait until the abort, never negative, and SGLang's
// queue-time histogram, observed as a request enters its first prefill
// batch, never sees it. It had no first token: no TTFT either.
func TestAbortInQueueTimes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mocktest.Profile(t, "default")
		p.MaxRunningRequests = 1
		ts := mocktest.Start(t, api.Config{Profile: p, EnableMetrics: true})
		done := make(chan struct{})
		go func() {
			defer close(done)
			ts.Send("POST", "/generate", `{"text": "first", "rid": "a", "sampling_params": {"max_new_tokens": 200}}`)
		}()
		go func() {
			time.Sleep(100 * time.Millisecond)
			ts.Send("POST", "/generate", `{"text": "second", "rid": "b"}`)
		}()
		time.Sleep(300 * time.Millisecond) // virtual: b waits behind a
		if st := ts.Engine().Stats(); st.Queued != 1 {
			t.Fatalf("%d queued, want b", st.Queued)
		}
		ts.Do(t, "POST", "/abort_request", `{"rid": "b"}`)
		<-done
		body := getOK(t, ts, "/sim/requests/b")
		var b sim.Truth
		if err := json.Unmarshal([]byte(body), &b); err != nil {
			t.Fatal(err)
		}
		if b.Arrival != 0.1 || b.Admitted != 0.3 || b.Queue != 0.2 || b.Finished != 0.3 {
			t.Fatalf("b: arrival %v, admitted %v, queue %v, finished %v; want 0.1, 0.3, 0.2, 0.3", b.Arrival, b.Admitted, b.Queue, b.Finished)
		}
		if !strings.Contains(body, `"first_token_s":null`) || !strings.Contains(body, `"ttft_s":null`) {
			t.Fatalf("b had no first token, yet: %s", body)
		}
		_, metrics, _ := ts.Do(t, "GET", "/metrics", "")
		label := `{engine_type="unified",model_name="sglmock/small-1b"}`
		sched := `{engine_type="unified",model_name="sglmock/small-1b",moe_ep_rank="0",pp_rank="0",tp_rank="0"}`
		for _, want := range []string{
			"sglang:queue_time_seconds_sum" + sched + " 0\n", // a's
			"sglang:queue_time_seconds_count" + sched + " 1\n",
			"sglang:e2e_request_latency_seconds_count" + label + " 2\n",
		} {
			if !strings.Contains(metrics, want) {
				t.Errorf("/metrics lacks %q", want)
			}
		}
	})
}

// A flush whose client gave up still runs once the server is idle, as
// SGLang's scheduler keeps it; /sim/flushes shows it pending meanwhile,
// with its origin and when its client left, and the log says when it ran.
// A timeout too long for a Duration waits rather than failing at once.
func TestPendingFlushIsVisible(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs bytes.Buffer
		ts := mocktest.Start(t, api.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		done := make(chan struct{})
		go func() {
			defer close(done)
			ts.Send("POST", "/generate", `{"text": "a long one", "rid": "a", "sampling_params": {"max_new_tokens": 200}}`)
		}()
		time.Sleep(10 * time.Millisecond) // virtual: a decodes
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Millisecond)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/flush_cache?timeout=60", nil)
		if resp, err := ts.Client.Do(req); err == nil {
			resp.Body.Close()
			t.Fatalf("the flush answered %d while a runs", resp.StatusCode)
		}
		time.Sleep(10 * time.Millisecond)
		flushes := func() []sim.Flush {
			var out []sim.Flush
			body := getOK(t, ts, "/sim/flushes")
			if err := mocktest.DecodeStrict([]byte(body), &out); err != nil {
				t.Fatal(err)
			}
			return out
		}
		left := 0.1
		if got := flushes(); len(got) != 1 || !got[0].Pending || got[0].Origin != "pipe" || got[0].At != 0.01 ||
			got[0].ClientLeft == nil || *got[0].ClientLeft != left || got[0].Outcome != "" {
			t.Fatalf("/sim/flushes while a runs: %+v, want one pending flush from pipe, asked at 0.01 s, client gone at 0.1 s", got)
		}
		<-done
		time.Sleep(time.Second) // virtual: settled, flushed
		got := flushes()
		tr, _ := ts.Engine().Truth("a")
		ran := tr.Finished + ts.Engine().Profile().FlushBusyAfterFinish()
		if len(got) != 1 || got[0].Pending || !got[0].OK || got[0].Answered != ran.Seconds() || *got[0].ClientLeft != left {
			t.Fatalf("/sim/flushes after a: %+v, want the flush answered at %v", got, ran.Seconds())
		}
		if st := ts.Engine().Stats(); st.CacheTokens != 0 {
			t.Fatalf("%d cached tokens: the pending flush did not run", st.CacheTokens)
		}
		for _, want := range []string{
			"The client of a deferred flush_cache (pipe, asked at 0.010 s) left at 0.100 s; the flush stays pending",
			fmt.Sprintf("Deferred flush_cache (pipe, asked at 0.010 s, its client gone since 0.100 s) ran at %.3f s.", ran.Seconds()),
		} {
			if !strings.Contains(logs.String(), want) {
				t.Errorf("log lacks %q:\n%s", want, logs.String())
			}
		}
		// Timeouts past a Duration's range wait for idle.
		for _, timeout := range []string{"1e10", "1e300"} {
			go ts.Send("POST", "/generate", `{"text": "another", "sampling_params": {"max_new_tokens": 100}}`)
			time.Sleep(10 * time.Millisecond)
			if code, body, _ := ts.Do(t, "POST", "/flush_cache?timeout="+timeout, ""); code != 200 || body != flushedBody {
				t.Errorf("timeout=%s: %d %q, want the flush once idle", timeout, code, body)
			}
		}
	})
}

// /server_info carries the scheduler's "status" and SGLang's kv_events
// descriptor (http_server.py; its tests of _build_kv_events_block pin
// each case), which a KV-aware router reads to subscribe: null, the key
// still there, without a zmq publisher on a TCP port a router can dial.
// The raw kv_events_config stays beside it, as SGLang's ServerArgs field.
func TestServerInfoKVEvents(t *testing.T) {
	raw := `{"publisher": "zmq", "endpoint": "tcp://*:5557", "topic": "kv"}`
	for _, tt := range []struct {
		name string
		kv   *api.KVEventsInfo
		want string
	}{
		{"no publisher", nil, `null`},
		{"the default endpoint", &api.KVEventsInfo{Publisher: "zmq", Endpoint: "tcp://*:5557", Topic: "kv"},
			`{"publisher":"zmq","endpoint_host":"*","endpoint_port_base":5557,"topic":"kv","block_size":16,"dp_size":1}`},
		{"a wildcard host is kept", &api.KVEventsInfo{Publisher: "zmq", Endpoint: "tcp://0.0.0.0:7777"},
			`{"publisher":"zmq","endpoint_host":"0.0.0.0","endpoint_port_base":7777,"topic":"","block_size":16,"dp_size":1}`},
		{"an IPv6 host keeps its brackets", &api.KVEventsInfo{Publisher: "zmq", Endpoint: "tcp://[::1]:5557"},
			`{"publisher":"zmq","endpoint_host":"[::1]","endpoint_port_base":5557,"topic":"","block_size":16,"dp_size":1}`},
		{"the null publisher", &api.KVEventsInfo{Publisher: "null", Endpoint: "tcp://*:5557"}, `null`},
		{"inproc", &api.KVEventsInfo{Publisher: "zmq", Endpoint: "inproc://cache"}, `null`},
		{"no port", &api.KVEventsInfo{Publisher: "zmq", Endpoint: "tcp://0.0.0.0"}, `null`},
		{"a port that is no number", &api.KVEventsInfo{Publisher: "zmq", Endpoint: "tcp://0.0.0.0:*"}, `null`},
		{"port 0", &api.KVEventsInfo{Publisher: "zmq", Endpoint: "tcp://0.0.0.0:0"}, `null`},
		{"port 65536", &api.KVEventsInfo{Publisher: "zmq", Endpoint: "tcp://0.0.0.0:65536"}, `null`},
	} {
		synctest.Test(t, func(t *testing.T) {
			p := mocktest.Profile(t, "default")
			p.PageSize = 16
			ts := mocktest.Start(t, api.Config{Profile: p, KVEvents: tt.kv, Args: api.ServerArgs{KVEventsConfig: &raw}})
			body := getOK(t, ts, "/server_info")
			var info map[string]json.RawMessage
			if err := json.Unmarshal([]byte(body), &info); err != nil {
				t.Fatal(err)
			}
			kv, ok := info["kv_events"]
			if !ok || string(kv) != tt.want {
				t.Errorf("%s: kv_events %s (present %v), want %s", tt.name, kv, ok, tt.want)
			}
			if string(info["status"]) != `"ready"` || string(info["kv_events_config"]) != jsonOf(raw) {
				t.Errorf("%s: status %s, kv_events_config %s; want \"ready\" and the config as given", tt.name, info["status"], info["kv_events_config"])
			}
		})
	}
}

// meta_info as current SGLang fills it. response_sent_to_client_ts goes
// with the first output yielded (a stream's first event). Under
// --enable-metrics every event carries the scheduler's queue_time (in
// simulated seconds), forward_entry_time and prefill_finished_time (wall
// times of the modelled admission and end of prefill), and the last one
// the tokenizer manager's request_received_ts, api_server_dispatch_finish_ts,
// request_finished_ts and decode_throughput. Under speculative decoding the
// last event has spec_correct_drafts_histogram (and its alias
// spec_accept_histogram), as long as the largest count of accepted drafts
// seen plus one; SGLang sends no spec_accept_token_num or
// spec_draft_token_num.
func TestMetaInfoTimingAndSpec(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mocktest.Profile(t, "llama-8b-eagle3-h100")
		p.Speculative.AcceptProbs = []float64{0.6, 0.01, 0.01} // a round seldom accepts more than one draft
		ts := mocktest.Start(t, api.Config{Profile: p, EnableMetrics: true})
		// b waits in the queue while a's prefill runs: its queue time is a's TTFT.
		go ts.Send("POST", "/generate", fmt.Sprintf(`{"input_ids": %s, "sampling_params": {"max_new_tokens": 1}, "rid": "a"}`, jsonOf(ids(1, 3000))))
		synctest.Wait()
		s := postStream(t, ts, "/generate", fmt.Sprintf(
			`{"input_ids": %s, "sampling_params": {"max_new_tokens": 20}, "rid": "b", "stream": true}`, jsonOf(ids(2, 200))))
		mocktest.Golden(t, "generate/stream_metrics.txt", []byte(strings.Join(s.events, "\n")+"\n"))
		type meta struct {
			CompletionTokens           int      `json:"completion_tokens"`
			QueueTime                  *float64 `json:"queue_time"`
			ForwardEntryTime           *float64 `json:"forward_entry_time"`
			PrefillFinishedTime        *float64 `json:"prefill_finished_time"`
			RequestReceivedTS          *float64 `json:"request_received_ts"`
			RequestFinishedTS          *float64 `json:"request_finished_ts"`
			DecodeThroughput           *float64 `json:"decode_throughput"`
			ResponseSentToClientTS     *float64 `json:"response_sent_to_client_ts"`
			SpecVerifyCt               int      `json:"spec_verify_ct"`
			SpecCorrectDraftsHistogram []int    `json:"spec_correct_drafts_histogram"`
			SpecAcceptHistogram        []int    `json:"spec_accept_histogram"`
		}
		var metas []meta
		for i, e := range s.events[:len(s.events)-1] {
			var r struct {
				MetaInfo json.RawMessage `json:"meta_info"`
			}
			var m meta
			if err := json.Unmarshal([]byte(e), &r); err != nil || json.Unmarshal(r.MetaInfo, &m) != nil {
				t.Fatalf("event %d: %s", i, e)
			}
			if strings.Contains(string(r.MetaInfo), "spec_accept_token_num") || strings.Contains(string(r.MetaInfo), "spec_draft_token_num") {
				t.Errorf("event %d carries a field SGLang does not send: %s", i, r.MetaInfo)
			}
			if m.QueueTime == nil || m.ForwardEntryTime == nil || m.PrefillFinishedTime == nil {
				t.Fatalf("event %d lacks the scheduler's timing: %s", i, r.MetaInfo)
			}
			if (m.ResponseSentToClientTS != nil) != (i == 0) {
				t.Errorf("event %d: response_sent_to_client_ts %v, want it on the first event only", i, m.ResponseSentToClientTS)
			}
			metas = append(metas, m)
		}
		first, last := metas[0], metas[len(metas)-1]
		tb, _ := ts.Engine().Truth("b")
		ta, _ := ts.Engine().Truth("a")
		const epoch = 946684800 // synctest's clock starts at 2000-01-01 UTC
		if *first.QueueTime != ta.TTFT().Seconds() || *first.QueueTime != tb.QueueTime().Seconds() || *first.QueueTime == 0 {
			t.Errorf("queue_time %v, want b's queue time, a's TTFT %v", *first.QueueTime, ta.TTFT().Seconds())
		}
		near := func(got float64, want time.Duration) bool { return math.Abs(got-(epoch+want.Seconds())) < 1e-6 }
		if !near(*first.ForwardEntryTime, tb.Admitted) || !near(*first.PrefillFinishedTime, tb.FirstToken) ||
			!near(*first.ResponseSentToClientTS, tb.FirstToken) {
			t.Errorf("forward_entry_time %v, prefill_finished_time %v, response_sent_to_client_ts %v; want the wall times of %v, %v, %v",
				*first.ForwardEntryTime, *first.PrefillFinishedTime, *first.ResponseSentToClientTS, tb.Admitted, tb.FirstToken, tb.FirstToken)
		}
		if first.RequestFinishedTS != nil || last.RequestReceivedTS == nil || !near(*last.RequestReceivedTS, tb.Arrival) || !near(*last.RequestFinishedTS, tb.Finished) {
			t.Errorf("request_received_ts %v, request_finished_ts %v: want them on the last event only, at %v and %v", last.RequestReceivedTS, last.RequestFinishedTS, tb.Arrival, tb.Finished)
		}
		if want := 19 / (tb.Finished - tb.FirstToken).Seconds(); last.DecodeThroughput == nil || math.Abs(*last.DecodeThroughput-want) > 1e-9 {
			t.Errorf("decode_throughput %v, want %v", last.DecodeThroughput, want)
		}
		h := last.SpecCorrectDraftsHistogram
		sum, top := 0, 0
		for a, n := range h {
			sum += n
			if n > 0 {
				top = a
			}
		}
		if !slices.Equal(h, last.SpecAcceptHistogram) || sum != last.SpecVerifyCt || len(h) != top+1 || len(h) != 2 {
			t.Errorf("histogram %v (alias %v) over %d rounds: want it summing to the rounds and ending at the largest count seen", h, last.SpecAcceptHistogram, last.SpecVerifyCt)
		}
	})
}

// getOK GETs path from s and fails the test unless it is answered 200.
func getOK(t *testing.T, s interface {
	Do(t testing.TB, method, path, body string, header ...string) (int, string, *http.Response)
}, path string) string {
	t.Helper()
	code, body, _ := s.Do(t, "GET", path, "")
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, code, body)
	}
	return body
}

package api_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
	"github.com/sglmock/sglmock/mockserver/profile"
)

// FuzzGenerateBody sends arbitrary bodies to /generate, the OpenAI
// endpoints and their render twins, /tokenize, /detokenize and
// /abort_request, and arbitrary queries to /sim/expect, /flush_cache and
// /v1/loads and rids to /sim/requests/. Whatever the input, the answer is 200, 400, 404 or 413
// (never a 500 or a panic), and afterwards the engine holds no request,
// lock or KV beyond its unlocked cache; synctest fails on any goroutine
// left behind.
func FuzzGenerateBody(f *testing.F) {
	for _, seed := range []string{
		`{"text": "hello", "sampling_params": {"max_new_tokens": 3}}`,
		`{"text": ["a", "b"], "rid": ["x", "y"], "stream": true}`,
		`{"input_ids": [[1, 2], [3]], "sampling_params": [{"n": 2}, {"stop": ["a"]}]}`,
		`{"text": "x", "sampling_params": {"max_new_tokens": -5}}`,
		`{"text": "x", "input_ids": [1]}`,
		`{"text": "x", "stream": true, "sampling_params": {"stop_token_ids": [1024], "stream_interval": 3}}`,
		`{"input_ids": [99999999999]}`,
		`{"text": "x", "return_logprob": true, "logprob_start_len": 0, "extra_key": "k"}`,
		`{"prompt": ["a", "b"], "n": 2, "stream": true, "stream_options": {"include_usage": true}}`,
		`{"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}], "max_tokens": 2}`,
		`[`, `null`, ``, `{"text": null}`,
		// Lengths at and past the edges of int64, which the fuzzer did not
		// find by itself.
		`{"text": "x", "sampling_params": {"max_new_tokens": 9223372036854775807}}`,
		`{"text": "x", "sampling_params": {"max_new_tokens": 9223372036854775806}}`,
		`{"text": "x", "sampling_params": {"max_new_tokens": 9223372036854775808}}`,
		`{"text": "x", "sampling_params": {"max_new_tokens": -9223372036854775808, "n": 18446744073709551615}}`,
		`{"prompt": "x", "max_tokens": 9223372036854775807, "logprobs": 9223372036854775807}`,
		`{"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 9999999999999999999}`,
		`{"text": "x", "return_logprob": true, "logprob_start_len": 9223372036854775807, "top_logprobs_num": -1}`,
	} {
		f.Add(seed, uint8(0))
		f.Add(seed, uint8(1))
	}
	for _, seed := range []string{
		`prompt_tokens=100&completion_tokens=2000000000`,
		`prompt_tokens=9223372036854775807&completion_tokens=9223372036854775807`,
		`prompt_tokens=2000&cached_tokens=1999&completion_tokens=48`,
		`prompt_tokens=-1`, `cached_tokens=5`, `%zz`,
	} {
		f.Add(seed, uint8(3))
		f.Add(seed, uint8(4))
	}
	for _, seed := range []struct {
		body   string
		target uint8
	}{
		{`{"prompt": "hello"}`, 5}, {`{"messages": [{"role": "user", "content": "hi"}]}`, 5},
		{`{"tokens": [1, 2, 3]}`, 6}, {`{"tokens": [-1, 4294967296]}`, 6},
		{`{"model": "x", "prompt": ["a", "b"]}`, 7}, {`{"messages": [{"role": "user", "content": "hi"}]}`, 8},
		{`{"rid": "x"}`, 9}, {`{"abort_all": true}`, 9},
		{`timeout=1e300`, 10}, {`timeout=NaN`, 10}, {`timeout=-1`, 10},
		{`format=prometheus&include=all`, 11}, {`dp_rank=99999999999999999999`, 11},
	} {
		f.Add(seed.body, seed.target)
	}
	f.Fuzz(func(t *testing.T, body string, target uint8) {
		// The first five targets keep their indices: the corpus names them.
		paths := []string{"/generate", "/v1/completions", "/v1/chat/completions", "/sim/expect?", "/sim/requests/r",
			"/tokenize", "/detokenize", "/v1/completions/render", "/v1/chat/completions/render", "/abort_request",
			"/flush_cache?", "/v1/loads?"}
		path := paths[int(target)%len(paths)]
		method := http.MethodPost
		switch {
		case strings.HasPrefix(path, "/sim/"):
			method, path = http.MethodGet, path+url.PathEscape(body)
		case strings.HasSuffix(path, "?"):
			method, path = http.MethodGet, path+body
		}
		synctest.Test(t, func(t *testing.T) {
			p, err := profile.Load("default")
			if err != nil {
				t.Fatal(err)
			}
			p.Prefill, p.Decode = profile.PrefillCost{OverheadS: 0.001}, profile.DecodeCost{StepOverheadS: 0.001}
			p.ContextLength = 2048
			s, err := api.New(api.Config{Profile: p, MaxBodyBytes: 1 << 16})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			s.MarkReady()
			req := httptest.NewRequest(method, "/", strings.NewReader(body))
			req.URL.Path, req.URL.RawQuery, _ = strings.Cut(path, "?")
			req.Host = "localhost" // a name the state-changing routes answer to
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, req)
			if rec.Code != 200 && rec.Code != 400 && rec.Code != 404 && rec.Code != 413 {
				t.Fatalf("%s %q: status %d %s", path, body, rec.Code, rec.Body.String())
			}
			if ct := rec.Header().Get("Content-Type"); strings.HasPrefix(ct, "text/event-stream") &&
				!strings.HasSuffix(rec.Body.String(), "data: [DONE]\n\n") {
				t.Fatalf("%s %q: stream without [DONE]: %q", path, body, rec.Body.String())
			}
			time.Sleep(time.Second) // virtual: any abort reaches its boundary
			mocktest.CheckIdle(t, s.Engine())
		})
	})
}

package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
)

// renderBatch is a completions render body of n short prompts and a
// padding field of pad bytes, which the endpoint does not read.
func renderBatch(n, pad int) string {
	prompts := make([]string, n)
	for i := range prompts {
		prompts[i] = fmt.Sprintf("%q", fmt.Sprintf("prompt %d", i))
	}
	return fmt.Sprintf(`{"prompt":[%s],"temperature":0.5,"padding":"%s"}`, strings.Join(prompts, ","), strings.Repeat("x", pad))
}

// A render of many prompts next to a large field costs memory linear in
// the body: the body is parsed once, not once per prompt (which allocated
// the padding again for each of the 512 prompts: 512 MiB).
func TestRenderIsLinear(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{})
		body := renderBatch(512, 1<<20)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		code, resp, _ := m.Do(t, "POST", "/v1/completions/render", body)
		runtime.ReadMemStats(&after)
		if code != 200 || strings.Count(resp, `"request_id"`) != 512 {
			t.Fatalf("got %d %.200s, want 200 with 512 rendered prompts", code, resp)
		}
		// The body is 1 MiB; reading, parsing and answering it takes a few
		// copies of it, whatever the number of prompts.
		if got := after.TotalAlloc - before.TotalAlloc; got > 24<<20 {
			t.Fatalf("the render allocated %d MiB for a 1 MiB body, want at most 24 MiB", got>>20)
		}
	})
}

// A render stops when its client leaves: nothing more is tokenized or
// written.
func TestRenderStopsWhenTheClientLeaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := api.New(api.Config{Profile: mocktest.Profile(t, "default")})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		s.MarkReady()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		req := httptest.NewRequestWithContext(ctx, "POST", "/v1/completions/render", strings.NewReader(renderBatch(64, 0)))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		if rec.Body.Len() != 0 {
			t.Fatalf("got %d bytes written to a client that left, want none: %.200s", rec.Body.Len(), rec.Body.String())
		}
	})
}

// max_tokens is vLLM's get_max_tokens: at most the context left after the
// prompt, and refused below 1 with vLLM's message and envelope.
func TestRenderMaxTokens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{})
		left := 32768 - 3 // the default profile's context less the 3-token prompt
		refusal := func(v string) string {
			return `{"error":{"code":400,"message":"max_tokens must be at least 1, got ` + v + `.","param":"max_tokens","type":"BadRequestError"}}`
		}
		for _, tt := range []struct {
			path, body string
			code       int
			want       string
		}{
			{"/v1/completions/render", `{"prompt":[1024,1025,1026],"max_tokens":-1}`, 400, refusal("-1")},
			{"/v1/completions/render", `{"prompt":[1024,1025,1026],"max_tokens":0}`, 400, refusal("0")},
			{"/v1/completions/render", `{"prompt":[1024,1025,1026],"max_tokens":9223372036854775807}`, 200, fmt.Sprintf(`"sampling_params":{"max_tokens":%d}`, left)},
			{"/v1/completions/render", `{"prompt":[1024,1025,1026],"max_tokens":7}`, 200, `"sampling_params":{"max_tokens":7}`},
			{"/v1/completions/render", `{"prompt":[1024,1025,1026],"max_tokens":9223372036854775808}`, 400, "max_tokens must be at most 9223372036854775807"},
			{"/v1/chat/completions/render", `{"messages":[{"role":"user","content":"x"}],"max_completion_tokens":-5}`, 400, refusal("-5")},
			{"/v1/chat/completions/render", `{"messages":[{"role":"user","content":"x"}],"max_tokens":-1}`, 400, refusal("-1")},
			{"/v1/completions/render", `{"prompt":"x","temperature":"hot"}`, 400, "temperature: Input should be a valid number, got string"},
			{"/v1/completions/render", `{"prompt":"x","stop":["` + strings.Repeat("s", 70_000) + `"]}`, 400,
				"The sampling parameters take 70004 bytes; the render endpoints repeat at most 65536 for each prompt."},
		} {
			code, body, _ := m.Do(t, http.MethodPost, tt.path, tt.body)
			if code != tt.code || !regexp.MustCompile(regexp.QuoteMeta(tt.want)).MatchString(body) {
				t.Errorf("%s %.80s: got %d %.300s, want %d with %q", tt.path, tt.body, code, body, tt.code, tt.want)
			}
		}
	})
}

package api_test

import (
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"testing"
	"testing/synctest"

	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
	"github.com/sglmock/sglmock/mockserver/tokenizer"
)

var renderID = regexp.MustCompile(`"request_id":"(cmpl|chatcmpl)-[0-9a-f]{32}"`)

// TestRenderGolden pins both render endpoints' answers (vLLM's shape) for
// a profile whose tokenizer adds a BOS, and checks their token ids are the
// ones /tokenize gives and a request prefills.
func TestRenderGolden(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{Profile: mocktest.Profile(t, "llama-8b-eagle3-h100")})
		for _, tt := range []struct{ name, path, body string }{
			{"completions", "/v1/completions/render",
				`{"model": "meta-llama/Llama-3.1-8B-Instruct", "prompt": ["Hello world", "Goodbye"], "temperature": 0.5, "stop": ["\n"]}`},
			{"completions-ids", "/v1/completions/render", `{"prompt": [1024, 1025, 1026], "max_tokens": 4}`},
			{"chat", "/v1/chat/completions/render",
				`{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}], "stream": true, "stream_options": {"include_usage": true}, "cache_salt": "t1", "top_p": 0.9}`},
		} {
			code, body, _ := m.Do(t, http.MethodPost, tt.path, tt.body)
			if code != http.StatusOK {
				t.Fatalf("%s: %d %s", tt.name, code, body)
			}
			if len(renderID.FindAllString(body, -1)) == 0 {
				t.Errorf("%s: no request_id of vLLM's form in %s", tt.name, body)
			}
			mocktest.Golden(t, "render/"+tt.name+".json", []byte(renderID.ReplaceAllString(body, `"request_id":"$1-ID"`)+"\n"))
		}

		// The ids are /tokenize's: the BOS first, then the text; the chat's
		// are the template's.
		var comp []struct {
			TokenIDs []int32 `json:"token_ids"`
		}
		_, body, _ := m.Do(t, http.MethodPost, "/v1/completions/render", `{"prompt": "Hello world"}`)
		json.Unmarshal([]byte(body), &comp)
		var tok struct {
			Tokens []int32 `json:"tokens"`
		}
		_, tbody, _ := m.Do(t, http.MethodPost, "/tokenize", `{"prompt": "Hello world"}`)
		json.Unmarshal([]byte(tbody), &tok)
		if len(comp) != 1 || !slices.Equal(comp[0].TokenIDs, tok.Tokens) || comp[0].TokenIDs[0] != tokenizer.BOS {
			t.Errorf("completions render %v, /tokenize %v: want the same ids, BOS first", comp, tok.Tokens)
		}
		// A request with those ids prefills as many tokens as the text.
		_, gen, _ := m.Do(t, http.MethodPost, "/v1/completions", `{"prompt": "Hello world", "max_tokens": 1}`)
		var usage struct {
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			} `json:"usage"`
		}
		json.Unmarshal([]byte(gen), &usage)
		if usage.Usage.PromptTokens != len(comp[0].TokenIDs) {
			t.Errorf("completion prompt_tokens %d, render %d ids", usage.Usage.PromptTokens, len(comp[0].TokenIDs))
		}
	})
}

func TestRenderRefuses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{})
		for _, tt := range []struct {
			path, body string
			code       int
			want       string
		}{
			{"/v1/completions/render", `{"model": "other", "prompt": "x"}`, 404,
				`{"error":{"code":404,"message":"The model ` + "`other`" + ` does not exist.","param":"model","type":"NotFoundError"}}`},
			{"/v1/chat/completions/render", `{"model": "other", "messages": [{"role": "user", "content": "x"}]}`, 404,
				`{"error":{"code":404,"message":"The model ` + "`other`" + ` does not exist.","param":"model","type":"NotFoundError"}}`},
			{"/v1/completions/render", `{"max_tokens": 3}`, 400, `"prompt: Field required"`},
			{"/v1/chat/completions/render", `{"messages": []}`, 400, "a chat needs at least one message"},
			{"/v1/completions/render", `{"prompt": [-1]}`, 400, "BadRequestError"},
		} {
			code, body, _ := m.Do(t, http.MethodPost, tt.path, tt.body)
			if code != tt.code || !regexp.MustCompile(regexp.QuoteMeta(tt.want)).MatchString(body) {
				t.Errorf("%s %s: got %d %s, want %d with %q", tt.path, tt.body, code, body, tt.code, tt.want)
			}
		}
	})
}

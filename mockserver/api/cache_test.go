package api_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"testing/synctest"

	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
	"github.com/sglmock/sglmock/sim"
)

// The cache namespace is SGLang's since PR #30827: the radix key carries
// the structured pair (extra_key, cache_salt) on every route, so /generate
// takes cache_salt (a salted "cold leg" is cold there too), a salt never
// collides with an extra_key or a concatenation of the two, an empty salt
// is no salt, and the LoRA adapter still appends to extra_key.
func TestCacheNamespaces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{EnableCacheReport: true})
		steps := []namespaceStep{
			{"cold", "/generate", ``, 0},
			{"cache_salt partitions /generate", "/generate", `"cache_salt": "a"`, 0},
			{"the same salt again", "/generate", `"cache_salt": "a"`, 499},
			{"another salt is cold", "/generate", `"cache_salt": "b"`, 0},
			{"an empty salt is no salt", "/generate", `"cache_salt": ""`, 499},
			{"extra_key partitions /generate", "/generate", `"extra_key": "ab"`, 0},
			{"an empty extra_key is a namespace of its own", "/generate", `"extra_key": ""`, 0},
			{"the empty namespace again", "/generate", `"extra_key": ""`, 499},
			{"OpenAI salt and extra_key are a pair, not a concatenation", "/v1/completions", `"cache_salt": "a", "extra_key": "b"`, 0},
			{"the same pair on /generate", "/generate", `"cache_salt": "a", "extra_key": "b"`, 499},
			{"a salt never meets an extra_key", "/v1/completions", `"cache_salt": "ab"`, 0},
			{"the salted namespace is one across routes", "/v1/completions", `"cache_salt": "a"`, 499},
			{"OpenAI's empty salt and key are no namespace", "/v1/completions", `"cache_salt": "", "extra_key": ""`, 499},
			{"LoRA appends to the key", "/generate", `"extra_key": "a", "lora_path": "b"`, 499},
			{"LoRA alone", "/v1/completions", `"lora_path": "ab"`, 499},
			{"LoRA with a salt", "/v1/completions", `"cache_salt": "x", "lora_path": "y"`, 0},
			{"the adapter's key without the salt", "/generate", `"extra_key": "y"`, 0},
			{"the salted one again", "/generate", `"cache_salt": "x", "lora_path": "y"`, 499},
		}
		checkNamespaces(t, ts, ids(40, 500), steps)
	})
}

// namespaceStep sends the prompt to path with fields and expects its
// cached tokens.
type namespaceStep struct {
	name, path, fields string
	want               int
}

func checkNamespaces(t *testing.T, ts *mocktest.Mock, tokens []int32, steps []namespaceStep) {
	t.Helper()
	prompt := jsonOf(tokens)
	for _, st := range steps {
		var body string
		if st.path == "/generate" {
			body = fmt.Sprintf(`{"input_ids": %s, "sampling_params": {"max_new_tokens": 1}`, prompt)
		} else {
			body = fmt.Sprintf(`{"prompt": %s, "max_tokens": 1`, prompt)
		}
		if st.fields != "" {
			body += ", " + st.fields
		}
		code, resp, _ := ts.Do(t, "POST", st.path, body+"}")
		var got struct {
			MetaInfo struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"meta_info"`
			Usage struct {
				PromptTokensDetails *struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(resp), &got); code != 200 || err != nil {
			t.Fatalf("%s: %d %s", st.name, code, resp)
		}
		cached := got.MetaInfo.CachedTokens
		if d := got.Usage.PromptTokensDetails; d != nil {
			cached = d.CachedTokens
		}
		if cached != st.want {
			t.Errorf("%s: cached %d, want %d", st.name, cached, st.want)
		}
	}
}

// Before PR #30827 (0.5.12) GenerateReqInput has no cache_salt: /generate
// ignores it, whatever its value, so a salted leg reuses the cache; the
// OpenAI routes join cache_salt and extra_key into one string
// (_compute_extra_key), so salt "a" and extra_key "a" share a namespace,
// and so do salt "a" with key "b" and key "ab".
func TestCacheNamespacesBeforePR30827(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mocktest.Profile(t, "default")
		p.SGLangVersion = "0.5.12"
		ts := mocktest.Start(t, api.Config{Profile: p, EnableCacheReport: true})
		checkNamespaces(t, ts, ids(40, 500), []namespaceStep{
			{"cold", "/generate", ``, 0},
			{"/generate ignores cache_salt", "/generate", `"cache_salt": "a"`, 499},
			{"another salt is the same", "/generate", `"cache_salt": "b"`, 499},
			{"even one that is no string", "/generate", `"cache_salt": [1, 2]`, 499},
			{"OpenAI salt is a namespace", "/v1/completions", `"cache_salt": "a"`, 0},
			{"the extra_key of the same text is that namespace", "/v1/completions", `"extra_key": "a"`, 499},
			{"salt and key are one string", "/v1/completions", `"cache_salt": "a", "extra_key": "b"`, 0},
			{"the key of their concatenation", "/v1/completions", `"extra_key": "ab"`, 499},
			{"and on /generate", "/generate", `"extra_key": "ab"`, 499},
			{"OpenAI's empty salt and key are no namespace", "/v1/completions", `"cache_salt": "", "extra_key": ""`, 499},
			{"LoRA appends to the joined key", "/v1/completions", `"cache_salt": "a", "lora_path": "b"`, 499},
		})
	})
}

// /sim/requests says which requests carried a cache_salt (a string that is
// not empty, one for all prompts or one each), whether or not the release
// takes it on their route, so that an audit can tell a salt the server
// ignored: in 0.5.12 as in 0.5.18.
func TestSimSaysWhichRequestsSentASalt(t *testing.T) {
	for _, release := range []string{"0.5.12", "0.5.18"} {
		synctest.Test(t, func(t *testing.T) {
			p := mocktest.Profile(t, "default")
			p.SGLangVersion = release
			ts := mocktest.Start(t, api.Config{Profile: p})
			for _, b := range []struct{ path, body string }{
				{"/generate", `{"rid": "salted", "text": "a b", "cache_salt": "s", "sampling_params": {"max_new_tokens": 1}}`},
				{"/generate", `{"rid": "empty", "text": "a b", "cache_salt": "", "sampling_params": {"max_new_tokens": 1}}`},
				{"/generate", `{"rid": "none", "text": "a b", "sampling_params": {"max_new_tokens": 1}}`},
				{"/generate", `{"rid": ["one", "two"], "text": ["a b", "c d"], "cache_salt": ["s", ""], "sampling_params": {"max_new_tokens": 1}}`},
				{"/v1/completions", `{"rid": "openai", "prompt": "a b", "cache_salt": "s", "max_tokens": 1}`},
				{"/v1/completions", `{"rid": "openai-empty", "prompt": "a b", "cache_salt": "", "max_tokens": 1}`},
			} {
				if code, body, _ := ts.Do(t, "POST", b.path, b.body); code != 200 {
					t.Fatalf("%s %s: %d %s", release, b.body, code, body)
				}
			}
			body := getOK(t, ts, "/sim/requests")
			var got []sim.RequestSummary
			if err := json.Unmarshal([]byte(body), &got); err != nil {
				t.Fatal(err)
			}
			var salted []string
			for _, r := range got {
				if r.CacheSalt {
					salted = append(salted, r.RID)
				}
			}
			if want := "[salted one openai]"; fmt.Sprint(salted) != want {
				t.Errorf("%s: salted requests %v, want %s", release, salted, want)
			}
		})
	}
}

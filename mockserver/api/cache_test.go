package api_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"testing/synctest"

	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
)

// The cache namespace is SGLang's since PR #30827: the radix key carries
// the structured pair (extra_key, cache_salt) on every route, so /generate
// takes cache_salt (a salted "cold leg" is cold there too), a salt never
// collides with an extra_key or a concatenation of the two, an empty salt
// is no salt, and the LoRA adapter still appends to extra_key.
func TestCacheNamespaces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{EnableCacheReport: true})
		prompt := jsonOf(ids(40, 500))
		steps := []struct {
			name, path, fields string
			want               int
		}{
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
	})
}

package harness_test

import (
	"testing"
	"testing/synctest"

	"github.com/sglmock/sglmock/harness"
	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
	"github.com/sglmock/sglmock/mockserver/tokenizer"
)

// The harness sizes its prompts through /tokenize, so against a server
// with a model's own tokenizer it still sends the requested sizes: 1024
// and 8192 tokens, nonce included, with real Llama 3.1, Qwen 3 and
// SentencePiece (Mistral) vocabularies.
func TestPromptSizingWithRealTokenizers(t *testing.T) {
	o := mocktest.NewOracle(t)
	for _, model := range []string{"llama3_1", "qwen3", "llama2"} {
		t.Run(model, func(t *testing.T) {
			tok, err := tokenizer.Load(o.Models(model))
			if err != nil {
				t.Fatal(err)
			}
			synctest.Test(t, func(t *testing.T) {
				m := mocktest.Start(t, api.Config{Profile: mocktest.Profile(t, "default"), Tokenizer: tok})
				points := []harness.Point{{CtxReq: 1024, Tokens: 1024}, {CtxReq: 8192, Tokens: 8192}}
				rep := run(t, twoPoint(m, points, harness.FlushNonce))
				for i, row := range rep.Rows {
					if row.PromptTokens != points[i].Tokens {
						t.Errorf("%d tokens requested: the server counted %d", points[i].Tokens, row.PromptTokens)
					}
				}
				mocktest.CheckIdle(t, m.Engine())
			})
		})
	}
}

package tokenizer_test

import (
	"slices"
	"sync"
	"testing"

	"github.com/sglmock/sglmock/mockserver/mocktest"
	"github.com/sglmock/sglmock/mockserver/tokenizer"
)

// loaded keeps each oracle tokenizer once per test binary: loading a
// 150k-token vocabulary takes a second.
var loaded sync.Map // directory -> *tokenizer.Tokenizer

func load(t *testing.T, dir string) *tokenizer.Tokenizer {
	t.Helper()
	if tok, ok := loaded.Load(dir); ok {
		return tok.(*tokenizer.Tokenizer)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	loaded.Store(dir, tok)
	return tok
}

// Every corpus text gets the oracle's ids (transformers.js on the
// tokenizer as SGLang loads it through Python's transformers), with and
// without special tokens, and decodes to its text; every chat renders to
// the same text and ids.
func TestOracleEncode(t *testing.T) {
	o := mocktest.NewOracle(t)
	for _, model := range mocktest.OracleModels {
		t.Run(model, func(t *testing.T) {
			tok := load(t, o.Models(model))
			want := o.Run(t, model, mocktest.OracleCorpus, mocktest.OracleChats)
			for i, text := range mocktest.OracleCorpus {
				if got := tok.Encode(nil, text); !slices.Equal(got, want.Plain[i]) {
					t.Errorf("Encode(%q):\n got %v\nwant %v", text, got, want.Plain[i])
				}
				if got := tok.EncodePrompt(nil, text); !slices.Equal(got, want.Prompt[i]) {
					t.Errorf("EncodePrompt(%q):\n got %v\nwant %v", text, got, want.Prompt[i])
				}
				if got := tok.Decode(want.Prompt[i], false); got != want.Decoded[i] {
					t.Errorf("Decode(%v): got %q, want %q", want.Prompt[i], got, want.Decoded[i])
				}
				if n := tok.Count(text); n != len(want.Plain[i]) {
					t.Errorf("Count(%q): got %d, want %d", text, n, len(want.Plain[i]))
				}
			}
			for i, chat := range mocktest.OracleChats {
				msgs := make([]tokenizer.Message, len(chat))
				for j, m := range chat {
					msgs[j] = tokenizer.Message{Role: m.Role, Content: m.Content}
				}
				got, err := tok.ApplyChatTemplate(msgs, true, nil)
				if want.Chat[i] == nil {
					if err == nil {
						t.Errorf("chat %d: rendered %q without a template", i, got)
					}
					continue
				}
				if err != nil || got != *want.Chat[i] {
					t.Errorf("chat %d: got %q, %v\nwant %q", i, got, err, *want.Chat[i])
					continue
				}
				if ids := tok.Encode(nil, got); !slices.Equal(ids, want.ChatIDs[i]) {
					t.Errorf("chat %d ids:\n got %v\nwant %v", i, ids, want.ChatIDs[i])
				}
			}
		})
	}
}

// The mock's output tokens come from the real vocabulary and read back as
// themselves: a multi-turn chat that sends an answer back extends its
// cached prompt, prompt plus answer.
func TestOracleOutputRoundTrips(t *testing.T) {
	o := mocktest.NewOracle(t)
	for _, model := range mocktest.OracleModels {
		t.Run(model, func(t *testing.T) {
			tok := load(t, o.Models(model))
			turn1 := []tokenizer.Message{{Role: "user", Content: "Say something."}}
			text1, err := tok.ApplyChatTemplate(turn1, true, nil)
			if err != nil {
				text1 = "Say something.\n" // no template: a plain prompt
			}
			prompt := tok.Encode(nil, text1)
			for _, seed := range []uint64{1, 2, 3, tokenizer.PromptHash(prompt)} {
				var answer []int32
				for i := range 300 {
					answer = append(answer, tok.OutputToken(seed, i))
				}
				var b []byte
				for _, id := range answer {
					b = tok.AppendDecode(b, id)
				}
				got := tok.Encode(nil, text1+string(b))
				if want := append(slices.Clone(prompt), answer...); !slices.Equal(got, want) {
					t.Fatalf("seed %d: prompt + answer %q re-tokenizes differently", seed, b)
				}
			}
		})
	}
}

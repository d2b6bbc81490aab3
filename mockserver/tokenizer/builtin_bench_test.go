package tokenizer_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sglmock/sglmock/mockserver/tokenizer"
)

// BenchmarkBuiltinEncode tokenizes an 8,000-word prompt (about 10k
// tokens) with the built-in tokenizer under a context that can end, as the
// server tokenizes a long completions prompt.
func BenchmarkBuiltinEncode(b *testing.B) {
	tok, err := tokenizer.Builtin(tokenizer.BuiltinOptions{})
	if err != nil {
		b.Fatal(err)
	}
	text := strings.TrimSpace(strings.Repeat("the cache keeps every prefix so later requests skip prefill. ", 800))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctx = tokenizer.WithPace(ctx, func() {})
	var ids []int32
	for b.Loop() {
		ids, _, err = tok.EncodeWithinContext(ctx, ids[:0], text, true, -1)
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(ids)), "tokens")
}

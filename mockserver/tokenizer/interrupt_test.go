package tokenizer

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// countingCtx is a context whose Err is nil for its first ok calls and
// context.Canceled from then on; it counts the calls.
type countingCtx struct {
	context.Context
	ok, calls int
}

func (c *countingCtx) Done() <-chan struct{} { return make(chan struct{}) } // never closed: Err says
func (c *countingCtx) Err() error {
	c.calls++
	if c.calls > c.ok {
		return context.Canceled
	}
	return nil
}

// A tokenization whose context ends stops at the encoder's next look at it,
// every 64 KiB of text: a client that leaves stops costing a core. A run of
// spaces is one pre-tokenized piece (merged in 64 KiB cuts), letters many
// pieces, and the built-in tokenizer reads the text byte by byte; all
// stop, counting, with a limit or without.
func TestTokenizingStopsWhenTheContextEnds(t *testing.T) {
	dir := writeDir(t, map[string]string{TokenizerJSON: llamaLike("Hello", " world")})
	loaded, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	builtin, err := Builtin(BuiltinOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const size = 4 << 20 // 64 looks at the context if it never ended
	for _, tt := range []struct {
		name string
		tok  *Tokenizer
		text string
	}{
		{"loaded, spaces", loaded, strings.Repeat(" ", size)},
		{"loaded, words", loaded, strings.Repeat("Hello world ", size/12)},
		{"built-in, words", builtin, strings.Repeat("Hello world ", size/12)},
	} {
		for _, limit := range []int{-1, 0, 100} {
			ctx := &countingCtx{Context: context.Background(), ok: 3}
			ids, n, err := tt.tok.EncodeWithinContext(ctx, nil, tt.text, true, limit)
			if !errors.Is(err, context.Canceled) || ids != nil || n != 0 {
				t.Errorf("%s, limit %d: got %d ids, count %d, %v; want context.Canceled and nothing", tt.name, limit, len(ids), n, err)
			}
			if ctx.calls != 4 {
				t.Errorf("%s, limit %d: the context was looked at %d times, want 4 (it ended at the 4th)", tt.name, limit, ctx.calls)
			}
		}
		ctx := &countingCtx{Context: context.Background(), ok: 3}
		if _, err := tt.tok.CountContext(ctx, tt.text); !errors.Is(err, context.Canceled) || ctx.calls != 4 {
			t.Errorf("%s: CountContext: got %v after %d looks, want context.Canceled after 4", tt.name, err, ctx.calls)
		}
		// A context that does not end changes nothing.
		want := tt.tok.Count(tt.text)
		if n, err := tt.tok.CountContext(context.Background(), tt.text); n != want || err != nil {
			t.Errorf("%s: CountContext without an end: got %d, %v; want %d", tt.name, n, err, want)
		}
	}
}

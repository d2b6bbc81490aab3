package tokenizer

import (
	"context"
	"math"
)

// interrupt stops a tokenization nobody waits for any more (its client
// left): the encoders look at it between pieces, at most once every
// interruptEvery bytes of text, and between the cuts of a long piece's
// merge, so a request whose client leaves stops costing a core within a
// few milliseconds. A nil interrupt never stops.
type interrupt struct {
	ctx     context.Context
	pace    func() // WithPace's, or nil
	pending int    // bytes of text since the last look
	stopped error  // the context's error, once it ended
}

// interruptEvery is how many bytes of text are encoded between looks at
// the context: the cut of a long piece's merge (maxMergePiece).
const interruptEvery = maxMergePiece

func newInterrupt(ctx context.Context) *interrupt {
	if ctx == nil {
		return nil
	}
	pace, _ := ctx.Value(paceKey{}).(func())
	if ctx.Done() == nil && pace == nil {
		return nil // a context that never ends, and no pace
	}
	return &interrupt{ctx: ctx, pace: pace}
}

type paceKey struct{}

// WithPace returns a context under which EncodeWithinContext and
// CountContext call pace between their pieces of work, every 64 KiB of
// text: where a server shares its cores among long work (another request's
// turn).
func WithPace(ctx context.Context, pace func()) context.Context {
	return context.WithValue(ctx, paceKey{}, pace)
}

// after records n more bytes encoded and reports whether to stop.
func (s *interrupt) after(n int) bool {
	if s == nil {
		return false
	}
	if s.stopped != nil {
		return true
	}
	if s.pending += n; s.pending >= interruptEvery {
		s.pending = 0
		if s.pace != nil {
			s.pace()
		}
		s.stopped = s.ctx.Err()
	}
	return s.stopped != nil
}

// due is how many more bytes after may be told of before it looks at the
// context: 0 once stopped (the next after reports it), never for a nil
// interrupt.
func (s *interrupt) due() int {
	switch {
	case s == nil:
		return math.MaxInt
	case s.stopped != nil:
		return 0
	}
	return interruptEvery - s.pending
}

// err is the context's error once the tokenization stopped, else nil.
func (s *interrupt) err() error {
	if s == nil {
		return nil
	}
	return s.stopped
}

package tokenizer

import "context"

// interrupt stops a tokenization nobody waits for any more (its client
// left): the encoders look at it between pieces, at most once every
// interruptEvery bytes of text, and between the cuts of a long piece's
// merge, so a request whose client leaves stops costing a core within a
// few milliseconds. A nil interrupt never stops.
type interrupt struct {
	ctx     context.Context
	pending int   // bytes of text since the last look
	stopped error // the context's error, once it ended
}

// interruptEvery is how many bytes of text are encoded between looks at
// the context: the cut of a long piece's merge (maxMergePiece).
const interruptEvery = maxMergePiece

func newInterrupt(ctx context.Context) *interrupt {
	if ctx == nil || ctx.Done() == nil {
		return nil // a context that never ends
	}
	return &interrupt{ctx: ctx}
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
		s.stopped = s.ctx.Err()
	}
	return s.stopped != nil
}

// err is the context's error once the tokenization stopped, else nil.
func (s *interrupt) err() error {
	if s == nil {
		return nil
	}
	return s.stopped
}

package api

import (
	"context"
	"runtime"

	"github.com/sglmock/sglmock/mockserver/engine"
	"github.com/sglmock/sglmock/mockserver/tokenizer"
)

// cpuSlots bounds the goroutines doing a request's long CPU work at once:
// encoding a long answer, tokenizing a long text, decoding a large body.
// There are GOMAXPROCS-1 slots (at least one), and long work gives its slot
// back between its pieces (every 64 KiB) and while it waits on a client,
// so that however many clients ask for long work at once, it shares the
// cores in turn and one core stays free for the rest: health checks, new
// connections, short requests. Without it, a few dozen encoders on two
// cores delay a health check by seconds (the Go scheduler gives each
// runnable goroutine its turn). A nil *cpuSlots bounds nothing.
type cpuSlots struct{ c chan struct{} }

func newCPUSlots() *cpuSlots {
	return &cpuSlots{c: make(chan struct{}, max(1, runtime.GOMAXPROCS(0)-1))}
}

// take waits for a slot.
func (s *cpuSlots) take() {
	if s != nil {
		s.c <- struct{}{}
	}
}

// give returns the slot.
func (s *cpuSlots) give() {
	if s != nil {
		<-s.c
	}
}

// pace gives the slot to the next in line, if any, and waits for one
// again: the point between two pieces of long work.
func (s *cpuSlots) pace() {
	if s != nil {
		s.give()
		s.take()
	}
}

// shortWork is the most bytes of text or body taken as short work, which
// needs no slot: less than one piece of paced work (the tokenizer looks at
// its pace and its context once every 64 KiB of text), done in microseconds.
const shortWork = 64 << 10

// tokenizePrompt is the engine's Tokenize in a CPU slot, paced every 64 KiB of
// text and stopped when the client leaves; a short text is tokenized as it
// is, as the tokenizer would not look at its pace or context before its
// end.
func (s *Server) tokenizePrompt(ctx context.Context, r engine.Request) ([]int32, error) {
	if r.InputIDs == nil && len(r.Text) < shortWork {
		return s.eng.Tokenize(context.Background(), r)
	}
	s.cpu.take()
	defer s.cpu.give()
	return s.eng.Tokenize(tokenizer.WithPace(ctx, s.cpu.pace), r)
}

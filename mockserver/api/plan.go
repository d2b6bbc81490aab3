package api

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/sglmock/sglmock/mockserver/engine"
)

// item is one sequence to generate, with what the HTTP layer needs to
// render it.
type item struct {
	req            engine.Request
	index          int
	noStopTrim     bool
	streamInterval int
	logprobs       logprobParams
	// metrics: --enable-metrics, whose time stats meta_info carries.
	metrics bool
	// dpRank: meta_info's dp_rank is the rank that ran the request (a
	// deployment of several ranks), not null.
	dpRank bool
}

// cacheNamespace is the radix cache namespace of SGLang's RadixKey: the
// request's extra_key with the LoRA adapter appended, plainly concatenated
// (schedule_batch.py, Req.__init__), paired with its cache_salt (PR
// #30827). A present extra_key, even "", is a namespace of its own, since
// SGLang's radix key tests extra_key against None; the engine's "" means
// none, so every present key gets a leading marker byte. An empty salt is
// no salt, as GenerateReqInput normalises it. A salt alone is marked by
// its own byte; a salt with a key carries the key's length, so that no pair
// collides with another or with an unsalted key.
func cacheNamespace(extraKey *string, lora string, cacheSalt *string) string {
	key := ""
	if extraKey != nil || lora != "" {
		key = "\x01" + deref(extraKey) + lora
	}
	switch {
	case cacheSalt == nil || *cacheSalt == "":
		return key
	case key == "":
		return "\x02" + *cacheSalt
	}
	return "\x03" + strconv.Itoa(len(key)) + ":" + key + *cacheSalt
}

// plan is a parsed generation request: its sequences, prompt-major, with
// copies (SGLang's n, parallel_sample_num) sequences per prompt.
type plan struct {
	items  []item
	copies int
	// batch: the answer is a list, and stream events carry an index.
	batch bool
}

// collected marks p's sequences as waited for whole (collect): their
// streams keep only their last events.
func (p plan) collected() {
	for i := range p.items {
		p.items[i].req.OnlyLast = true
	}
}

// maxN bounds n (parallel samples per prompt), as OpenAI does, and
// maxSequences the sequences of one request (prompts x n), so that one
// request cannot ask for unbounded work: each sequence is an engine
// request. SGLang bounds neither; the mock's bound is generous.
const (
	maxN         = 128
	maxSequences = 2048
)

// checkSequences bounds the sequences of a batch of prompts with n copies
// each.
func checkSequences(prompts, copies int) error {
	if prompts > maxSequences || prompts*copies > maxSequences {
		return fmt.Errorf("A request may ask for at most %d sequences (prompts x n), got %d prompts x %d.",
			maxSequences, prompts, copies)
	}
	return nil
}

func copiesOf(n *integer) (int, error) {
	switch {
	case n == nil:
		return 1, nil
	case *n < 1:
		return 0, fmt.Errorf("n must be at least 1, got %d.", *n)
	case *n > maxN:
		return 0, fmt.Errorf("n must be at most %d, got %d.", maxN, *n)
	}
	return int(*n), nil
}

// maxRequestOutputTokens bounds the tokens one request may have the server
// generate and hold until it answers, summed over its sequences (prompts x
// n x max_new_tokens, each capped by the context length), and
// maxRequestLogprobs the logprob entries it may ask for (positions x (1 +
// top_logprobs_num), prompt positions included): the sequences are bounded
// in number, and these bound them in bytes. A request at both bounds pins
// a few hundred MiB (TestRequestOutputIsBoundedInBytes measures it); SGLang
// bounds neither, and a real server's memory would hold the same output.
const (
	maxRequestOutputTokens = 1 << 20
	maxRequestLogprobs     = 1 << 21
)

// checkOutput refuses a plan whose sequences could together generate more
// than maxRequestOutputTokens tokens, or return more than
// maxRequestLogprobs logprob entries, before anything is submitted.
func (s *Server) checkOutput(p plan) error {
	ctxLen := s.cfg.Profile.ContextLength
	var tokens, logprobs int64
	longest := 0
	for _, it := range p.items {
		out := min(max(it.req.MaxNewTokens, 0), ctxLen)
		longest = max(longest, out)
		tokens += int64(out)
		if lp := it.logprobs; lp.on {
			positions := int64(out)
			if lp.start >= 0 && it.req.InputIDs != nil {
				positions += int64(max(len(it.req.InputIDs)-lp.start, 0))
			}
			logprobs += positions * int64(1+lp.top)
		}
	}
	if tokens > maxRequestOutputTokens {
		return fmt.Errorf("The request may generate %d tokens (%d sequences of up to %d): sglmock serves at most %d output tokens a request "+
			"(prompts x n x max_new_tokens, each at most the context length). Split it, or ask for fewer tokens.",
			tokens, len(p.items), longest, maxRequestOutputTokens)
	}
	if logprobs > maxRequestLogprobs {
		return fmt.Errorf("The request asks for %d logprob entries (positions x (1 + top_logprobs_num) over %d sequences): "+
			"sglmock returns at most %d a request. Ask for fewer alternatives or positions.", logprobs, len(p.items), maxRequestLogprobs)
	}
	return nil
}

// submit submits a plan's sequences, each arriving at received, the
// simulated time the request's body had arrived: the mock's own decoding
// and tokenizing are not the model's time. Their prompts are tokenized
// first (stopping if the client leaves), then the request takes its room
// in the answer budget, waiting its turn if there is none (budget.go). On
// the first refusal it aborts those it already submitted and returns the
// refusal. With n > 1 it first caches the prompts, as SGLang's parallel
// sampling does; the copies then arrive when that is done. The caller
// releases the hold once the answer is written.
func (s *Server) submit(ctx context.Context, p plan, received time.Duration) ([]*engine.Stream, *budgetHold, error) {
	if err := s.checkOutput(p); err != nil {
		return nil, nil, err
	}
	if err := s.tokenizePrompts(ctx, p); err != nil {
		return nil, nil, err
	}
	hold, err := s.answers.acquire(ctx, s.answerCost(p))
	if err != nil {
		return nil, nil, err
	}
	if p.copies > 1 {
		if err := s.cachePrompts(ctx, p, received); err != nil {
			hold.release()
			return nil, nil, err
		}
		received = s.eng.Now()
	}
	streams := make([]*engine.Stream, 0, len(p.items))
	for _, it := range p.items {
		st, err := s.eng.SubmitAt(it.req, received)
		if err != nil {
			abortStreams(streams)
			hold.release()
			return nil, nil, err
		}
		streams = append(streams, st)
	}
	return streams, hold, nil
}

// tokenizePrompts gives every sequence of p its prompt's tokens, a text
// tokenized once for its n copies; tokenizing stops, with ctx's error,
// when the client leaves. With n > 1 every prompt is also checked before
// anything runs, as SGLang's parallel sampling checks them
// (cachePrompts); a single sample is checked as it is submitted.
func (s *Server) tokenizePrompts(ctx context.Context, p plan) error {
	copies := max(p.copies, 1)
	for i := 0; i < len(p.items); i += copies {
		group := p.items[i:min(i+copies, len(p.items))]
		if group[0].req.InputIDs == nil {
			tokens, err := s.tokenizePrompt(ctx, group[0].req)
			if err != nil {
				return err
			}
			for c := range group {
				group[c].req.InputIDs, group[c].req.Text = tokens, ""
			}
		}
		if copies > 1 {
			if err := s.eng.Check(group[0].req); err != nil {
				return err
			}
		}
	}
	return nil
}

// What a generation request makes the server hold until its answer is
// written, as the answer budget counts it: for each output token, the
// engine's record of the decode round that made it (48 bytes, up to twice
// that as its slice grows), its id (4, up to 8) and its text (a word of a
// few bytes, up to twice that); each prompt token in the engine's copy for
// every sequence and in the request's own; and the answer's write buffer.
// Logprobs are computed as they are written. A request at the bound on
// output tokens (1,048,576) is charged 128 MiB and was measured holding
// some 85 MiB.
const (
	outputTokenBytes = 128
	promptTokenBytes = 4
)

// answerCost is what p's sequences make the server hold, at most: every
// sequence generating its max_new_tokens (at most the context length).
func (s *Server) answerCost(p plan) int64 {
	ctxLen := s.cfg.Profile.ContextLength
	n := int64(answerChunk)
	for i, it := range p.items {
		out := min(max(it.req.MaxNewTokens, 0), ctxLen)
		n += int64(out)*outputTokenBytes + int64(len(it.req.InputIDs))*promptTokenBytes
		if i%max(p.copies, 1) == 0 {
			n += int64(len(it.req.InputIDs)) * promptTokenBytes
		}
	}
	return n
}

// cachePrompts is the prelude of SGLang's parallel sampling
// (tokenizer_manager.py, _handle_batch_request): every prompt has been
// tokenized and checked before anything runs (tokenizePrompts); then,
// prompt after prompt, a copy with
// max_new_tokens 0 and a fresh rid prefills it into the cache and is
// waited for. It is a request like any other (counted in the metrics,
// listed under /sim/requests, dispatched to a DP rank), so each of the n
// copies submitted next that runs on its rank finds the whole prompt
// cached; on several ranks the controller spreads the copies, and those on
// other ranks prefill it again, as in SGLang. The copies share one
// tokenization.
func (s *Server) cachePrompts(ctx context.Context, p plan, received time.Duration) error {
	for i := 0; i < len(p.items); i += p.copies {
		prefill := p.items[i].req
		prefill.RID, prefill.MaxNewTokens = "", 0
		st, err := s.eng.SubmitAt(prefill, received)
		if err != nil {
			return err
		}
		if _, _, err := st.Collect(ctx); err != nil {
			st.Abort()
			return err
		}
		for c := range p.items[i : i+p.copies] {
			p.items[i+c].req.SampleOf = st.RID()
		}
		received = s.eng.Now() // the next is sent when this one is done
	}
	return nil
}

// abortStreams aborts the streams of a plan one of whose sequences was
// refused.
func abortStreams(streams []*engine.Stream) {
	for _, st := range streams {
		st.Abort()
	}
}

// disconnectAll tells the engine the client of every stream left; SGLang
// aborts them only later (see engine.Stream.Disconnect).
func disconnectAll(streams []*engine.Stream, streaming bool) {
	for _, st := range streams {
		st.Disconnect(streaming)
	}
}

// collect reads every stream to its end. If ctx ends first (the client
// disconnected), it tells the engine and reports false.
func (s *Server) collect(ctx context.Context, items []item, streams []*engine.Stream) ([]*output, bool) {
	outs := newOutputs(s.eng.Tokenizer(), items, streams)
	for i, st := range streams {
		last, tokens, err := st.Collect(ctx)
		if err != nil {
			disconnectAll(streams, false)
			return nil, false
		}
		last.Tokens = tokens
		outs[i].add(last)
	}
	return outs, true
}

package scenarios

import (
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sglmock/sglmock/mockserver/profile"

	"github.com/sglmock/sglmock/harness"
)

// The kinds of step, each one key of a step's mapping.
const (
	kindTwoPoint  = "twopoint"
	kindStream    = "stream"
	kindFlush     = "flush"
	kindStartLoad = "start_load"
	kindStopLoad  = "stop_load"
	kindRaw       = "raw"
	kindWait      = "wait"
	kindRestart   = "restart"
)

var stepKinds = []string{kindTwoPoint, kindStream, kindFlush, kindStartLoad, kindStopLoad, kindRaw, kindWait, kindRestart}

// flushPolicy is how a method's flushes are made, in the server's seconds
// (the runner turns the retry wait into wall time with the speedup).
type flushPolicy struct {
	retries   int
	retryWait float64
	timeout   float64
}

// defaultFlush is bench's: three retries; 0.1 simulated seconds apart is
// twice kimi-k2.6-rtx6000's settling window.
var defaultFlush = flushPolicy{retries: 3, retryWait: 0.1}

type twoPointAction struct {
	points      []harness.Point
	a, b        int
	method      harness.Method
	repeat      int
	noncePos    harness.NoncePosition
	betweenLegs bool
	allowShared int
	flush       flushPolicy
}

type streamAction struct {
	points      []harness.Point
	maxNew      int
	noFlush     bool
	allowShared int
	flush       flushPolicy
}

// flushAction is one POST /flush_cache, timeout > 0 adding ?timeout=.
type flushAction struct {
	timeout float64
}

// startLoadAction starts streams concurrent streaming requests, each of
// its own prompt (no prefix shared with anything), started one after the
// other so that their order is deterministic; with a delay, that many
// simulated seconds after the step, while the next steps run.
type startLoadAction struct {
	name                 string
	streams              int
	promptTokens, maxNew int
	delay                float64
}

// stopLoadAction waits for a load's streams to finish, or with abort
// disconnects them (the server aborts each as SGLang does, 2 s later).
type stopLoadAction struct {
	name  string
	abort bool
}

// rawAction is one request where no harness method does what the
// scenario needs (n > 1, say). promptTokens > 0 puts a fresh prompt of
// that many token ids in the body's input_ids; prompts puts a batch of
// them there, in order.
type rawAction struct {
	method, path string
	body         map[string]any
	promptTokens int
	prompts      []batchPrompt
}

// batchPrompt is one prompt of a raw batch: tokens ids, the first shared
// of them the run's shared prefix (its head, for a prompt that shares
// less than another), the rest its own.
type batchPrompt struct {
	tokens, shared int
}

// maxBatchPrompts bounds a raw batch.
const maxBatchPrompts = 256

// waitAction lets simulated time pass (a load get going, a server settle).
type waitAction struct {
	seconds float64
}

// maxStreams bounds a load; maxPromptTokens a raw or load prompt.
const (
	maxStreams      = 1024
	maxPromptTokens = 1_000_000
)

type parser struct {
	d     *decoder
	loads map[string]bool // started and not yet stopped
}

func (p *parser) step(n *yaml.Node, path string) (*Step, error) {
	f, err := p.d.mapping(n, path, append([]string{"name", "note", "expect"}, stepKinds...)...)
	if err != nil {
		return nil, err
	}
	if err := f.require("name"); err != nil {
		return nil, err
	}
	st := &Step{Line: n.Line}
	if err := f.str("name", &st.Name); err != nil {
		return nil, err
	}
	if !validName(st.Name) {
		return nil, f.errorf("name", "%q: want lower-case letters, digits and dashes", st.Name)
	}
	if err := f.str("note", &st.Note); err != nil {
		return nil, err
	}
	var kind string
	for _, k := range stepKinds {
		if f.has(k) {
			if kind != "" {
				return nil, f.errorf(k, "a step does one thing: it already has %s", kind)
			}
			kind = k
		}
	}
	if kind == "" {
		return nil, p.d.errorf(n, path, "say what the step does: one of %s", strings.Join(stepKinds, ", "))
	}
	body, sub := f.values[kind], f.sub(kind)
	parse := map[string]func(*yaml.Node, string) (action, error){
		kindTwoPoint: p.twoPoint, kindStream: p.stream, kindFlush: p.flush, kindStartLoad: p.startLoad,
		kindStopLoad: p.stopLoad, kindRaw: p.raw, kindWait: p.wait, kindRestart: p.restart,
	}
	st.action, err = parse[kind](body, sub)
	if err != nil {
		return nil, err
	}
	if f.has("expect") {
		list := f.values["expect"]
		if list.Kind != yaml.SequenceNode {
			return nil, f.errorf("expect", "want a list of expectations, got %s", profile.NodeKind(list))
		}
		for i, en := range list.Content {
			e, err := p.expectation(en, fmt.Sprintf("%s.expect[%d]", path, i), st.action)
			if err != nil {
				return nil, err
			}
			st.Expect = append(st.Expect, e)
		}
	}
	return st, nil
}

func (p *parser) twoPoint(n *yaml.Node, path string) (action, error) {
	f, err := p.d.mapping(n, path, "ctx", "a", "b", "method", "repeat", "nonce_position", "flush_only_between_legs", "allow_shared_prefix", "flush")
	if err != nil {
		return nil, err
	}
	if err := f.require("ctx", "method"); err != nil {
		return nil, err
	}
	tp := &twoPointAction{a: 1, b: 17, repeat: 1, noncePos: harness.NonceStart, flush: defaultFlush}
	if tp.points, err = p.points(f); err != nil {
		return nil, err
	}
	var method, pos string
	errs := []error{
		f.integer("a", &tp.a, 1, harness.MaxTokens),
		f.integer("b", &tp.b, 2, harness.MaxTokens),
		f.integer("repeat", &tp.repeat, 1, 1000),
		f.oneOf("method", &method, methodNames()...),
		f.oneOf("nonce_position", &pos, string(harness.NonceStart), string(harness.NonceEnd)),
		f.boolean("flush_only_between_legs", &tp.betweenLegs),
		f.integer("allow_shared_prefix", &tp.allowShared, 0, harness.MaxTokens),
	}
	if err := firstErr(errs); err != nil {
		return nil, err
	}
	if tp.b <= tp.a {
		return nil, f.errorf("b", "%d: must be more than a (%d)", tp.b, tp.a)
	}
	tp.method = harness.Method(method)
	if pos != "" {
		tp.noncePos = harness.NoncePosition(pos)
	}
	if tp.betweenLegs && tp.method != harness.FlushMethod && tp.method != harness.FlushNonce {
		return nil, f.errorf("flush_only_between_legs", "method %s sends no flush", tp.method)
	}
	if f.has("flush") {
		if tp.flush, err = p.flushPolicy(f.values["flush"], f.sub("flush")); err != nil {
			return nil, err
		}
	}
	return tp, nil
}

func methodNames() []string {
	var out []string
	for _, m := range harness.Methods {
		out = append(out, string(m))
	}
	return out
}

func (p *parser) stream(n *yaml.Node, path string) (action, error) {
	f, err := p.d.mapping(n, path, "ctx", "max_new_tokens", "no_flush", "allow_shared_prefix", "flush")
	if err != nil {
		return nil, err
	}
	if err := f.require("ctx", "max_new_tokens"); err != nil {
		return nil, err
	}
	st := &streamAction{flush: defaultFlush}
	if st.points, err = p.points(f); err != nil {
		return nil, err
	}
	errs := []error{
		f.integer("max_new_tokens", &st.maxNew, 3, harness.MaxTokens),
		f.boolean("no_flush", &st.noFlush),
		f.integer("allow_shared_prefix", &st.allowShared, 0, harness.MaxTokens),
	}
	if err := firstErr(errs); err != nil {
		return nil, err
	}
	if f.has("flush") {
		if st.flush, err = p.flushPolicy(f.values["flush"], f.sub("flush")); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// points reads ctx: a context or a list, each TOKENS or REQ:TOKENS (the
// row's label, and the server tokens its prompt is sized to).
func (p *parser) points(f *fields) ([]harness.Point, error) {
	list, err := f.list("ctx")
	if err != nil {
		return nil, err
	}
	if len(list) == 0 {
		return nil, f.errorf("ctx", "empty: want at least one context")
	}
	var out []harness.Point
	for i, n := range list {
		field := fmt.Sprintf("%s[%d]", f.sub("ctx"), i)
		if n.Kind != yaml.ScalarNode {
			return nil, p.d.errorf(n, field, "want TOKENS or REQ:TOKENS, got %s", profile.NodeKind(n))
		}
		req, tok, hasReq := strings.Cut(n.Value, ":")
		if !hasReq {
			tok = req
		}
		tokens, err1 := strconv.Atoi(tok)
		label, err2 := strconv.Atoi(req)
		if err1 != nil || err2 != nil || tokens < 16 || tokens > harness.MaxTokens || label < 1 {
			return nil, p.d.errorf(n, field, "%q: want TOKENS or REQ:TOKENS, tokens in 16..%d", n.Value, harness.MaxTokens)
		}
		for _, o := range out {
			if o.CtxReq == label {
				return nil, p.d.errorf(n, field, "context %d is listed twice", label)
			}
		}
		out = append(out, harness.Point{CtxReq: label, Tokens: tokens})
	}
	return out, nil
}

func (p *parser) flushPolicy(n *yaml.Node, path string) (flushPolicy, error) {
	fp := defaultFlush
	f, err := p.d.mapping(n, path, "retries", "retry_wait_s", "timeout_s")
	if err != nil {
		return fp, err
	}
	return fp, firstErr([]error{
		f.integer("retries", &fp.retries, 0, 1000),
		f.number("retry_wait_s", &fp.retryWait, 0, 3600),
		f.number("timeout_s", &fp.timeout, 0, 3600),
	})
}

func (p *parser) flush(n *yaml.Node, path string) (action, error) {
	f, err := p.d.mapping(n, path, "timeout_s")
	if err != nil {
		return nil, err
	}
	fa := &flushAction{}
	return fa, f.number("timeout_s", &fa.timeout, 0, 3600)
}

func (p *parser) startLoad(n *yaml.Node, path string) (action, error) {
	f, err := p.d.mapping(n, path, "name", "streams", "prompt_tokens", "max_new_tokens", "delay_s")
	if err != nil {
		return nil, err
	}
	if err := f.require("name", "streams", "prompt_tokens", "max_new_tokens"); err != nil {
		return nil, err
	}
	la := &startLoadAction{}
	errs := []error{
		f.str("name", &la.name),
		f.integer("streams", &la.streams, 1, maxStreams),
		f.integer("prompt_tokens", &la.promptTokens, 1, maxPromptTokens),
		f.integer("max_new_tokens", &la.maxNew, 1, harness.MaxTokens),
		f.number("delay_s", &la.delay, 0, 3600),
	}
	if err := firstErr(errs); err != nil {
		return nil, err
	}
	if !validName(la.name) {
		return nil, f.errorf("name", "%q: want lower-case letters, digits and dashes", la.name)
	}
	if p.loads[la.name] {
		return nil, f.errorf("name", "load %q is already running", la.name)
	}
	p.loads[la.name] = true
	return la, nil
}

func (p *parser) stopLoad(n *yaml.Node, path string) (action, error) {
	f, err := p.d.mapping(n, path, "name", "abort")
	if err != nil {
		return nil, err
	}
	if err := f.require("name"); err != nil {
		return nil, err
	}
	sa := &stopLoadAction{}
	if err := firstErr([]error{f.str("name", &sa.name), f.boolean("abort", &sa.abort)}); err != nil {
		return nil, err
	}
	if !p.loads[sa.name] {
		return nil, f.errorf("name", "no load %q was started before this step", sa.name)
	}
	delete(p.loads, sa.name)
	return sa, nil
}

func (p *parser) raw(n *yaml.Node, path string) (action, error) {
	f, err := p.d.mapping(n, path, "method", "path", "body", "prompt_tokens", "prompts")
	if err != nil {
		return nil, err
	}
	if err := f.require("path"); err != nil {
		return nil, err
	}
	ra := &rawAction{method: "POST"}
	errs := []error{
		f.oneOf("method", &ra.method, "GET", "POST"),
		f.str("path", &ra.path),
		f.integer("prompt_tokens", &ra.promptTokens, 0, maxPromptTokens),
	}
	if err := firstErr(errs); err != nil {
		return nil, err
	}
	if !strings.HasPrefix(ra.path, "/") {
		return nil, f.errorf("path", "%q: want a path on the server, starting with /", ra.path)
	}
	if f.has("body") {
		bn := f.values["body"]
		if bn.Kind != yaml.MappingNode {
			return nil, f.errorf("body", "want a mapping (sent as a JSON object), got %s", profile.NodeKind(bn))
		}
		if err := bn.Decode(&ra.body); err != nil {
			return nil, f.errorf("body", "%v", err)
		}
	}
	if f.has("prompts") {
		if err := p.batchPrompts(f, ra); err != nil {
			return nil, err
		}
	}
	if ra.promptTokens > 0 || ra.prompts != nil {
		key := "prompt_tokens"
		if ra.prompts != nil {
			key = "prompts"
		}
		if ra.body == nil {
			ra.body = map[string]any{}
		}
		for _, input := range []string{"input_ids", "text"} {
			if _, ok := ra.body[input]; ok {
				return nil, f.errorf(key, "the body already has %s", input)
			}
		}
	}
	return ra, nil
}

// batchPrompts reads a raw step's prompts: a list of {tokens, shared},
// sent to /generate as one batch.
func (p *parser) batchPrompts(f *fields, ra *rawAction) error {
	if ra.promptTokens > 0 {
		return f.errorf("prompts", "give prompt_tokens or prompts, not both")
	}
	if ra.path != "/generate" || ra.method != "POST" {
		return f.errorf("prompts", "a batch of prompts goes to POST /generate, not %s %s", ra.method, ra.path)
	}
	list, err := f.list("prompts")
	if err != nil {
		return err
	}
	if len(list) == 0 || len(list) > maxBatchPrompts {
		return f.errorf("prompts", "want 1 to %d prompts, got %d", maxBatchPrompts, len(list))
	}
	for i, n := range list {
		path := fmt.Sprintf("%s[%d]", f.sub("prompts"), i)
		pf, err := p.d.mapping(n, path, "tokens", "shared")
		if err != nil {
			return err
		}
		if err := pf.require("tokens"); err != nil {
			return err
		}
		var bp batchPrompt
		if err := firstErr([]error{pf.integer("tokens", &bp.tokens, 1, maxPromptTokens), pf.integer("shared", &bp.shared, 0, maxPromptTokens)}); err != nil {
			return err
		}
		if bp.shared > bp.tokens {
			return pf.errorf("shared", "%d: more than the prompt's %d tokens", bp.shared, bp.tokens)
		}
		ra.prompts = append(ra.prompts, bp)
	}
	return nil
}

func (p *parser) wait(n *yaml.Node, path string) (action, error) {
	f, err := p.d.mapping(n, path, "seconds")
	if err != nil {
		return nil, err
	}
	if err := f.require("seconds"); err != nil {
		return nil, err
	}
	wa := &waitAction{}
	return wa, f.number("seconds", &wa.seconds, 0, 3600)
}

func firstErr(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

package api

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/sglmock/sglmock/mockserver/tokenizer"
)

// Logprobs. The mock's model has no distribution, so every position gets a
// deterministic one, a pure function of the prompt, the position and the
// token: a generated token has probability p in [0.5, 0.99) (the model
// chose it), a prompt token p in [0.01, 0.5); the alternatives, other output
// words, share the rest, halving: (1-p)/2, (1-p)/4, ... So every list is
// well formed (probabilities below 1 in sum, top lists sorted) and a
// request asked twice gets the same numbers.

// maxTopLogprobs bounds top_logprobs, as OpenAI does: the mock builds that
// many alternatives at every position.
const maxTopLogprobs = 20

// logprobParams are a request's logprob parameters, as SGLang's scheduler
// resolves them.
type logprobParams struct {
	on bool // return_logprob
	// start is logprob_start_len: the first prompt position whose logprob
	// is returned; SGLang's -1 means the last prompt token only.
	start int
	top   int  // top_logprobs_num
	text  bool // return_text_in_logprobs
}

// checkTopLogprobs bounds a top-logprobs count from field.
func checkTopLogprobs(field string, n int) error {
	if n < 0 || n > maxTopLogprobs {
		return fmt.Errorf("%s must be between 0 and %d, got %d.", field, maxTopLogprobs, n)
	}
	return nil
}

// tokenLogprob is one (logprob, token id, text) entry, written as SGLang
// writes the tuple: [logprob, id, text]; the logprob is null for the first
// prompt token, which nothing precedes, and the text null unless asked for.
type tokenLogprob struct {
	logprob float64
	none    bool
	id      int32
	text    *string
}

func (l tokenLogprob) MarshalJSON() ([]byte, error) { return l.appendJSON(nil), nil }

// appendJSON appends the entry's JSON to b. Its text is escaped as
// json.Marshal escapes it, HTML characters included.
func (l tokenLogprob) appendJSON(b []byte) []byte {
	b = append(b, '[')
	if l.none {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendFloat(b, l.logprob, 'g', -1, 64)
	}
	b = append(b, ',')
	b = strconv.AppendInt(b, int64(l.id), 10)
	b = append(b, ',')
	if l.text == nil {
		b = append(b, "null"...)
	} else {
		t, _ := json.Marshal(*l.text) // a string always marshals
		b = append(b, t...)
	}
	return append(b, ']')
}

// metaLogprobs are meta_info's logprob lists; the top lists only when
// top_logprobs_num > 0.
type metaLogprobs struct {
	InputTokenLogprobs  []tokenLogprob    `json:"input_token_logprobs"`
	OutputTokenLogprobs []tokenLogprob    `json:"output_token_logprobs"`
	InputTopLogprobs    *[][]tokenLogprob `json:"input_top_logprobs,omitempty"`
	OutputTopLogprobs   *[][]tokenLogprob `json:"output_top_logprobs,omitempty"`
}

// splitmix is a 64-bit mixer.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// position is the distribution at one position: the token there and its
// alternatives, most probable first.
func position(tok *tokenizer.Tokenizer, seed uint64, pos int, token int32, generated bool, top int, text bool) (tokenLogprob, []tokenLogprob) {
	h := splitmix(seed ^ splitmix(uint64(pos)<<32|uint64(uint32(token))))
	u := float64(h>>11) / (1 << 53)
	p := 0.01 + 0.49*u
	if generated {
		p = 0.5 + 0.49*u
	}
	entry := func(id int32, prob float64) tokenLogprob {
		e := tokenLogprob{logprob: math.Log(prob), id: id}
		if text {
			s := tok.Decode([]int32{id}, false)
			e.text = &s
		}
		return e
	}
	chosen := entry(token, p)
	if top == 0 {
		return chosen, nil
	}
	// The top list is the most probable top of the token and its
	// alternatives (a prompt token need not be among them).
	list := make([]tokenLogprob, 0, top+1)
	list = append(list, chosen)
	for j := 1; j <= top; j++ {
		list = append(list, entry(tok.OutputToken(h, j), (1-p)/math.Exp2(float64(j))))
	}
	slices.SortStableFunc(list, func(a, b tokenLogprob) int { return cmp.Compare(b.logprob, a.logprob) })
	return chosen, list[:top]
}

// logprobView computes an output's logprobs position by position and
// keeps none of them: a long answer writes each as it is computed, so its
// logprob entries cost the server nothing but the write buffer.
type logprobView struct {
	o      *output
	seed   uint64
	prompt []int32
	start  int // the first prompt position listed
	top    int
	text   bool
}

// logprobView returns the output's view; ok is false unless the request
// returns logprobs.
func (o *output) logprobView() (v logprobView, ok bool) {
	lp := o.item.logprobs
	if !lp.on {
		return logprobView{}, false
	}
	prompt := o.item.req.InputIDs
	if !o.lpSeeded {
		o.lpSeed, o.lpSeeded = tokenizer.PromptHash(prompt), true
	}
	start := lp.start
	if start < 0 || start >= len(prompt) {
		start = len(prompt) - 1
	}
	return logprobView{o: o, seed: o.lpSeed, prompt: prompt, start: max(start, 0), top: lp.top, text: lp.text}, true
}

// inputs and outputs count the prompt and output positions listed.
func (v logprobView) inputs() int  { return len(v.prompt) - v.start }
func (v logprobView) outputs() int { return len(v.o.ids) }

// input is the i-th prompt position listed, with its alternatives when
// withTop; the first prompt token has neither logprob nor alternatives.
func (v logprobView) input(i int, withTop bool) (tokenLogprob, []tokenLogprob) {
	pos := v.start + i
	e, alts := position(v.o.tok, v.seed, pos, v.prompt[pos], false, v.topOf(withTop), v.text)
	if pos == 0 {
		e.none, alts = true, nil
	}
	return e, alts
}

// output is the i-th output position, with its alternatives when withTop.
func (v logprobView) output(i int, withTop bool) (tokenLogprob, []tokenLogprob) {
	return position(v.o.tok, v.seed, len(v.prompt)+i, v.o.ids[i], true, v.topOf(withTop), v.text)
}

func (v logprobView) topOf(withTop bool) int {
	if withTop {
		return v.top
	}
	return 0
}

// logprobLists are logprob entries and their alternatives, materialized
// for an answer or an event short enough to be marshalled whole.
type logprobLists struct {
	in, out         []tokenLogprob
	inTops, outTops [][]tokenLogprob
}

// logprobs returns the output's lists, nil unless the request returns
// logprobs.
func (o *output) logprobs() *logprobLists {
	v, ok := o.logprobView()
	if !ok {
		return nil
	}
	l := &logprobLists{}
	l.in, l.inTops = v.inputLists()
	l.out, l.outTops = v.outputLists(0)
	return l
}

// inputLists materializes the prompt positions listed.
func (v logprobView) inputLists() (entries []tokenLogprob, tops [][]tokenLogprob) {
	for i := range v.inputs() {
		e, alts := v.input(i, true)
		entries, tops = append(entries, e), append(tops, alts)
	}
	return entries, tops
}

// outputLists materializes the output positions from on.
func (v logprobView) outputLists(from int) (entries []tokenLogprob, tops [][]tokenLogprob) {
	for i := from; i < v.outputs(); i++ {
		e, alts := v.output(i, true)
		entries, tops = append(entries, e), append(tops, alts)
	}
	return entries, tops
}

// meta renders the lists as meta_info carries them, the top lists only
// with top_logprobs_num > 0.
func (l *logprobLists) meta(top bool) *metaLogprobs {
	if l == nil {
		return nil
	}
	m := &metaLogprobs{InputTokenLogprobs: l.in, OutputTokenLogprobs: l.out}
	if m.OutputTokenLogprobs == nil {
		m.OutputTokenLogprobs = []tokenLogprob{}
	}
	if top {
		outTops := l.outTops
		if outTops == nil {
			outTops = [][]tokenLogprob{}
		}
		m.InputTopLogprobs, m.OutputTopLogprobs = &l.inTops, &outTops
	}
	return m
}

// tokenizeForLogprobs gives a request that returns logprobs its prompt's
// tokens, which the input logprobs are of.
func (s *Server) tokenizeForLogprobs(ctx context.Context, it *item) error {
	if !it.logprobs.on || it.req.InputIDs != nil {
		return nil
	}
	tokens, err := s.tokenizePrompt(ctx, it.req)
	it.req.InputIDs, it.req.Text = tokens, ""
	return err
}

// topLogprobMap is one position's alternatives as OpenAI's completions
// logprobs write them: {text: logprob} in the list's order, a text seen
// twice keeping its first place and last value, as a Python dict does.
type topLogprobMap []tokenLogprob

func (m topLogprobMap) MarshalJSON() ([]byte, error) {
	if m == nil {
		return []byte("null"), nil
	}
	var keys []string
	vals := map[string]float64{}
	for _, e := range m {
		k := ""
		if e.text != nil {
			k = *e.text
		}
		if _, ok := vals[k]; !ok {
			keys = append(keys, k)
		}
		vals[k] = e.logprob
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		b.Write(kb)
		b.WriteByte(':')
		b.Write(strconv.AppendFloat(nil, vals[k], 'g', -1, 64))
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// completionLogprobs is SGLang's LogProbs for /v1/completions
// (to_openai_style_logprobs): text offsets are not supported, so -1.
type completionLogprobs struct {
	TextOffset    []int           `json:"text_offset"`
	TokenLogprobs []*float64      `json:"token_logprobs"`
	Tokens        []*string       `json:"tokens"`
	TopLogprobs   []topLogprobMap `json:"top_logprobs"`
}

func toCompletionLogprobs(entries []tokenLogprob, tops [][]tokenLogprob, withTop bool) *completionLogprobs {
	c := &completionLogprobs{TextOffset: []int{}, TokenLogprobs: []*float64{}, Tokens: []*string{}, TopLogprobs: []topLogprobMap{}}
	for _, e := range entries {
		c.TextOffset = append(c.TextOffset, -1)
		if e.none {
			c.TokenLogprobs = append(c.TokenLogprobs, nil)
		} else {
			c.TokenLogprobs = append(c.TokenLogprobs, &e.logprob)
		}
		c.Tokens = append(c.Tokens, e.text)
	}
	if withTop {
		for _, t := range tops {
			c.TopLogprobs = append(c.TopLogprobs, topLogprobMap(t))
		}
	}
	return c
}

// chatLogprobs is SGLang's ChoiceLogprobs for /v1/chat/completions.
type chatLogprobs struct {
	Content []chatTokenLogprob `json:"content"`
}

type chatTopLogprob struct {
	Token   string  `json:"token"`
	Bytes   []int   `json:"bytes"`
	Logprob float64 `json:"logprob"`
}

type chatTokenLogprob struct {
	Token       string           `json:"token"`
	Bytes       []int            `json:"bytes"`
	Logprob     float64          `json:"logprob"`
	TopLogprobs []chatTopLogprob `json:"top_logprobs"`
}

func utf8Bytes(s string) []int {
	out := make([]int, len(s))
	for i := range len(s) {
		out[i] = int(s[i])
	}
	return out
}

// toChatLogprobs renders output positions as _process_logprobs_tokens does:
// each position's alternatives come from its {text: logprob} dict.
func toChatLogprobs(entries []tokenLogprob, tops [][]tokenLogprob) *chatLogprobs {
	c := &chatLogprobs{Content: make([]chatTokenLogprob, 0, len(entries))}
	for i, e := range entries {
		tok := deref(e.text)
		t := chatTokenLogprob{Token: tok, Bytes: utf8Bytes(tok), Logprob: e.logprob, TopLogprobs: []chatTopLogprob{}}
		if i < len(tops) {
			seen := map[string]int{}
			for _, alt := range tops[i] {
				text := deref(alt.text)
				if j, ok := seen[text]; ok {
					t.TopLogprobs[j].Logprob = alt.logprob
					continue
				}
				seen[text] = len(t.TopLogprobs)
				t.TopLogprobs = append(t.TopLogprobs, chatTopLogprob{Token: text, Bytes: utf8Bytes(text), Logprob: alt.logprob})
			}
		}
		c.Content = append(c.Content, t)
	}
	return c
}

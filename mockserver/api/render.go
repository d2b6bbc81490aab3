package api

import (
	"slices"
	"strings"
	"time"

	"github.com/sglmock/sglmock/mockserver/engine"
	"github.com/sglmock/sglmock/mockserver/tokenizer"
)

// output accumulates one sequence's output for rendering. Its text is
// decoded as the tokens come (a token's text does not depend on its
// neighbours), so rendering a stream costs time linear in its length.
type output struct {
	tok  *tokenizer.Tokenizer
	item item
	rid  string
	ids  []int32
	// text is ids decoded; lastTokenAt is where the last token's text
	// begins in it.
	text        []byte
	lastTokenAt int
	last        engine.Event
	// sent counts the events a streaming client was sent, textSent the
	// bytes of text an OpenAI stream has sent.
	sent, textSent int
	// lpSeed is the prompt's hash, which its logprobs are drawn from,
	// once lpSeeded; lpSent counts the output positions whose logprobs an
	// OpenAI stream has sent.
	lpSeed   uint64
	lpSeeded bool
	lpSent   int
	// stopTail is how many trailing tokens holdsStopPrefix decodes; 0
	// until first needed.
	stopTail int
	// wall gives the wall time of a simulated moment on the request's
	// engine (meta_info's timestamps).
	wall func(time.Duration) time.Time
}

// newOutputs starts an output for each stream, decoded with tok.
func newOutputs(tok *tokenizer.Tokenizer, items []item, streams []*engine.Stream) []*output {
	outs := make([]*output, len(streams))
	for i, st := range streams {
		outs[i] = &output{tok: tok, item: items[i], rid: st.RID(), wall: st.WallAt}
	}
	return outs
}

// due reports whether the event just added goes to a streaming client, as
// SGLang's output streamer decides (output_streamer.py, accept): the finish
// always does; before it, an event goes when the output's length in tokens
// is 1 modulo stream_interval (every event for 1), unless the output's tail
// could be the start of a stop string. Such an event is held back, so
// streamed text never has to be taken back.
func (o *output) due() bool {
	if o.last.Finish != nil {
		return true
	}
	if si := o.item.streamInterval; si > 1 && len(o.ids)%si != 1 {
		return false
	}
	return !o.holdsStopPrefix()
}

// holdsStopPrefix is Req.check_match_stop_str_prefix: the last tokens
// (as many as the longest stop string has, plus two) decode to a text that
// contains a stop string or ends with one's first characters.
func (o *output) holdsStopPrefix() bool {
	stops := o.item.req.Stop
	if len(stops) == 0 {
		return false
	}
	if o.stopTail == 0 {
		longest := 0
		for _, st := range stops {
			longest = max(longest, o.tok.Count(st))
		}
		o.stopTail = longest + 2
	}
	tail := o.tok.Decode(o.ids[len(o.ids)-min(o.stopTail, len(o.ids)):], false)
	for _, st := range stops {
		if st == "" {
			continue
		}
		if strings.Contains(tail, st) {
			return true
		}
		for i := 1; i <= min(len(tail), len(st)); i++ {
			if tail[len(tail)-i:] == st[:i] {
				return true
			}
		}
	}
	return false
}

func (o *output) add(ev engine.Event) {
	if o.ids == nil {
		// The engine's tokens, which it never changes; clipped, so that
		// a later append copies them.
		o.ids = slices.Clip(ev.Tokens)
	} else {
		o.ids = append(o.ids, ev.Tokens...)
	}
	if o.text == nil {
		// A word a token, most of them: one buffer for a short answer.
		o.text = make([]byte, 0, 8*len(ev.Tokens)+16)
	}
	for _, id := range ev.Tokens {
		o.lastTokenAt = len(o.text)
		o.text = o.tok.AppendDecode(o.text, id)
	}
	o.last = ev
}

// visibleText is the output text so far, trimmed at a matched stop string
// or stop token unless no_stop_trim, as SGLang's detokenizer trims. It
// aliases the output's buffer: copy what must outlive the next add.
func (o *output) visibleText() []byte {
	f := o.last.Finish
	switch {
	case f == nil || o.item.noStopTrim:
	case f.MatchedToken != nil:
		return o.text[:o.lastTokenAt]
	case f.MatchedString != nil:
		return o.text[:f.MatchedAt]
	}
	return o.text
}

// textDelta is the text not yet sent to an OpenAI stream. A stop string
// trims the final text, possibly below what was already sent; sent text
// cannot be taken back, so then nothing more goes.
func (o *output) textDelta() string {
	text := o.visibleText()
	if len(text) <= o.textSent {
		return ""
	}
	delta := string(text[o.textSent:])
	o.textSent = len(text)
	return delta
}

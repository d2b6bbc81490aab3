package api

import (
	"strings"

	"sglmock/mockserver/engine"
	"sglmock/mockserver/tokenizer"
)

// output accumulates one sequence's output for rendering.
type output struct {
	item item
	rid  string
	ids  []int32
	last engine.Event
	// sent counts the events a streaming client was sent.
	sent int
	// lp holds the logprobs computed so far, lpSent how many output
	// positions an OpenAI stream has sent.
	lp     *logprobLists
	lpSent int
	// stopTail is how many trailing tokens holdsStopPrefix decodes; 0
	// until first needed.
	stopTail int
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
			longest = max(longest, tokenizer.Count(st))
		}
		o.stopTail = longest + 2
	}
	tail := tokenizer.Decode(o.ids[len(o.ids)-min(o.stopTail, len(o.ids)):])
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
	o.ids = append(o.ids, ev.Tokens...)
	o.last = ev
}

// text is the cumulative output text, trimmed at a matched stop string or
// stop token unless no_stop_trim, as SGLang's detokenizer trims.
func (o *output) text() string {
	ids := o.ids
	f := o.last.Finish
	if f != nil && f.MatchedToken != nil && !o.item.noStopTrim && len(ids) > 0 {
		ids = ids[:len(ids)-1]
	}
	t := tokenizer.Decode(ids)
	if f != nil && f.MatchedString != nil && !o.item.noStopTrim {
		if i := strings.Index(t, *f.MatchedString); i >= 0 {
			t = t[:i]
		}
	}
	return t
}

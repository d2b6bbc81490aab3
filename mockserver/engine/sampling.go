package engine

import (
	"fmt"
	"strconv"
	"strings"
)

// Number is a sampling parameter as the client sent it: its value, and
// the text Python prints for it (an integer literal stays an integer, a
// float prints as Python's repr), which SGLang's messages quote.
type Number struct {
	Value float64
	Text  string
}

// Sampling are the sampling parameters SGLang verifies before it queues a
// request (SamplingParams.verify): the mock's output does not depend on
// them, but a value SGLang refuses is refused. Nil is a parameter not
// given, which takes SGLang's default.
type Sampling struct {
	Temperature, TopP, MinP, TopK                        *Number
	FrequencyPenalty, PresencePenalty, RepetitionPenalty *Number
	MinNewTokens                                         *Number
	// LogitBias are logit_bias's keys, token ids as strings.
	LogitBias []string
	// Grammars counts the constraints given among json_schema, regex and
	// ebnf.
	Grammars int
}

// samplingEps is SGLang's _SAMPLING_EPS: a temperature below it is greedy.
const samplingEps = 1e-6

// verify applies SamplingParams.__init__'s normalisation (a greedy
// temperature sets top_k to 1; top_k -1 is the whole vocabulary) and then
// verify's checks, in its order, with its messages. maxNew is the
// request's max_new_tokens.
func (sp Sampling) verify(maxNew int, vocab int64) error {
	value := func(n *Number, def float64) float64 {
		if n == nil {
			return def
		}
		return n.Value
	}
	text := func(n *Number, def string) string {
		if n == nil {
			return def
		}
		return n.Text
	}
	refuse := func(format string, args ...any) error {
		return &InvalidRequestError{Message: fmt.Sprintf(format, args...)}
	}
	temperature := value(sp.Temperature, 1)
	topK, topKText := value(sp.TopK, -1), text(sp.TopK, "-1")
	if 0 <= temperature && temperature < samplingEps {
		topK, topKText = 1, "1"
	}
	if topK == -1 {
		topK = 1 << 30 // TOP_K_ALL
	}
	topP, minP := value(sp.TopP, 1), value(sp.MinP, 0)
	freq, presence, repetition := value(sp.FrequencyPenalty, 0), value(sp.PresencePenalty, 0), value(sp.RepetitionPenalty, 1)
	minNew := value(sp.MinNewTokens, 0)
	switch {
	case temperature < 0:
		return refuse("temperature must be non-negative, got %s.", text(sp.Temperature, ""))
	case !(0 < topP && topP <= 1):
		return refuse("top_p must be in (0, 1], got %s.", text(sp.TopP, ""))
	case !(0 <= minP && minP <= 1):
		return refuse("min_p must be in [0, 1], got %s.", text(sp.MinP, ""))
	case topK < 1:
		return refuse("top_k must be -1 (disable) or at least 1, got %s.", topKText)
	case !(-2 <= freq && freq <= 2):
		return refuse("frequency_penalty must be in [-2, 2], got %s.", text(sp.FrequencyPenalty, ""))
	case !(-2 <= presence && presence <= 2):
		return refuse("presence_penalty must be in [-2, 2], got %s.", text(sp.PresencePenalty, ""))
	case !(0 < repetition && repetition <= 2):
		return refuse("repetition_penalty must be in (0, 2] (1.0 = no penalty), got %s.", text(sp.RepetitionPenalty, ""))
	case !(0 <= minNew):
		return refuse("min_new_tokens must be in [0, max_new_tokens], got %s.", text(sp.MinNewTokens, ""))
	case maxNew < 0:
		return refuse("max_new_tokens must be at least 0, got %d.", maxNew)
	case !(minNew <= float64(maxNew)):
		return refuse("min_new_tokens must be in [0, max_new_tokens(%d)], got %s.", maxNew, text(sp.MinNewTokens, ""))
	}
	for _, key := range sp.LogitBias {
		id, err := strconv.ParseInt(strings.TrimSpace(key), 10, 64)
		if err != nil {
			return refuse("invalid literal for int() with base 10: %s", pyQuote(key))
		}
		if id < 0 || id >= vocab {
			return refuse("logit_bias must has keys in [0, %d], got %s.", vocab-1, key)
		}
	}
	if sp.Grammars > 1 {
		return refuse("Only one of regex, json_schema, or ebnf can be set.")
	}
	return nil
}

// pyQuote is Python's repr of a short string: single quotes unless the
// text holds one and no double quote.
func pyQuote(s string) string {
	if strings.Contains(s, "'") && !strings.Contains(s, `"`) {
		return `"` + s + `"`
	}
	return "'" + strings.ReplaceAll(s, "'", `\'`) + "'"
}

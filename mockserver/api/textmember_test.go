package api

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestMemberValue: the walk finds the text member's raw value, or declines
// the body.
func TestMemberValue(t *testing.T) {
	tests := []struct {
		body  string
		value string // "" when the walk declines the body
	}{
		{`{"prompt": "hello", "max_tokens": 2}`, `"hello"`},
		{` { "model" : "m" ,"prompt":"a b"}  `, `"a b"`},
		{`{"a": {"prompt": "inner", "b": [1, {"c": "]}"}]}, "prompt": "outer"}`, `"outer"`},
		{`{"a": "quote \" and \\", "prompt": "x"}`, `"x"`},
		{`{"prompt": "esc\"aped"}`, `"esc\"aped"`},
		{`{"prompt": "a\\", "n": "\"}"}`, `"a\\"`},
		{`{"prompt": "\n\n\"\\\n", "n": 1}`, `"\n\n\"\\\n"`},
		{`{"prompt": "ends in an escape\"}`, ""},
		{`{"prompt": "\`, ""},
		{`{"prompt": ["a", "b"]}`, `["a", "b"]`},
		{`{"prompt": 12, "n": true}`, `12`},
		{`{"n": 1}`, ""},
		{`{}`, ""},
		{`{"prompt": "a", "Prompt": "b"}`, ""},
		{`{"PROMPT": "a"}`, ""},
		{`{"pro\u006dpt": "a"}`, ""},
		{`{"prömpt": "a", "prompt": "b"}`, ""},
		{`{"prompt": "a"} x`, ""},
		{`{"prompt": "a",}`, ""},
		{`{"prompt" "a"}`, ""},
		{`{"prompt": "a"`, ""},
		{`{"prompt": "unterminated}`, ""},
		{`{"prompt": }`, ""},
		{`["prompt", "a"]`, ""},
		{``, ""},
	}
	for _, tt := range tests {
		var b completionBody
		start, end, _, ok := decodeMembers([]byte(tt.body), reflect.ValueOf(&b).Elem(), "prompt")
		got := ""
		if ok {
			got = tt.body[start:end]
		}
		if got != tt.value {
			t.Errorf("decodeMembers(%q) found %q, want %q", tt.body, got, tt.value)
		}
	}
}

// decodeSeeds are bodies for which the walk and the decoder must agree.
var decodeSeeds = []string{
	`{"model": "m", "prompt": "the cache keeps every prefix", "max_tokens": 16, "stream": false}`,
	`{"text": "hello", "sampling_params": {"max_new_tokens": 3}, "rid": "r"}`,
	`{"prompt": "a", "max_tokens": "x"}`,
	`{"prompt": "a", "max_tokens": 99999999999999999999}`,
	`{"prompt": "a", "stop": ["x", 1]}`,
	`{"prompt": "a", "n": 2, "extra": {"prompt": "b"}, "Stream": true}`,
	`{"prompt": "a\u0000b", "text": "c\nd"}`,
	`{"prompt": "` + "tab\there" + `"}`,
	`{"prompt": "` + "bad \xff utf-8" + `"}`,
	`{"prompt": "a"}{"prompt": "b"}`,
	`{"prompt": "a", "model": nul}`,
	`{"prompt": [1, 2], "text": ["x"]}`,
	`{"PROMPT": "a", "prompt": "b"}`,
	`{"model": "m", "prompt": "p", "max_tokens": 16, "stream": true, "ignore_eos": true, "temperature": 0.5, "top_p": 1e-3, "top_k": -1, "n": 1}`,
	`{"prompt": "p", "stream_options": {"include_usage": true}, "stop": ["a", "b"], "stop_token_ids": [1, 2], "logit_bias": {"1": 2}, "regex": null, "ebnf": "x"}`,
	`{"prompt": "p", "model": "m\u00e9", "rid": "r", "extra_key": null, "cache_salt": "s", "lora_path": "l", "min_p": 0, "echo": false, "logprobs": 2}`,
	`{"prompt": "p", "max_tokens": "16", "top_k": 1.5, "n": true, "stream": null, "echo": 1, "min_tokens": 016}`,
	`{"prompt": "p", "max_tokens": 16, "max_tokens": 17}`,
	`{"prompt": "p", "Max_Tokens": 16}`,
	`{"prompt": "p", "unknown": [1, {"a": "b"}], "other": tru}`,
	`{"prompt": "p", "unknown": {"max_tokens": 3}, "priority": 3, "routed_dp_rank": 1, "data_parallel_rank": null}`,
	`{"prompt": "p", "sampling_params": {"max_new_tokens": 3, "temperature": 0}, "return_logprob": true, "logprob_start_len": -1, "top_logprobs_num": 2, "return_text_in_logprobs": true}`,
	`{"text": "p", "input_ids": [1, 2], "rid": ["a", "b"], "stream": false}`,
	`{"prompt": "p", "temperature": 1.0e+2, "top_p": -0.0, "frequency_penalty": 2E-1, "presence_penalty": 1.}`,
	`{"prompt": "p", "model": "\ud800", "temperature": "0.5"}`,
}

// FuzzDecodeBody checks that decodeBody gives exactly what json.Unmarshal
// gives, value or error, for both bodies with a text member.
func FuzzDecodeBody(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		checkDecodeBody(t, body, func() any { return new(completionBody) })
		checkDecodeBody(t, body, func() any { return new(generateBody) })
	})
}

func TestDecodeBodyIsUnmarshal(t *testing.T) {
	long := strings.TrimSpace(strings.Repeat("the cache keeps every prefix so later requests skip prefill. ", 800))
	for _, body := range append(decodeSeeds, `{"model": "m", "prompt": "`+long+`", "max_tokens": 16}`) {
		checkDecodeBody(t, body, func() any { return new(completionBody) })
		checkDecodeBody(t, body, func() any { return new(generateBody) })
	}
}

func checkDecodeBody(t *testing.T, body string, fresh func() any) {
	t.Helper()
	got, want := fresh(), fresh()
	gotErr, wantErr := decodeBody([]byte(body), got), json.Unmarshal([]byte(body), want)
	if (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
		t.Fatalf("%T from %q: got error %v, want %v", got, body, gotErr, wantErr)
	}
	// The plain mark is decodeBody's own: it may be set only on a plain
	// string, and is left out of the comparison.
	if m, ok := got.(textMember); ok && gotErr == nil {
		if _, raw, plain := m.textMember(); *plain {
			if !isPlainString(*raw) {
				t.Fatalf("%T from %q: marked plain, but %q is not a plain string", got, body, *raw)
			}
			*plain = false
		}
	}
	if gotErr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%T from %q: got %+v, want %+v", got, body, got, want)
	}
}

// BenchmarkDecodeEscapedPrompt decodes one body whose prompt is 1 MiB of
// escaped newlines against 16 bodies of 64 KiB in the same run: a walk
// linear in the prompt costs about 1x, one that reads the rest of the
// string again at every escape 16x (some 5 s for the 1 MiB body).
func BenchmarkDecodeEscapedPrompt(b *testing.B) {
	body := func(n int) []byte { return []byte(`{"text": "` + strings.Repeat(`\n`, n/2) + `", "rid": "r"}`) }
	long, short := body(1<<20), body(1<<16)
	decode := func(body []byte) time.Duration {
		start := time.Now()
		var g generateBody
		if err := decodeBody(body, &g); err != nil || g.RID == nil {
			b.Fatalf("decodeBody: %v, rid %v", err, g.RID)
		}
		return time.Since(start)
	}
	var ratio float64
	for b.Loop() {
		l := decode(long)
		var s time.Duration
		for range 16 {
			s += decode(short)
		}
		ratio = float64(l) / float64(s)
	}
	b.ReportMetric(ratio, "long/short")
}

// TestDecodeBodyMarksPlainText checks that a plain prompt is marked, so
// that reading its text does not check it again, and that nothing else is.
func TestDecodeBodyMarksPlainText(t *testing.T) {
	for _, tt := range []struct {
		body  string
		plain bool
	}{
		{`{"prompt": "the cache", "max_tokens": 16}`, true},
		{`{"prompt": "the\ncache"}`, false},
		{`{"prompt": ["a", "b"]}`, false},
		{`{"prompt": [1, 2]}`, false},
	} {
		var b completionBody
		if err := decodeBody([]byte(tt.body), &b); err != nil {
			t.Fatalf("%s: %v", tt.body, err)
		}
		if b.promptPlain != tt.plain {
			t.Errorf("%s: got promptPlain %v, want %v", tt.body, b.promptPlain, tt.plain)
		}
		reqs, err := parsePrompt(b.Prompt, b.promptPlain)
		if err != nil {
			t.Fatalf("%s: %v", tt.body, err)
		}
		if tt.plain && reqs[0].Text != "the cache" {
			t.Errorf("%s: got text %q, want %q", tt.body, reqs[0].Text, "the cache")
		}
	}
}

// TestDecodeMembersTakesCommonBodies: the bodies benchmark clients send are
// decoded member by member, without the whole body going to the decoder.
func TestDecodeMembersTakesCommonBodies(t *testing.T) {
	for _, body := range []string{
		`{"model": "m", "prompt": "p", "max_tokens": 16, "stream": false}`,
		`{"model": "m", "prompt": "p", "max_tokens": 16, "stream": true, "ignore_eos": true, "temperature": 0.0, "stream_options": {"include_usage": true}}`,
		`{"model": "m", "prompt": "p", "max_tokens": 16, "best_of": 1, "logprobs": null, "top_p": 1}`,
	} {
		var b completionBody
		if _, _, whole, ok := decodeMembers([]byte(body), reflect.ValueOf(&b).Elem(), "prompt"); !ok || !whole {
			t.Errorf("%s: the whole body went to the decoder", body)
		}
	}
	var g generateBody
	body := `{"text": "p", "sampling_params": {"max_new_tokens": 16, "temperature": 0}, "stream": false, "rid": "r1"}`
	if _, _, whole, ok := decodeMembers([]byte(body), reflect.ValueOf(&g).Elem(), "text"); !ok || !whole {
		t.Errorf("%s: the whole body went to the decoder", body)
	}
}

// TestBodyFieldsLeaveOutWhatTheyCannotSet: a name found twice or reached
// through an embedded pointer is not decoded member by member, so its key
// sends the body to the decoder.
func TestBodyFieldsLeaveOutWhatTheyCannotSet(t *testing.T) {
	type inner struct {
		B string `json:"b"`
		C string `json:"c"`
	}
	type other struct {
		D string `json:"d"`
	}
	type body struct {
		A string `json:"a"`
		X string `json:"c"` // inner's C has this name too
		inner
		*other
	}
	fs := bodyFields(reflect.TypeFor[body]())
	for name, want := range map[string]bool{"a": true, "b": true, "c": false, "d": false} {
		if _, got := fs.byName[name]; got != want {
			t.Errorf("%q: got decoded member by member %v, want %v", name, got, want)
		}
		if !fs.folded([]byte(strings.ToUpper(name))) {
			t.Errorf("%q in upper case: not seen as naming a field", name)
		}
	}
	var b body
	if _, _, whole, ok := decodeMembers([]byte(`{"t": "p", "d": "x"}`), reflect.ValueOf(&b).Elem(), "t"); !ok || whole {
		t.Error(`{"d": "x"}: decoded member by member through a nil pointer`)
	}
}

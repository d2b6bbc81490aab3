package tokenizer

import (
	"bytes"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// english is a plain English passage for the tokens-per-word rate.
const english = `The two-point method is a textbook technique for measuring decode speed. ` +
	`You send two requests with the same prompt but different output lengths, subtract the ` +
	`times, and divide by the difference in tokens. It assumes that each request is independent ` +
	`of the other. A server with a prefix cache breaks that assumption quietly: the second request ` +
	`finds the prompt already computed and skips the whole prefill, so it finishes sooner than the ` +
	`first one, even though it produced more tokens. Nothing crashes and nothing warns; the numbers ` +
	`simply stop making sense. The remedy is to flush the cache between the two requests, and to ` +
	`put a random nonce at the start of every prompt so that no earlier run can match it.`

// plain and withBOS are the built-in tokenizer without and with BOS.
var plain, withBOS = mustBuiltin(BuiltinOptions{}), mustBuiltin(BuiltinOptions{AddBOS: true})

func mustBuiltin(o BuiltinOptions) *Tokenizer {
	t, err := Builtin(o)
	if err != nil {
		panic(err)
	}
	return t
}

// chat renders msgs with the generation prompt.
func chat(t *testing.T, msgs []Message) string {
	t.Helper()
	s, err := plain.ApplyChatTemplate(msgs, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	tests := []string{
		"",
		"a",
		"Hello world",
		" leading space",
		"trailing space ",
		"two  spaces",
		"extraordinarily long words split",
		"digits 12345 and punctuation!?",
		"line\nbreaks\tand tabs",
		"unicode: naïve café 日本",
		"<|im_start|>user\nhi<|im_end|>\n",
		"not special: <|im_", // a cut special is plain bytes
		"3f2a9c1e-7b4d-4e0a-9c55-0123456789ab nonce",
		english,
	}
	for _, text := range tests {
		ids := plain.Encode(nil, text)
		if got := plain.Decode(ids, false); got != text {
			t.Errorf("Decode(Encode(%q)): got %q", text, got)
		}
		for _, id := range ids {
			if id < 0 || int64(id) >= plain.VocabSize() {
				t.Errorf("plain.Encode(%q): id %d outside [0, %d)", text, id, plain.VocabSize())
			}
		}
	}
}

func TestEncodeSplits(t *testing.T) {
	tests := []struct {
		text string
		want []string // decoded pieces
	}{
		{"Hello world", []string{"Hello", " world"}},
		{"extraordinary", []string{"extrao", "rdinar", "y"}},
		{"HTTP McDonald", []string{"H", "T", "T", "P", " Mc", "Donald"}},
		{"a, b.", []string{"a", ",", " b", "."}},
		{"x  y", []string{"x", " ", " y"}},
		{"42", []string{"4", "2"}},
		{"<|im_start|>system\n", []string{"<|im_start|>", "system", "\n"}},
	}
	for _, tt := range tests {
		var got []string
		for _, id := range plain.Encode(nil, tt.text) {
			got = append(got, plain.Decode([]int32{id}, false))
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("plain.Encode(%q): got pieces %q, want %q", tt.text, got, tt.want)
		}
	}
}

func TestSpecialTokens(t *testing.T) {
	got := plain.Encode(nil, "<|endoftext|><|im_start|><|im_end|><|begin_of_text|>")
	if want := []int32{EOS, IMStart, IMEnd, BOS}; !slices.Equal(got, want) {
		t.Fatalf("specials: got %v, want %v", got, want)
	}
}

// A text prompt begins with BOS when the tokenizer adds one; plain text
// never produces it, so it is only ever the first token.
func TestEncodePromptAddsBOS(t *testing.T) {
	for _, text := range []string{"", "Hello world", english, "<|im_start|>user\nhi<|im_end|>\n"} {
		ids := plain.Encode(nil, text)
		with := withBOS.EncodePrompt(nil, text)
		if len(with) != len(ids)+1 || with[0] != BOS || !slices.Equal(with[1:], ids) {
			t.Errorf("EncodePrompt(%q, BOS): got %v, want BOS then %v", text, with, ids)
		}
		if without := plain.EncodePrompt(nil, text); !slices.Equal(without, ids) {
			t.Errorf("EncodePrompt(%q, no BOS): got %v, want %v", text, without, ids)
		}
		if slices.Contains(ids, BOS) {
			t.Errorf("Encode(%q) produced BOS", text)
		}
	}
	if got := plain.Decode([]int32{BOS}, false); got != "<|begin_of_text|>" {
		t.Errorf("Decode(BOS): got %q", got)
	}
}

func TestDecodeOutOfVocabulary(t *testing.T) {
	tests := []struct {
		id   int32
		want string
	}{
		{-1, "<|unk_-1|>"},
		{300, "<|reserved_300|>"},
		{int32(plain.VocabSize()), "<|unk_" + strconv.FormatInt(plain.VocabSize(), 10) + "|>"},
	}
	for _, tt := range tests {
		if got := plain.Decode([]int32{tt.id}, false); got != tt.want {
			t.Errorf("Decode(%d): got %q, want %q", tt.id, got, tt.want)
		}
	}
}

func TestPrefixStable(t *testing.T) {
	full := plain.Encode(nil, english)
	for cut := 0; cut <= len(english); cut++ {
		prefix := plain.Encode(nil, english[:cut])
		// All but the last piece of the prefix's tokens are the full text's.
		keep := max(len(prefix)-1, 0)
		if !slices.Equal(prefix[:keep], full[:keep]) {
			t.Fatalf("cut at %d: prefix tokens diverge before the last piece", cut)
		}
	}
}

func TestTokensPerWord(t *testing.T) {
	words := len(strings.Fields(english))
	tokens := plain.Count(english)
	rate := float64(tokens) / float64(words)
	// About 1.3 tokens a word is the target: 163 tokens for 122 words.
	if words != 122 || tokens != 163 {
		t.Fatalf("got %d words and %d tokens (%.3f per word), want 122 and 163 (1.336)", words, tokens, rate)
	}
}

func TestOutputRoundTrips(t *testing.T) {
	for _, h := range []uint64{0, 1, PromptHash([]int32{1, 2, 3}), PromptHash(plain.Encode(nil, english))} {
		var ids []int32
		for i := range 500 {
			ids = append(ids, plain.OutputToken(h, i))
		}
		text := plain.Decode(ids, false)
		if got := plain.Encode(nil, text); !slices.Equal(got, ids) {
			t.Fatalf("hash %d: re-tokenized output differs from the generated ids:\n%q", h, text)
		}
		if text[0] < 'A' || text[0] > 'Z' {
			t.Fatalf("hash %d: output %q does not start with a capital", h, text[:20])
		}
	}
}

// The output is a function of the prompt's tokens alone: an equal prompt
// in another slice gives the same hash, and a fixed prompt gives these
// exact words in every process (nothing random, no map order, no clock).
// Different prompts give different outputs.
func TestOutputDeterministicPerPrompt(t *testing.T) {
	prompt := []int32{5, 6, 7}
	a, b := PromptHash(prompt), PromptHash([]int32{5, 6, 8})
	if a == PromptHash([]int32{5, 6}) || a == b {
		t.Fatal("distinct prompts share a hash")
	}
	if again := PromptHash(slices.Clone(prompt)); again != a {
		t.Fatalf("an equal prompt hashes to %#x, want %#x", again, a)
	}
	out := func(h uint64, n int) []int32 {
		var ids []int32
		for i := range n {
			ids = append(ids, plain.OutputToken(h, i))
		}
		return ids
	}
	const want = "More also, place if being both. no they so is"
	if got := plain.Decode(out(a, 12), false); got != want {
		t.Fatalf("output of [5 6 7]: got %q, want %q", got, want)
	}
	same := 0
	for i, tok := range out(a, 100) {
		if tok == plain.OutputToken(b, i) {
			same++
		}
	}
	if same > 20 {
		t.Fatalf("different prompts agree on %d of 100 output tokens, want few", same)
	}
}

func TestMultiTurnChatExtendsThePrompt(t *testing.T) {
	turn1 := []Message{{Role: "system", Content: "You are terse."}, {Role: "user", Content: "Say something."}}
	prompt1 := plain.Encode(nil, chat(t, turn1))
	h := PromptHash(prompt1)
	var answer []int32
	for i := range 12 {
		answer = append(answer, plain.OutputToken(h, i))
	}
	turn2 := append(turn1, Message{Role: "assistant", Content: plain.Decode(answer, false)}, Message{Role: "user", Content: "More."})
	prompt2 := plain.Encode(nil, chat(t, turn2))
	want := append(slices.Clone(prompt1), answer...)
	if !slices.Equal(prompt2[:len(want)], want) {
		t.Fatalf("turn 2 prompt does not start with turn 1 prompt + answer")
	}
}

func TestApplyChatTemplate(t *testing.T) {
	got := chat(t, []Message{{Role: "user", Content: "Hi"}})
	want := "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
	if got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// BenchmarkEncode reports tokenizer throughput and its ratio to bytes.Count
// over the same text (a single vectorized pass: the floor for any scan).
func BenchmarkEncode(b *testing.B) {
	var sb strings.Builder
	for sb.Len() < 1<<20 {
		sb.WriteString(english)
		sb.WriteByte('\n')
	}
	text := sb.String()
	raw := []byte(text)
	dst := make([]int32, 0, len(text))
	var encodeNs, countNs int64
	var sink int
	for b.Loop() {
		b.StopTimer()
		start := time.Now().UnixNano()
		sink += bytes.Count(raw, []byte{'\n'})
		countNs += time.Now().UnixNano() - start
		b.StartTimer()
		start = time.Now().UnixNano()
		dst = plain.Encode(dst[:0], text)
		encodeNs += time.Now().UnixNano() - start
	}
	b.SetBytes(int64(len(text)))
	b.ReportMetric(float64(encodeNs)/float64(countNs), "x-bytes.Count")
	b.ReportMetric(float64(len(text))*float64(b.N)/(float64(encodeNs)/1e9)/1e6, "MB/s")
	_ = sink
}

// Count agrees with Encode and allocates nothing, so a prompt too long to
// serve can be measured at no cost in memory.
func TestCountAllocatesNothing(t *testing.T) {
	text := strings.Repeat(english+" <|im_end|>\n", 100)
	if got, want := plain.Count(text), len(plain.Encode(nil, text)); got != want {
		t.Fatalf("Count: got %d, want %d (Encode)", got, want)
	}
	if allocs := testing.AllocsPerRun(10, func() { plain.Count(text) }); allocs != 0 {
		t.Fatalf("Count allocated %v times, want 0", allocs)
	}
}

// Decode's text is valid UTF-8, as Python's decode(errors="replace")
// makes it: one U+FFFD per maximal subpart of a valid sequence.
func TestValidUTF8(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain", "plain"},
		{"caf\xc3\xa9", "café"},
		{"\xe6\x97A", "\uFFFDA"},               // a 3-byte character cut after 2
		{"\xe6A\x97", "\uFFFDA\uFFFD"},         // a lead byte, then a lone continuation
		{"\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"}, // a surrogate: ED's second byte is at most 9F
		{"\xf0\x9f\x99", "\uFFFD"},             // an emoji cut after 3 of 4
		{"\xff\xfe", "\uFFFD\uFFFD"},
		{"ok\xc3", "ok\uFFFD"},
	}
	for _, tt := range tests {
		if got := validUTF8(tt.in); got != tt.want {
			t.Errorf("validUTF8(%q): got %q, want %q", tt.in, got, tt.want)
		}
	}
}

// The built-in templates render a conversation as the model family's own
// template does: Llama 3.1-Instruct's tool result as JSON in an ipython
// turn, Kimi K2's every role other than user and assistant under the
// system marker and a tool result after its "## Return of" line.
func TestBuiltinTemplatesRoles(t *testing.T) {
	msgs := []Message{{Role: "system", Content: "Be brief. "}, {Role: "user", Content: " Hi "}, {Role: "assistant", Content: " Hello "},
		{Role: "tool", Content: "sunny \"25\"\n"}, {Role: "developer", Content: "Cite."}, {Role: "user", Content: "Thanks"}}
	tests := []struct{ template, want string }{
		{Llama31, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n" +
			"Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nBe brief.<|eot_id|>" +
			"<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>" +
			"<|start_header_id|>assistant<|end_header_id|>\n\nHello<|eot_id|>" +
			"<|start_header_id|>ipython<|end_header_id|>\n\n\"sunny \\\"25\\\"\\n\"<|eot_id|>" +
			"<|start_header_id|>developer<|end_header_id|>\n\nCite.<|eot_id|>" +
			"<|start_header_id|>user<|end_header_id|>\n\nThanks<|eot_id|>" +
			"<|start_header_id|>assistant<|end_header_id|>\n\n"},
		{KimiK2, "<|im_system|>system<|im_middle|>Be brief. <|im_end|>" +
			"<|im_user|>user<|im_middle|> Hi <|im_end|>" +
			"<|im_assistant|>assistant<|im_middle|> Hello <|im_end|>" +
			"<|im_system|>tool<|im_middle|>## Return of \nsunny \"25\"\n<|im_end|>" +
			"<|im_system|>developer<|im_middle|>Cite.<|im_end|>" +
			"<|im_user|>user<|im_middle|>Thanks<|im_end|>" +
			"<|im_assistant|>assistant<|im_middle|>"},
	}
	for _, tt := range tests {
		tok := mustBuiltin(BuiltinOptions{ChatTemplate: tt.template})
		got, err := tok.ApplyChatTemplate(msgs, true, nil)
		if err != nil || got != tt.want {
			t.Errorf("%s:\n got %q, %v\nwant %q", tt.template, got, err, tt.want)
		}
	}
}

// Two unrelated chats share their template's opening, as docs/tokenizer.md
// gives it for each built-in template in built-in tokens.
func TestBuiltinTemplatesSharedOpening(t *testing.T) {
	for name, want := range map[string]int{ChatML: 3, Llama31: 40, KimiK2: 24} {
		tok := mustBuiltin(BuiltinOptions{ChatTemplate: name})
		a, errA := tok.ApplyChatTemplate([]Message{{Role: "user", Content: "alpha"}}, true, nil)
		b, errB := tok.ApplyChatTemplate([]Message{{Role: "user", Content: "omega"}}, true, nil)
		if errA != nil || errB != nil {
			t.Fatal(errA, errB)
		}
		x, y := tok.Encode(nil, a), tok.Encode(nil, b)
		shared := 0
		for shared < min(len(x), len(y)) && x[shared] == y[shared] {
			shared++
		}
		if shared != want {
			t.Errorf("%s: two chats share %d tokens, want %d", name, shared, want)
		}
	}
}

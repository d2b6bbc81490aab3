package tokenizer

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
)

// writeDir writes files into a new directory and returns it.
func writeDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// byteLevelVocab is a GPT-2 style vocabulary: the 256 bytes (ids 0..255,
// spelled as byte-level characters) and the merges that build words.
func byteLevelVocab(words ...string) (map[string]int32, []string) {
	vocab := map[string]int32{}
	for b := range 256 {
		vocab[string(byteToRune[b])] = int32(b)
	}
	var merges []string
	for _, w := range words {
		spelled := ""
		for i := 0; i < len(w); i++ {
			spelled += string(byteToRune[w[i]])
		}
		// Merge left to right: "h e", "he l", "hel l", ...
		runes := []rune(spelled)
		left := string(runes[0])
		for _, r := range runes[1:] {
			merged := left + string(r)
			if _, ok := vocab[merged]; !ok {
				vocab[merged] = int32(len(vocab))
				merges = append(merges, left+" "+string(r))
			}
			left = merged
		}
	}
	return vocab, merges
}

// llamaLike is a small tokenizer.json in Llama 3's shape: byte-level BPE
// with the GPT-4 split, ignore_merges, special tokens and a BOS template.
// It has the words the mock generates, "The" and " the".
func llamaLike(words ...string) string {
	vocab, merges := byteLevelVocab(append(words, "The", " the")...)
	bos, eot := int32(len(vocab)), int32(len(vocab)+1)
	return mustJSON(map[string]any{
		"added_tokens": []map[string]any{
			{"id": bos, "content": "<|begin_of_text|>", "special": true},
			{"id": eot, "content": "<|eot_id|>", "special": true},
		},
		"normalizer": nil,
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": cl100kPattern}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
		}},
		"post_processor": map[string]any{"type": "TemplateProcessing",
			"single":         []any{map[string]any{"SpecialToken": map[string]any{"id": "<|begin_of_text|>", "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}},
			"special_tokens": map[string]any{"<|begin_of_text|>": map[string]any{"id": "<|begin_of_text|>", "ids": []int32{bos}, "tokens": []string{"<|begin_of_text|>"}}}},
		"decoder": map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
		"model":   map[string]any{"type": "BPE", "vocab": vocab, "merges": merges, "ignore_merges": true, "byte_fallback": false},
	})
}

// ids returns the vocabulary ids of byte-level tokens.
func ids(t *testing.T, tok *Tokenizer, pieces ...string) []int32 {
	t.Helper()
	c := tok.enc.(*hfCodec)
	var out []int32
	for _, p := range pieces {
		id, ok := c.lookup(p)
		if !ok {
			if id, ok = c.model.vocab[p]; !ok {
				t.Fatalf("no token %q", p)
			}
		}
		out = append(out, id)
	}
	return out
}

const llamaTemplate = `{{ bos_token }}{% for m in messages %}{{ '<|start_header_id|>' + m.role + '<|end_header_id|>\n\n' + m.content | trim + '<|eot_id|>' }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}`

func TestLoadByteLevel(t *testing.T) {
	words := []string{"Hello", " world", " the", " of", " and", " to", ",", ".", "The", "Of"}
	dir := writeDir(t, map[string]string{
		TokenizerJSON:   llamaLike(words...),
		TokenizerConfig: mustJSON(map[string]any{"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "chat_template": llamaTemplate}),
	})
	tok, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	bos := ids(t, tok, "<|begin_of_text|>")[0]
	tests := []struct {
		text string
		want []string // token texts, as raw bytes
	}{
		{"Hello world", []string{"Hello", " world"}},
		{"Hello  world", []string{"Hello", " ", " world"}}, // \s+(?!\S) keeps the last space for the word
		{"Hello world<|eot_id|>", []string{"Hello", " world", "<|eot_id|>"}},
		{"héllo", []string{"h", "\xc3", "\xa9", "l", "l", "o"}}, // unmerged bytes
		{"The, of.", []string{"The", ",", " of", "."}},
	}
	for _, tt := range tests {
		want := ids(t, tok, tt.want...)
		if got := tok.Encode(nil, tt.text); !slices.Equal(got, want) {
			t.Errorf("Encode(%q): got %v, want %v", tt.text, got, want)
		}
		if got, want := tok.EncodePrompt(nil, tt.text), append([]int32{bos}, want...); !slices.Equal(got, want) {
			t.Errorf("EncodePrompt(%q): got %v, want %v", tt.text, got, want)
		}
		if got := tok.Decode(tok.Encode(nil, tt.text), false); got != tt.text {
			t.Errorf("Decode(Encode(%q)): got %q", tt.text, got)
		}
	}
	if got := tok.Decode(tok.EncodePrompt(nil, "Hello"), true); got != "Hello" {
		t.Errorf("Decode skipping specials: got %q, want %q", got, "Hello")
	}
	if got := tok.Decode([]int32{-1, 1 << 30, ids(t, tok, "Hello")[0]}, false); got != "Hello" {
		t.Errorf("Decode of ids outside the vocabulary: got %q, want them skipped", got)
	}
	if got, want := tok.Count("Hello world, the"), 4; got != want {
		t.Errorf("Count: got %d, want %d", got, want)
	}
	chat, err := tok.ApplyChatTemplate([]Message{{Role: "user", Content: " Hello "}}, true, nil)
	if want := "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"; err != nil || chat != want {
		t.Errorf("chat: got %q, %v; want %q", chat, err, want)
	}
	if tok.Name() != dir || tok.ChatTemplate() != filepath.Join(dir, TokenizerConfig) {
		t.Errorf("Name %q, ChatTemplate %q", tok.Name(), tok.ChatTemplate())
	}
}

// EncodeWithin stops keeping ids past its limit but counts them all.
func TestEncodeWithin(t *testing.T) {
	dir := writeDir(t, map[string]string{TokenizerJSON: llamaLike("Hello", " world")})
	tok, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Repeat("Hello world", 10) // 20 tokens, 21 with BOS
	for _, tt := range []struct {
		limit, wantIDs, wantN int
	}{{-1, 21, 21}, {21, 21, 21}, {20, 0, 21}, {0, 0, 21}, {5, 0, 21}} {
		got, n := tok.EncodeWithin(nil, text, true, tt.limit)
		if len(got) != tt.wantIDs || n != tt.wantN {
			t.Errorf("limit %d: got %d ids and count %d, want %d and %d", tt.limit, len(got), n, tt.wantIDs, tt.wantN)
		}
	}
}

// A SentencePiece-style tokenizer: spaces become ▁, missing characters
// fall back to byte tokens, and the decoder undoes both.
// sentencePieceLike writes a small tokenizer in Llama 2's shape
// (SentencePiece-style BPE with byte fallback, the Prepend and Replace
// normalizers, no pre-tokenizer) into a new directory and returns it and
// its vocabulary.
func sentencePieceLike(t *testing.T) (string, map[string]int32) {
	t.Helper()
	vocab := map[string]int32{"<unk>": 0, "<s>": 1, "</s>": 2}
	for b := range 256 {
		vocab[fmt.Sprintf("<0x%02X>", b)] = int32(3 + b)
	}
	var merges [][2]string
	add := func(tok string) { vocab[tok] = int32(len(vocab)) }
	for _, c := range "▁HelowrdTth" {
		add(string(c))
	}
	for _, m := range [][2]string{{"▁", "H"}, {"▁H", "e"}, {"l", "l"}, {"▁He", "ll"}, {"▁Hell", "o"}, {"▁", "w"}, {"o", "r"}, {"▁w", "or"}, {"l", "d"}, {"▁wor", "ld"},
		{"▁", "T"}, {"▁T", "h"}, {"▁Th", "e"}, {"▁", "t"}, {"▁t", "h"}, {"▁th", "e"}} {
		merges = append(merges, m)
		add(m[0] + m[1])
	}
	tj := mustJSON(map[string]any{
		"added_tokens": []map[string]any{
			{"id": 0, "content": "<unk>", "special": true}, {"id": 1, "content": "<s>", "special": true}, {"id": 2, "content": "</s>", "special": true},
		},
		"normalizer": map[string]any{"type": "Sequence", "normalizers": []any{
			map[string]any{"type": "Prepend", "prepend": "▁"},
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": "▁"},
		}},
		"pre_tokenizer":  nil,
		"post_processor": nil,
		"decoder": map[string]any{"type": "Sequence", "decoders": []any{
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": "▁"}, "content": " "},
			map[string]any{"type": "ByteFallback"}, map[string]any{"type": "Fuse"},
			map[string]any{"type": "Strip", "content": " ", "start": 1, "stop": 0},
		}},
		"model": map[string]any{"type": "BPE", "vocab": vocab, "merges": merges, "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": true},
	})
	dir := writeDir(t, map[string]string{
		TokenizerJSON: tj,
		// transformers' Llama tokenizer adds BOS from the config, whatever
		// tokenizer.json's post-processor says (here: nothing).
		TokenizerConfig: mustJSON(map[string]any{"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "add_bos_token": true}),
	})
	return dir, vocab
}

func TestLoadSentencePiece(t *testing.T) {
	dir, vocab := sentencePieceLike(t)
	tok, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := tok.EncodePrompt(nil, "Hello world é</s>")
	want := []int32{1, vocab["▁Hello"], vocab["▁world"], vocab["▁"], vocab["<0xC3>"], vocab["<0xA9>"], 2}
	if !slices.Equal(got, want) {
		t.Fatalf("EncodePrompt: got %v, want %v", got, want)
	}
	if s := tok.Decode(got, true); s != "Hello world é" {
		t.Errorf("Decode: got %q, want %q", s, "Hello world é")
	}
	if s := tok.Decode(got, false); s != "<s> Hello world é</s>" {
		t.Errorf("Decode with specials: got %q", s)
	}
	// A stream of output shows the marker as a space: SGLang decodes
	// output after prompt context, so nothing is stripped.
	var b []byte
	for _, id := range got[1:3] {
		b = tok.AppendDecode(b, id)
	}
	if string(b) != " Hello world" {
		t.Errorf("streamed: got %q", b)
	}
	if tok.ChatTemplate() != "" {
		t.Errorf("a config without a template: ChatTemplate %q", tok.ChatTemplate())
	}
	if _, err := tok.ApplyChatTemplate([]Message{{Role: "user", Content: "hi"}}, true, nil); !errors.Is(err, ErrNoChatTemplate) {
		t.Errorf("chat without a template: got %v, want ErrNoChatTemplate", err)
	}
}

// A long SentencePiece text is merged word by word; a word longer than
// the word cache takes (a run of Chinese, a URL: no "▁" to cut at) is
// merged whole, as in one pass over the text.
func TestSentencePieceLongWord(t *testing.T) {
	// Without the fix this recursed until the stack overflowed, which no
	// recover catches: keep that failure quick.
	defer debug.SetMaxStack(debug.SetMaxStack(64 << 20))
	dir, _ := sentencePieceLike(t)
	tok, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	model := tok.enc.(*hfCodec).model
	for _, text := range []string{
		strings.Repeat("Hello", 60),
		"Hello world " + strings.Repeat("Hello", 60) + " the world",
		strings.Repeat("東京", 100) + " Hello",
	} {
		want := model.merge(nil, "▁"+strings.ReplaceAll(text, " ", "▁"))
		if got := tok.Encode(nil, text); !slices.Equal(got, want) {
			t.Errorf("Encode(%.20q...): got %v, want %v", text, got, want)
		}
	}
}

func TestLoadRefusals(t *testing.T) {
	unigram := mustJSON(map[string]any{"model": map[string]any{"type": "Unigram", "vocab": [][]any{{"a", -1.0}}}})
	var bert map[string]any
	json.Unmarshal([]byte(llamaLike("a")), &bert)
	bert["pre_tokenizer"] = map[string]any{"type": "BertPreTokenizer"}
	bertPre := mustJSON(bert)
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	tests := []struct {
		name string
		dir  string
		want string
	}{
		{"missing", filepath.Join(t.TempDir(), "nope"), "no such file or directory"},
		{"a file", file, "is not a directory"},
		{"empty", t.TempDir(), "no tokenizer: the directory has neither tokenizer.json nor tiktoken.model"},
		{"unigram", writeDir(t, map[string]string{TokenizerJSON: unigram}), "the model type Unigram is not supported"},
		{"bert", writeDir(t, map[string]string{TokenizerJSON: bertPre}), `the pre-tokenizer "BertPreTokenizer" is not supported`},
		{"tiktoken alone", writeDir(t, map[string]string{TiktokenModel: "YQ== 0\n"}), "tiktoken.model needs tokenizer_config.json beside it"},
		{"bad template", writeDir(t, map[string]string{TokenizerJSON: llamaLike("a"), TokenizerConfig: `{"chat_template": "{% for %}"}`}), "chat template"},
	}
	for _, tt := range tests {
		_, err := Load(tt.dir)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, want an error with %q", tt.name, err, tt.want)
		}
	}
}

// Chat templates: chat_template.jinja wins over the config's, a list of
// named templates gives "default", a template that raises is a
// TemplateError with its message, and chat_template_kwargs reach it.
func TestLoadChatTemplates(t *testing.T) {
	tj := llamaLike("a")
	named := `[{"name": "tool_use", "template": "T"}, {"name": "default", "template": "{{ messages[0].content }}{% if enable_thinking is defined and not enable_thinking %}/no_think{% endif %}"}]`
	raising := `{% if messages[0].role != 'user' %}{{ raise_exception('roles must alternate') }}{% endif %}ok`
	for _, tt := range []struct {
		name   string
		files  map[string]string
		msgs   []Message
		kwargs map[string]any
		want   string
		err    string
	}{
		{"jinja file", map[string]string{ChatTemplateFile: "file:{{ messages | length }}", TokenizerConfig: `{"chat_template": "config"}`}, []Message{{Role: "user", Content: "x"}}, nil, "file:1", ""},
		{"named", map[string]string{TokenizerConfig: `{"chat_template": ` + named + `}`}, []Message{{Role: "user", Content: "x"}}, map[string]any{"enable_thinking": false}, "x/no_think", ""},
		{"raises", map[string]string{TokenizerConfig: mustJSON(map[string]any{"chat_template": raising})}, []Message{{Role: "system", Content: "x"}}, nil, "", "roles must alternate"},
		{"namespace and loops", map[string]string{TokenizerConfig: mustJSON(map[string]any{"chat_template": `{% set ns = namespace(n=0) %}{% for m in messages %}{% if loop.index0 == 1 %}{% continue %}{% endif %}{% set ns.n = ns.n + 1 %}{{ m | tojson }}{% endfor %}{{ ns.n }}`})},
			[]Message{{Role: "user", Content: "a"}, {Role: "assistant", Content: "b"}, {Role: "user", Content: "c"}}, nil, `{"role": "user", "content": "a"}{"role": "user", "content": "c"}2`, ""},
	} {
		tt.files[TokenizerJSON] = tj
		tok, err := Load(writeDir(t, tt.files))
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		got, err := tok.ApplyChatTemplate(tt.msgs, true, tt.kwargs)
		var te *TemplateError
		switch {
		case tt.err == "" && (err != nil || got != tt.want):
			t.Errorf("%s: got %q, %v; want %q", tt.name, got, err, tt.want)
		case tt.err != "" && (!errors.As(err, &te) || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%s: got %q, %v; want a TemplateError with %q", tt.name, got, err, tt.err)
		}
	}
}

// A tiktoken vocabulary (Kimi's format), written here: ranks are ids,
// special tokens follow the vocabulary as tokenizer_config.json names them,
// and Han characters split from other letters, as Kimi's pattern says.
func TestLoadTiktoken(t *testing.T) {
	var lines []string
	rank := 0
	add := func(tok string) {
		lines = append(lines, fmt.Sprintf("%s %d", base64.StdEncoding.EncodeToString([]byte(tok)), rank))
		rank++
	}
	for b := range 256 {
		add(string([]byte{byte(b)}))
	}
	for _, tok := range []string{"he", "ll", "hell", "hello", " w", " wo", " wor", " world", "世界", "Th", "The", " t", " th", " the"} {
		add(tok)
	}
	base := rank
	tokens := func(texts ...string) []int32 { // ids of the added tokens above
		var out []int32
		for _, text := range texts {
			for i, l := range lines[256:] {
				if strings.HasPrefix(l, base64.StdEncoding.EncodeToString([]byte(text))+" ") {
					out = append(out, int32(256+i))
				}
			}
		}
		return out
	}
	dir := writeDir(t, map[string]string{
		TiktokenModel: strings.Join(lines, "\n") + "\n",
		TokenizerConfig: mustJSON(map[string]any{
			"tokenizer_class": "TikTokenTokenizer", "bos_token": "[BOS]", "eos_token": "[EOS]",
			"added_tokens_decoder": map[string]any{
				fmt.Sprint(base):     map[string]any{"content": "[BOS]", "special": true},
				fmt.Sprint(base + 1): map[string]any{"content": "[EOS]", "special": true},
				fmt.Sprint(base + 2): map[string]any{"content": "<|im_end|>", "special": true},
			},
			"chat_template": "{% for m in messages %}{{ m.content }}<|im_end|>{% endfor %}",
		}),
	})
	tok, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.VocabSize(); got != int64(base+258) {
		t.Errorf("VocabSize: got %d, want %d", got, base+258)
	}
	got := tok.EncodePrompt(nil, "hello world世界<|im_end|><|reserved_token_300|>")
	want := append(tokens("hello", " world", "世界"), int32(base+2), 300)
	if !slices.Equal(got, want) {
		t.Fatalf("EncodePrompt: got %v, want %v (no BOS: Kimi's tokenizer adds none)", got, want)
	}
	if s := tok.Decode(got[:4], false); s != "hello world世界<|im_end|>" {
		t.Errorf("Decode: got %q", s)
	}
	if s := tok.Decode(got[:4], true); s != "hello world世界" {
		t.Errorf("Decode skipping specials: got %q", s)
	}
	// "hell" + "o" merges by rank: "hello" is a token, found whole.
	if got := tok.Encode(nil, "hellp"); !slices.Equal(got, append(tokens("hell"), 'p')) {
		t.Errorf("Encode(hellp): got %v", got)
	}
}

// A long text's ids are kept: a repeat gets the same ids from the cache,
// a text of the same length that differs gets its own, and a cached text
// over a limit is counted, not returned.
func TestPromptCache(t *testing.T) {
	tok, err := Load(writeDir(t, map[string]string{TokenizerJSON: llamaLike("Hello", " world")}))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Repeat("Hello world", minCachedPrompt/11+1) // 2 tokens per 11 bytes
	first := tok.EncodePrompt(nil, text)
	if _, ok := tok.prompts.get(text); !ok {
		t.Fatal("a long text was not cached")
	}
	if again := tok.EncodePrompt(nil, text); !slices.Equal(again, first) {
		t.Fatal("the cached ids differ")
	}
	other := "J" + text[1:]
	if ids := tok.Encode(nil, other); slices.Equal(ids, first[1:]) {
		t.Fatal("a different text of the same length got the cached ids")
	}
	n := len(first)
	if ids, got := tok.EncodeWithin([]int32{7}, text, true, 10); got != n || !slices.Equal(ids, []int32{7}) {
		t.Errorf("EncodeWithin past its limit: got %v and %d, want [7] and %d", ids, got, n)
	}
	if got := tok.Count(text); got != n-1 {
		t.Errorf("Count: got %d, want %d", got, n-1)
	}
}

// A piece longer than maxMergePiece (one letter repeated, a blob without a
// space) is merged in cuts at character boundaries, each its own merge, so
// that no request makes one merge cost gigabytes.
func TestLongPieceIsMergedInCuts(t *testing.T) {
	dir := writeDir(t, map[string]string{TokenizerJSON: llamaLike("Hello", " world")})
	tok, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	model := tok.enc.(*hfCodec).model
	text := strings.Repeat("Hello", 3*maxMergePiece/5+7) // a cut falls inside a "Hello"
	var want []int32
	for rest := text; len(rest) > 0; {
		cut := min(len(rest), maxMergePiece)
		want = model.merge(want, rest[:cut])
		rest = rest[cut:]
	}
	if got := tok.Encode(nil, text); !slices.Equal(got, want) {
		t.Errorf("%d bytes of one piece: got %d ids, want the %d of its %d-byte cuts merged one by one", len(text), len(got), len(want), maxMergePiece)
	}
	if whole := model.merge(nil, text); slices.Equal(whole, want) {
		t.Fatalf("merged whole, the text gives the same ids as in cuts: the test shows nothing")
	}
}

// withConfig is a tokenizer directory's tokenizer.json with another
// tokenizer_config.json.
func withConfig(t *testing.T, dir string, cfg map[string]any) *Tokenizer {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, TokenizerJSON))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := Load(writeDir(t, map[string]string{TokenizerJSON: string(b), TokenizerConfig: mustJSON(cfg)}))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// SGLang tokenizes through transformers 5, which builds a LlamaTokenizer
// from its class, not from tokenizer.json: no normalizer but a Metaspace
// pre-tokenizer, whose prepend scheme follows legacy and
// add_prefix_space, and which adds no ▁ before a text that begins with a
// space; BPE without ignore_merges. SGLang keeps tokenizer.json's
// pre-tokenizer when it is of another kind, sets BOS from add_bos_token
// and never adds EOS.
func TestTransformersRebuildsLlamaTokenizer(t *testing.T) {
	dir, vocab := sentencePieceLike(t)
	v := func(toks ...string) []int32 {
		out := make([]int32, len(toks))
		for i, s := range toks {
			out[i] = vocab[s]
		}
		return out
	}
	base := map[string]any{"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>"}
	with := func(kv ...any) map[string]any {
		m := maps.Clone(base)
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	tests := []struct {
		name   string
		cfg    map[string]any
		text   string
		prompt bool
		want   []int32
	}{
		// tokenizer.json's Prepend normalizer gives "▁▁Hello" here.
		{"a leading space, legacy", with("legacy", true), " Hello", false, v("▁Hello")},
		{"a leading space", base, " Hello", false, v("▁Hello")},
		{"after a special token, legacy", with("legacy", true), "</s>Hello", false, v("</s>", "▁Hello")},
		{"after a special token", base, "</s>Hello", false, v("</s>", "H", "e", "ll", "o")},
		{"at the start", base, "Hello world", false, v("▁Hello", "▁world")},
		{"no prefix space", with("add_prefix_space", false), "Hello world", false, v("H", "e", "ll", "o", "▁world")},
		{"BOS, no EOS", with("add_eos_token", true), "Hello", true, v("<s>", "▁Hello")},
		{"no BOS", with("add_bos_token", false), "Hello", true, v("▁Hello")},
	}
	for _, tt := range tests {
		tok := withConfig(t, dir, tt.cfg)
		got := tok.Encode(nil, tt.text)
		if tt.prompt {
			got = tok.EncodePrompt(nil, tt.text)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: %q: got %v, want %v", tt.name, tt.text, got, tt.want)
		}
	}
	if s := withConfig(t, dir, base).Decode(v("<s>", "▁Hello", "▁world"), true); s != "Hello world" {
		t.Errorf("Decode: got %q, want %q", s, "Hello world")
	}

	// A byte-level tokenizer.json under a Llama class (DeepSeek V3's):
	// its pre-tokenizer and decoder stand, BOS comes from the config, and
	// ignore_merges is gone: "xyz", a token no merge builds, is three.
	var bl map[string]any
	json.Unmarshal([]byte(llamaLike("Hello", " world")), &bl)
	model := bl["model"].(map[string]any)
	model["vocab"].(map[string]any)["xyz"] = len(model["vocab"].(map[string]any)) + 10
	bl["added_tokens"].([]any)[0].(map[string]any)["id"] = len(model["vocab"].(map[string]any)) + 11
	bl["post_processor"] = nil
	bdir := writeDir(t, map[string]string{TokenizerJSON: mustJSON(bl)})
	fast := withConfig(t, bdir, map[string]any{"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>"})
	llama := withConfig(t, bdir, map[string]any{"tokenizer_class": "LlamaTokenizerFast", "bos_token": "<|begin_of_text|>", "legacy": true})
	if got, want := fast.Encode(nil, "xyz"), ids(t, fast, "xyz"); !slices.Equal(got, want) {
		t.Errorf("PreTrainedTokenizerFast: xyz: got %v, want %v", got, want)
	}
	if got, want := llama.Encode(nil, "xyz"), ids(t, llama, "x", "y", "z"); !slices.Equal(got, want) {
		t.Errorf("LlamaTokenizerFast: xyz: got %v, want %v", got, want)
	}
	bos, _ := llama.enc.(*hfCodec).lookup("<|begin_of_text|>")
	if got, want := llama.EncodePrompt(nil, "Hello world"), append([]int32{bos}, fast.Encode(nil, "Hello world")...); !slices.Equal(got, want) {
		t.Errorf("LlamaTokenizerFast: EncodePrompt: got %v, want %v", got, want)
	}
	if s := llama.Decode(llama.Encode(nil, " Hello world"), false); s != " Hello world" {
		t.Errorf("LlamaTokenizerFast: Decode: got %q", s)
	}
}

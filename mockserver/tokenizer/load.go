package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/dlclark/regexp2/v2"
	"golang.org/x/text/unicode/norm"
)

// The files a model directory holds its tokenizer in.
const (
	TokenizerJSON    = "tokenizer.json"        // Hugging Face's fast tokenizer
	TokenizerConfig  = "tokenizer_config.json" // special tokens, BOS/EOS, the chat template
	ChatTemplateFile = "chat_template.jinja"   // the chat template, in newer models
	TiktokenModel    = "tiktoken.model"        // Kimi's tiktoken vocabulary
)

// ErrNoTokenizer is the error of a directory that holds no tokenizer.
var ErrNoTokenizer = errors.New("no tokenizer")

// UnsupportedError is a tokenizer that uses something the mock does not
// implement.
type UnsupportedError struct {
	Dir, What string
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("tokenizer %s: %s is not supported: sglmock reads BPE tokenizers "+
		"(byte-level, as Llama 3, Qwen and DeepSeek's; SentencePiece-style with byte fallback, as Llama 2, Mistral and Gemma's) "+
		"and Kimi's tiktoken.model", e.Dir, e.What)
}

// Load reads the tokenizer of a Hugging Face model directory:
// tokenizer.json with tokenizer_config.json (and chat_template.jinja
// beside them, if there is one), or Kimi's tiktoken.model with
// tokenizer_config.json. It refuses, naming it, a tokenizer type it does
// not implement.
func Load(dir string) (*Tokenizer, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("tokenizer: %s is not a directory: give the model directory that holds %s and %s", dir, TokenizerJSON, TokenizerConfig)
	}
	cfg, err := readConfig(dir)
	if err != nil {
		return nil, err
	}
	var t *Tokenizer
	switch {
	case exists(filepath.Join(dir, TokenizerJSON)):
		t, err = loadHF(dir, cfg)
	case exists(filepath.Join(dir, TiktokenModel)):
		if cfg == nil {
			return nil, fmt.Errorf("tokenizer %s: %s needs %s beside it (its special tokens): %w", dir, TiktokenModel, TokenizerConfig, ErrNoTokenizer)
		}
		t, err = loadTiktoken(dir, cfg)
	default:
		return nil, fmt.Errorf("tokenizer %s: %w: the directory has neither %s nor %s", dir, ErrNoTokenizer, TokenizerJSON, TiktokenModel)
	}
	if err != nil {
		return nil, err
	}
	t.name, t.prompts = dir, newPromptCache()
	if t.chat, err = loadChatTemplate(dir, cfg); err != nil {
		return nil, err
	}
	if t.out, err = outputFor(t); err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", dir, err)
	}
	return t, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// hfConfig is what sglmock reads of tokenizer_config.json.
type hfConfig struct {
	TokenizerClass            string                  `json:"tokenizer_class"`
	AddBOSToken               *bool                   `json:"add_bos_token"`
	AddEOSToken               *bool                   `json:"add_eos_token"`
	BOSToken                  tokenSpec               `json:"bos_token"`
	EOSToken                  tokenSpec               `json:"eos_token"`
	UnkToken                  tokenSpec               `json:"unk_token"`
	SepToken                  tokenSpec               `json:"sep_token"`
	PadToken                  tokenSpec               `json:"pad_token"`
	ClsToken                  tokenSpec               `json:"cls_token"`
	MaskToken                 tokenSpec               `json:"mask_token"`
	Legacy                    *bool                   `json:"legacy"`
	AddPrefixSpace            *bool                   `json:"add_prefix_space"`
	CleanUpTokenizationSpaces *bool                   `json:"clean_up_tokenization_spaces"`
	ChatTemplate              json.RawMessage         `json:"chat_template"`
	AddedTokensDecoder        map[string]hfAddedToken `json:"added_tokens_decoder"`
}

// tokenSpec is a special token as tokenizer_config.json gives one: its
// text, or an object with its content.
type tokenSpec string

func (t *tokenSpec) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*t = tokenSpec(s)
		return nil
	}
	var o struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(b, &o); err != nil {
		return err
	}
	*t = tokenSpec(o.Content)
	return nil
}

func readConfig(dir string) (*hfConfig, error) {
	b, err := os.ReadFile(filepath.Join(dir, TokenizerConfig))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	var c hfConfig
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("tokenizer %s: %s: %w", dir, TokenizerConfig, err)
	}
	return &c, nil
}

// hfFile is what sglmock reads of tokenizer.json.
type hfFile struct {
	AddedTokens   []hfAddedToken  `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         json.RawMessage `json:"model"`
}

type hfAddedToken struct {
	ID         int32  `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type hfBPE struct {
	Type                    string           `json:"type"`
	Vocab                   map[string]int32 `json:"vocab"`
	Merges                  json.RawMessage  `json:"merges"`
	UnkToken                *string          `json:"unk_token"`
	FuseUnk                 bool             `json:"fuse_unk"`
	ByteFallback            bool             `json:"byte_fallback"`
	IgnoreMerges            bool             `json:"ignore_merges"`
	ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string          `json:"end_of_word_suffix"`
	Dropout                 *float64         `json:"dropout"`
}

// node is a component of tokenizer.json: its type and its fields.
type node map[string]json.RawMessage

func (n node) typ() string {
	var t string
	json.Unmarshal(n["type"], &t)
	return t
}

// field decodes n's field k into v; an absent or null field leaves v.
func (n node) field(k string, v any) error {
	raw, ok := n[k]
	if !ok || string(raw) == "null" {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%s.%s: %w", n.typ(), k, err)
	}
	return nil
}

func (n node) list(k string) ([]node, error) {
	var l []node
	err := n.field(k, &l)
	return l, err
}

func parseNode(raw json.RawMessage) (node, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var n node
	if err := json.Unmarshal(raw, &n); err != nil {
		return nil, err
	}
	return n, nil
}

func loadHF(dir string, cfg *hfConfig) (*Tokenizer, error) {
	b, err := os.ReadFile(filepath.Join(dir, TokenizerJSON))
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	var f hfFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("tokenizer %s: %s: %w", dir, TokenizerJSON, err)
	}
	b = nil
	unsupported := func(what string) error { return &UnsupportedError{Dir: dir, What: what} }
	var m hfBPE
	if err := json.Unmarshal(f.Model, &m); err != nil {
		var t struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(f.Model, &t) == nil && t.Type != "" && t.Type != "BPE" {
			return nil, unsupported("the model type " + t.Type)
		}
		return nil, fmt.Errorf("tokenizer %s: %s: model: %w", dir, TokenizerJSON, err)
	}
	switch {
	case m.Type != "" && m.Type != "BPE":
		return nil, unsupported("the model type " + m.Type)
	case m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "":
		return nil, unsupported("a BPE continuing_subword_prefix")
	case m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return nil, unsupported("a BPE end_of_word_suffix")
	case m.Dropout != nil && *m.Dropout > 0:
		return nil, unsupported("BPE dropout")
	}
	rebuildAsTransformers(cfg, &f, &m)
	preNode, err := parseNode(f.PreTokenizer)
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: pre_tokenizer: %w", dir, err)
	}
	decNode, err := parseNode(f.Decoder)
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: decoder: %w", dir, err)
	}
	byteLevel := usesByteLevel(preNode) || decNode.typ() == "ByteLevel"
	c := &hfCodec{}
	p := &parser{dir: dir, byteLevel: byteLevel}
	if c.pre, err = p.preTokenizer(preNode); err != nil {
		return nil, err
	}
	normNode, err := parseNode(f.Normalizer)
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: normalizer: %w", dir, err)
	}
	if c.norm, err = p.normalizer(normNode); err != nil {
		return nil, err
	}
	if c.dec, err = p.decoder(decNode); err != nil {
		return nil, err
	}
	if byteLevel && decNode.typ() != "ByteLevel" {
		return nil, unsupported(fmt.Sprintf("the decoder %q with a byte-level pre-tokenizer", decNode.typ()))
	}

	// The vocabulary, with a byte-level model's tokens as raw bytes.
	model := &bpe{vocab: make(map[string]int32, len(m.Vocab)), unk: -1, fuseUnk: m.FuseUnk,
		byteFallback: m.ByteFallback, wholeFirst: m.IgnoreMerges, byteLevel: byteLevel, cache: newWordCache()}
	size := int32(0)
	for _, a := range f.AddedTokens {
		size = max(size, a.ID+1)
	}
	for tok, id := range m.Vocab {
		if id < 0 {
			return nil, fmt.Errorf("tokenizer %s: token %q has a negative id %d", dir, tok, id)
		}
		size = max(size, id+1)
	}
	c.tokens, c.stream = make([]string, size), make([]string, size)
	c.known, c.special = make([]bool, size), make([]bool, size)
	for tok, id := range m.Vocab {
		key := tok
		if byteLevel {
			key = fromByteLevel(tok)
		}
		model.vocab[key] = id
		c.tokens[id], c.known[id] = key, true
		c.stream[id] = streamText(key, byteLevel, m.ByteFallback)
	}
	m.Vocab = nil
	pairs, err := mergePairs(m.Merges)
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: %s: merges: %w", dir, TokenizerJSON, err)
	}
	m.Merges = nil
	merges := make(mergeTable, len(pairs))
	for rank, pair := range pairs {
		left, right := pair[0], pair[1]
		if byteLevel {
			left, right = fromByteLevel(left), fromByteLevel(right)
		}
		l, okl := model.vocab[left]
		r, okr := model.vocab[right]
		id, ok := model.vocab[left+right]
		if okl && okr && ok {
			key := uint64(uint32(l))<<32 | uint64(uint32(r))
			if _, dup := merges[key]; !dup {
				merges[key] = merge{rank: int32(rank), id: id}
			}
		}
	}
	model.rank = merges.rank
	for b := range 256 {
		model.byteIDs[b] = -1
		key := fmt.Sprintf("<0x%02X>", b)
		if byteLevel {
			key = string([]byte{byte(b)})
		}
		if id, ok := model.vocab[key]; ok {
			model.byteIDs[b] = id
		} else if byteLevel {
			return nil, fmt.Errorf("tokenizer %s: the byte-level vocabulary has no token for byte %#02x", dir, b)
		}
	}
	if m.UnkToken != nil {
		if id, ok := model.vocab[*m.UnkToken]; ok {
			model.unk = id
		}
	}
	if !byteLevel {
		model.words = newWordSplitter("▁", model.vocab)
	}
	c.model = model

	added := make([]addedToken, 0, len(f.AddedTokens))
	for _, a := range f.AddedTokens {
		added = append(added, addedToken{id: a.ID, content: a.Content, special: a.Special, normalized: a.Normalized,
			lstrip: a.LStrip, rstrip: a.RStrip, singleWord: a.SingleWord})
		text := a.Content
		if byteLevel {
			text = byteLevelDecoded(a.Content)
		}
		c.tokens[a.ID], c.stream[a.ID], c.known[a.ID], c.special[a.ID] = text, text, true, a.Special
	}
	// Normalized added tokens are matched in normalized text, as what the
	// normalizer makes of them.
	for i := range added {
		if added[i].normalized && c.norm != nil {
			added[i].content = c.norm(added[i].content)
		}
	}
	c.added = newAddedVocab(added)
	if cfg != nil && cfg.CleanUpTokenizationSpaces != nil {
		c.cleanUp = *cfg.CleanUpTokenizationSpaces
	}

	t := &Tokenizer{enc: c}
	post, err := parseNode(f.PostProcessor)
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: post_processor: %w", dir, err)
	}
	if t.prefix, t.suffix, err = p.postProcessor(post); err != nil {
		return nil, err
	}
	if err := applyBOSOverride(t, cfg, c.lookup); err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", dir, err)
	}
	return t, nil
}

// lookup finds the id of a token's text: an added token's or the
// vocabulary's.
func (c *hfCodec) lookup(text string) (int32, bool) {
	for _, a := range c.added.tokens {
		if a.content == text {
			return a.id, true
		}
	}
	key := text
	if c.model.byteLevel {
		key = fromByteLevel(text)
	}
	id, ok := c.model.vocab[key]
	return id, ok
}

// rebuildAsTransformers makes tokenizer.json's pipeline the one SGLang
// tokenizes with: transformers 5 (SGLang pins 5.8.1) builds a
// LlamaTokenizer (LlamaTokenizerFast is the same class) from its class,
// taking only the vocabulary, the merges and the post-processor from
// tokenizer.json: no normalizer; a Metaspace pre-tokenizer that turns
// spaces into ▁ and prepends one to the text, "always" (to every part
// between special tokens) with legacy set in tokenizer_config.json,
// "first" (to the text's start only) without, "never" with
// add_prefix_space false, and adds none to a part that begins with a
// space; its decoder; a BPE model with byte fallback and without
// ignore_merges. Where tokenizer.json has a pre-tokenizer of another kind
// (DeepSeek V3's byte-level one), SGLang's _fix_v5_tokenizer_components
// puts that pre-tokenizer and its decoder back.
func rebuildAsTransformers(cfg *hfConfig, f *hfFile, m *hfBPE) {
	if cfg == nil || strings.TrimSuffix(cfg.TokenizerClass, "Fast") != "LlamaTokenizer" {
		return
	}
	addPrefix := cfg.AddPrefixSpace == nil || *cfg.AddPrefixSpace
	scheme := "never"
	switch {
	case addPrefix && cfg.Legacy != nil && *cfg.Legacy:
		scheme = "always"
	case addPrefix:
		scheme = "first"
	}
	f.Normalizer = nil
	m.ByteFallback, m.FuseUnk, m.IgnoreMerges, m.UnkToken = true, true, false, nil
	if pre, err := parseNode(f.PreTokenizer); err != nil || pre != nil && pre.typ() != "Metaspace" {
		return
	}
	f.PreTokenizer = json.RawMessage(`{"type":"Metaspace","replacement":"▁","prepend_scheme":"` + scheme + `","split":false}`)
	strip := ""
	if addPrefix {
		strip = `,{"type":"Strip","content":" ","start":1,"stop":0}`
	}
	f.Decoder = json.RawMessage(`{"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"},"content":" "},` +
		`{"type":"ByteFallback"},{"type":"Fuse"}` + strip + `]}`)
}

// applyBOSOverride applies SGLang's _fix_v5_add_bos_eos_token: for the
// tokenizer classes that took add_bos_token in transformers 4 (Llama,
// CodeLlama, Gemma, Cohere), a prompt begins with BOS as
// tokenizer_config.json's add_bos_token says (default true), whatever
// tokenizer.json's post-processor does (DeepSeek V3's adds none, its
// config does), and ends with no EOS (transformers 5 drops add_eos_token
// and SGLang keeps it off for fast tokenizers). A Llama tokenizer
// without a BOS keeps tokenizer.json's post-processor: transformers 5
// leaves it as it is, and SGLang changes nothing.
func applyBOSOverride(t *Tokenizer, cfg *hfConfig, lookup func(string) (int32, bool)) error {
	if cfg == nil {
		return nil
	}
	class := strings.TrimSuffix(cfg.TokenizerClass, "Fast")
	switch class {
	case "LlamaTokenizer", "CodeLlamaTokenizer", "GemmaTokenizer", "CohereTokenizer":
	default:
		return nil
	}
	bos := cfg.AddBOSToken == nil || *cfg.AddBOSToken
	if !bos && class == "LlamaTokenizer" {
		return nil
	}
	t.prefix, t.suffix = nil, nil
	if !bos {
		return nil
	}
	id, ok := lookup(string(cfg.BOSToken))
	if !ok {
		return fmt.Errorf("%s: add_bos_token is set but bos_token %q is not a token", TokenizerConfig, cfg.BOSToken)
	}
	t.prefix = []int32{id}
	return nil
}

// mergePairs reads the merges: a list of "left right", or of ["left",
// "right"].
func mergePairs(raw json.RawMessage) ([][2]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var pairs [][2]string
	var joined []string
	if err := json.Unmarshal(raw, &joined); err != nil {
		if err := json.Unmarshal(raw, &pairs); err != nil {
			return nil, errors.New("neither a list of \"left right\" strings nor of [left, right] pairs")
		}
		return pairs, nil
	}
	pairs = make([][2]string, len(joined))
	for i, s := range joined {
		left, right, ok := strings.Cut(s, " ")
		if !ok {
			return nil, fmt.Errorf("[%d]: %q is not two tokens", i, s)
		}
		pairs[i] = [2]string{left, right}
	}
	return pairs, nil
}

// streamText is the text a token adds to a stream of output: its bytes; a
// SentencePiece token's marker as a space, a byte token as its byte.
func streamText(tok string, byteLevel, byteFallback bool) string {
	if byteLevel {
		return tok
	}
	if byteFallback {
		if b, ok := byteToken(tok); ok {
			return string([]byte{b})
		}
	}
	return strings.ReplaceAll(tok, "▁", " ")
}

// usesByteLevel reports whether a pre-tokenizer has a ByteLevel step.
func usesByteLevel(n node) bool {
	if n == nil {
		return false
	}
	if n.typ() == "ByteLevel" {
		return true
	}
	steps, _ := n.list("pretokenizers")
	for _, s := range steps {
		if usesByteLevel(s) {
			return true
		}
	}
	return false
}

// parser reads tokenizer.json's components.
type parser struct {
	dir       string
	byteLevel bool
}

func (p *parser) unsupported(kind string, n node) error {
	return &UnsupportedError{Dir: p.dir, What: fmt.Sprintf("the %s %q", kind, n.typ())}
}

func (p *parser) bad(kind string, err error) error {
	return fmt.Errorf("tokenizer %s: %s: %s: %w", p.dir, TokenizerJSON, kind, err)
}

// pattern reads a Split or Replace pattern: {"String": s} or {"Regex": r}.
func (p *parser) pattern(n node) (matcher, error) {
	var pat struct {
		String *string `json:"String"`
		Regex  *string `json:"Regex"`
	}
	if err := n.field("pattern", &pat); err != nil {
		return nil, err
	}
	switch {
	case pat.String != nil:
		if *pat.String == "" {
			return nil, errors.New("an empty pattern")
		}
		return literalMatcher(*pat.String), nil
	case pat.Regex != nil:
		return compileRegex(*pat.Regex)
	}
	return nil, errors.New("a pattern that is neither String nor Regex")
}

// compileRegex compiles a pattern, with a scanner of its own when it is
// one the mock knows.
func compileRegex(pat string) (matcher, error) {
	if digits, ok := scanners[pat]; ok {
		return cl100kScanner{digits: digits}, nil
	}
	re, err := regexp2.Compile(pat, regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("regex %q: %w", pat, err)
	}
	return regexMatcher{re}, nil
}

// gpt2Pattern is the split of ByteLevel's use_regex.
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

func (p *parser) preTokenizer(n node) (preTokenizer, error) {
	if n == nil {
		return nil, nil
	}
	switch n.typ() {
	case "Sequence":
		steps, err := n.list("pretokenizers")
		if err != nil {
			return nil, p.bad("pre_tokenizer", err)
		}
		var seq sequencePre
		for _, s := range steps {
			pt, err := p.preTokenizer(s)
			if err != nil {
				return nil, err
			}
			if pt != nil {
				seq = append(seq, pt)
			}
		}
		switch len(seq) {
		case 0:
			return nil, nil
		case 1:
			return seq[0], nil
		}
		return seq, nil
	case "Split":
		m, err := p.pattern(n)
		if err != nil {
			return nil, p.bad("pre_tokenizer Split", err)
		}
		var behavior string
		var invert bool
		if err := errors.Join(n.field("behavior", &behavior), n.field("invert", &invert)); err != nil {
			return nil, p.bad("pre_tokenizer", err)
		}
		b, ok := splitBehaviors[behavior]
		if !ok {
			return nil, p.bad("pre_tokenizer Split", fmt.Errorf("unknown behavior %q", behavior))
		}
		return &splitPre{m: m, behavior: b, invert: invert}, nil
	case "ByteLevel":
		addPrefix, useRegex := true, true
		if err := errors.Join(n.field("add_prefix_space", &addPrefix), n.field("use_regex", &useRegex)); err != nil {
			return nil, p.bad("pre_tokenizer", err)
		}
		if !addPrefix && !useRegex {
			return nil, nil // the byte mapping alone: nothing to split
		}
		pt := &byteLevelPre{addPrefixSpace: addPrefix}
		if useRegex {
			m, err := compileRegex(gpt2Pattern)
			if err != nil {
				return nil, err
			}
			pt.re = &splitPre{m: m, behavior: isolated}
		}
		return pt, nil
	case "Metaspace":
		return p.metaspace(n)
	case "Digits":
		var individual bool
		if err := n.field("individual_digits", &individual); err != nil {
			return nil, p.bad("pre_tokenizer", err)
		}
		return &digitsPre{individual: individual}, nil
	case "WhitespaceSplit":
		return whitespaceSplitPre{}, nil
	}
	return nil, p.unsupported("pre-tokenizer", n)
}

func (p *parser) metaspace(n node) (*metaspacePre, error) {
	replacement, scheme, split := "▁", "always", true
	var addPrefix *bool
	if err := errors.Join(n.field("replacement", &replacement), n.field("prepend_scheme", &scheme),
		n.field("split", &split), n.field("add_prefix_space", &addPrefix)); err != nil {
		return nil, p.bad("Metaspace", err)
	}
	if addPrefix != nil && !*addPrefix {
		scheme = "never"
	}
	switch scheme {
	case "always", "first", "never":
	default:
		return nil, p.bad("Metaspace", fmt.Errorf("unknown prepend_scheme %q", scheme))
	}
	return &metaspacePre{replacement: replacement, prepend: scheme, splitOn: split}, nil
}

func (p *parser) normalizer(n node) (normalizer, error) {
	if n == nil {
		return nil, nil
	}
	switch n.typ() {
	case "Sequence":
		steps, err := n.list("normalizers")
		if err != nil {
			return nil, p.bad("normalizer", err)
		}
		var seq []normalizer
		for _, s := range steps {
			nm, err := p.normalizer(s)
			if err != nil {
				return nil, err
			}
			if nm != nil {
				seq = append(seq, nm)
			}
		}
		if len(seq) == 0 {
			return nil, nil
		}
		return sequenceNormalizer(seq), nil
	case "NFC":
		return unicodeNormalizer(norm.NFC), nil
	case "NFD":
		return unicodeNormalizer(norm.NFD), nil
	case "NFKC":
		return unicodeNormalizer(norm.NFKC), nil
	case "NFKD":
		return unicodeNormalizer(norm.NFKD), nil
	case "Lowercase":
		return lowercaseNormalizer, nil
	case "Prepend":
		var prefix string
		if err := n.field("prepend", &prefix); err != nil {
			return nil, p.bad("normalizer", err)
		}
		return prependNormalizer(prefix), nil
	case "Replace":
		m, content, err := p.replace(n)
		if err != nil {
			return nil, err
		}
		return replaceNormalizer(m, content), nil
	case "Strip":
		left, right := true, true
		if err := errors.Join(n.field("strip_left", &left), n.field("strip_right", &right)); err != nil {
			return nil, p.bad("normalizer", err)
		}
		return stripNormalizer(left, right), nil
	}
	return nil, p.unsupported("normalizer", n)
}

func (p *parser) replace(n node) (matcher, string, error) {
	m, err := p.pattern(n)
	if err != nil {
		return nil, "", p.bad("Replace", err)
	}
	var content string
	if err := n.field("content", &content); err != nil {
		return nil, "", p.bad("Replace", err)
	}
	return m, content, nil
}

func (p *parser) decoder(n node) (decoder, error) {
	if n == nil {
		return nil, nil
	}
	switch n.typ() {
	case "Sequence":
		steps, err := n.list("decoders")
		if err != nil {
			return nil, p.bad("decoder", err)
		}
		var seq []decoder
		for _, s := range steps {
			d, err := p.decoder(s)
			if err != nil {
				return nil, err
			}
			seq = append(seq, d)
		}
		return sequenceDecoder(seq), nil
	case "ByteLevel":
		return byteLevelDecoder, nil
	case "Replace":
		m, content, err := p.replace(n)
		if err != nil {
			return nil, err
		}
		return replaceDecoder(m, content), nil
	case "ByteFallback":
		return byteFallbackDecoder, nil
	case "Fuse":
		return fuseDecoder, nil
	case "Strip":
		var content string
		var start, stop int
		if err := errors.Join(n.field("content", &content), n.field("start", &start), n.field("stop", &stop)); err != nil {
			return nil, p.bad("decoder", err)
		}
		return stripDecoder(content, start, stop), nil
	case "Metaspace":
		m, err := p.metaspace(n)
		if err != nil {
			return nil, err
		}
		return metaspaceDecoder(m.replacement, m.prepend != "never"), nil
	}
	return nil, p.unsupported("decoder", n)
}

// postProcessor reads the ids a post-processor puts around one sequence.
func (p *parser) postProcessor(n node) (prefix, suffix []int32, err error) {
	if n == nil {
		return nil, nil, nil
	}
	switch n.typ() {
	case "ByteLevel":
		return nil, nil, nil
	case "Sequence":
		steps, err := n.list("processors")
		if err != nil {
			return nil, nil, p.bad("post_processor", err)
		}
		for _, s := range steps {
			pre, suf, err := p.postProcessor(s)
			if err != nil {
				return nil, nil, err
			}
			prefix, suffix = append(pre, prefix...), append(suffix, suf...)
		}
		return prefix, suffix, nil
	case "TemplateProcessing":
		var single []map[string]struct {
			ID string `json:"id"`
		}
		var specials map[string]struct {
			IDs []int32 `json:"ids"`
		}
		if err := errors.Join(n.field("single", &single), n.field("special_tokens", &specials)); err != nil {
			return nil, nil, p.bad("post_processor", err)
		}
		seen := false
		for _, piece := range single {
			if _, ok := piece["Sequence"]; ok {
				seen = true
				continue
			}
			sp, ok := piece["SpecialToken"]
			if !ok {
				return nil, nil, p.bad("post_processor", errors.New("a template piece that is neither Sequence nor SpecialToken"))
			}
			ids, ok := specials[sp.ID]
			if !ok {
				return nil, nil, p.bad("post_processor", fmt.Errorf("special token %q has no ids", sp.ID))
			}
			if seen {
				suffix = append(suffix, ids.IDs...)
			} else {
				prefix = append(prefix, ids.IDs...)
			}
		}
		return prefix, suffix, nil
	case "RobertaProcessing", "BertProcessing":
		var cls, sep [2]json.RawMessage
		if err := errors.Join(n.field("cls", &cls), n.field("sep", &sep)); err != nil {
			return nil, nil, p.bad("post_processor", err)
		}
		var clsID, sepID int32
		if err := errors.Join(json.Unmarshal(cls[1], &clsID), json.Unmarshal(sep[1], &sepID)); err != nil {
			return nil, nil, p.bad("post_processor", err)
		}
		return []int32{clsID}, []int32{sepID}, nil
	}
	return nil, nil, p.unsupported("post-processor", n)
}

// byteLevel maps bytes to the printable characters GPT-2's byte-level
// vocabularies spell them with, and back.
var byteToRune, runeToByte = func() ([256]rune, map[rune]byte) {
	var b2r [256]rune
	r2b := make(map[rune]byte, 256)
	n := rune(0)
	for b := range 256 {
		if b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE {
			b2r[b] = rune(b)
		} else {
			b2r[b] = 256 + n
			n++
		}
		r2b[b2r[b]] = byte(b)
	}
	return b2r, r2b
}()

// fromByteLevel turns a byte-level vocabulary's token into its bytes; a
// character outside the mapping stays as its UTF-8.
func fromByteLevel(tok string) string {
	b := make([]byte, 0, len(tok))
	for _, r := range tok {
		if c, ok := runeToByte[r]; ok {
			b = append(b, c)
		} else {
			b = append(b, string(r)...)
		}
	}
	return string(b)
}

// byteLevelDecoded is what the ByteLevel decoder makes of an added
// token's text: its bytes, if every character is a byte-level one, else
// the text unchanged.
func byteLevelDecoded(text string) string {
	b := make([]byte, 0, len(text))
	for _, r := range text {
		c, ok := runeToByte[r]
		if !ok {
			return text
		}
		b = append(b, c)
	}
	return string(b)
}

package tokenizer

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// kimiPattern is the pre-tokenizer pattern of Kimi's tokenizer
// (tokenization_kimi.py), which tiktoken runs with fancy-regex; its class
// intersections (A&&[^B]) are written as the backtracking engine's class
// subtractions (A-[B]).
const kimiPattern = `[\p{Han}]+` +
	`|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}-[\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}-[\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?` +
	`|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}-[\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}-[\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?` +
	`|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// kimiReservedSpecials is how many special token ids follow the base
// vocabulary (tokenization_kimi.py: num_reserved_special_tokens + 2).
const kimiReservedSpecials = 256 + 2

// loadTiktoken reads Kimi's tokenizer: tiktoken.model (one token a line,
// its bytes in base64 and its rank, which is its id) and the special
// tokens tokenizer_config.json names after the base vocabulary.
func loadTiktoken(dir string, cfg *hfConfig) (*Tokenizer, error) {
	path := filepath.Join(dir, TiktokenModel)
	vocab, err := readTiktoken(path)
	if err != nil {
		return nil, err
	}
	base := int32(len(vocab))
	size := base + kimiReservedSpecials
	c := &hfCodec{
		tokens: make([]string, size), stream: make([]string, size),
		known: make([]bool, size), special: make([]bool, size),
		dec: byteLevelDecoder,
	}
	model := &bpe{vocab: vocab, unk: -1, byteLevel: true, wholeFirst: true, cache: newWordCache()}
	model.rank = rankByText(vocab)
	for tok, id := range vocab {
		if id < 0 || id >= base {
			return nil, fmt.Errorf("tokenizer %s: %s: rank %d of %d tokens: ranks must number the tokens from 0", dir, TiktokenModel, id, base)
		}
		c.tokens[id], c.stream[id], c.known[id] = tok, tok, true
	}
	for b := range 256 {
		id, ok := vocab[string([]byte{byte(b)})]
		if !ok {
			return nil, fmt.Errorf("tokenizer %s: %s has no token for byte %#02x", dir, TiktokenModel, b)
		}
		model.byteIDs[b] = id
	}
	var added []addedToken
	for id := base; id < size; id++ {
		a := addedToken{id: id, content: fmt.Sprintf("<|reserved_token_%d|>", id), special: true}
		if d, ok := cfg.AddedTokensDecoder[strconv.Itoa(int(id))]; ok {
			a.content, a.special = d.Content, d.Special
		}
		added = append(added, a)
		c.tokens[id], c.stream[id], c.known[id], c.special[id] = a.content, a.content, true, a.special
	}
	c.added = newAddedVocab(added)
	m, err := compileRegex(kimiPattern)
	if err != nil {
		return nil, err
	}
	c.pre = tiktokenChunks{&splitPre{m: m, behavior: isolated}}
	c.model = model
	return &Tokenizer{enc: c}, nil
}

// readTiktoken reads a tiktoken vocabulary: lines of base64 bytes and rank.
func readTiktoken(path string) (map[string]int32, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	defer f.Close()
	vocab := make(map[string]int32, 1<<17)
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		tok, rank, ok := bytes.Cut(text, []byte(" "))
		if !ok {
			return nil, fmt.Errorf("tokenizer %s:%d: want \"BASE64 RANK\", got %q", path, line, text)
		}
		b, err := base64.StdEncoding.DecodeString(string(tok))
		if err != nil {
			return nil, fmt.Errorf("tokenizer %s:%d: %w", path, line, err)
		}
		r, err := strconv.ParseInt(string(rank), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("tokenizer %s:%d: rank: %w", path, line, err)
		}
		vocab[string(b)] = int32(r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", path, err)
	}
	if len(vocab) == 0 {
		return nil, fmt.Errorf("tokenizer %s: no tokens", path)
	}
	return vocab, nil
}

// tiktokenChunks cuts text as Kimi's encode does before tiktoken sees it:
// into slices of 400,000 characters, each into runs of at most 25,000
// characters of white space or of anything else (tiktoken's stack limit).
type tiktokenChunks struct{ inner preTokenizer }

const (
	tiktokenMaxChars = 400_000
	tiktokenMaxRun   = 25_000
)

func (t tiktokenChunks) split(s string, first bool, emit func(string, bool)) {
	for len(s) > 0 {
		end, chars := 0, 0
		for end < len(s) && chars < tiktokenMaxChars {
			_, n := utf8.DecodeRuneInString(s[end:])
			end += n
			chars++
		}
		t.runs(s[:end], first, emit)
		s, first = s[end:], false
	}
}

// runs is _split_whitespaces_or_nonwhitespaces: a new slice starts where
// a run of white space or of non-white space passes tiktokenMaxRun
// characters.
func (t tiktokenChunks) runs(s string, first bool, emit func(string, bool)) {
	start, runLen := 0, 0
	isSpace := false
	for i, r := range s {
		now := pyIsSpace(r)
		if i == 0 {
			isSpace = now
		}
		if now != isSpace {
			runLen, isSpace = 1, now
			continue
		}
		runLen++
		if runLen > tiktokenMaxRun {
			t.inner.split(s[start:i], first && start == 0, emit)
			start, runLen = i, 1
		}
	}
	t.inner.split(s[start:], first && start == 0, emit)
}

// pyIsSpace is Python's str.isspace for one character: Unicode white
// space and the four information separators U+001C..U+001F.
func pyIsSpace(r rune) bool { return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f }

// Package tokenizer turns text into token ids and back for the mock,
// renders chat templates and picks the mock's output tokens. A Tokenizer
// is a value each server holds: two servers with different tokenizers
// share nothing.
//
// Two kinds serve. Builtin is sglmock's deterministic, offline stand-in
// for a model tokenizer: fast, prefix-stable, about 1.3 tokens per English
// word, with no vocabulary file to download. Load reads a model's own from
// a Hugging Face model directory, so a client that sizes prompts with the
// model's tokenizer and the mock agree on every count.
//
// # The built-in tokenizer's ids
//
//   - 0..255: single bytes (punctuation, digits, white space, non-ASCII bytes).
//   - 256..1023: special tokens; see EOS, IMStart, IMEnd, BOS (259,
//     "<|begin_of_text|>", which EncodePrompt puts before a text prompt
//     when BuiltinOptions.AddBOS says so; plain text never produces it)
//     and the markers of the Llama 3 and Kimi K2 chat templates, with the
//     reasoning block of K2.6's (Think, ThinkEnd).
//   - 1024 and up: a run of 1 to 6 ASCII letters, all lower case but maybe the
//     first, with or without one leading space. The id encodes the run itself
//     (bijective base 26, a capital flag and a space flag), so decoding needs
//     no table and every id in range means exactly one piece.
//
// Text is read left to right: a special token's text becomes its id; a space
// followed by a letter starts a piece " Abcdef"; lower-case letters continue
// it up to 6 letters, and an upper-case letter starts a new piece; every other
// byte is a byte token. The split of a text's prefix is a prefix of the split
// of the text, but for its last piece (a word cut short, a trailing space),
// which is what a radix cache over real tokenizers sees too.
//
// # A loaded tokenizer
//
// Load runs tokenizer.json as Hugging Face's tokenizers library does (and
// Kimi's tiktoken.model as its tokenization_kimi.py does): added tokens
// are cut out of the text first (leftmost, longest); each part between them
// is normalized, pre-tokenized into pieces, and each piece is merged by
// byte-pair encoding, the pair of lowest rank first. Byte-level models
// (Llama 3, Qwen, DeepSeek, GPT-2, Kimi) work on raw bytes, their
// vocabulary's byte characters mapped back at load; SentencePiece-style
// ones (Llama 2, Mistral, Gemma) on characters, with byte fallback. The
// special tokens EncodePrompt adds come from the post-processor, or, for
// the Llama, CodeLlama, Gemma and Cohere classes, from add_bos_token (and
// never an EOS), as SGLang sets them after loading. Decode runs the
// decoders and transformers' clean_up_tokenization_spaces.
//
// SGLang tokenizes with the tokenizer transformers 5 builds, not the file
// alone: a LlamaTokenizer is rebuilt from its class (no normalizer, a
// Metaspace pre-tokenizer whose prepend scheme follows legacy and
// add_prefix_space, BPE without ignore_merges), except for a
// pre-tokenizer of another kind, which SGLang puts back. Load applies the
// same rebuild to tokenizer.json (rebuildAsTransformers).
//
// Speed comes from three places. The GPT-4-family split (Llama 3, Qwen)
// has a scanner of its own, checked against the regex engine (regexp2, a
// backtracking engine with lookaheads and Unicode classes, as Oniguruma
// and fancy-regex have), which runs every other pattern a window at a
// time. A SentencePiece text, one piece with no pre-tokenizer, is merged
// word by word, cut where no token can cross. And pieces (64k) and long
// prompts (eight slots, each the last prompt hashed to it) are cached,
// lock-free, so a benchmark that resends a prompt does not pay for it
// twice.
//
// EncodeWithinContext and CountContext stop, with the context's error,
// once their context ends (a request whose client left): the encoders look
// at it every 64 KiB of text, between pieces and between the cuts of a long
// piece's merge, so a 64 MiB run of spaces stops within one cut; a context
// made with WithPace has them call its pace there too, where a server lets
// other work have the core.
//
// # Chat templates
//
// A chat is rendered with a Jinja template as transformers'
// apply_chat_template renders it (github.com/ardanlabs/jinja runs it:
// namespace, loop controls, raise_exception, tojson), with messages,
// tools, documents, add_generation_prompt, the special tokens and the
// caller's extra variables (Chat); the text carries its own special
// tokens, so it is encoded without a BOS. Where the engine and Python's
// jinja2 differ, the template's source is rewritten before it is compiled
// (prepareTemplate: line breaks, string escapes, printing as str(), the
// format filter) and strftime_now is Python's strftime at a fixed date; a
// source whose brackets nest deeper than jinja2 can parse (maxNesting) is
// refused when it is loaded. A template that fails is a *TemplateError,
// the request's 400.
// ChatContentFormat is how SGLang hands the template content parts
// ("string" or "openai"), from the template's source as SGLang detects
// it. The built-in tokenizer renders the template its profile names
// (chatml, llama-3.1, kimi-k2, kimi-k2.6: ChatTemplates), a loaded one its
// model's.
//
// # Output tokens
//
// Tokenizer.OutputToken gives the mock's deterministic "generated" tokens:
// whole words, the first capitalized and the rest with a leading space, and
// an occasional comma or period, drawn from the prompt's hash. A loaded
// tokenizer keeps the words whose tokens read back as themselves after its
// chat template's generation prompt, two by two, and forbids two
// punctuation tokens in a row when they would merge, so a multi-turn chat
// that sends the answer back hits the radix cache as it does with a real
// model.
package tokenizer

// Package tokenizer turns text into token ids and back for the mock. A
// Tokenizer is a value each server holds: two servers with different
// tokenizers share nothing. The built-in one (Builtin) is sglmock's
// deterministic, offline stand-in for a model tokenizer: fast,
// prefix-stable, about 1.3 tokens per English word, with no vocabulary file
// to download.
//
// # Token ids
//
//   - 0..255: single bytes (punctuation, digits, white space, non-ASCII bytes).
//   - 256..1023: special tokens; see EOS, IMStart, IMEnd and BOS (259,
//     "<|begin_of_text|>", which EncodePrompt puts before a text prompt
//     when BuiltinOptions.AddBOS says so; plain text never produces it).
//   - 1024 and up: a run of 1 to 6 ASCII letters, all lower case but maybe the
//     first, with or without one leading space. The id encodes the run itself
//     (bijective base 26, a capital flag and a space flag), so decoding needs
//     no table and every id in range means exactly one piece.
//
// # Splitting
//
// Text is read left to right: a special token's text becomes its id; a space
// followed by a letter starts a piece " Abcdef"; lower-case letters continue
// it up to 6 letters, and an upper-case letter starts a new piece; every other
// byte is a byte token. The split of a text's prefix is
// a prefix of the split of the text, but for its last piece (a word cut short,
// a trailing space), which is what a radix cache over real tokenizers sees too.
//
// # Output words
//
// Tokenizer.OutputToken gives the mock's deterministic "generated" tokens: whole words
// of at most 5 letters, the first without a leading space and the rest with
// one, and an occasional comma or period. Their decoded text tokenizes back to
// the same ids, so a multi-turn chat that sends the answer back hits the radix
// cache as it does with a real model.
package tokenizer

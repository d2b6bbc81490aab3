// The tokenizer oracle: reads {dir, texts, chats} as JSON on standard
// input and writes, as JSON, what transformers.js makes of them with the
// tokenizer in dir (tokenizer.json and tokenizer_config.json), as SGLang
// loads it through Python's transformers (asSGLang): each text's
// ids with and without special tokens and its decoded ids, each chat
// rendered by the chat template (the Jinja of transformers.js) with the
// generation prompt, and the rendered chat's ids without special tokens.
import fs from "fs";
import { createRequire } from "module";

const require = createRequire(process.cwd() + "/");
const { TokenizerLoader } = require("@lenml/tokenizers");
const { Template } = require("@huggingface/jinja");

const req = JSON.parse(fs.readFileSync(0, "utf8"));
const read = (f) => JSON.parse(fs.readFileSync(req.dir + "/" + f, "utf8"));
const config = read("tokenizer_config.json");
const special = (t) => (t && typeof t === "object" ? t.content : t) || "";

// asSGLang is the tokenizer SGLang encodes with where Python's layer
// changes tokenizer.json on loading (transformers 5.8.1 and SGLang's
// post-load fixes in hf_transformers/tokenizer.py):
// - transformers 5 builds a LlamaTokenizer (LlamaTokenizerFast) from its
//   class: no normalizer, a Metaspace pre-tokenizer without split whose
//   prepend scheme is "always" with legacy, "first" without, "never"
//   with add_prefix_space false, its decoder, BPE with byte fallback and
//   no ignore_merges; SGLang puts back tokenizer.json's pre-tokenizer and
//   decoder when they are of another kind (_fix_v5_tokenizer_components);
// - for the classes that took add_bos_token in transformers 4, SGLang
//   sets BOS from add_bos_token (default true) and never adds EOS
//   (_fix_v5_add_bos_eos_token); a Llama tokenizer without BOS keeps
//   tokenizer.json's post-processor.
function asSGLang(json, config) {
  const cls = (config.tokenizer_class || "").replace(/Fast$/, "");
  const out = JSON.parse(JSON.stringify(json));
  let conf = config;
  if (cls === "LlamaTokenizer") {
    const addPrefix = config.add_prefix_space ?? true;
    const scheme = !addPrefix ? "never" : config.legacy ? "always" : "first";
    out.normalizer = null;
    Object.assign(out.model, { byte_fallback: true, fuse_unk: true, ignore_merges: false, unk_token: null });
    if (!out.pre_tokenizer || out.pre_tokenizer.type === "Metaspace") {
      out.pre_tokenizer = { type: "Metaspace", replacement: "\u2581", prepend_scheme: scheme, add_prefix_space: addPrefix, split: false };
      const decoders = [{ type: "Replace", pattern: { String: "\u2581" }, content: " " }, { type: "ByteFallback" }, { type: "Fuse" }];
      if (addPrefix) decoders.push({ type: "Strip", content: " ", start: 1, stop: 0 });
      out.decoder = { type: "Sequence", decoders };
    }
    // transformers.js's own Llama class has rules of its own for legacy.
    conf = { ...config, tokenizer_class: "PreTrainedTokenizer" };
  }
  if (["LlamaTokenizer", "CodeLlamaTokenizer", "GemmaTokenizer", "CohereTokenizer"].includes(cls)) {
    const bos = config.add_bos_token ?? true;
    if (bos) {
      const b = special(config.bos_token);
      const added = out.added_tokens.find((t) => t.content === b);
      const id = added ? added.id : out.model.vocab[b];
      out.post_processor = {
        type: "TemplateProcessing",
        single: [{ SpecialToken: { id: b, type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
        pair: [{ SpecialToken: { id: b, type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }, { Sequence: { id: "B", type_id: 1 } }],
        special_tokens: { [b]: { id: b, ids: [id], tokens: [b] } },
      };
    } else if (cls !== "LlamaTokenizer") {
      out.post_processor = null;
    }
  }
  return [out, conf];
}

const [tokenizerJSON, tokenizerConfig] = asSGLang(read("tokenizer.json"), config);
const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });

const out = { prompt: [], plain: [], decoded: [], chat: [], chat_ids: [] };
for (const text of req.texts) {
  const ids = tok.encode(text);
  out.prompt.push(ids);
  out.plain.push(tok.encode(text, { add_special_tokens: false }));
  out.decoded.push(ids.length ? tok.decode(ids, { skip_special_tokens: false }) : "");
}
const template = config.chat_template ? new Template(config.chat_template) : null;
for (const messages of req.chats || []) {
  if (!template) {
    out.chat.push(null);
    out.chat_ids.push(null);
    continue;
  }
  const text = template.render({
    messages, add_generation_prompt: true,
    bos_token: special(config.bos_token), eos_token: special(config.eos_token),
  });
  out.chat.push(text);
  out.chat_ids.push(tok.encode(text, { add_special_tokens: false }));
}
process.stdout.write(JSON.stringify(out));

// The tokenizer oracle: reads {dir, texts, chats} as JSON on standard
// input and writes, as JSON, what transformers.js makes of them with the
// tokenizer in dir (tokenizer.json and tokenizer_config.json): each text's
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
const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON: read("tokenizer.json"), tokenizerConfig: config });
const special = (t) => (t && typeof t === "object" ? t.content : t) || "";

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

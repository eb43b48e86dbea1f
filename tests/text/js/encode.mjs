// Reference side of the tokenizer cross-check: encodes a JSON corpus with the
// Hugging Face JS tokenizer and writes ids + decoded text per string.
// Usage: node encode.mjs MODEL_DIR CORPUS.json OUT.json
import { Tokenizer } from "@huggingface/tokenizers";
import fs from "node:fs";
import path from "node:path";

const [dir, corpusPath, outPath] = process.argv.slice(2);
const tj = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
const cfgPath = path.join(dir, "tokenizer_config.json");
const cfg = fs.existsSync(cfgPath) ? JSON.parse(fs.readFileSync(cfgPath, "utf8")) : {};
const tok = new Tokenizer(tj, cfg);
const corpus = JSON.parse(fs.readFileSync(corpusPath, "utf8"));
const out = corpus.map((s) => {
  const ids = tok.encode(s).ids;
  const ids_plain = tok.encode(s, { add_special_tokens: false }).ids;
  return { ids, ids_plain, decoded: tok.decode(ids_plain) };
});
fs.writeFileSync(outPath, JSON.stringify(out));

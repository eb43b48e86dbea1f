// Single-thread encode throughput of the JS reference on a text file.
// Usage: node bench.mjs MODEL_DIR FILE [REPEAT]
import { Tokenizer } from "@huggingface/tokenizers";
import fs from "node:fs";
import path from "node:path";

const [dir, file, repeatArg, chunkArg] = process.argv.slice(2);
// chunk > 0: encode the file as separate documents cut after the first newline past
// every `chunk` bytes (same cut rule as nemotron_text_tool bench).
const chunk = Number(chunkArg || 0);
const repeat = Number(repeatArg || 1);
const tj = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
const cfgPath = path.join(dir, "tokenizer_config.json");
const cfg = fs.existsSync(cfgPath) ? JSON.parse(fs.readFileSync(cfgPath, "utf8")) : {};
const tok = new Tokenizer(tj, cfg);
const buf = fs.readFileSync(file);
const bytes = buf.length;
const docs = [];
if (chunk > 0) {
  let start = 0;
  while (start < buf.length) {
    let cut = buf.indexOf(10, Math.min(start + chunk, buf.length));
    cut = cut < 0 ? buf.length : cut + 1;
    docs.push(buf.subarray(start, cut).toString("utf8"));
    start = cut;
  }
} else {
  docs.push(buf.toString("utf8"));
}
let best = Infinity, ntok = 0;
for (let r = 0; r < repeat; ++r) {
  const t0 = process.hrtime.bigint();
  let n = 0;
  for (const d of docs) n += tok.encode(d, { add_special_tokens: false }).ids.length;
  const t1 = process.hrtime.bigint();
  best = Math.min(best, Number(t1 - t0) / 1e9);
  ntok = n;
}
console.log(JSON.stringify({ impl: "js", bytes, docs: docs.length, tokens: ntok, seconds: best, mb_per_s: bytes / 1e6 / best }));

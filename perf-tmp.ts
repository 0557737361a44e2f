import { loadTokenizer } from "./src/tokenizer/index.ts";
import { readFileSync } from "node:fs";
const base = readFileSync("README.md", "utf8") + readFileSync("../shared/vocab/ggml-vocab-deepseek-llm.gguf.inp", "utf8");
let text = ""; while (text.length < 1_000_000) text += base;
const bytes = Buffer.byteLength(text);
for (const f of process.argv.slice(2)) {
  const t0 = performance.now();
  const { tokenizer } = loadTokenizer(f);
  const t1 = performance.now();
  const ids = tokenizer.encode(text);
  const t2 = performance.now();
  const ids2 = tokenizer.encode(text);
  const t3 = performance.now();
  const ok = tokenizer.decode(ids) === text;
  console.log(f.split("/").pop(), `load ${(t1-t0).toFixed(0)} ms, encode ${(bytes/1e6).toFixed(2)} MB: ${(t2-t1).toFixed(0)} ms cold (${(bytes/1e6/((t2-t1)/1000)).toFixed(2)} MB/s), ${(t3-t2).toFixed(0)} ms warm, ${ids.length} tokens, roundtrip ${ok}`);
}

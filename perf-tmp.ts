import { loadTokenizer } from "./src/tokenizer/index.ts";
import { mixedTexts } from "./test/helpers/vocab-vectors.ts";
let text = mixedTexts(40000, 3).join(" ");
text = text.slice(0, 1_000_000);
const bytes = Buffer.byteLength(text);
for (const f of process.argv.slice(2)) {
  const { tokenizer } = loadTokenizer(f);
  const t1 = performance.now();
  const ids = tokenizer.encode(text);
  const t2 = performance.now();
  console.log(f.split("/").pop(), `encode ${(bytes/1e6).toFixed(2)} MB mixed: ${(t2-t1).toFixed(0)} ms (${(bytes/1e6/((t2-t1)/1000)).toFixed(2)} MB/s), ${ids.length} tokens`);
}

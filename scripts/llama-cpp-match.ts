/**
 * Checks pagellm against llama.cpp on one F32 GGUF file by the same-file rule of
 * ../shared/golden/llama-cpp/README.md: the same tokens, greedy ids equal, mean |logprob
 * difference| at most 0.02 and the same argmax at 97% of positions or more. llama.cpp's side is
 * `llref` (../shared/tools/llama-ref); pagellm's is `pagellm perplexity --json` and `generate --json`.
 *
 *   bun scripts/llama-cpp-match.ts MODEL.gguf LLREF [pagellm options...]
 *
 * For the models of scripts/large-models.ts (docs/large-models.md): e.g. Llama-2-7B's width in
 * F32, placed over two WebAssembly memories. Exit code 0 when every check holds.
 */
import { join } from "node:path";

const [model, llref, ...extra] = process.argv.slice(2);
if (model === undefined || llref === undefined) {
  console.error("usage: bun scripts/llama-cpp-match.ts MODEL.gguf LLREF [pagellm options...]");
  process.exit(2);
}
const texts = join(import.meta.dir, "..", "..", "shared", "golden", "llama-cpp", "texts");
const root = join(import.meta.dir, "..");

function run(cmd: string[]): string {
  const p = Bun.spawnSync(cmd, { stdout: "pipe", stderr: "pipe", cwd: root });
  if (p.exitCode !== 0) throw new Error(`${cmd.join(" ")}: exit ${p.exitCode}: ${p.stderr.toString().trim().split("\n").pop()}`);
  return p.stdout.toString();
}

/** The last JSON line of a command's output. */
function lastJson<T>(out: string): T {
  const lines = out.split("\n").filter((l) => l.startsWith("{"));
  return JSON.parse(lines[lines.length - 1]!) as T;
}

let failed = 0;
const report = (ok: boolean, line: string) => {
  if (!ok) failed++;
  console.log(`${ok ? "ok  " : "FAIL"} ${line}`);
};

const text = join(texts, "story.txt");
const want = JSON.parse(run([llref, "score", model, text, "512"])) as { tokens: number[]; logprobs: [number, number][] };
const got = lastJson<{ tokens: number[]; token_logprobs: number[]; top_tokens: number[] }>(
  run(["bun", "bin/pagellm", "perplexity", "--model", model, "--file", text, "--json", ...extra]),
);
report(JSON.stringify(got.tokens) === JSON.stringify(want.tokens), `score story: tokens equal (${want.tokens.length})`);
const diffs = want.logprobs.map(([lp], i) => Math.abs(lp - got.token_logprobs[i]!));
const mean = diffs.reduce((a, b) => a + b, 0) / diffs.length;
const agree = want.logprobs.filter(([, top], i) => top === got.top_tokens[i]).length / want.logprobs.length;
report(mean <= 0.02 && agree >= 0.97, `score story: mean |Δlogprob| ${mean.toFixed(5)} (≤ 0.02), argmax agreement ${(100 * agree).toFixed(1)}% (≥ 97%)`);

const prompt = join(texts, "p_story.txt");
const greedy = JSON.parse(run([llref, "greedy", model, prompt, "32"])) as { generated: number[] };
const gen = lastJson<{ token_ids: number[] }>(
  run(["bun", "bin/pagellm", "generate", "--model", model, "--prompt-file", prompt, "--max-tokens", "32", "--temperature", "0", "--json", ...extra]),
);
const n = Math.min(gen.token_ids.length, greedy.generated.length);
report(n > 0 && gen.token_ids.slice(0, n).every((id, i) => id === greedy.generated[i]), `greedy: ${n} ids equal llama.cpp's`);
console.log(failed === 0 ? "all checks hold" : `${failed} checks fail`);
process.exit(failed === 0 ? 0 : 1);

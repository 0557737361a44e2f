/**
 * Two checkouts of pagellm measured against each other in one process: each checkout's own modules
 * and WebAssembly instances, loaded side by side on the same model file, their runs alternating
 * A B B A round after round, so that both see the machine at the same moments. Ratios of this
 * kind settle a few per cent on a shared VM whose speed drifts by more than that between two
 * `bench all` runs (docs/performance.md, "The front door's cost").
 *
 *   bun scripts/ab-commits.ts BEFORE_DIR AFTER_DIR MODEL.gguf [THREADS] [ROUNDS] [WORKLOAD]
 *
 * BEFORE_DIR and AFTER_DIR are checkouts with `bun install` done (git worktree add DIR COMMIT).
 * WORKLOAD: decode (one sequence, 128 tokens), prefill (a 220-word prompt, one token), batch16
 * (16 sequences of 32 tokens) or batch3 (3 sequences of 64: steps of 3 tokens); all four when
 * left out. Prints one JSON line per workload: the after / before wall-time ratio of each round,
 * their geometric mean with a 95% interval, and the median. Greedy, prefix cache off, WebAssembly.
 */
import { resolve } from "node:path";
import { percentile } from "../src/bench/measure.ts";

export interface GenerateCall { prompt: string; maxTokens: number; temperature: number; ignoreEos: boolean }
interface Library { generate(requests: GenerateCall[]): Promise<unknown>; close(): void }
interface LibraryModule { LLM: { open(o: object): Promise<Library> } }

const WORDS = "the quick brown fox jumps over a lazy dog while seven small birds sing in the old oak tree by the river".split(" ");
const words = (n: number, seed: number) => Array.from({ length: n }, (_, i) => WORDS[(i * 7 + seed) % WORDS.length]).join(" ");

const WORKLOADS: Record<string, GenerateCall[]> = {
  decode: [{ prompt: "once upon a time", maxTokens: 128, temperature: 0, ignoreEos: true }],
  prefill: [{ prompt: words(220, 1), maxTokens: 1, temperature: 0, ignoreEos: true }],
  batch16: Array.from({ length: 16 }, (_, i) => ({ prompt: words(8, i), maxTokens: 32, temperature: 0, ignoreEos: true })),
  batch3: Array.from({ length: 3 }, (_, i) => ({ prompt: words(8, i), maxTokens: 64, temperature: 0, ignoreEos: true })),
};

async function open(dir: string, model: string, threads: number): Promise<Library> {
  // Absolute: an import path is read from this file's folder, the checkout's from the shell's.
  const lib = (await import(resolve(dir, "src", "index.ts"))) as LibraryModule;
  return lib.LLM.open({ model, device: "wasm", engine: { threads, enablePrefixCaching: false } });
}

async function wallMs(lib: Library, requests: GenerateCall[]): Promise<number> {
  const t0 = performance.now();
  await lib.generate(requests);
  return performance.now() - t0;
}

/** After / before time of each round, the pair's order alternating (A B B A, then B A A B). */
async function rounds(before: Library, after: Library, requests: GenerateCall[], n: number): Promise<number[]> {
  await wallMs(before, requests);
  await wallMs(after, requests);
  const ratios: number[] = [];
  for (let r = 0; r < n; r++) {
    const order = r % 2 === 0 ? [before, after, after, before] : [after, before, before, after];
    let b = 0, a = 0;
    for (const lib of order) {
      const ms = await wallMs(lib, requests);
      if (lib === before) b += ms;
      else a += ms;
    }
    ratios.push(a / b);
  }
  return ratios;
}

function summary(ratios: number[]): { geomean: number; ci95: [number, number]; median: number } {
  const logs = ratios.map(Math.log);
  const mean = logs.reduce((s, x) => s + x, 0) / logs.length;
  const sd = Math.sqrt(logs.reduce((s, x) => s + (x - mean) ** 2, 0) / Math.max(1, logs.length - 1));
  const half = (2 * sd) / Math.sqrt(logs.length);
  const round4 = (x: number) => Math.round(x * 1e4) / 1e4;
  const median = percentile([...ratios].sort((x, y) => x - y), 50);
  return { geomean: round4(Math.exp(mean)), ci95: [round4(Math.exp(mean - half)), round4(Math.exp(mean + half))], median: round4(median) };
}

async function main(): Promise<void> {
  const [beforeDir, afterDir, model, threadsArg = "1", roundsArg = "8", only] = process.argv.slice(2);
  const threads = Number(threadsArg), n = Number(roundsArg);
  if (beforeDir === undefined || afterDir === undefined || model === undefined || !(threads >= 1) || !(n >= 2) || (only !== undefined && !(only in WORKLOADS))) {
    console.error(`usage: bun scripts/ab-commits.ts BEFORE_DIR AFTER_DIR MODEL.gguf [THREADS] [ROUNDS>=2] [${Object.keys(WORKLOADS).join("|")}]`);
    process.exitCode = 2;
    return;
  }
  const before = await open(beforeDir, model, threads);
  const after = await open(afterDir, model, threads);
  try {
    for (const [workload, requests] of Object.entries(WORKLOADS)) {
      if (only !== undefined && workload !== only) continue;
      const ratios = await rounds(before, after, requests, n);
      console.log(JSON.stringify({ workload, threads, rounds: n, afterOverBeforeTime: summary(ratios), ratios: ratios.map((x) => Math.round(x * 1000) / 1000) }));
    }
  } finally {
    before.close();
    after.close();
  }
}

await main();

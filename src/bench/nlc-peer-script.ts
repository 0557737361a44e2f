/**
 * The node-llama-cpp peer, run as its own Bun process by peer-nlc.ts: native llama.cpp (the
 * package's prebuilt CPU binaries) on a GGUF file, at one thread count, timed the way pagellm's
 * decode and prefill benches time themselves. node-llama-cpp is not a dependency of pagellm: it is
 * imported from the folder given (installed there with `npm install node-llama-cpp`).
 *
 *   bun nlc-peer-script.ts DIR MODEL.gguf THREADS MODE PROMPT_TOKENS GEN_TOKENS WARMUP REPS VOCAB SEED
 *
 * MODE decode: per repetition a fresh random prompt, then greedy tokens; tokens/s counts the tokens
 * after the first over the time after the first (the prompt is out of it), as measureDecode does.
 * MODE prefill: the time to evaluate a fresh random prompt, as a time to first token.
 * Prints one JSON line: {"llamaCpp", "threads", "tokensPerSecond": [per repetition]}.
 */

/** The part of node-llama-cpp's API used here. */
interface NlcSequence {
  clearHistory(): Promise<void>;
  evaluateWithoutGeneratingNewTokens(tokens: number[]): Promise<void>;
  evaluate(tokens: number[], options: { temperature: number }): AsyncIterable<number>;
}
interface NlcContext {
  getSequence(): NlcSequence;
  dispose(): Promise<void>;
}
interface NlcModel {
  createContext(options: { contextSize: number; batchSize: number; threads: number; sequences: number }): Promise<NlcContext>;
  dispose(): Promise<void>;
}
interface NlcLlama {
  loadModel(options: { modelPath: string; gpuLayers: number }): Promise<NlcModel>;
  readonly llamaCppRelease?: { release?: string };
}
interface NlcModule {
  getLlama(options: { gpu: false; build: "never"; skipDownload: true; maxThreads: number; logLevel: string }): Promise<NlcLlama>;
  LlamaLogLevel: { error: string };
}

/** The same linear congruential stream on every run: random token ids in [3, vocab). */
function tokenStream(seed: number, vocab: number): (n: number) => number[] {
  let state = seed >>> 0;
  return (n) =>
    Array.from({ length: n }, () => {
      state = (Math.imul(state, 1103515245) + 12345) & 0x7fffffff;
      return 3 + Math.floor((state / 0x80000000) * (vocab - 3));
    });
}

export async function main(): Promise<void> {
  const [dir, model, threadsArg, mode, promptArg, genArg, warmupArg, repsArg, vocabArg, seedArg] = process.argv.slice(2);
  if (seedArg === undefined || (mode !== "decode" && mode !== "prefill")) {
    process.stderr.write("usage: nlc-peer-script.ts DIR MODEL THREADS decode|prefill PROMPT_TOKENS GEN_TOKENS WARMUP REPS VOCAB SEED\n");
    process.exitCode = 2;
    return;
  }
  const [threads, promptTokens, genTokens, warmup, reps, vocab, seed] = [threadsArg, promptArg, genArg, warmupArg, repsArg, vocabArg, seedArg].map(Number) as [
    number, number, number, number, number, number, number,
  ];
  const nlc = (await import(Bun.resolveSync("node-llama-cpp", dir!))) as NlcModule;
  const llama = await nlc.getLlama({ gpu: false, build: "never", skipDownload: true, maxThreads: 0, logLevel: nlc.LlamaLogLevel.error });
  const loaded = await llama.loadModel({ modelPath: model!, gpuLayers: 0 });
  const context = await loaded.createContext({ contextSize: promptTokens + genTokens + 16, batchSize: Math.max(512, promptTokens), threads, sequences: 1 });
  const sequence = context.getSequence();
  const prompt = tokenStream(seed, Math.min(vocab, 32000));
  const rates: number[] = [];
  for (let rep = -warmup; rep < reps; rep++) {
    await sequence.clearHistory();
    const tokens = prompt(promptTokens);
    let rate: number;
    if (mode === "prefill") {
      const t0 = performance.now();
      await sequence.evaluateWithoutGeneratingNewTokens(tokens);
      rate = (1000 * promptTokens) / (performance.now() - t0);
    } else {
      let generated = 0;
      let first = 0;
      for await (const _token of sequence.evaluate(tokens, { temperature: 0 })) {
        if (generated === 0) first = performance.now();
        if (++generated >= genTokens) break;
      }
      rate = (1000 * (generated - 1)) / (performance.now() - first);
    }
    if (rep >= 0) rates.push(rate);
  }
  await context.dispose();
  await loaded.dispose();
  process.stdout.write(`${JSON.stringify({ llamaCpp: llama.llamaCppRelease?.release ?? "unknown", threads, tokensPerSecond: rates })}\n`);
}

if (import.meta.main) await main();

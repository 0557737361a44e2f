/**
 * The engine on WebGPU: the same scheduler, KV block manager (prefix cache included), sampler and
 * tokenizers as on WebAssembly, the forward pass in WGSL over the same block ids (LLM.load with a
 * WebGpuBackend; the software adapter in CI). What must hold there:
 *   - greedy output equals llama2.c run.c on runc-greedy.json's f32 cases (stories260K's two run
 *     together in one batch; llama2xs_h192), and llama.cpp's greedy ids on the F32, F16 and BF16
 *     stories260K references and the random F32 llama, qwen2, qwen3moe, gpt-oss, gemma3 and phi3 models;
 *   - the quantized stories260K files, the random K-quant ones (gemma3 and phi3 among them) and the
 *     mixtures of experts rnd-qwen3moe-Q4_K_M and rnd-gptoss-MXFP4_MOE meet the README's accuracy
 *     bound (golden/llama-cpp) through the engine's teacher-forced scores, as they do on WebAssembly;
 *   - bitwise invariance: requests run one at a time with the prefix cache off give the same
 *     tokens run together with the cache on, in a pool so small that requests are preempted while
 *     prefixes hit, and with chunked prefill beside decodes (on mixtures of experts too: a small
 *     qwen3moe, and gpt-oss with its sinks and windows);
 *   - the command line: --device webgpu runs on the adapter and says so on stderr; a model WGSL
 *     cannot run, and a machine without a usable adapter, fail with one line and exit code 2;
 *     auto falls back to WebAssembly with the reason.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LLM, type CompletionResult, type GenerateRequest } from "../src/llm/llm.ts";
import type { EngineOptions } from "../src/engine/engine-options.ts";
import { KVCacheGroups } from "../src/kv/kv-groups.ts";
import type { KVType } from "../src/kv/kv-layout.ts";
import type { WebGpuBackend } from "../src/backend/webgpu/backend.ts";
import { REPO_ROOT, runPagellm } from "./helpers/cli.ts";
import { MODELS, TEXTS, TOKENIZER } from "./helpers/prefix.ts";
import { describeShared, sharedPath } from "./helpers/shared.ts";
import { expertTypes, webgpuRefusal } from "../src/backend/device-choice.ts";
import { openCheckpoint } from "../src/model/load.ts";
import { describeGpu } from "./helpers/webgpu.ts";
import { openedLLMs } from "./helpers/llm.ts";
import { logSoftmaxAt } from "./helpers/gguf-rig.ts";
import { greedyGoldenCases } from "./helpers/runc-golden.ts";
import { CHILD_PROCESS_MS, PROCESS_TEST_MS } from "./helpers/limits.ts";
import { makeConfig } from "../src/model/config.ts";
import { writeModelGGUF } from "../src/synth/gguf-model-writer.ts";
import { tokenizerMetadata } from "../src/synth/gguf-tokenizer-metadata.ts";
import { writtenModel } from "./helpers/written-models.ts";

/** Positions of the story text the quantized files are scored on. */
const SCORED_TOKENS = 128;
/** Greedy steps compared with llama.cpp's on the random F32 files (large classifiers on a software adapter). */
const GREEDY_TOKENS = 16;
/**
 * The random files' classifiers have 32,000 to 151,936 rows, and a position costs the software adapter
 * about one of them: their first 24 positions. Every position runs the same products (the kernels
 * under test), and the rule holds there with the margin it has over 48 (0.78-0.90 of the bound on
 * llvmpipe); attention over longer contexts is compared with WebAssembly's in webgpu-forward.test.ts.
 */
const RND_SCORED_TOKENS = 24;
/** Files with sliding-window layers (windows of 32): their first 48 positions, past the window. */
const WINDOWED_SCORED_TOKENS = 48;
const WINDOWED = /^rnd-(gemma3|gptoss)-/;
/** Per-test limit: the software adapter runs about a GFLOP/s. */
const TIMEOUT_MS = 120_000;

const llms = openedLLMs();

function load(gpu: WebGpuBackend, model: string, tokenizer: string | undefined, engine: Partial<EngineOptions> = {}): LLM {
  return llms.load({ model, tokenizer, engine: { threads: 1, ...engine }, gpu });
}

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

/**
 * Quantized files with llama.cpp score references, and their F32 reference: every stories260K
 * 32-value type, the random llama (Q4_K_M: Q4_K and Q6_K; Q2_K: Q2_K and Q3_K) and qwen2 (Q5_K_M).
 */
const ACCURACY_CASES: [string, string][] = [
  ...["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"].map((t): [string, string] => [`stories260K-${t}`, "stories260K-F32"]),
  ["rnd-llama-Q4_K_M", "rnd-llama-F32"], ["rnd-llama-Q2_K", "rnd-llama-F32"], ["rnd-qwen2-Q5_K_M", "rnd-qwen2-F32"],
  ["rnd-qwen3moe-Q4_K_M", "rnd-qwen3moe-F32"], ["rnd-gptoss-MXFP4_MOE", "rnd-gptoss-F32"],
  // gemma3 (sliding-window layers: the story outgrows the window of 32) and phi3 (fused matrices).
  ["rnd-gemma3-Q4_K_M", "rnd-gemma3-F32"], ["rnd-phi3-Q4_K_M", "rnd-phi3-F32"],
];

function accuracyTests(gpu: WebGpuBackend, cases: readonly [string, string][]): void {
  // README of golden/llama-cpp: err(E) <= 1.15 * err(llama.cpp) + 0.01, err = mean |log p - log p of
  // llama.cpp's F32 run|, here over the story's first SCORED_TOKENS positions (RND_SCORED_TOKENS for
  // the random files, WINDOWED_SCORED_TOKENS for those with windows; causal: the same
  // log-probabilities as in the whole text), to keep the software adapter's time short.
  for (const [name, f32Name] of cases) {
    const refs = "golden/llama-cpp/refs";
    describeShared(
      `accuracy of ${name} on WebGPU (${gpu.productArithmetic})`,
      [`models/gguf/${name}.gguf`, `${refs}/${name}.score.story.json`, `${refs}/${f32Name}.score.story.json`],
      ([model, ownRef, f32Ref]) => {
        test("teacher-forced log-probabilities meet the quantized rule against llama.cpp's F32 run", async () => {
          const own = JSON.parse(readFileSync(ownRef!, "utf8")) as { tokens: number[]; logprobs: [number, number][] };
          const f32 = JSON.parse(readFileSync(f32Ref!, "utf8")) as { logprobs: [number, number][] };
          await gpu.prepareExperts(expertTypes(openCheckpoint(model!)));
          const llm = load(gpu, model!, undefined);
          const scored = WINDOWED.test(name) ? WINDOWED_SCORED_TOKENS : name.startsWith("rnd-") ? RND_SCORED_TOKENS : SCORED_TOKENS;
          const tokens = own.tokens.slice(0, scored + 1);
          const mine: number[] = [];
          const rows = (await llm.client.score({ tokens, logits: true })).logits!;
          rows.forEach((logits, i) => {
            if (i + 1 < tokens.length) mine.push(logSoftmaxAt(logits, tokens[i + 1]!));
          });
          expect(mine.length).toBe(scored);
          const errMine = mean(mine.map((lp, p) => Math.abs(lp - f32.logprobs[p]![0])));
          const errLlama = mean(own.logprobs.slice(0, scored).map(([lp], p) => Math.abs(lp - f32.logprobs[p]![0])));
          expect(errMine).toBeLessThanOrEqual(1.15 * errLlama + 0.01);
        }, /^rnd-(qwen|gemma3|phi3)/.test(name) ? 3 * TIMEOUT_MS : TIMEOUT_MS); // 128 rows of a 32,000-49,152-token classifier
      },
    );
  }
}

/** Bitwise invariance of the engine's output on `gpu` (see the file's header), on `model`, with a KV cache of `kvType` (null: the model's default). */
function invarianceTests(gpu: WebGpuBackend, model: string, tok: string | undefined, kvType: KVType | null = null): void {
  /** 10 requests sharing prefixes (8 texts cut at many lengths), every other one sampled with its own seed. */
  const requestsFor = (llm: LLM): GenerateRequest[] => Array.from({ length: 10 }, (_, i) => {
    const ids = llm.encode(`${TEXTS[i % TEXTS.length]} ${TEXTS[(3 * i + 1) % TEXTS.length]}`).slice(0, 3 + ((i * 29) % 50));
    const r: GenerateRequest = { id: `r${i}`, promptTokenIds: ids, maxTokens: 4 + ((i * 37) % 17), temperature: 0 };
    return i % 2 === 1 ? { ...r, temperature: 0.9, topP: 0.95, seed: 1000 + i } : r;
  });
  const tokensOf = (rs: CompletionResult[]) => rs.map((r) => ({ id: r.id, finish: r.finish_reason, tokens: r.token_ids }));

  test("one at a time with the cache off = together with the cache on = preempted and chunked with prefix hits; a repeated run makes no new bind groups or staging buffers", async () => {
    const reference = load(gpu, model, tok, { enablePrefixCaching: false, kvType });
    const requests = requestsFor(reference);
    const alone: CompletionResult[] = [];
    for (const r of requests) alone.push(...(await reference.generate([r])));
    const want = tokensOf(alone);
    expect(new Set(alone.map((r) => r.completion_tokens)).size).toBeGreaterThan(5);

    // Native memory stays flat: the longest request again (past two blocks of 16, and gpt-oss's
    // window of 32) dispatches its layers at every step, its tokens the same, and makes no new bind
    // group or staging buffer.
    const longest = requests.reduce((a, b) => (a.promptTokenIds!.length + a.maxTokens! >= b.promptTokenIds!.length + b.maxTokens! ? a : b));
    const before = { ...gpu.runner.cached };
    const dispatches = gpu.runner.counts.dispatches;
    const [again] = await reference.generate([longest]);
    expect(tokensOf([again!])).toEqual(want.filter((r) => r.id === longest.id));
    expect(gpu.runner.counts.dispatches).toBeGreaterThan(dispatches + again!.completion_tokens * 5);
    expect(gpu.runner.cached).toEqual(before);

    // A request reaches at most 72 positions: 20 blocks of 4 hold one, not all 10 at once. A model with
    // sliding-window layers has several KV cache groups, a block holding one group's layers
    // (kv-groups.ts), and a local group holds only its window and a step's tokens: the pool is what
    // one sequence of 80 positions holds in every group, so that here too requests preempt one another
    // (the watermark admission keeps a block per group for each seat, scheduler.ts).
    const numBlocks = KVCacheGroups.of(openCheckpoint(model).config).blocksPerSequence(80, 4, 12);
    const configs: { label: string; engine: Partial<EngineOptions>; preempts?: boolean }[] = [
      { label: "together, cache on", engine: { enablePrefixCaching: true } },
      {
        label: `${numBlocks} blocks of 4 tokens and 12-token steps, cache on`,
        engine: { enablePrefixCaching: true, blockSize: 4, numBlocks, maxNumBatchedTokens: 12, admission: "watermark" }, preempts: true,
      },
    ];
    for (const { label, engine, preempts } of configs) {
      const llm = load(gpu, model, tok, { ...engine, kvType });
      // Twice: in the second round every prompt's full blocks are in the cache.
      for (let round = 0; round < 2; round++) {
        const got = tokensOf(await llm.generate(requests));
        if (JSON.stringify(got) !== JSON.stringify(want)) throw new Error(`${label}, round ${round}: tokens differ from the requests run alone`);
      }
      const s = llm.stats();
      expect(s.prefixHits).toBeGreaterThan(0);
      expect(s.blocksInUse).toBe(0);
      if (preempts) expect(s.preemptions).toBeGreaterThan(0);
    }
  }, TIMEOUT_MS);
}

await describeGpu("the engine on WebGPU", (gpu) => {
  describeShared("run.c greedy goldens", ["golden/runc-greedy.json"], ([golden]) => {
    test("every case WGSL can run (f32 checkpoints; int8 runq ones are WebAssembly-only), a model's cases run together in one batch, is run.c's completion", async () => {
      const byModel = Map.groupBy(greedyGoldenCases(golden!), (c) => `${c.model}|${c.tokenizer}`);
      let ran = 0;
      for (const cases of byModel.values()) {
        const [model, tok] = [sharedPath(`models/${cases[0]!.model}`), sharedPath(`models/${cases[0]!.tokenizer}`)];
        if (model === null || tok === null) continue;
        if (webgpuRefusal(openCheckpoint(model)) !== null) continue;
        const llm = load(gpu, model, tok);
        expect(llm.info.device).toBe("webgpu");
        // run.c's -n counts positions, the prompt (BOS included) too.
        const requests = cases.map((c, i) => ({ id: `golden-${i}`, prompt: c.prompt, maxTokens: c.steps - llm.encode(c.prompt).length + 1, temperature: 0 }));
        const results = await llm.generate(requests);
        expect(results.map((r) => r.text)).toEqual(cases.map((c) => c.completion));
        ran += cases.length;
      }
      expect(ran).toBeGreaterThanOrEqual(3);
    }, TIMEOUT_MS);
  });

  for (const type of ["F32", "F16", "BF16"]) {
    const file = `models/gguf/${type === "F32" ? "stories260K" : `stories260K-${type}`}.gguf`;
    const ref = `golden/llama-cpp/refs/stories260K-${type}.greedy.p_story.json`;
    describeShared(`llama.cpp greedy on stories260K ${type}`, [file, ref], ([model, refPath]) => {
      test("greedy ids equal llama.cpp's", async () => {
        const want = JSON.parse(readFileSync(refPath!, "utf8")) as { tokens: number[]; generated: number[] };
        const llm = load(gpu, model!, undefined);
        const [r] = await llm.generate([{ promptTokenIds: want.tokens, maxTokens: want.generated.length, temperature: 0 }]);
        // llama.cpp lists the end-of-generation token it stopped on; the engine stops without emitting it.
        const eog = r!.finish_reason === "stop" ? want.generated.slice(0, -1) : want.generated;
        expect(r!.token_ids).toEqual(eog);
      }, TIMEOUT_MS);
    });
  }

  // The random F32 llama and qwen2 (q/k/v biases, neox RoPE, grouped KV heads, tied classifier),
  // qwen3moe (8 experts, 2 per token: routed and grouped on the GPU), gpt-oss (sinks, biases, windows,
  // YaRN, experts with biases and the clamped SwiGLU), gemma3 (sliding-window layers),
  // phi3 (fused matrices) and its LongRoPE variant, rewritten bit for bit by the references'
  // make_refmodels.ts into a temp folder.
  for (const arch of ["llama", "qwen2", "qwen3moe", "gptoss", "gemma3", "phi3", "phi3-longrope"] as const) {
    describeShared(
      `llama.cpp greedy on the random F32 ${arch}`,
      ["tools/llama-ref/make_refmodels.ts", `golden/llama-cpp/refs/rnd-${arch}-F32.greedy.p_fox.json`],
      ([script, refPath]) => {
        test("greedy ids equal llama.cpp's", async () => {
          const dir = mkdtempSync(join(tmpdir(), "pagellm-webgpu-refmodels-"));
          try {
            const made = Bun.spawnSync([process.execPath, script!, dir, `rnd-${arch}`], { stdout: "pipe", stderr: "pipe", timeout: CHILD_PROCESS_MS });
            if (made.exitCode !== 0) throw new Error(`make_refmodels rnd-${arch}: ${made.stderr.toString()}`);
            const want = JSON.parse(readFileSync(refPath!, "utf8")) as { tokens: number[]; generated: number[] };
            const model = join(dir, `rnd-${arch}-F32.gguf`);
            await gpu.prepareExperts(expertTypes(openCheckpoint(model)));
            const llm = load(gpu, model, undefined);
            // The first GREEDY_TOKENS of llama.cpp's ids (all of them on WebAssembly: gguf-llama-cpp.test.ts).
            const wanted = want.generated.slice(0, GREEDY_TOKENS);
            const [r] = await llm.generate([{ promptTokenIds: want.tokens, maxTokens: wanted.length, temperature: 0 }]);
            const eog = r!.finish_reason === "stop" ? wanted.slice(0, -1) : wanted;
            expect(r!.token_ids).toEqual(eog);
          } finally {
            rmSync(dir, { recursive: true, force: true });
          }
        }, arch === "qwen3moe" ? 3 * TIMEOUT_MS : TIMEOUT_MS); // 48 steps of a 49,152-token classifier
      },
    );
  }

  accuracyTests(gpu, ACCURACY_CASES);
  describeShared("batch invariance on WebGPU (stories260K)", [MODELS.stories260K, TOKENIZER], ([model, tok]) => invarianceTests(gpu, model!, tok!));
  describeShared("a constraint on WebGPU (stories260K GGUF)", ["models/gguf/stories260K.gguf"], ([model]) => {
    test("every finished output in the regex's language; the same bits alone and batched", async () => {
      const pattern = "(Once|The|A)( [a-z]{1,8}){2,6}\\.";
      const constraint = { kind: "regex", pattern } as const;
      const llm = load(gpu, model!, undefined);
      const requests: GenerateRequest[] = [0, 1, 2].map((i) => ({
        id: `r${i}`, prompt: "Once upon a time", maxTokens: 24, constraint, ...(i === 0 ? { temperature: 0 } : { temperature: 0.9, seed: i }),
      }));
      const together = await llm.generate(requests);
      expect(together.some((r) => r.finish_reason === "stop")).toBe(true);
      for (const r of together) if (r.finish_reason === "stop") expect(r.text).toMatch(new RegExp(`^${pattern}$`));
      const alone: CompletionResult[] = [];
      for (const r of requests) alone.push(...(await llm.generate([r])));
      const tokens = (rs: CompletionResult[]) => rs.map((r) => ({ id: r.id, finish: r.finish_reason, tokens: r.token_ids }));
      expect(tokens(together)).toEqual(tokens(alone));
    }, TIMEOUT_MS);
  });
  // GGUF models default to an f16 KV cache; q8_0 needs heads of whole 32-value blocks (rnd-llama: 64).
  describeShared("batch invariance on WebGPU, f16 KV cache (stories260K F32 GGUF)", ["models/gguf/stories260K.gguf"], ([model]) => invarianceTests(gpu, model!, undefined));
  describeShared("batch invariance on WebGPU, q8_0 KV cache (a small Q8_0 llama, heads of 32)", ["models/gguf/stories260K.gguf"], ([stories]) => {
    // q8_0 needs heads of whole 32-value blocks: a 2-layer llama of two 32-wide heads on stories260K's vocabulary.
    const dir = mkdtempSync(join(tmpdir(), "pagellm-webgpu-q8kv-"));
    const model = join(dir, "heads32-Q8_0.gguf");
    const config = makeConfig({ dim: 64, hiddenDim: 128, nLayers: 2, nHeads: 2, nKvHeads: 1, vocabSize: 512, seqLen: 256, sharedClassifier: false });
    writeModelGGUF(model, { arch: "llama", name: "heads32", config, mix: "Q8_0", tokenizer: tokenizerMetadata(stories!), seed: 9 });
    afterAll(() => rmSync(dir, { recursive: true, force: true }));
    invarianceTests(gpu, model, undefined, "q8_0");
  });

  describeShared("batch invariance on WebGPU, gpt-oss (sinks, windows of 32, MXFP4 experts; q8_0 KV cache)", ["models/gguf/rnd-gptoss-MXFP4_MOE.gguf"], ([model]) => {
    beforeAll(() => gpu.prepareExperts(expertTypes(openCheckpoint(model!))));
    invarianceTests(gpu, model!, undefined, "q8_0");
  });
  describeShared("batch invariance on WebGPU, a mixture of experts (a small Q8_0 qwen3moe, 8 experts, 2 per token)", ["models/gguf/stories260K.gguf"], ([stories]) => {
    const model = smallQwen3Moe(stories!, "Q8_0");
    beforeAll(() => gpu.prepareExperts(expertTypes(openCheckpoint(model))));
    invarianceTests(gpu, model, undefined);
  });

  describeShared("batch invariance on WebGPU, sliding-window layers (a written gemma3 with a window of 4)", ["models/gguf/stories260K.gguf"], () => {
    const dir = mkdtempSync(join(tmpdir(), "pagellm-webgpu-gemma3-"));
    afterAll(() => rmSync(dir, { recursive: true, force: true }));
    invarianceTests(gpu, writtenModel(dir, "gemma3", "Q4_K_M")!, undefined);
  });

  describeShared("the command line on WebGPU", [MODELS.stories260K, MODELS.stories260K_q80, TOKENIZER], ([model, q80, tok]) => {
    test("--device webgpu runs on the adapter, names it on stderr, and prints what wasm prints (greedy)", () => {
      const args = ["generate", "--model", model!, "--tokenizer", tok!, "--prompt", "Once upon a time", "--max-tokens", "40", "--temperature", "0"];
      const onGpu = runPagellm([...args, "--device", "webgpu"]);
      expect(onGpu.exitCode).toBe(0);
      expect(onGpu.stderr).toContain(`device: webgpu on ${gpu.gpu.adapter.name}`);
      const onWasm = runPagellm([...args, "--device", "wasm"]);
      expect(onWasm.stderr).toContain("device: wasm (requested)");
      expect(onGpu.stdout).toBe(onWasm.stdout);
    }, TIMEOUT_MS);

    test("--gpu-f16: on (where the adapter offers shader-f16) and off say which arithmetic on the device line; a bad value is one line, exit 2", () => {
      const args = ["generate", "--model", sharedPath("models/gguf/stories260K-Q8_0.gguf")!, "--prompt", "Once", "--max-tokens", "4", "--device", "webgpu"];
      const off = runPagellm([...args, "--gpu-f16", "off"]);
      expect(off.exitCode).toBe(0);
      expect(off.stderr).toMatch(/^device: webgpu on .*, products in f32$/m);
      const on = runPagellm([...args, "--gpu-f16", "on"]);
      if (gpu.gpu.adapter.shaderF16) {
        expect(on.exitCode).toBe(0);
        expect(on.stderr).toMatch(/^device: webgpu on .*, quantized products in f16$/m);
      } else {
        expect(on.exitCode).toBe(2);
        expect(on.stderr).toContain("does not offer shader-f16");
      }
      const bad = runPagellm([...args, "--gpu-f16", "half"]);
      expect(bad.exitCode).toBe(2);
      expect(bad.stderr.trim()).toBe(`pagellm: error: --gpu-f16 must be one of auto, on, off, got "half"`);
    }, TIMEOUT_MS);

    test("bench decode --device webgpu: WebGPU beside WebAssembly in one run, the adapter named and labelled software", () => {
      const r = runPagellm([
        "bench", "decode", "--model", model!, "--tokenizer", tok!, "--device", "webgpu", "--threads", "1",
        "--tokens", "8", "--reps", "1", "--warmup", "0", "--stream-mb", "16", "--json",
      ]);
      expect(r.exitCode).toBe(0);
      const report = JSON.parse(r.stdout) as { results: { rows: unknown[]; webgpu: { adapter: string; software: boolean; row: { vsWasm: number }; perStep: { dispatches: number; readBacks: number } } } };
      const g = report.results.webgpu;
      expect(report.results.rows).toHaveLength(1);
      expect(g.adapter).toContain(gpu.gpu.adapter.name);
      expect(g.software).toBe(gpu.gpu.adapter.software);
      expect(g.row.vsWasm).toBeGreaterThan(0);
      // One read-back per decode step, and a whole number of dispatches, several per layer (5 layers).
      expect(g.perStep.readBacks).toBe(1);
      expect(Number.isInteger(g.perStep.dispatches)).toBe(true);
      expect(g.perStep.dispatches).toBeGreaterThan(5 * 5);
    }, TIMEOUT_MS);

    test("LLM.open (src/index.ts): device webgpu runs on the adapter, wasm on WebAssembly, each saying so in llm.device", async () => {
      const { LLM: PublicLLM } = await import("../src/index.ts");
      const onGpu = await PublicLLM.open({ model: model!, tokenizer: tok!, device: "webgpu", engine: { threads: 1 } });
      const onWasm = await PublicLLM.open({ model: model!, tokenizer: tok!, device: "wasm", engine: { threads: 1 } });
      try {
        expect([onGpu.info.device, onWasm.info.device]).toEqual(["webgpu", "wasm"]);
        expect(onGpu.device).toStartWith(`device: webgpu on ${gpu.gpu.adapter.name}`);
        expect(onWasm.device).toBe("device: wasm (requested)");
        const request = { prompt: "Once upon a time", maxTokens: 20, temperature: 0 };
        const [a] = await onGpu.generate([request]);
        const [b] = await onWasm.generate([request]);
        expect(a!.text).toBe(b!.text);
      } finally {
        onGpu.close();
        onWasm.close();
      }
    }, TIMEOUT_MS);

    test("a model WGSL cannot run (llama2.c int8) is refused in one line naming --device wasm, exit 2", () => {
      const r = runPagellm(["generate", "--model", q80!, "--tokenizer", tok!, "--prompt", "Once", "--device", "webgpu"]);
      expect(r.exitCode).toBe(2);
      expect(r.stderr.trim().split("\n")).toHaveLength(1);
      expect(r.stderr).toContain("--device wasm");
    }, PROCESS_TEST_MS);
  });
});

/**
 * A small qwen3moe of `mix` on stories260K's vocabulary, written into a temp folder (removed after
 * the file's tests): 64 wide, 2 layers, heads of 32, 8 experts of 32 with 2 per token.
 */
function smallQwen3Moe(vocab: string, mix: "Q8_0" | "F32"): string {
  const dir = mkdtempSync(join(tmpdir(), "pagellm-webgpu-moe-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const model = join(dir, `qwen3moe-${mix}.gguf`);
  const config = makeConfig({
    dim: 64, hiddenDim: 96, nLayers: 2, nHeads: 4, nKvHeads: 2, headDim: 32, vocabSize: 512, seqLen: 256, sharedClassifier: false,
    ropeStyle: "neox", qkNorm: true,
    experts: { count: 8, used: 2, hiddenDim: 32, gating: "softmax", normalizeWeights: true, biases: false, activation: "swiglu" },
  });
  writeModelGGUF(model, { arch: "qwen3moe", name: "small-qwen3moe", config, mix, tokenizer: tokenizerMetadata(vocab), seed: 11 });
  return model;
}

/**
 * With f16 products, the files whose classifiers are small enough for a software adapter (every
 * stories260K 32-value type, gpt-oss's MXFP4 experts): the K-quant files' 32,000- to 151,936-row
 * classifiers took minutes each here, and every K type's f16 product is compared with the
 * WebAssembly one, step by step, in test/webgpu-forward.test.ts.
 */
const F16_ACCURACY_CASES = ACCURACY_CASES.filter(([name]) => name.startsWith("stories260K-") || name === "rnd-gptoss-MXFP4_MOE");

// The same with f16 products (wgsl-matmul-f16.ts): those files within llama.cpp's accuracy rule,
// and the engine's output bitwise the same at any batching on a Q8_0 model.
await describeGpu("the engine on WebGPU with f16 products", (gpu) => {
  accuracyTests(gpu, F16_ACCURACY_CASES);
  describeShared("batch invariance with f16 products (stories260K Q8_0)", ["models/gguf/stories260K-Q8_0.gguf"], ([model]) => invarianceTests(gpu, model!, undefined));
  describeShared("batch invariance with f16 products, a mixture of experts (a small Q8_0 qwen3moe)", ["models/gguf/stories260K.gguf"], ([stories]) => {
    const model = smallQwen3Moe(stories!, "Q8_0");
    beforeAll(() => gpu.prepareExperts(expertTypes(openCheckpoint(model))));
    invarianceTests(gpu, model, undefined);
  });
}, { half: true });

describeShared("--device without a usable adapter (a Vulkan loader that finds no driver)", [MODELS.stories260K, TOKENIZER], ([model, tok]) => {
  const run = (device: string) => {
    const proc = Bun.spawnSync(["bun", "bin/pagellm", "generate", "--model", model!, "--tokenizer", tok!, "--prompt", "Once", "--max-tokens", "5", "--device", device], {
      cwd: REPO_ROOT, stdout: "pipe", stderr: "pipe", timeout: CHILD_PROCESS_MS,
      env: { ...process.env, PAGELLM_DEBUG: "", VK_ICD_FILENAMES: "/nonexistent-icd.json", VK_DRIVER_FILES: "/nonexistent-icd.json" },
    });
    return { exitCode: proc.exitCode, stdout: proc.stdout.toString(), stderr: proc.stderr.toString() };
  };

  test("--device webgpu: one line saying why, exit code 2", () => {
    const r = run("webgpu");
    expect(r.exitCode).toBe(2);
    expect(r.stderr.trim().split("\n")).toHaveLength(1);
    expect(r.stderr).toMatch(/^pagellm: error: webgpu: /);
  }, PROCESS_TEST_MS);

  test("--device auto: WebAssembly, one stderr line saying why", () => {
    const r = run("auto");
    expect(r.exitCode).toBe(0);
    expect(r.stdout.length).toBeGreaterThan(0);
    expect(r.stderr.split("\n").filter((l) => l.startsWith("device: "))).toEqual([expect.stringMatching(/^device: wasm \(auto: webgpu: /)]);
  }, PROCESS_TEST_MS);
});

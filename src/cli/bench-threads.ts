/**
 * `pagellm bench threads`: prefill, decode and batched decode at 1, 2, 4, ... threads up to the
 * cores the machine has, each a speed-up over one thread next to llama.cpp's at the same counts in
 * the same run. The measuring lives in src/bench/thread-scaling.ts.
 */
import { defineCommand, type ArgsDef } from "citty";
import { availableParallelism } from "node:os";
import { InputError } from "../errors.ts";
import { batchedBenchPeer } from "../bench/peer-batched-bench.ts";
import { makeReport } from "../bench/schema.ts";
import { reportText } from "../bench/bench-report.ts";
import {
  defaultThreadCounts, runThreadScaling, threadScalingNotes, threadScalingTables, TWO_THREAD_FLOOR,
} from "../bench/thread-scaling.ts";
import {
  benchModels, commonArgs, intList, modelArgs, modelNotes, nonNegInt, peerArg, peerOption, posint, repeatOptions, str, streamArg, streamBytes,
} from "./bench-options.ts";
import { benchOutputArgs, startRun, writeOutputs } from "./bench-output.ts";
import { checkKnownOptions } from "./options.ts";

const DEFAULT_TYPES = "F32,Q8_0,Q4_K_M";

export const benchThreadsArgs = {
  ...commonArgs,
  ...benchOutputArgs,
  ...streamArg,
  ...modelArgs(`smollm2-135m, in ${DEFAULT_TYPES}`),
  ...peerArg,
  threads: { type: "string", description: "Thread counts, comma-separated, starting at 1 (default 1, 2, 4, ... up to the cores, and the cores)", valueHint: "n,n" },
  "prompt-tokens": { type: "string", description: "Prefill prompt length (default 512)", valueHint: "n" },
  tokens: { type: "string", description: "Tokens decoded per single-sequence repetition (default 64)", valueHint: "n" },
  seqs: { type: "string", description: "Sequences decoding together in the batch figure (default 16)", valueHint: "n" },
  "batch-prompt-tokens": { type: "string", description: "Prompt length of each batched sequence (default 16)", valueHint: "n" },
  steps: { type: "string", description: "Batched decode steps timed per repetition (default 16)", valueHint: "n" },
  "peer-batched-bench": {
    type: "string",
    description:
      "llama.cpp's llama-batched-bench binary (a build of your own: cmake --build build --target llama-batched-bench): run it on the same file, " +
      "sequences and thread count right after each batch measurement",
    valueHint: "path",
  },
} as const satisfies ArgsDef;

export const benchThreadsCommand = defineCommand({
  meta: {
    name: "threads",
    description:
      "Prefill, single-sequence decode and 16-sequence decode at 1, 2, 4, ... threads up to the cores, as speed-ups over one thread next to " +
      `llama.cpp's (llama-bench, llama-batched-bench) on the same files in the same run (floor: prefill and batch >= ${TWO_THREAD_FLOOR}x at 2 threads, ` +
      "decode's gain >= llama.cpp's) (default 3 repetitions)",
  },
  args: benchThreadsArgs,
  async run({ args, rawArgs }) {
    checkKnownOptions(rawArgs, benchThreadsArgs);
    const run = startRun(args, rawArgs);
    const values = str(args, "model") === undefined && str(args, "type") === undefined ? { ...args, type: DEFAULT_TYPES } : args;
    const models = benchModels(values, rawArgs, ["smollm2-135m"]);
    const threads = intList(args, "threads", defaultThreadCounts(availableParallelism()));
    if (threads[0] !== 1 || threads.some((t, i) => i > 0 && t <= threads[i - 1]!)) {
      throw new InputError(`--threads ${threads.join(",")}: ascending counts starting at 1 (one thread is every speed-up's baseline)`);
    }
    const batchedBin = str(args, "peer-batched-bench");
    const o = {
      ...repeatOptions(args, 3), models, threads, promptTokens: posint(args, "prompt-tokens", 512), decodeTokens: posint(args, "tokens", 64),
      batch: { seqs: posint(args, "seqs", 16), promptTokens: posint(args, "batch-prompt-tokens", 16), steps: posint(args, "steps", 16), warmupSteps: 2 },
      streamBytes: streamBytes(args), seed: nonNegInt(args, "seed", 1),
      peer: peerOption(args, models), batchedPeer: batchedBin === undefined ? null : batchedBenchPeer(batchedBin),
    };
    const r = await runThreadScaling(o);
    const settings = {
      reps: o.reps, warmup: o.warmup, threads, models: models.map((m) => m.label), promptTokens: o.promptTokens, tokens: o.decodeTokens,
      seqs: o.batch.seqs, batchPromptTokens: o.batch.promptTokens, steps: o.batch.steps, seed: o.seed,
    };
    const notes = [...modelNotes(models), ...threadScalingNotes(r, { llamaBench: o.peer !== null, batched: o.batchedPeer !== null })];
    const report = makeReport("threads", run.date, settings, notes, r);
    writeOutputs({ doc: report, text: reportText(report, threadScalingTables(r)) }, run.out);
  },
});

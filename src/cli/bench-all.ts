/**
 * `pagellm bench all [--quick]`: the release set of src/bench/all.ts as one command, one JSON
 * document (--json FILE), one chart file (--chart FILE.svg) and one comparison (--compare).
 */
import { defineCommand, type ArgsDef } from "citty";
import { InputError } from "../errors.ts";
import { isModelMix, MODEL_MIXES, type ModelMix } from "../synth/gguf-model-writer.ts";
import { FULL_PLAN, QUICK_PLAN, runAll, type AllPlan } from "../bench/all.ts";
import { machineInfo, machineLine } from "../bench/machine.ts";
import { benchModel, DEFAULT_MODELS_DIR, parseShape, SHAPE_HELP } from "../bench/bench-models.ts";
import { intList, modelNotes, nonNegInt, str } from "./bench-options.ts";
import { BENCH_SCHEMA, progress, shortDate } from "../bench/bench-report.ts";
import type { AllDocument } from "../bench/schema.ts";
import { benchOutputArgs, startRun, writeOutputs } from "./bench-output.ts";
import { checkKnownOptions, type ParsedValues } from "./options.ts";

const allArgs = {
  ...benchOutputArgs,
  quick: { type: "boolean", description: "The same set on a tiny model with one repetition: seconds, for trying the options (its figures mean nothing)" },
  shape: { type: "string", description: `Shape of the random-weight models: ${SHAPE_HELP} (default ${FULL_PLAN.shape})`, valueHint: "shape" },
  type: { type: "string", description: `Tensor types, comma-separated: ${Object.keys(MODEL_MIXES).join(" | ")} (default ${FULL_PLAN.types.join(",")}; F32 is always run)`, valueHint: "mix,mix" },
  threads: { type: "string", description: `Thread counts, comma-separated (default ${FULL_PLAN.threads.join(",")})`, valueHint: "n,n" },
  seed: { type: "string", description: "Seed of the random prompts (default 1)", valueHint: "n" },
  "models-dir": { type: "string", description: "Cache folder of the random-weight models (default: models/ in pagellm's folder)", valueHint: "dir" },
} as const satisfies ArgsDef;

/** --type, with F32 first (the baseline of the others, and the model of the batch and prefix runs). */
function types(values: ParsedValues, fallback: readonly ModelMix[]): ModelMix[] {
  const raw = str(values, "type");
  const list = raw === undefined ? [...fallback] : raw.split(",").map((s) => s.trim());
  const bad = list.find((m) => !isModelMix(m));
  if (bad !== undefined) throw new InputError(`--type: "${bad}" is not one of ${Object.keys(MODEL_MIXES).join(", ")}`);
  return ["F32", ...(list as ModelMix[]).filter((m) => m !== "F32")];
}

function planOf(values: ParsedValues): AllPlan {
  const base = values.quick === true ? QUICK_PLAN : FULL_PLAN;
  return { ...base, shape: str(values, "shape") ?? base.shape, types: types(values, base.types), threads: intList(values, "threads", base.threads) };
}

export const allCommand = defineCommand({
  meta: {
    name: "all",
    description:
      `The set a release records, in one run: decode and prefill at ${FULL_PLAN.threads.join(" and ")} threads over ${FULL_PLAN.types.join(", ")} ` +
      `on the ${FULL_PLAN.shape} shape next to the bandwidth and compute limits, batched decode at ${FULL_PLAN.batch.seqs.join(", ")} sequences, ` +
      "TTFT against the cached prefix fraction; under 15 minutes on 2 cores",
  },
  args: allArgs,
  async run({ args, rawArgs }) {
    checkKnownOptions(rawArgs, allArgs);
    const run = startRun(args, rawArgs);
    const plan = planOf(args);
    const seed = nonNegInt(args, "seed", 1);
    const modelsDir = str(args, "models-dir") ?? DEFAULT_MODELS_DIR;
    const shape = parseShape(plan.shape);
    const t0 = performance.now();
    const models = plan.types.map((mix) => benchModel({ shape, format: "f32", mix, modelsDir }, progress));
    const notes = modelNotes(models);
    if (args.quick === true) notes.push("--quick: a tiny model and one repetition; these figures only show that the set runs");
    const result = await runAll(plan, models, seed, run.date, notes);
    const elapsedSeconds = (performance.now() - t0) / 1000;
    const elapsed = `${Math.floor(elapsedSeconds / 60)} min ${Math.round(elapsedSeconds % 60)} s`;
    progress(`bench all took ${elapsed}`);
    const machine = machineInfo();
    const doc: AllDocument = {
      schema: BENCH_SCHEMA, bench: "all", date: run.date, machine, elapsedSeconds,
      settings: { quick: args.quick === true, shape: shape.name, types: plan.types, threads: plan.threads, seed },
      notes, reports: result.reports,
    };
    const text = `pagellm bench all — ${machineLine(machine, shortDate(run.date))}\n\n${result.text}\nbench all took ${elapsed}\n`;
    writeOutputs({ doc, text }, run.out);
  },
});

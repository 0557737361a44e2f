/**
 * `pagellm serve` with several models: the models of --models-dir, of each --model NAME=PATH (or
 * --model PATH, named after its file) and of --models-preset, with each model's load options (the
 * command line's, under the preset's "*" table, under the model's own table), put in a
 * ModelRegistry within --memory-budget (default: the memory available at start) and
 * --keep-alive (default ollama's 5m). Every option is checked at start; a model's file is read
 * only when it is first used, so a bad file fails its own requests and nothing else.
 */
import { basename } from "node:path";
import { existsSync } from "node:fs";
import { InputError } from "../errors.ts";
import { availableMemoryBytes } from "../engine/memory-plan.ts";
import type { EngineOptions } from "../engine/engine-options.ts";
import type { LLM } from "../llm/llm.ts";
import { ApiError } from "../server/api-error.ts";
import { SYSTEM_CLOCK, type Clock } from "../server/models/clock.ts";
import { estimateModelBytes } from "../server/models/model-memory.ts";
import { scanModelsDir } from "../server/models/models-dir.ts";
import { readPresets, type ModelPreset } from "../server/models/presets.ts";
import { mib, ModelRegistry, type ModelSource, type RegisteredModel } from "../server/models/registry.ts";
import { keepAliveMs } from "../server/ollama/options.ts";
import { loadLLM, noteChatFormat } from "./load.ts";
import { engineOptions, repeated, type ParsedValues } from "./options.ts";
import { info } from "./output.ts";

/** ollama's default keep_alive. */
export const DEFAULT_KEEP_ALIVE = "5m";

/** Whether the command line asks for several models (else `--model PATH` serves one, as it always has). */
export function servesManyModels(values: ParsedValues, rawArgs: readonly string[]): boolean {
  const models = repeated(rawArgs, "model");
  return typeof values["models-dir"] === "string" || typeof values["models-preset"] === "string" || models.length > 1 || models.some((m) => namedModel(m) !== null);
}

/** NAME=PATH as [NAME, PATH]; null for a plain path (one that exists as given, or has no '=' before its first '/'). */
function namedModel(value: string): [string, string] | null {
  const eq = value.indexOf("=");
  if (eq <= 0 || existsSync(value)) return null;
  const name = value.slice(0, eq);
  return [name, value.slice(eq + 1)];
}

export interface ManyModels {
  registry: ModelRegistry<LLM>;
  /** The budget in words, with where it came from. */
  budgetNote: string;
}

/** The registry of the models the command line names, `maxQueue` requests at most waiting for loads; `clock` for tests. */
export function manyModels(values: ParsedValues, rawArgs: readonly string[], maxQueue: number, clock: Clock = SYSTEM_CLOCK): ManyModels {
  if (typeof values["served-model-name"] === "string") throw new InputError("--served-model-name names the one model of --model PATH; with several models name each: --model NAME=PATH");
  const files = new Map<string, string>();
  const add = (name: string, path: string, from: string) => {
    if (name === "") throw new InputError(`${from}: a model needs a name`);
    if (files.has(name)) throw new InputError(`${from}: two models are named '${name}'`);
    files.set(name, path);
  };
  const dir = values["models-dir"];
  if (typeof dir === "string") {
    if (!existsSync(dir)) throw new InputError(`--models-dir ${dir}: no such folder`);
    for (const m of scanModelsDir(dir, (name) => info(`pagellm serve: note: --models-dir has two models named '${name}'; serving the first`))) add(m.name, m.path, "--models-dir");
  }
  for (const value of repeated(rawArgs, "model")) {
    const named = namedModel(value);
    const [name, path] = named ?? [basename(value).replace(/\.gguf$/i, ""), value];
    if (!existsSync(path)) throw new InputError(`--model ${value}: no such file`);
    add(name, path, `--model ${value}`);
  }
  const presetFile = values["models-preset"];
  const presets = typeof presetFile === "string" ? readPresets(presetFile) : { defaults: {}, models: [] };
  const byName = new Map<string, ModelPreset>();
  for (const p of presets.models) {
    byName.set(p.name, p);
    if (p.model !== undefined && !files.has(p.name)) {
      if (!existsSync(p.model)) throw new InputError(`--models-preset [${p.name}] model ${p.model}: no such file`);
      files.set(p.name, p.model);
    }
    if (!files.has(p.name)) throw new InputError(`--models-preset [${p.name}]: no model of that name in --models-dir or --model, and no 'model' file in its table`);
  }
  if (files.size === 0) throw new InputError("no models to serve: --models-dir holds no GGUF file and no --model or preset names one");

  const models: RegisteredModel<LLM>[] = [...files].map(([name, path]) => {
    const preset = byName.get(name);
    const merged: ParsedValues = { ...values, ...presets.defaults, ...(preset?.options ?? {}), model: path };
    const source = modelSource(merged, name);
    return { name, file: path, aliases: preset?.aliases ?? [], pinned: preset?.pinned ?? false, keepAliveMs: preset?.keepAliveMs, source };
  });
  const budget = budgetOption(values);
  const registry = new ModelRegistry(models, {
    budgetBytes: budget.bytes, defaultKeepAliveMs: keepAliveOption(values), maxWaiting: maxQueue, clock,
    onEvent: (line) => info(`pagellm serve: ${line}`),
  });
  return { registry, budgetNote: budget.note };
}

/** How one model is loaded (with its merged options, checked now) and what it costs. */
function modelSource(values: ParsedValues, name: string): ModelSource<LLM> {
  let engine: EngineOptions;
  try {
    engine = engineOptions(values);
  } catch (e) {
    if (e instanceof InputError) throw new InputError(`model '${name}': ${e.message}`);
    throw e;
  }
  const path = values.model as string;
  let estimate: number | null = null;
  const estimated = () => (estimate ??= estimateModelBytes(path, engine));
  return {
    estimateBytes: estimated,
    async load() {
      const llm = await loadLLM({ ...values, template: values["chat-template"] }, "--chat-template");
      noteChatFormat(llm, "--chat-template");
      return llm;
    },
    // On WebAssembly the engine measures its memories; elsewhere (weights and KV on a GPU) the plan stands.
    bytesOf: (llm) => (llm.capabilities.generate && llm.info.device === "wasm" ? llm.stats().memoryBytes : estimated()),
    async unload(llm) {
      // The disk tier keeps the prefix cache of a model unloaded: what it holds is written first.
      if (llm.capabilities.generate) await llm.flush();
      // close() releases the engine at once when no step computes (none does: the model is idle);
      // closed() is not awaited, it does not resolve for an engine that never ran a step after close.
      llm.close();
    },
  };
}

const UNITS: Record<string, number> = { "": 2 ** 20, k: 2 ** 10, m: 2 ** 20, g: 2 ** 30, t: 2 ** 40 };

/** --memory-budget: MiB, or with a unit (512M, 8G, 1.5T; binary), default the memory available now. */
function budgetOption(values: ParsedValues): { bytes: number; note: string } {
  const raw = values["memory-budget"];
  if (typeof raw !== "string") {
    const bytes = availableMemoryBytes();
    return { bytes, note: `memory budget ${mib(bytes)} (the memory available at start; --memory-budget sets it)` };
  }
  const m = /^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$/i.exec(raw);
  const bytes = m === null ? NaN : Number(m[1]) * UNITS[m[2]!.toLowerCase()]!;
  if (!Number.isFinite(bytes) || bytes <= 0) throw new InputError(`--memory-budget expects a size in MiB or with a unit (512M, 8G), got "${raw}"`);
  return { bytes: Math.floor(bytes), note: `memory budget ${mib(bytes)}` };
}

function keepAliveOption(values: ParsedValues): number {
  const raw = typeof values["keep-alive"] === "string" ? values["keep-alive"] : DEFAULT_KEEP_ALIVE;
  try {
    return keepAliveMs(raw, "--keep-alive")!;
  } catch (e) {
    if (e instanceof ApiError) throw new InputError(`--keep-alive expects a duration ("5m", "1h", "30s"), seconds, or -1 for never; got "${raw}"`);
    throw e;
  }
}

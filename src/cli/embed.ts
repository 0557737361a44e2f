/**
 * `pagellm embed`: the embedding of one input or many (files, a folder, a JSONL of requests), one
 * JSON line per input, `{"id","dimensions","tokens","embedding"}`, written (to stdout or --output)
 * as each group of inputs finishes; --resume skips the ids --output already holds. An input that
 * cannot be embedded is a line `{"id","error"}` naming the option or the JSONL line and field,
 * the others still run, and the command then exits non-zero.
 */
import { defineCommand, type ArgsDef } from "citty";
import { dirname, resolve } from "node:path";
import type { EmbedInput, EmbedOptions, Embedding } from "../embed/embed-types.ts";
import { InputError, RequestFieldError } from "../errors.ts";
import type { LLM } from "../llm/llm.ts";
import { ProgressBar } from "./batch-progress.ts";
import { InterruptedError, onInterrupt } from "./interrupt.ts";
import { jsonlLines, promptFileRequests, promptRequest, promptsDirRequests, readPromptFile, type InputRequest } from "./inputs.ts";
import { loadLLM } from "./load.ts";
import { checkKnownOptions, engineArgs, modelArgs, numberOption, poolingArg, repeated, type ParsedValues } from "./options.ts";
import { info } from "./output.ts";
import { ResultsFile } from "./results-file.ts";

export const embedArgs = {
  ...modelArgs,
  prompt: { type: "string", description: "Text to embed", valueHint: "text" },
  "prompt-file": { type: "string", description: "Embed a file's text, - for stdin (repeatable)", valueHint: "path" },
  "prompts-dir": { type: "string", description: "Embed every *.txt file in a folder", valueHint: "dir" },
  prompts: {
    type: "string",
    description: 'JSONL file, one input per line: {"id","input"|"prompt"|"prompt_file"}; "input" a text or an array of token ids',
    valueHint: "path",
  },
  output: { type: "string", description: "Write each result as a JSON line to this file as soon as it is computed", valueHint: "path" },
  resume: { type: "boolean", description: "Keep the results already in --output and skip their ids" },
  normalize: {
    type: "string",
    description: "As llama.cpp's --embd-normalize: -1 none, 0 max absolute value scaled to int16, 1 taxicab, 2 Euclidean, p > 2 the p-norm (default 2)",
    valueHint: "p",
  },
  dimensions: { type: "string", description: "Keep the first N values of each embedding, then normalize (Matryoshka; at most the model's width)", valueHint: "n" },
  truncate: { type: "boolean", description: "Cut an input longer than the model's context to it instead of refusing it" },
  ...poolingArg,
  ...engineArgs,
} as const satisfies ArgsDef;

export const embedCommand = defineCommand({
  meta: { name: "embed", description: "Embed texts or token ids with an embedding model: one JSON line per input" },
  args: embedArgs,
  async run({ args, rawArgs }) {
    checkKnownOptions(rawArgs, embedArgs);
    await runEmbed(args, rawArgs);
  },
});

/** Inputs given to one LLM.embed call: results are written and progress drawn after each. */
const GROUP_SIZE = 32;

/** An input ready to embed, where it came from (`path:N`, null for an option), or one already refused. */
type EmbedItem = { id: string; input: EmbedInput; where: string | null } | { id: string; error: string };

/** One output line. */
type EmbedLine = { id: string; dimensions: number; tokens: number; embedding: number[] } | { id: string; error: string };

async function runEmbed(values: ParsedValues, rawArgs: readonly string[]): Promise<void> {
  const options = embedOptions(values);
  const items = collectItems(values, rawArgs);
  const output = typeof values.output === "string" ? ResultsFile.open(values.output, values.resume === true) : null;
  if (values.resume === true && output === null) throw new InputError("--resume needs --output");
  const todo = items.filter((item) => !output?.doneIds.has(item.id));
  const llm = await loadLLM(values);
  const errors: string[] = [];
  const write = (line: EmbedLine) => {
    if ("error" in line) errors.push(`${line.id}: ${line.error}`);
    if (output !== null) output.write(line);
    else process.stdout.write(JSON.stringify(line) + "\n");
  };
  const controller = new AbortController();
  const stopListening = onInterrupt(() => controller.abort());
  const progress = new ProgressBar();
  let done = 0;
  let tokens = 0;
  const t0 = performance.now();
  try {
    checkEmbeds(llm);
    for (let at = 0; at < todo.length && !controller.signal.aborted; at += GROUP_SIZE) {
      const group = todo.slice(at, at + GROUP_SIZE);
      for (const line of await embedGroup(llm, group, options)) {
        write(line);
        if (!("error" in line)) tokens += line.tokens;
      }
      done += group.length;
      progress.update({ done, total: todo.length, generatedTokens: tokens, cacheHitRate: 0 });
    }
  } finally {
    stopListening();
    progress.end();
    output?.close();
    if (llm.capabilities.generate) await llm.flush();
    llm.close();
  }
  const seconds = (performance.now() - t0) / 1000;
  if (done > errors.length) info(`embedded ${done - errors.length} inputs, ${tokens} tokens in ${seconds.toFixed(2)} s (${(tokens / Math.max(seconds, 1e-3)).toFixed(1)} tokens/s)`);
  if (controller.signal.aborted) throw new InterruptedError(`interrupted: ${done} of ${todo.length} inputs embedded` + (output ? `, results in ${output.path}` : ""));
  if (errors.length > 0) throw new InputError(errors.length === 1 ? errors[0]! : `${errors.length} inputs were refused (see their results); the first: ${errors[0]}`);
}

/** A model that does not embed is refused before any input runs, saying what it is. */
function checkEmbeds(llm: LLM): void {
  const caps = llm.capabilities;
  if (caps.embed) return;
  if (caps.rerank) throw new InputError("the model is a reranker (pooling rank): use `pagellm rerank`");
  throw new InputError("the model generates text and has no pooling: give --pooling mean, cls or last to embed with it");
}

/**
 * One group's lines, in order. A refused group is run input by input, so that only the inputs at
 * fault are refused (an embedding is the same bits whatever it runs with).
 */
async function embedGroup(llm: LLM, group: readonly EmbedItem[], options: EmbedOptions): Promise<EmbedLine[]> {
  const runnable = group.filter((item) => "input" in item);
  try {
    const result = await llm.embed(runnable.map((item) => item.input), options);
    const byId = new Map(runnable.map((item, i) => [item.id, result.embeddings[i]!]));
    return group.map((item) => ("error" in item ? item : embeddingLine(item.id, byId.get(item.id)!)));
  } catch (e) {
    if (!(e instanceof InputError)) throw e;
    if (runnable.length <= 1) return group.map((item) => ("error" in item ? item : { id: item.id, error: refusal(e, item.where) }));
  }
  const lines: EmbedLine[] = [];
  for (const item of group) lines.push(...(await embedGroup(llm, [item], options)));
  return lines;
}

function embeddingLine(id: string, e: Embedding): EmbedLine {
  return { id, dimensions: e.values.length, tokens: e.tokenCount, embedding: Array.from(e.values) };
}

/** Why LLM.embed refused an input, naming the JSONL line and field (`"input"[3]`) or the option. */
function refusal(e: InputError, where: string | null): string {
  if (!(e instanceof RequestFieldError)) return where === null ? e.message : `${where}: ${e.message}`;
  const inputs = /^inputs?\[\d+\](.*)$/.exec(e.field);
  if (inputs !== null) return where === null ? `the input${inputs[1]} ${e.problem}` : `${where}: "input"${inputs[1]} ${e.problem}`;
  return `--${e.field} ${e.problem}`;
}

function embedOptions(values: ParsedValues): EmbedOptions {
  const normalize = numberOption(values, "normalize", "int", { min: -1 });
  const dimensions = numberOption(values, "dimensions", "posint");
  return {
    ...(normalize === undefined ? {} : { normalize }),
    ...(dimensions === undefined ? {} : { dimensions }),
    ...(values.truncate === true ? { truncate: true } : {}),
  };
}

function collectItems(values: ParsedValues, rawArgs: readonly string[]): EmbedItem[] {
  const given: InputRequest[] = [];
  if (typeof values.prompt === "string") given.push(promptRequest(values.prompt, {}));
  given.push(...promptFileRequests(repeated(rawArgs, "prompt-file"), {}));
  if (typeof values["prompts-dir"] === "string") given.push(...promptsDirRequests(values["prompts-dir"], {}));
  const items: EmbedItem[] = given.map((r) => ("rejected" in r ? r.rejected : textItem(r.request.id!, r.request.prompt ?? "", null)));
  if (typeof values.prompts === "string") items.push(...jsonlItems(values.prompts));
  if (items.length === 0) throw new InputError("nothing to embed: give --prompt, --prompt-file, --prompts-dir or --prompts");
  const ids = new Set<string>();
  for (const item of items) {
    if (ids.has(item.id)) throw new InputError(`two inputs have the id "${item.id}"`);
    ids.add(item.id);
  }
  return items;
}

/** A text input; an empty one is refused (there is nothing to embed). */
function textItem(id: string, text: string, where: string | null, field = "input"): EmbedItem {
  if (text !== "") return { id, input: text, where };
  return { id, error: where === null ? `${id}: the text is empty, there is nothing to embed` : `${where}: "${field}" is empty, there is nothing to embed` };
}

/** The JSONL fields of an embedding request. */
const JSONL_FIELDS: ReadonlySet<string> = new Set(["id", "input", "prompt", "prompt_file"]);

function jsonlItems(path: string): EmbedItem[] {
  const baseDir = dirname(resolve(path));
  return jsonlLines(path).map(({ fields, id, where }): EmbedItem => {
    const unknown = Object.keys(fields).find((k) => !JSONL_FIELDS.has(k));
    if (unknown !== undefined) return { id, error: `${where}: unknown field "${unknown}" (an embedding request has "id" and one of "input", "prompt", "prompt_file")` };
    const given = ["input", "prompt", "prompt_file"].filter((k) => fields[k] !== undefined);
    if (given.length !== 1) return { id, error: `${where}: give one of "input", "prompt" or "prompt_file"${given.length > 1 ? `, not ${given.map((k) => `"${k}"`).join(" and ")}` : ""}` };
    const field = given[0]!;
    const v = fields[field];
    if (field === "prompt_file") {
      if (typeof v !== "string") return { id, error: `${where}: "prompt_file" must be a path` };
      try {
        return textItem(id, readPromptFile(resolve(baseDir, v)), where, field);
      } catch (e) {
        if (e instanceof InputError) return { id, error: `${where}: "prompt_file" ${e.message}` };
        throw e;
      }
    }
    if (typeof v === "string") return textItem(id, v, where, field);
    if (field === "input" && Array.isArray(v)) return tokenItem(id, v, where);
    return { id, error: `${where}: "${field}" must be ${field === "input" ? "a text or an array of token ids" : "a text"}` };
  });
}

function tokenItem(id: string, ids: readonly unknown[], where: string): EmbedItem {
  if (ids.length === 0) return { id, error: `${where}: "input" is an empty array of token ids` };
  const bad = ids.findIndex((t) => typeof t !== "number" || !Number.isInteger(t) || t < 0);
  if (bad >= 0) return { id, error: `${where}: "input"[${bad}] must be a token id (an integer from 0), got ${JSON.stringify(ids[bad])}` };
  return { id, input: ids as number[], where };
}

/**
 * What ollama's listing routes say of a model, read once from its file: the `details` object
 * (format, family, parameter_size as ollama writes it, quantization_level), size, digest,
 * modified_at, `model_info` (the GGUF metadata as ollama sends it: every key but `general.name`
 * and `tokenizer.chat_template`, arrays of more than 5 items empty unless verbose), the tensors,
 * the chat template and the capabilities.
 *
 * The digest is not the sha256 of the whole file (reading gigabytes on the first /api/tags): it is
 * the model's fingerprint that the KV disk tier keys blocks by (kv-disk/fingerprint.ts: sha256 of
 * the header, the tensor table and samples of the weights), as 64 hex digits; an encoder, which has
 * no checkpoint, gets the sha256 of its file's size and header.
 */
import { closeSync, openSync, readSync, statSync } from "node:fs";
import { modelFingerprint } from "../../kv-disk/fingerprint.ts";
import { readGGUF, type GGUFFile, type GGUFValue } from "../../model/gguf.ts";
import { isGGUF, openCheckpoint } from "../../model/load.ts";
import { readGGUFCheckpoint } from "../../model/gguf-checkpoint.ts";
import { isEncoderFile } from "../../model/encoder.ts";
import { filePooling } from "../../model/pooling-type.ts";
import type { Checkpoint } from "../../model/checkpoint.ts";
import type { ModelCapabilities } from "../../embed/embed-types.ts";
import type { LLM } from "../../llm/llm.ts";
import { summarizeModel } from "../../hub/summary.ts";
import { replySetup } from "../../tools/reply-reader.ts";
import { toolCallFormat } from "../../tools/tool-format.ts";

/** ollama's ModelDetails. */
export interface OllamaDetails {
  parent_model: string;
  format: string;
  family: string;
  families: string[];
  parameter_size: string;
  quantization_level: string;
}

export type OllamaCapability = "completion" | "tools" | "thinking" | "embedding";

export interface ModelFacts {
  details: OllamaDetails;
  /** Bytes of the model's file. */
  size: number;
  digest: string;
  /** The file's modification time, ISO 8601. */
  modifiedAt: string;
  architecture: string;
  capabilities: OllamaCapability[];
  /** It scores documents (pooling rank): /v1/rerank's, not one of ollama's capabilities. */
  reranks: boolean;
  /** The Jinja chat template the model is served with ("" for a built-in format). */
  template: string;
  /** GGUF metadata for model_info; `verbose` keeps the long arrays. */
  modelInfo(verbose: boolean): Record<string, unknown>;
  tensors: { name: string; type: string; shape: number[] }[];
}

/** Arrays longer than this are sent empty unless verbose, as ollama does (the vocabulary, the merges). */
const MAX_TERSE_ARRAY = 5;

const factsOf = new WeakMap<LLM, ModelFacts>();
const fileFactsOf = new Map<string, { mtimeMs: number; facts: ModelFacts }>();

/** The facts of a loaded model, read from its file on first use. */
export function modelFacts(llm: LLM): ModelFacts {
  let facts = factsOf.get(llm);
  if (facts === undefined) factsOf.set(llm, (facts = readFacts(llm.files[0]!, llm)));
  return facts;
}

/**
 * The facts of a model not loaded (a server of several models lists them all), from its file
 * alone: its own chat template, and what it can do as its header says (an encoder or a pooling
 * decoder embeds; a decoder generates). Read again when the file changes.
 */
export function fileFacts(path: string): ModelFacts {
  const mtimeMs = statSync(path).mtimeMs;
  const known = fileFactsOf.get(path);
  if (known !== undefined && known.mtimeMs === mtimeMs) return known.facts;
  const facts = readFacts(path, null);
  fileFactsOf.set(path, { mtimeMs, facts });
  return facts;
}

function readFacts(path: string, llm: LLM | null): ModelFacts {
  const stat = statSync(path);
  const gguf = isGGUF(path) ? readGGUF(path) : null;
  const summary = gguf === null ? null : summarizeModel(path, gguf);
  const architecture = summary?.architecture ?? "llama";
  const parameters = summary?.parameters ?? 0;
  const own = gguf?.has("tokenizer.chat_template") === true ? gguf.getString("tokenizer.chat_template") : "";
  const template = llm === null ? own : llm.chatFormat.kind === "jinja" ? llm.chatFormat.template.text : "";
  const served = llm?.capabilities ?? fileCapabilities(gguf, architecture);
  return {
    details: {
      parent_model: "", format: gguf === null ? "llama2c" : "gguf", family: architecture, families: [architecture],
      parameter_size: humanNumber(parameters), quantization_level: summary?.quantization ?? "F32",
    },
    size: stat.size,
    digest: digestOf(served.generate ? (llm?.checkpoint ?? (gguf === null ? openCheckpoint(path) : readGGUFCheckpoint(path, gguf))) : null, path, gguf),
    modifiedAt: stat.mtime.toISOString(),
    architecture,
    capabilities: capabilitiesOf(served, template),
    reranks: served.rerank,
    template,
    modelInfo: (verbose) => (gguf === null ? { "general.architecture": architecture } : ggufModelInfo(gguf, parameters, verbose)),
    tensors: gguf === null ? [] : gguf.tensors.map((t) => ({ name: t.name, type: t.typeName, shape: [...t.dims] })),
  };
}

/** What a model's file says it can do, before it is loaded (its pooling as the file gives it). */
function fileCapabilities(gguf: GGUFFile | null, arch: string): Pick<ModelCapabilities, "generate" | "embed" | "rerank"> {
  if (gguf === null) return { generate: true, embed: false, rerank: false };
  const encoder = isEncoderFile(gguf);
  const pooling = encoder ? null : filePooling(gguf, arch);
  const rank = pooling === "rank";
  return { generate: !encoder, embed: (encoder && !rank) || (pooling !== null && !rank), rerank: rank };
}

/**
 * What ollama lists: completion for a model that generates, tools when its template has a call
 * format it was trained for (any generating model takes tools here, through the generic format,
 * but apps offer tools where this is listed), thinking when its replies carry reasoning, embedding.
 */
function capabilitiesOf(served: Pick<ModelCapabilities, "generate" | "embed">, template: string): OllamaCapability[] {
  const caps: OllamaCapability[] = [];
  if (served.generate) {
    caps.push("completion");
    const format = toolCallFormat(template === "" ? null : template);
    if (template !== "" && (format.name !== "generic" || format.templateRendersTools)) caps.push("tools");
    if (replySetup(template === "" ? null : template, "", null) !== null) caps.push("thinking");
  }
  if (served.embed) caps.push("embedding");
  return caps;
}

/** The GGUF metadata as ollama's model_info: scalars as numbers, long arrays empty unless verbose. */
function ggufModelInfo(gguf: GGUFFile, parameters: number, verbose: boolean): Record<string, unknown> {
  const info: Record<string, unknown> = {};
  for (const [key, value] of gguf.metadata) {
    if (key === "general.name" || key === "tokenizer.chat_template") continue;
    info[key] = jsonValue(value, verbose);
  }
  info["general.parameter_count"] ??= parameters;
  return info;
}

function jsonValue(value: GGUFValue, verbose: boolean): unknown {
  switch (value.type) {
    case "u64":
    case "i64":
      return Number(value.value);
    case "array": {
      const array = value.value;
      const length = array.itemType === "string" ? array.items.length : array.items.length;
      if (!verbose && length > MAX_TERSE_ARRAY) return [];
      if (array.itemType === "string") return Array.from({ length }, (_, i) => array.items.get(i));
      if (array.itemType === "bool") return Array.from(array.items, (b) => b !== 0);
      return Array.from(array.items as ArrayLike<number | bigint>, (n) => Number(n));
    }
    default:
      return value.value;
  }
}

/** ollama's format.HumanNumber: 135M as "134.52M", 7.6 billion as "7.6B", 260 thousand as "260K". */
export function humanNumber(n: number): string {
  const scaled = (unit: number, suffix: string, decimals: number) => {
    const x = n / unit;
    return `${Number.isInteger(x) ? x.toFixed(0) : x.toFixed(decimals)}${suffix}`;
  };
  if (n >= 1e9) return scaled(1e9, "B", 1);
  if (n >= 1e6) return scaled(1e6, "M", 2);
  if (n >= 1e3) return `${(n / 1e3).toFixed(0)}K`;
  return String(n);
}

function digestOf(checkpoint: Checkpoint | null, path: string, gguf: GGUFFile | null): string {
  if (checkpoint !== null) return Buffer.from(modelFingerprint(checkpoint)).toString("hex");
  const hasher = new Bun.CryptoHasher("sha256");
  const fd = openSync(path, "r");
  try {
    const size = statSync(path).size;
    const header = Buffer.alloc(Math.min(size, gguf?.dataOffset ?? size, 64 << 20));
    readSync(fd, header, 0, header.length, 0);
    hasher.update(String(size));
    hasher.update(header);
  } finally {
    closeSync(fd);
  }
  return hasher.digest("hex");
}

/**
 * `--models-preset FILE`: per-model options in TOML (read by Bun's own TOML parser), one table per
 * model named as requests name it, and an optional `["*"]` table of defaults for every model:
 *
 *   ["*"]
 *   ctx-size = 2048
 *
 *   [stories]
 *   model = "stories260K-Q8_0.gguf"      # relative to the preset's folder; optional for a model
 *                                        # --models-dir or --model NAME=PATH already names
 *   aliases = ["tiny", "storyteller"]
 *   pinned = true                        # loaded at start, never unloaded for memory or keep_alive
 *   keep-alive = "10m"                   # ollama's durations; -1 never; 0 as soon as idle
 *   ctx-size = 1024
 *   kv-type = "q8_0"
 *   threads = 2
 *
 *   ["org/repo:Q4_K_M"]                  # a name with '/', ':' or '.' is quoted
 *   chat-template = "chatml"
 *
 * The load options are `pagellm serve`'s own, by the same names and read the same way
 * (PRESET_LOAD_OPTIONS); anything else is refused at start with the table and key named.
 */
import { existsSync, readFileSync } from "node:fs";
import { dirname, isAbsolute, join } from "node:path";
import { InputError } from "../../errors.ts";
import { keepAliveMs } from "../ollama/options.ts";
import { ApiError } from "../api-error.ts";

/** The serve options a preset may set per model (their values are read as on the command line). */
export const PRESET_LOAD_OPTIONS = [
  "ctx-size", "kv-type", "kv-cache-mb", "num-blocks", "block-size", "threads", "chat-template", "chat-template-kwargs", "pooling", "device",
  "max-num-seqs", "max-num-batched-tokens", "tokenizer", "prefix-cache",
] as const;

/** Options whose value may be a file, resolved against the preset's folder when it names one there. */
const PATH_OPTIONS = new Set(["model", "tokenizer", "chat-template"]);

export interface ModelPreset {
  name: string;
  /** The model's file, when the preset names it. */
  model?: string;
  aliases: string[];
  pinned: boolean;
  /** keep_alive in ms (negative: never); absent: the server's. */
  keepAliveMs?: number;
  /** Load options by their command-line names, as the command line gives them (text; booleans as booleans). */
  options: Record<string, string | boolean>;
}

export interface Presets {
  /** The `["*"]` table: options for every model (a model's own override them). */
  defaults: Record<string, string | boolean>;
  models: ModelPreset[];
}

/** The presets in `file` (InputError naming the file, the table and the key for anything wrong). */
export function readPresets(file: string): Presets {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (e) {
    throw new InputError(`--models-preset ${file}: cannot read it: ${(e as Error).message}`);
  }
  let parsed: unknown;
  try {
    parsed = Bun.TOML.parse(text);
  } catch (e) {
    throw new InputError(`--models-preset ${file}: not valid TOML: ${(e as Error).message.split("\n")[0]}`);
  }
  const base = dirname(file);
  const defaults: Record<string, string | boolean> = {};
  const models: ModelPreset[] = [];
  for (const [name, table] of Object.entries(parsed as Record<string, unknown>)) {
    const where = `--models-preset ${file}: [${JSON.stringify(name)}]`;
    if (!isTable(table)) throw new InputError(`${where}: each model is a table ([name] and its keys); got a bare key`);
    const preset = readTable(table, where, base);
    if (name === "*") {
      if (preset.model !== undefined || preset.aliases.length > 0 || preset.pinned || preset.keepAliveMs !== undefined) {
        throw new InputError(`${where}: the defaults table takes load options only (not model, aliases, pinned, keep-alive)`);
      }
      Object.assign(defaults, preset.options);
    } else {
      models.push({ name, ...preset });
    }
  }
  return { defaults, models };
}

function isTable(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v) && !(v instanceof Date);
}

function readTable(table: Record<string, unknown>, where: string, base: string): Omit<ModelPreset, "name"> {
  const out: Omit<ModelPreset, "name"> = { aliases: [], pinned: false, options: {} };
  for (const [key, value] of Object.entries(table)) {
    const at = `${where} ${key}`;
    switch (key) {
      case "model":
        out.model = resolvePath(text(value, at), base);
        break;
      case "aliases":
      case "alias":
        out.aliases = typeof value === "string" ? [value] : Array.isArray(value) && value.every((a) => typeof a === "string" && a !== "") ? (value as string[]) : fail(at, "a name or an array of names");
        break;
      case "pinned":
        out.pinned = typeof value === "boolean" ? value : fail(at, "true or false");
        break;
      case "keep-alive":
        out.keepAliveMs = presetKeepAlive(value, at);
        break;
      default: {
        if (!(PRESET_LOAD_OPTIONS as readonly string[]).includes(key)) {
          throw new InputError(`${at}: not a preset key (model, aliases, pinned, keep-alive, ${PRESET_LOAD_OPTIONS.join(", ")})`);
        }
        if (key === "prefix-cache") out.options[key] = typeof value === "boolean" ? value : fail(at, "true or false");
        else if (key === "chat-template-kwargs") out.options[key] = isTable(value) ? JSON.stringify(value) : text(value, at);
        else out.options[key] = PATH_OPTIONS.has(key) ? resolvePath(text(value, at), base) : text(value, at);
      }
    }
  }
  return out;
}

/** A scalar as the command line would give it. */
function text(v: unknown, at: string): string {
  if (typeof v === "string") return v;
  if (typeof v === "number" && Number.isFinite(v)) return String(v);
  return fail(at, "a string or a number");
}

function fail(at: string, expected: string): never {
  throw new InputError(`${at}: expects ${expected}`);
}

function presetKeepAlive(v: unknown, at: string): number {
  try {
    const ms = keepAliveMs(typeof v === "number" || typeof v === "string" ? v : undefined, "keep-alive");
    return ms ?? fail(at, 'a duration ("5m", "1h", "-1") or a number of seconds');
  } catch (e) {
    if (e instanceof ApiError) fail(at, 'a duration ("5m", "1h", "-1") or a number of seconds');
    throw e;
  }
}

/** A relative path that names a file beside the preset, as that file; anything else (a built-in name, a missing file) as given. */
function resolvePath(value: string, base: string): string {
  if (isAbsolute(value)) return value;
  const beside = join(base, value);
  return existsSync(beside) ? beside : value;
}

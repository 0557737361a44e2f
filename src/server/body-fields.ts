/**
 * Reads a request body's fields with their types and ranges checked: a missing or ill-typed
 * field is a 400 naming it. Every field a handler reads is marked; `rejectUnknown` then turns any
 * other field into a 400 (a client must never believe a field it sent was applied).
 *
 * A body nested deeper than MAX_JSON_DEPTH is refused before it is parsed, by a scan that does not
 * recurse: nothing that later walks the value (a check, an error message that quotes it) can run
 * out of stack.
 */
import { topLevelNumberText } from "../util/json-number-text.ts";
import { ApiError, excerpt } from "./api-error.ts";

/** Deepest nesting of arrays and objects a body may have (a request of any real shape is far below it). */
export const MAX_JSON_DEPTH = 128;

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

export interface NumberRange {
  min?: number;
  max?: number;
  /** min itself is excluded. */
  minOpen?: boolean;
  integer?: boolean;
}

export class BodyFields {
  private readonly read = new Set<string>();

  /** `text`: the JSON the body was parsed from, for the numbers whose digits a double loses (numberText). */
  constructor(readonly body: Record<string, Json>, private readonly text: string | null = null) {}

  /** Parse a request's text as a JSON object: 400 for malformed JSON or anything else at the top. */
  static parse(text: string): BodyFields {
    if (jsonDepthExceeds(text, MAX_JSON_DEPTH)) {
      throw new ApiError(400, `request body nests arrays and objects deeper than ${MAX_JSON_DEPTH} levels`, "invalid_request_error", null, "invalid_json");
    }
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (e) {
      throw new ApiError(400, `request body is not valid JSON: ${(e as Error).message}`, "invalid_request_error", null, "invalid_json");
    }
    if (typeof value !== "object" || value === null || Array.isArray(value)) {
      throw new ApiError(400, "request body must be a JSON object", "invalid_request_error", null, "invalid_json");
    }
    return new BodyFields(value as Record<string, Json>, text);
  }

  /** The JSON text of the number field `name` as the body wrote it (for a check the parsed double cannot make), or null. */
  numberText(name: string): string | null {
    return this.text === null || typeof this.body[name] !== "number" ? null : topLevelNumberText(this.text, name);
  }

  /** The raw value of `name` (undefined when absent or null), marking it read. */
  raw(name: string): Json | undefined {
    this.read.add(name);
    const v = this.body[name];
    return v === null ? undefined : v;
  }

  string(name: string): string | undefined {
    const v = this.raw(name);
    if (v === undefined || typeof v === "string") return v;
    throw ApiError.badField(name, `'${name}' must be a string`);
  }

  boolean(name: string): boolean | undefined {
    const v = this.raw(name);
    if (v === undefined || typeof v === "boolean") return v;
    throw ApiError.badField(name, `'${name}' must be a boolean`);
  }

  number(name: string, range: NumberRange = {}): number | undefined {
    const v = this.raw(name);
    if (v === undefined) return undefined;
    return checkNumber(name, v, range);
  }

  /** A JSON object (not an array), or undefined when absent or null. */
  object(name: string): { [key: string]: Json } | undefined {
    const v = this.raw(name);
    if (v === undefined || isObject(v)) return v;
    throw ApiError.badField(name, `'${name}' must be an object`);
  }

  /** An object whose values are all strings (OpenAI's `metadata`): a 400 naming the first other value. */
  stringMap(name: string): Record<string, string> | undefined {
    const v = this.object(name);
    if (v === undefined) return undefined;
    for (const [key, value] of Object.entries(v)) {
      if (typeof value !== "string") throw ApiError.badField(`${name}.${excerpt(key)}`, `'${name}.${excerpt(key)}' must be a string`);
    }
    return v as Record<string, string>;
  }

  /** A field that must be absent, null, or equal to `neutral` (e.g. a penalty of 0): else a 400. */
  onlyNeutral(name: string, what: string, isNeutral: (v: Json) => boolean): void {
    const v = this.raw(name);
    if (v !== undefined && !isNeutral(v)) throw ApiError.unsupported(name, what);
  }

  /** 400 naming the first field no reader asked for. */
  rejectUnknown(): void {
    for (const name of Object.keys(this.body)) {
      if (!this.read.has(name)) throw ApiError.unsupported(excerpt(name), `the field '${excerpt(name)}'`);
    }
  }
}

/** Whether `v` is a JSON object (not an array, not null). */
export function isObject(v: Json | undefined): v is { [key: string]: Json } {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** `v` as a number within `range`, else a 400 naming `name`. */
export function checkNumber(name: string, v: Json, range: NumberRange = {}): number {
  const { min, max, minOpen, integer } = range;
  if (typeof v !== "number" || !Number.isFinite(v) || (integer && !Number.isInteger(v))) {
    throw ApiError.badField(name, `'${name}' must be ${integer ? "an integer" : "a number"}`);
  }
  const belowMin = min !== undefined && (minOpen ? v <= min : v < min);
  if (belowMin || (max !== undefined && v > max)) {
    const lo = min === undefined ? "" : `${minOpen ? "above" : "at least"} ${min}`;
    const hi = max === undefined ? "" : `at most ${max}`;
    throw ApiError.badField(name, `'${name}' must be ${[lo, hi].filter(Boolean).join(" and ")}, got ${v}`);
  }
  return v;
}

/**
 * Whether JSON text nests arrays and objects deeper than `limit`: one pass over the characters,
 * brackets inside strings skipped, no recursion (the text need not be valid JSON: the parser then
 * says what is wrong with it).
 */
export function jsonDepthExceeds(text: string, limit: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++; // a backslash escapes the next character
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) {
      if (++depth > limit) return true;
    } else if (c === 0x5d || c === 0x7d) depth--;
  }
  return false;
}

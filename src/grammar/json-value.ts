/**
 * JSON values as the schema compiler and MaskBench need them, which `JSON.parse` loses: object keys
 * in their written order (a JavaScript object puts "10" before "b"), numbers as written (an
 * integer beyond 2^53, `1.0` against `1`), and Python's `json.dumps(v, ensure_ascii=False)` text
 * (separators ", " and ": ", floats in Python's repr). Duplicate keys keep the first position and
 * the last value, as Python's dict does.
 */
import { GrammarError } from "../errors.ts";
import { pythonJsonQuote } from "./json-strings.ts";

export type JsonValue = null | boolean | JsonNumber | string | JsonValue[] | JsonObject;

/** A number with its source text. */
export class JsonNumber {
  constructor(readonly text: string) {}
  get value(): number {
    return Number(this.text);
  }
  /** Written without a fraction or exponent (Python reads it as an int). */
  get isIntegerLiteral(): boolean {
    return !/[.eE]/.test(this.text);
  }
}

/** An object: its entries in order. */
export class JsonObject {
  readonly entries: [string, JsonValue][] = [];
  private readonly index = new Map<string, number>();

  set(key: string, value: JsonValue): void {
    const at = this.index.get(key);
    if (at !== undefined) this.entries[at]![1] = value;
    else {
      this.index.set(key, this.entries.length);
      this.entries.push([key, value]);
    }
  }
  get(key: string): JsonValue | undefined {
    const at = this.index.get(key);
    return at === undefined ? undefined : this.entries[at]![1];
  }
  has(key: string): boolean {
    return this.index.has(key);
  }
  get keys(): string[] {
    return this.entries.map(([k]) => k);
  }
}

export function isObject(v: JsonValue | undefined): v is JsonObject {
  return v instanceof JsonObject;
}

/** Parse JSON text, keeping key order and number text. Throws GrammarError naming the offset. */
export function parseJsonText(text: string, what = "JSON"): JsonValue {
  const p = new JsonTextParser(text, what);
  p.space();
  const v = p.value(0);
  p.space();
  if (p.pos < text.length) p.fail("unexpected text after the value");
  return v;
}

const MAX_DEPTH = 512;

class JsonTextParser {
  pos = 0;
  constructor(private readonly text: string, private readonly what: string) {}

  fail(problem: string): never {
    throw new GrammarError(`${this.what} is not valid JSON: ${problem} at offset ${this.pos}`);
  }

  space(): void {
    while (this.pos < this.text.length && " \t\n\r".includes(this.text[this.pos]!)) this.pos++;
  }

  value(depth: number): JsonValue {
    if (depth > MAX_DEPTH) this.fail(`nesting deeper than ${MAX_DEPTH}`);
    const c = this.text[this.pos];
    if (c === "{") return this.object(depth);
    if (c === "[") return this.array(depth);
    if (c === '"') return this.string();
    if (c === "-" || (c !== undefined && c >= "0" && c <= "9")) return this.number();
    for (const [word, v] of [["true", true], ["false", false], ["null", null]] as const) {
      if (this.text.startsWith(word, this.pos)) {
        this.pos += word.length;
        return v;
      }
    }
    return this.fail(c === undefined ? "unexpected end" : `unexpected ${JSON.stringify(c)}`);
  }

  private object(depth: number): JsonObject {
    const obj = new JsonObject();
    this.pos++;
    this.space();
    if (this.text[this.pos] === "}") {
      this.pos++;
      return obj;
    }
    for (;;) {
      this.space();
      if (this.text[this.pos] !== '"') this.fail("expected a property name");
      const key = this.string();
      this.space();
      if (this.text[this.pos] !== ":") this.fail('expected ":"');
      this.pos++;
      this.space();
      obj.set(key, this.value(depth + 1));
      this.space();
      const c = this.text[this.pos++];
      if (c === "}") return obj;
      if (c !== ",") this.fail('expected "," or "}"');
    }
  }

  private array(depth: number): JsonValue[] {
    const out: JsonValue[] = [];
    this.pos++;
    this.space();
    if (this.text[this.pos] === "]") {
      this.pos++;
      return out;
    }
    for (;;) {
      this.space();
      out.push(this.value(depth + 1));
      this.space();
      const c = this.text[this.pos++];
      if (c === "]") return out;
      if (c !== ",") this.fail('expected "," or "]"');
    }
  }

  private string(): string {
    const m = /^"(?:[^"\\\u0000-\u001f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"/.exec(this.text.slice(this.pos, this.pos + 1_000_000));
    if (m === null) this.fail("a bad string");
    this.pos += m[0].length;
    return JSON.parse(m[0]) as string;
  }

  private number(): JsonNumber {
    const m = /^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?/.exec(this.text.slice(this.pos, this.pos + 4096));
    if (m === null) this.fail("a bad number");
    this.pos += m[0].length;
    return new JsonNumber(m[0]);
  }
}

/** A JavaScript value (from JSON.parse or built in code) as a JsonValue, in its own key order. */
export function fromJavaScript(v: unknown, what = "value"): JsonValue {
  if (v instanceof JsonObject || v instanceof JsonNumber) return v;
  if (v === null || typeof v === "boolean" || typeof v === "string") return v;
  if (typeof v === "number") {
    if (!Number.isFinite(v)) throw new GrammarError(`${what}: ${v} is not a JSON number`);
    return new JsonNumber(String(v));
  }
  if (Array.isArray(v)) return v.map((x) => fromJavaScript(x, what));
  if (typeof v === "object") {
    const obj = new JsonObject();
    for (const [k, x] of Object.entries(v as Record<string, unknown>)) obj.set(k, fromJavaScript(x, what));
    return obj;
  }
  throw new GrammarError(`${what}: a ${typeof v} is not a JSON value`);
}

/** Python's repr of a float (what json.dumps writes): shortest round-trip digits, exponent outside 1e-4..1e16. */
export function pythonFloatRepr(x: number): string {
  if (x === 0) return Object.is(x, -0) ? "-0.0" : "0.0";
  const [mantissa, expText] = Math.abs(x).toExponential().split("e") as [string, string];
  const digits = mantissa.replace(".", "");
  const exp = Number(expText);
  const sign = x < 0 ? "-" : "";
  if (exp < -4 || exp >= 16) {
    const m = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
    return `${sign}${m}e${exp < 0 ? "-" : "+"}${String(Math.abs(exp)).padStart(2, "0")}`;
  }
  if (exp < 0) return `${sign}0.${"0".repeat(-exp - 1)}${digits}`;
  const intPart = digits.slice(0, exp + 1).padEnd(exp + 1, "0");
  const frac = digits.slice(exp + 1);
  return `${sign}${intPart}.${frac === "" ? "0" : frac}`;
}

/** The number as Python writes the value json.loads made of it (int stays exact, float is repr'd). */
export function pythonNumberText(n: JsonNumber): string {
  if (n.isIntegerLiteral) return BigInt(n.text).toString();
  const v = n.value;
  // Python's json.dumps writes inf as "Infinity" (a huge literal like 1e999 parses to inf).
  if (!Number.isFinite(v)) return v > 0 ? "Infinity" : "-Infinity";
  return pythonFloatRepr(v);
}

/** `json.dumps(v, indent=None, ensure_ascii=False)`. */
export function pythonJsonDumps(v: JsonValue): string {
  if (v === null) return "null";
  if (v === true) return "true";
  if (v === false) return "false";
  if (typeof v === "string") return pythonJsonQuote(v);
  if (v instanceof JsonNumber) return pythonNumberText(v);
  if (Array.isArray(v)) return `[${v.map(pythonJsonDumps).join(", ")}]`;
  return `{${v.entries.map(([k, x]) => `${pythonJsonQuote(k)}: ${pythonJsonDumps(x)}`).join(", ")}}`;
}

/**
 * Qwen3-Coder's XML arguments as a grammar (after llama.cpp's grammar for the format): one
 *
 *   <parameter=NAME>\nVALUE\n</parameter>
 *
 * per parameter, in the schema's order, each optional one optional, none the schema does not
 * declare (but required ones it does not). A VALUE read as text (a `string` schema) is any text
 * without `</parameter>` in it, held to the schema's length, pattern, format, enum and const; the
 * opening tag, the text and the closing tag are one lexeme, so the first `</parameter>` ends it
 * exactly as the format's parser reads it. Any other VALUE is a JSON value by its schema (the
 * parser reads it as JSON). Text values are not bounded otherwise: code (what Qwen3-Coder writes
 * there) has long runs of whitespace, and a value is no more bounded than a JSON string is.
 */
import { GrammarError } from "../errors.ts";
import type { CfgBuilder } from "./cfg.ts";
import { ANY_CHAR, minus, utf8Expr } from "./code-set.ts";
import { EMPTY, EPSILON, INFINITE, type ExprPool } from "./expr.ts";
import { jsonSchemaStringText, jsonSchemaSymbols } from "./json-schema.ts";
import type { JsonValue } from "./json-value.ts";

/** One parameter (the shape of tools/call-syntax.ts's CallParameter). */
export interface XmlParameterShape {
  readonly name: string;
  /** `<parameter=NAME>\n`. */
  readonly begin: string;
  /** `\n</parameter>`: its text after the leading whitespace may not appear in a text value. */
  readonly end: string;
  readonly required: boolean;
  readonly value: "text" | "json";
  /** The parameter's schema in the arguments schema (a JSON pointer); null: free text. */
  readonly schemaAt: string | null;
}

const utf8 = new TextEncoder();

/**
 * The symbols of a call's parameters, each followed by `ws` (optional whitespace), for the
 * function whose arguments schema is `schema`. `text(s)` is a literal whose whitespace runs are
 * `ws`; `maxWhitespace` bounds whitespace inside JSON values.
 */
export function xmlParameterSymbols(
  b: CfgBuilder, schema: JsonValue, parameters: readonly XmlParameterShape[], ws: number, text: (s: string) => number[], maxWhitespace: number,
): number[] {
  const pool = b.pool;
  const out: number[] = [];
  for (const p of parameters) {
    let symbols: number[];
    if (p.value === "json") {
      symbols = [b.terminal(pool.literal(utf8.encode(p.begin.trimEnd()))), ...jsonSchemaSymbols(b, schema, { maxWhitespace }, p.schemaAt ?? "#"), ...text(p.end)];
    } else {
      const value = textValue(b, schema, p);
      if (value === EMPTY || pool.isEmpty(value)) throw new GrammarError(`parameter ${p.name}: its schema allows no text`);
      symbols = [b.terminal(pool.seq([pool.literal(utf8.encode(p.begin)), value, pool.literal(utf8.encode(p.end))]))];
    }
    if (p.required) out.push(...symbols, ws);
    else out.push(b.rule(`parameter ${p.name}`, [[], [...symbols, ws]]));
  }
  return out;
}

/** A text value: no `</parameter>` in it, and a string its schema allows. */
function textValue(b: CfgBuilder, schema: JsonValue, p: XmlParameterShape): number {
  const pool = b.pool;
  const free = textWithout(pool, p.end.trimStart());
  if (p.schemaAt === null) return free;
  const allowed = jsonSchemaStringText(b, schema, p.schemaAt);
  // An unconstrained string schema adds nothing (and no And to the lexeme).
  if (allowed === pool.repeat(utf8Expr(pool, ANY_CHAR), 0, INFINITE)) return free;
  return pool.and([free, allowed]);
}

/**
 * Every text of whole UTF-8 characters that does not contain `forbidden` (ASCII, its first
 * character nowhere else in it, as `</parameter>`), without And/Not. With s = forbidden:
 *
 *   ( [^s0] | D* s0 mismatch(1) )* D*      D = s0 (a proper prefix of s1..s(n-2))
 *   mismatch(k) = [^sk s0] | sk mismatch(k+1)   (k < n-1);   mismatch(n-1) = [^s(n-1) s0]
 *
 * D is a start of `forbidden` cut off by another s0 (or by the end); mismatch(k) leaves it at its
 * k-th character by one that is neither that character nor s0.
 */
export function textWithout(pool: ExprPool, forbidden: string): number {
  const s = [...forbidden].map((c) => c.charCodeAt(0));
  if (s.length < 2 || s.some((c) => c > 0x7f) || s.indexOf(s[0]!, 1) >= 0) throw new Error(`textWithout: ${JSON.stringify(forbidden)} is not supported`);
  const first = s[0]!;
  const char = (c: number): number => pool.byteRange(c, c);
  const except = (...cs: number[]): number => utf8Expr(pool, minus(ANY_CHAR, [...new Set(cs)].sort((x, y) => x - y).map((c): [number, number] => [c, c])));
  let mismatch = except(s[s.length - 1]!, first);
  for (let k = s.length - 2; k >= 1; k--) mismatch = pool.or([except(s[k]!, first), pool.concat(char(s[k]!), mismatch)]);
  let prefix = EPSILON;
  for (let k = s.length - 2; k >= 1; k--) prefix = pool.or([EPSILON, pool.concat(char(s[k]!), prefix)]);
  const cut = pool.repeat(pool.concat(char(first), prefix), 0, INFINITE);
  const item = pool.or([except(first), pool.seq([cut, char(first), mismatch])]);
  return pool.concat(pool.repeat(item, 0, INFINITE), cut);
}

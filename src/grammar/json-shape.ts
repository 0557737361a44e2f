/**
 * A Shape: a plain record of what one JSON value may be, type by type (json-schema-shape.ts builds
 * them from schemas, json-schema-algebra.ts subtracts them, json-schema.ts compiles them), with the
 * comparisons both need: value equality (canonical) and number bounds.
 */
import { compareDecimal, parseDecimal, type Decimal } from "./json-numbers.ts";
import type { At } from "./json-schema-refs.ts";
import { isObject, JsonNumber, type JsonValue } from "./json-value.ts";

export const T_NULL = 1, T_BOOLEAN = 2, T_OBJECT = 4, T_ARRAY = 8, T_STRING = 16, T_INTEGER = 32, T_FRACTION = 64;
export const T_ALL = 127;
export const T_NUMBER = T_INTEGER | T_FRACTION;

/** A conjunction of written schemas; [] is `true`. */
export type Conj = readonly At[];

export interface Shape {
  path: string;
  types: number;
  /** Allowed values (canonical text -> value), or null for no enum. */
  enumValues: Map<string, JsonValue> | null;
  minLength: number;
  maxLength: number;
  patterns: string[];
  formats: string[];
  /** String values excluded by `not: {enum/const}`. */
  notStrings: string[];
  /** Strings excluded: those meeting the string keywords of any of these (oneOf's other branches, `not`). */
  notShapes: Shape[];
  min: Decimal | null;
  minExclusive: boolean;
  max: Decimal | null;
  maxExclusive: boolean;
  multipleOf: Decimal[];
  properties: Map<string, Conj>;
  required: Set<string>;
  /** Schema of properties not declared and not matching a pattern; null: unconstrained. */
  additional: Conj;
  patternProperties: [string, Conj][];
  propertyNames: Conj;
  minProperties: number;
  maxProperties: number;
  prefixItems: Conj[];
  items: Conj;
  minItems: number;
  maxItems: number;
}

export function neutralShape(path: string): Shape {
  return {
    path, types: T_ALL, enumValues: null, minLength: 0, maxLength: Infinity, patterns: [], formats: [], notStrings: [], notShapes: [],
    min: null, minExclusive: false, max: null, maxExclusive: false, multipleOf: [],
    properties: new Map(), required: new Set(), additional: [], patternProperties: [], propertyNames: [], minProperties: 0, maxProperties: Infinity,
    prefixItems: [], items: [], minItems: 0, maxItems: Infinity,
  };
}

export const FALSE_AT: At = { raw: false, path: "#" };

export function isFalse(c: Conj): boolean {
  return c.some((a) => a.raw === false);
}

/** The tighter of s's lower bound and d (exclusive or not). */
export function tighterLower(s: Shape, d: Decimal, exclusive: boolean): [Decimal, boolean] {
  const c = s.min === null ? 1 : compareDecimal(d, s.min);
  return c > 0 || (c === 0 && exclusive) ? [d, exclusive] : [s.min!, s.minExclusive];
}
export function tighterUpper(s: Shape, d: Decimal, exclusive: boolean): [Decimal, boolean] {
  const c = s.max === null ? -1 : compareDecimal(d, s.max);
  return c < 0 || (c === 0 && exclusive) ? [d, exclusive] : [s.max!, s.maxExclusive];
}
/** s with a lower (upper) bound added: the values of s at or above d (above when exclusive). */
export function withLower(s: Shape, d: Decimal, exclusive: boolean): Shape {
  const [min, minExclusive] = tighterLower(s, d, exclusive);
  return { ...s, min, minExclusive };
}
export function withUpper(s: Shape, d: Decimal, exclusive: boolean): Shape {
  const [max, maxExclusive] = tighterUpper(s, d, exclusive);
  return { ...s, max, maxExclusive };
}

/** The text a value is compared by (JSON Schema equality: 1 and 1.0 are one number). */
export function canonical(v: JsonValue): string {
  if (v instanceof JsonNumber) {
    const d = parseDecimal(v.text);
    return `${d.negative ? "-" : ""}${d.int}${d.frac === "" ? "" : `.${d.frac}`}`;
  }
  if (Array.isArray(v)) return `[${v.map(canonical).join(",")}]`;
  if (isObject(v)) return `{${[...v.entries].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([k, x]) => `${JSON.stringify(k)}:${canonical(x)}`).join(",")}}`;
  return JSON.stringify(v);
}


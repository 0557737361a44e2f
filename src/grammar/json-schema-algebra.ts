/**
 * Shapes minus shapes, for `oneOf` (an instance must match exactly one branch) and `not`: a
 * Shape's values outside another's, as a list of Shapes. Every piece lies inside `a` and outside
 * `b` (never looser); `exact` says whether the pieces cover all of a minus b. What is exact:
 * types, enum/const values, null and booleans, strings (any of their keywords: the lexeme
 * excludes b's strings), number ranges without multipleOf, array lengths with unconstrained items,
 * objects whose other side constrains only required names and the property count. Elsewhere a
 * piece is dropped (stricter) unless the two shapes are shown disjoint: different types, enum
 * values, ranges, lengths, or a property both require whose schemas are disjoint (a
 * discriminator's const), or one requires and the other forbids.
 */
import { GrammarError } from "../errors.ts";
import { formatRegex } from "./json-formats.ts";
import { ceilDecimal, compareDecimal, floorDecimal, type Decimal } from "./json-numbers.ts";
import { isAssertion } from "./json-schema-keywords.ts";
import type { At } from "./json-schema-refs.ts";
import {
  canonical, FALSE_AT, isFalse, T_ARRAY, T_BOOLEAN, T_INTEGER, T_NULL, T_NUMBER, T_OBJECT, T_STRING, withLower, withUpper, type Conj, type Shape,
} from "./json-shape.ts";
import { isObject, type JsonValue } from "./json-value.ts";

/** How deep disjointness looks into property and item schemas (a discriminator is one level). */
const NESTING = 3;

/** What deciding disjointness needs from the compiler: string languages, values, sub-schemas. */
export interface ShapeOracle {
  /** Whether some string meets both shapes' string keywords (true where unsure). */
  stringsMeet(a: Shape, b: Shape): boolean;
  /** Whether some string meets a's string keywords and not b's (true where unsure). */
  stringsOutside(a: Shape, b: Shape): boolean;
  /** Whether v meets the shape's type and the keywords of its type (true where unsure: objects, arrays). */
  valueFits(v: JsonValue, s: Shape): boolean;
  /** Whether a property name matches a patternProperties pattern. */
  matchesPattern(pattern: string, key: string): boolean;
  /** Whether some property name matches both patterns (true where unsure). */
  patternsMeet(p: string, q: string): boolean;
  /** Throws when the compile's budget is spent (differences can multiply: they are bounded by it). */
  checkBudget(): void;
  /** Shapes allowing at least what a conjunction of schemas allows (property and item schemas). */
  shapes(c: Conj, path: string): Shape[];
  /** A schema allowing what the conjunction does not (stricter where that cannot be exact). */
  negation(c: Conj): At;
}

export interface Difference {
  readonly pieces: Shape[];
  readonly exact: boolean;
}

export class ShapeAlgebra {
  private nesting = 0;
  /** conjDisjoint's answers and the shapes it looked at, by the schemas' places (a place is one written schema). */
  private readonly disjointMemo = new Map<string, boolean>();
  private readonly shapesMemo = new Map<string, Shape[]>();

  constructor(private readonly oracle: ShapeOracle) {}

  /** The shapes `as` minus every shape of `bs` (the alternatives of one schema). */
  subtractAll(as: readonly Shape[], bs: readonly Shape[]): Difference {
    let pieces = [...as];
    let exact = true;
    for (const b of bs) {
      const next: Shape[] = [];
      for (const p of pieces) {
        const d = this.subtract(p, b);
        next.push(...d.pieces);
        exact &&= d.exact;
      }
      pieces = next;
    }
    return { pieces, exact };
  }

  /** Pieces of a outside b (see the file comment). */
  subtract(a: Shape, b: Shape): Difference {
    this.oracle.checkBudget();
    if (this.disjoint(a, b)) return { pieces: [a], exact: true };
    const pieces: Shape[] = [];
    const outsideTypes = a.types & ~b.types;
    if (outsideTypes !== 0) pieces.push({ ...a, types: outsideTypes });
    const common = a.types & b.types;
    if (a.enumValues !== null) {
      // The values b does not allow; an object or array value b might allow is dropped (inexact:
      // valueFits does not look into them).
      const kept = new Map<string, JsonValue>();
      let exact = true;
      for (const [key, v] of a.enumValues) {
        if (!this.valueIn(v, a)) continue;
        if (!this.valueIn(v, b)) kept.set(key, v);
        else if (Array.isArray(v) || isObject(v)) exact = false;
      }
      return { pieces: kept.size > 0 ? prune({ ...a, enumValues: kept }, this.oracle) : [], exact };
    }
    let exact = true;
    for (const t of [T_NULL, T_BOOLEAN]) {
      if (!(common & t)) continue;
      const values: JsonValue[] = t === T_NULL ? [null] : [true, false];
      const kept = values.filter((v) => !this.valueIn(v, b));
      if (kept.length > 0) pieces.push({ ...a, types: t, enumValues: new Map(kept.map((v) => [canonical(v), v])) });
    }
    if (b.enumValues !== null) {
      const bValues = [...b.enumValues.values()].filter((v) => this.valueIn(v, b));
      if (common & T_STRING) {
        const strings = bValues.filter((v): v is string => typeof v === "string");
        pieces.push({ ...a, types: T_STRING, notStrings: [...a.notStrings, ...strings] });
      }
      // Numbers, arrays and objects outside b's values: whole where b has none of that type.
      for (const t of [T_NUMBER, T_ARRAY, T_OBJECT]) {
        if (!(common & t)) continue;
        if (bValues.some((v) => typeBit(v) & t)) exact = false;
        else pieces.push({ ...a, types: common & t });
      }
      return { pieces: pieces.flatMap((p) => prune(p, this.oracle)), exact };
    }
    // A format's regex may be stricter than the format: excluding it would let through a string
    // the format allows; such strings are dropped instead (inexact).
    if (common & T_STRING && b.formats.some((f) => formatRegex(f) !== undefined)) exact = false;
    else if (common & T_STRING && this.oracle.stringsOutside(a, b)) pieces.push({ ...a, types: T_STRING, notShapes: [...a.notShapes, b] });
    if (common & T_NUMBER) exact = this.numbersOutside(a, b, common & T_NUMBER, pieces) && exact;
    if (common & T_ARRAY) exact = this.arraysOutside(a, b, pieces) && exact;
    if (common & T_OBJECT) exact = this.objectsOutside(a, b, pieces) && exact;
    return { pieces: pieces.flatMap((p) => prune(p, this.oracle)), exact };
  }

  /** Whether no value meets both shapes (false where unsure). */
  disjoint(a: Shape, b: Shape): boolean {
    this.oracle.checkBudget();
    const common = a.types & b.types;
    if (common === 0) return true;
    for (const [s, other] of [[a, b], [b, a]] as const) {
      if (s.enumValues !== null) return ![...s.enumValues.values()].some((v) => this.valueIn(v, s) && this.valueIn(v, other));
    }
    if (common & (T_NULL | T_BOOLEAN)) return false;
    if (common & T_STRING && this.oracle.stringsMeet(a, b)) return false;
    if (common & T_NUMBER && !rangesDisjoint(a, b, common & T_NUMBER)) return false;
    if (common & T_ARRAY && !this.arraysDisjoint(a, b)) return false;
    if (common & T_OBJECT && !this.objectsDisjoint(a, b)) return false;
    return true;
  }

  /** Whether v may be one of s's values (true where unsure: objects, arrays, strings under a format's regex). */
  private valueIn(v: JsonValue, s: Shape): boolean {
    if (s.enumValues !== null && !s.enumValues.has(canonical(v))) return false;
    if (typeof v === "string" && s.types & T_STRING && s.formats.some((f) => formatRegex(f) !== undefined)) return true;
    return this.oracle.valueFits(v, s);
  }

  /** Numbers of a below b's minimum or above its maximum; exact without b's multipleOf. */
  private numbersOutside(a: Shape, b: Shape, bits: number, pieces: Shape[]): boolean {
    const numeric = { ...a, types: bits };
    if (b.min !== null) pieces.push(withUpper(numeric, b.min, !b.minExclusive));
    if (b.max !== null) pieces.push(withLower(numeric, b.max, !b.maxExclusive));
    return b.multipleOf.length === 0;
  }

  /** Arrays of a too short or too long for b; exact where b says nothing of its items. */
  private arraysOutside(a: Shape, b: Shape, pieces: Shape[]): boolean {
    const arrays = { ...a, types: T_ARRAY };
    const bMax = maxItems(b);
    if (bMax !== Infinity) pieces.push({ ...arrays, minItems: Math.max(a.minItems, bMax + 1) });
    if (b.minItems > 0) pieces.push({ ...arrays, maxItems: Math.min(a.maxItems, b.minItems - 1) });
    return b.prefixItems.every(trivial) && (trivial(b.items) || isFalse(b.items));
  }

  /**
   * Objects of a without a name b requires, with a property whose value b's schema for it does
   * not allow (its schema there: a's and the negation of b's, or a's alone where they are
   * disjoint), or with too many or too few members for b; exact where b does not constrain the
   * other names (additionalProperties, patternProperties, propertyNames).
   */
  private objectsOutside(a: Shape, b: Shape, pieces: Shape[]): boolean {
    const objects = { ...a, types: T_OBJECT };
    for (const name of b.required) {
      if (!a.required.has(name)) pieces.push({ ...objects, properties: new Map(a.properties).set(name, [FALSE_AT]) });
    }
    for (const name of new Set([...a.properties.keys(), ...b.properties.keys(), ...a.required])) {
      const theirs = this.propertyConj(b, name);
      const mine = this.propertyConj(a, name);
      if (trivial(theirs) || isFalse(mine)) continue;
      const value = this.conjDisjoint(mine, theirs, `${a.path}/properties/${name}`) ? mine : [...mine, this.oracle.negation(theirs)];
      pieces.push({ ...objects, properties: new Map(a.properties).set(name, value), required: new Set(a.required).add(name) });
    }
    if (b.maxProperties !== Infinity) pieces.push({ ...objects, minProperties: Math.max(a.minProperties, b.maxProperties + 1) });
    if (b.minProperties > 0) pieces.push({ ...objects, maxProperties: Math.min(a.maxProperties, b.minProperties - 1) });
    return trivial(b.additional) && b.patternProperties.every(([, c]) => trivial(c)) && b.propertyNames.length === 0;
  }

  private arraysDisjoint(a: Shape, b: Shape): boolean {
    if (Math.max(a.minItems, b.minItems) > Math.min(maxItems(a), maxItems(b))) return true;
    // An item both require at the same place, with disjoint schemas.
    const both = Math.min(a.minItems, b.minItems, NESTING);
    for (let j = 0; j < both; j++) if (this.conjDisjoint(itemConj(a, j), itemConj(b, j), `${a.path}/items`)) return true;
    return false;
  }

  private objectsDisjoint(a: Shape, b: Shape): boolean {
    if (Math.max(a.minProperties, b.minProperties) > Math.min(a.maxProperties, b.maxProperties)) return true;
    // One has a member, and every key it allows the other forbids (key sets apart: "1.5x" against "en-US").
    if ((a.minProperties > 0 && this.keysForbidden(a, b)) || (b.minProperties > 0 && this.keysForbidden(b, a))) return true;
    for (const [s, other] of [[a, b], [b, a]] as const) {
      // A name s requires that the other forbids, or whose value there is of another kind.
      for (const name of s.required) {
        if (this.conjDisjoint(this.propertyConj(s, name), this.propertyConj(other, name), `${s.path}/properties/${name}`)) return true;
      }
    }
    return false;
  }

  /** Whether every key s allows is one `other` forbids (false where unsure). */
  private keysForbidden(s: Shape, other: Shape): boolean {
    if (!isFalse(s.additional)) return false;
    const allowed = <T>(list: [T, Conj][]): T[] => list.filter(([, c]) => !isFalse(c)).map(([k]) => k);
    const names = allowed([...s.properties]);
    const patterns = allowed(s.patternProperties);
    if (!names.every((n) => isFalse(this.propertyConj(other, n)))) return false;
    if (patterns.length === 0) return true;
    if (!isFalse(other.additional)) return false;
    const otherNames = allowed([...other.properties]);
    const otherPatterns = allowed(other.patternProperties);
    return patterns.every((p) => !otherNames.some((n) => this.oracle.matchesPattern(p, n)) && !otherPatterns.some((q) => this.oracle.patternsMeet(p, q)));
  }

  /** The schemas a property of that name takes in s: declared, else its patterns, else additional. */
  private propertyConj(s: Shape, name: string): Conj {
    const declared = s.properties.get(name);
    if (declared !== undefined) return declared;
    const matched = s.patternProperties.filter(([p]) => this.oracle.matchesPattern(p, name)).flatMap(([, c]) => c);
    return matched.length > 0 ? matched : s.additional;
  }

  /** Whether two conjunctions of schemas are disjoint, looking NESTING levels deep (false where unsure). */
  private conjDisjoint(x: Conj, y: Conj, path: string): boolean {
    if (isFalse(x) || isFalse(y)) return true;
    if (this.nesting >= NESTING || trivial(x) || trivial(y)) return false;
    const key = `${places(x)} ${places(y)}`;
    const known = this.disjointMemo.get(key);
    if (known !== undefined) return known;
    this.nesting++;
    let answer: boolean;
    try {
      const xs = this.conjShapes(x, path);
      const ys = this.conjShapes(y, path);
      answer = xs.every((p) => ys.every((q) => this.disjoint(p, q)));
    } catch (e) {
      // A schema refused here is refused where it is compiled; a recursive one is not looked into.
      if (!(e instanceof GrammarError)) throw e;
      answer = false;
    } finally {
      this.nesting--;
    }
    // An answer cut short by NESTING is "not disjoint": kept, it can only make oneOf stricter.
    this.disjointMemo.set(key, answer);
    return answer;
  }

  private conjShapes(c: Conj, path: string): Shape[] {
    const key = places(c);
    let shapes = this.shapesMemo.get(key);
    if (shapes === undefined) this.shapesMemo.set(key, (shapes = this.oracle.shapes(c, path)));
    return shapes;
  }
}

/** The shape without the types it plainly allows nothing of (bounds crossed, a required name forbidden); [] if none is left. */
function prune(s: Shape, oracle: Pick<ShapeOracle, "matchesPattern">): Shape[] {
  let types = s.types;
  if (s.enumValues !== null && s.enumValues.size === 0) return [];
  const forbidden = (name: string): boolean => {
    const declared = s.properties.get(name);
    if (declared !== undefined) return isFalse(declared);
    const matched = s.patternProperties.filter(([p]) => oracle.matchesPattern(p, name));
    return matched.length > 0 ? matched.some(([, c]) => isFalse(c)) : isFalse(s.additional);
  };
  if (Math.max(s.minProperties, s.required.size) > s.maxProperties || [...s.required].some(forbidden)) types &= ~T_OBJECT;
  if (s.minItems > maxItems(s)) types &= ~T_ARRAY;
  if (s.minLength > s.maxLength) types &= ~T_STRING;
  if (types & T_NUMBER && rangesDisjoint(s, s, types & T_NUMBER)) types &= ~T_NUMBER;
  if (types === 0) return [];
  return [types === s.types ? s : { ...s, types }];
}

export function places(c: Conj): string {
  return c.map((at) => (typeof at.raw === "boolean" ? String(at.raw) : at.path)).join("&");
}

function typeBit(v: JsonValue): number {
  if (v === null) return T_NULL;
  if (typeof v === "boolean") return T_BOOLEAN;
  if (typeof v === "string") return T_STRING;
  if (Array.isArray(v)) return T_ARRAY;
  return isObject(v) ? T_OBJECT : T_NUMBER;
}

/** Whether a conjunction allows everything ([], true, or schemas of annotations only). */
function trivial(c: Conj): boolean {
  return c.every((at) => at.raw === true || (isObject(at.raw) && at.raw.keys.every((k) => !isAssertion(k))));
}

function maxItems(s: Shape): number {
  return isFalse(s.items) ? Math.min(s.maxItems, s.prefixItems.length) : s.maxItems;
}

function itemConj(s: Shape, j: number): Conj {
  return j < s.prefixItems.length ? s.prefixItems[j]! : s.items;
}

/** Whether no number lies in both ranges (integers only when `bits` is T_INTEGER). */
function rangesDisjoint(a: Shape, b: Shape, bits: number): boolean {
  if (bits === T_INTEGER) {
    const lo = (s: Shape): bigint | null => (s.min === null ? null : s.minExclusive ? floorDecimal(s.min) + 1n : ceilDecimal(s.min));
    const hi = (s: Shape): bigint | null => (s.max === null ? null : s.maxExclusive ? ceilDecimal(s.max) - 1n : floorDecimal(s.max));
    const below = (h: bigint | null, l: bigint | null): boolean => h !== null && l !== null && h < l;
    return below(hi(a), lo(b)) || below(hi(b), lo(a));
  }
  const below = (max: Decimal | null, maxEx: boolean, min: Decimal | null, minEx: boolean): boolean => {
    if (max === null || min === null) return false;
    const c = compareDecimal(max, min);
    return c < 0 || (c === 0 && (maxEx || minEx));
  };
  return below(a.max, a.maxExclusive, b.min, b.minExclusive) || below(b.max, b.maxExclusive, a.min, a.minExclusive);
}

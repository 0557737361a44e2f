/**
 * A JSON Schema normalized into Shapes: plain records of what each JSON type may be, with `$ref`
 * (when it has sibling keywords), `allOf`, `anyOf` and `oneOf` resolved. A conjunction of schemas
 * becomes a list of alternative Shapes (anyOf/oneOf distributed over allOf, at most
 * GRAMMAR_LIMITS.allOfBranches), each the merge of its parts keyword by keyword.
 *
 * Sub-schemas (a property's, the items') stay as lists of written schemas (their conjunction) and
 * are normalized only when compiled, so recursive schemas never expand here. `oneOf` is each
 * branch minus the others and `not` the shape minus its schema (json-schema-algebra.ts): exact, or
 * stricter, never looser.
 *
 * Every keyword that asserts something is either honoured or refused with a GrammarError naming it
 * and its place; annotations (title, description, examples, ...) are ignored.
 */
import { GrammarError, GrammarLimitError } from "../errors.ts";
import { GRAMMAR_LIMITS } from "./limits.ts";
import { parseDecimal, type Decimal } from "./json-numbers.ts";
import { places, ShapeAlgebra, type ShapeOracle } from "./json-schema-algebra.ts";
import { ANNOTATIONS, isKnownKeyword, REFUSED } from "./json-schema-keywords.ts";
import type { At, SchemaDocument } from "./json-schema-refs.ts";
import {
  canonical, neutralShape, T_ARRAY, T_BOOLEAN, T_FRACTION, T_INTEGER, T_NULL, T_OBJECT, T_STRING, tighterLower, tighterUpper, type Conj, type Shape,
} from "./json-shape.ts";
import { isObject, JsonNumber, JsonObject, pythonJsonDumps, type JsonValue } from "./json-value.ts";

const TYPE_BITS: Readonly<Record<string, number>> = {
  null: T_NULL, boolean: T_BOOLEAN, object: T_OBJECT, array: T_ARRAY, string: T_STRING, integer: T_INTEGER, number: T_INTEGER | T_FRACTION,
};

/** A copy of s that a merge may change: the parts merges change in place are its own. */
function copyShape(s: Shape): Shape {
  return { ...s, properties: new Map(s.properties), required: new Set(s.required), patterns: [...s.patterns], formats: [...s.formats] };
}

/** Whether a written schema is only a $ref (annotations aside): it then compiles to the target's rule. */
export function pureRef(raw: JsonValue): string | null {
  if (!isObject(raw)) return null;
  const ref = raw.get("$ref");
  if (typeof ref !== "string") return null;
  return raw.keys.every((k) => k === "$ref" || ANNOTATIONS.has(k) || !isKnownKeyword(k)) ? ref : null;
}

/**
 * Shapes being merged, and whether the merge may change them in place (`owned`): then they are
 * distinct objects that nothing else refers to, whose properties, required, patterns and formats
 * are their own (a merge replaces every other part, never changes it). Merging n allOf branches
 * into owned shapes costs what the branches say, where copying the shapes at each branch cost n
 * copies of everything declared so far.
 */
interface Merge {
  readonly shapes: Shape[];
  readonly owned: boolean;
}

/** What the shapes need from the compiler to tell oneOf's branches apart (ShapeOracle's scalar part). */
export type ValueOracle = Pick<ShapeOracle, "stringsMeet" | "stringsOutside" | "valueFits" | "patternsMeet" | "checkBudget">;

export class ShapeBuilder {
  private inlining: string[] = [];
  private inlines = 0;
  private loose = false;
  /** Differences that were not exact (their pieces stricter than the schema), counted as they happen. */
  private approximations = 0;
  private readonly negations = new Map<string, At>();
  private readonly stricterNots = new WeakSet<JsonObject>();
  private readonly algebra: ShapeAlgebra;

  constructor(private readonly doc: SchemaDocument, private readonly matchesPattern: (pattern: string, key: string, where: string) => boolean, private readonly values: ValueOracle) {
    this.algebra = new ShapeAlgebra({
      ...values,
      matchesPattern: (pattern, key) => matchesPattern(pattern, key, "patternProperties"),
      shapes: (c, path) => this.looseShapes(c, path),
      negation: (c) => this.negation(c),
    });
  }

  /**
   * `{"not": ...}` of a conjunction, one per conjunction (so that a recursive schema's rules stay
   * finite), enforced stricter where its complement is not exact (andNot's `stricter`).
   */
  private negation(c: Conj): At {
    const path = `not(${places(c)})`;
    let at = this.negations.get(path);
    if (at === undefined) {
      const raw = new JsonObject();
      if (c.length === 1) raw.set("not", c[0]!.raw);
      else {
        const all = new JsonObject();
        all.set("allOf", c.map((x) => x.raw));
        raw.set("not", all);
      }
      this.stricterNots.add(raw);
      this.negations.set(path, (at = { raw, path }));
    }
    return at;
  }

  /**
   * Shapes that allow at least what the conjunction allows: oneOf read as anyOf, `not` left out
   * (enough to show two schemas disjoint, and no subtraction within one). Its own $ref stack: a
   * schema being inlined may be looked at from inside itself.
   */
  private looseShapes(conj: Conj, path: string): Shape[] {
    const [inlining, loose] = [this.inlining, this.loose];
    [this.inlining, this.loose] = [[], true];
    try {
      return this.shapes(conj, path);
    } finally {
      [this.inlining, this.loose] = [inlining, loose];
    }
  }

  /** The alternatives a conjunction of schemas allows ([] when none: it is unsatisfiable). */
  shapes(conj: Conj, path: string): Shape[] {
    let results: Merge = { shapes: [neutralShape(path)], owned: true };
    for (const at of conj) {
      results = this.andSchema(results, at);
      if (results.shapes.length === 0) return [];
    }
    return results.shapes;
  }

  /** The shapes of `current` that also meet the schema at `at`: in place where `current` is owned. */
  private andSchema(current: Merge, at: At): Merge {
    const raw = at.raw;
    if (raw === true) return current;
    if (raw === false) return { shapes: [], owned: true };
    if (!isObject(raw)) throw new GrammarError(`${at.path}: a schema must be an object or a boolean`);
    for (const k of REFUSED) if (raw.has(k)) throw new GrammarError(`${at.path}: "${k}" is not supported`);
    // Merging shapes is work the compile budget bounds too (1,000 allOf branches, each copying the shapes so far).
    this.values.checkBudget();
    let results: Merge = { shapes: current.shapes.map((s) => this.applyKeywords(current.owned ? s : copyShape(s), raw, at.path)), owned: true };
    const ref = raw.get("$ref");
    if (typeof ref === "string") results = this.andInlined(results, ref, at.path);
    const allOf = arrayOf(raw, "allOf", at.path);
    allOf?.forEach((branch, i) => {
      results = this.andSchema(results, { raw: branch, path: `${at.path}/allOf/${i}` });
    });
    const anyOf = arrayOf(raw, "anyOf", at.path);
    if (anyOf !== undefined) results = this.andAnyOf(results.shapes, anyOf, at.path, "anyOf");
    const oneOf = arrayOf(raw, "oneOf", at.path);
    if (oneOf !== undefined) results = this.loose ? this.andAnyOf(results.shapes, oneOf, at.path, "oneOf") : { shapes: this.andOneOf(results.shapes, oneOf, at.path), owned: false };
    // The algebra's pieces share their parts with each other: not owned.
    const not = raw.get("not");
    if (not !== undefined && !this.loose) results = { shapes: results.shapes.flatMap((s) => this.andNot(s, not, `${at.path}/not`, this.stricterNots.has(raw))), owned: false };
    return results;
  }

  private andInlined(current: Merge, ref: string, from: string): Merge {
    const target = this.doc.resolve(ref, from);
    if (this.inlining.includes(target.path)) throw new GrammarError(`${from}: $ref "${ref}" refers to itself through allOf or sibling keywords`);
    if (++this.inlines > GRAMMAR_LIMITS.refInlines) throw new GrammarLimitError("refInlines", `${from}: more than ${GRAMMAR_LIMITS.refInlines} $ref expansions (limit: refInlines)`);
    this.inlining.push(target.path);
    try {
      return this.andSchema(current, target);
    } finally {
      this.inlining.pop();
    }
  }

  /** Each branch's merge with copies of `current`: owned unless a branch left them as they were (`true`). */
  private andAnyOf(current: Shape[], branches: JsonValue[], path: string, key: string): Merge {
    const merges = branches.map((branch, i) => this.andSchema({ shapes: current, owned: false }, { raw: branch, path: `${path}/${key}/${i}` }));
    return { shapes: branchLimit(merges.flatMap((m) => m.shapes), path, key), owned: merges.every((m) => m.owned) };
  }

  /**
   * An instance valid against exactly one branch: each branch's shapes minus every other
   * branch's (ShapeAlgebra). Where a difference cannot be computed exactly the pieces are
   * stricter; a branch left with nothing for that reason is refused, naming the two branches.
   */
  private andOneOf(current: Shape[], branches: JsonValue[], path: string): Shape[] {
    const each = branches.map((branch, i) => this.subtrahend(() => this.andSchema({ shapes: current, owned: false }, { raw: branch, path: `${path}/oneOf/${i}` }).shapes, [{ raw: branch, path: `${path}/oneOf/${i}` }]));
    const out: Shape[] = [];
    let exact = true;
    each.forEach(({ shapes }, i) => {
      let pieces = shapes;
      let inexact = -1;
      each.forEach(({ others, exact: othersExact }, j) => {
        if (j === i || pieces.length === 0) return;
        const d = this.algebra.subtractAll(pieces, others);
        if ((!d.exact || !othersExact) && inexact < 0) inexact = j;
        pieces = branchLimit(d.pieces, path, "oneOf");
      });
      if (shapes.length > 0 && pieces.length === 0 && inexact >= 0) {
        throw new GrammarError(
          `${path}/oneOf: branches ${i} and ${inexact} may both match one value, and which one it matches cannot be enforced exactly ` +
            `(oneOf branches must exclude each other: other types, const/enum values, number ranges, string patterns, or a required property whose values differ)`,
        );
      }
      exact &&= inexact < 0;
      out.push(...pieces);
    });
    if (!exact) this.approximations++;
    return branchLimit(out, path, "oneOf");
  }

  /**
   * Shapes computed by `compute`, and the shapes to subtract for them (`others`): a difference is
   * never looser only if what it takes away allows at least what the schema allows, so where the
   * computed shapes are stricter than the schema (a difference inside them was not exact) the
   * loose shapes of `conj` are taken away instead, and the difference is then stricter (exact: false).
   */
  private subtrahend(compute: () => Shape[], conj: Conj): { shapes: Shape[]; others: Shape[]; exact: boolean } {
    const before = this.approximations;
    const shapes = compute();
    const exact = this.approximations === before;
    return { shapes, others: exact ? shapes : this.looseShapes(conj, conj[0]!.path), exact };
  }

  /**
   * `not`: the shape minus the schema's shapes (ShapeAlgebra), where that can be computed exactly;
   * `stricter` (oneOf's own negations): the pieces that can, even where they are not all.
   */
  private andNot(s: Shape, not: JsonValue, path: string, stricter: boolean): Shape[] {
    if (!isObject(not) && typeof not !== "boolean") throw new GrammarError(`${path}: must be a schema`);
    const conj = [{ raw: not, path }];
    const excluded = this.subtrahend(() => this.shapes(conj, path), conj);
    const d = this.algebra.subtractAll([s], excluded.others);
    if (!d.exact || !excluded.exact) this.approximations++;
    if ((!d.exact || !excluded.exact) && !stricter) {
      throw new GrammarError(`${path}: "not" is supported only where its complement can be enforced exactly (types, enum/const values, string keywords, number ranges without multipleOf, array lengths, required properties)`);
    }
    return d.pieces;
  }

  /** s with the plain keywords of one schema object added (in place: s is a copy, or owned). */
  private applyKeywords(s: Shape, raw: JsonObject, path: string): Shape {
    const type = raw.get("type");
    if (type !== undefined) s.types &= typeBits(type, `${path}/type`);
    this.applyEnum(s, raw, path);
    this.applyString(s, raw, path);
    this.applyNumber(s, raw, path);
    this.applyObject(s, raw, path);
    this.applyArray(s, raw, path);
    return s;
  }

  private applyEnum(s: Shape, raw: JsonObject, path: string): void {
    let values: JsonValue[] | undefined;
    if (raw.has("enum")) values = arrayOf(raw, "enum", path);
    if (raw.has("const")) values = values === undefined ? [raw.get("const")!] : values.filter((v) => canonical(v) === canonical(raw.get("const")!));
    if (values === undefined) return;
    const next = new Map<string, JsonValue>();
    for (const v of values) {
      const key = canonical(v);
      if (s.enumValues === null || s.enumValues.has(key)) next.set(key, v);
    }
    s.enumValues = next;
  }

  private applyString(s: Shape, raw: JsonObject, path: string): void {
    const minLength = count(raw, "minLength", path);
    if (minLength !== undefined) s.minLength = Math.max(s.minLength, minLength);
    const maxLength = count(raw, "maxLength", path);
    if (maxLength !== undefined) s.maxLength = Math.min(s.maxLength, maxLength);
    const pattern = raw.get("pattern");
    if (pattern !== undefined) {
      if (typeof pattern !== "string") throw new GrammarError(`${path}/pattern: must be a string`);
      s.patterns.push(pattern);
    }
    const format = raw.get("format");
    if (typeof format === "string") s.formats.push(format);
  }

  private applyNumber(s: Shape, raw: JsonObject, path: string): void {
    const num = (key: string): Decimal | undefined => {
      const v = raw.get(key);
      if (v === undefined || typeof v === "boolean") return undefined;
      if (!(v instanceof JsonNumber)) throw new GrammarError(`${path}/${key}: must be a number`);
      return parseDecimal(v.text);
    };
    const lower = (d: Decimal, exclusive: boolean): void => {
      [s.min, s.minExclusive] = tighterLower(s, d, exclusive);
    };
    const upper = (d: Decimal, exclusive: boolean): void => {
      [s.max, s.maxExclusive] = tighterUpper(s, d, exclusive);
    };
    const minimum = num("minimum");
    const maximum = num("maximum");
    // Draft 4: exclusiveMinimum/Maximum are booleans modifying minimum/maximum.
    if (minimum !== undefined) lower(minimum, raw.get("exclusiveMinimum") === true);
    if (maximum !== undefined) upper(maximum, raw.get("exclusiveMaximum") === true);
    const exMin = num("exclusiveMinimum");
    if (exMin !== undefined) lower(exMin, true);
    const exMax = num("exclusiveMaximum");
    if (exMax !== undefined) upper(exMax, true);
    const multipleOf = num("multipleOf");
    if (multipleOf !== undefined) s.multipleOf = [...s.multipleOf, multipleOf];
  }

  private applyObject(s: Shape, raw: JsonObject, path: string): void {
    const props = raw.get("properties");
    const patternProps = raw.get("patternProperties");
    const additional = raw.get("additionalProperties");
    if (props !== undefined && !isObject(props)) throw new GrammarError(`${path}/properties: must be an object`);
    if (patternProps !== undefined && !isObject(patternProps)) throw new GrammarError(`${path}/patternProperties: must be an object`);
    const ownPatterns: [string, Conj][] = (patternProps?.entries ?? []).map(([p, v]) => [p, [{ raw: v, path: `${path}/patternProperties/${p}` }]]);
    // `true` constrains nothing, as absent does: kept out, so that n branches with it do not give every key n schemas.
    const ownAdditional: Conj = additional === undefined || additional === true ? [] : [{ raw: additional, path: `${path}/additionalProperties` }];
    if (ownPatterns.length > 0 && s.patternProperties.length > 0) throw new GrammarError(`${path}/patternProperties: patternProperties in more than one allOf branch is not supported`);
    if (props !== undefined || patternProps !== undefined || additional !== undefined) this.mergeKeys(s, props, ownPatterns, ownAdditional, path);
    const required = raw.get("required");
    if (Array.isArray(required)) for (const r of required) if (typeof r === "string") s.required.add(r);
    const names = raw.get("propertyNames");
    if (names !== undefined) s.propertyNames = [...s.propertyNames, { raw: names, path: `${path}/propertyNames` }];
    const minP = count(raw, "minProperties", path);
    if (minP !== undefined) s.minProperties = Math.max(s.minProperties, minP);
    const maxP = count(raw, "maxProperties", path);
    if (maxP !== undefined) s.maxProperties = Math.min(s.maxProperties, maxP);
  }

  /**
   * One object's properties, patternProperties and additionalProperties merged into s's (in place;
   * each side's parts are read before they are replaced). A key one side declares is, on the other
   * side, a pattern property or an additional one. A declared key also takes the schema of every
   * pattern it matches; additionalProperties applies only to keys neither declared nor matched.
   * Keys s declared that this object does not gain nothing unless it has patterns or additional
   * properties, so they are left as they are: merging costs what this object declares.
   */
  private mergeKeys(s: Shape, props: JsonObject | undefined, ownPatterns: [string, Conj][], ownAdditional: Conj, path: string): void {
    const ownFor = (key: string): Conj => {
      const own = props?.get(key);
      const declared: Conj = own === undefined ? [] : [{ raw: own, path: `${path}/properties/${key}` }];
      const matched = ownPatterns.filter(([p]) => this.matchesPattern(p, key, `${path}/patternProperties`)).flatMap(([, c]) => c);
      return own !== undefined || matched.length > 0 ? [...declared, ...matched] : ownAdditional;
    };
    const baseFor = (key: string): Conj => {
      const declared = s.properties.get(key);
      if (declared !== undefined) return declared;
      const matched = s.patternProperties.filter(([p]) => this.matchesPattern(p, key, path)).flatMap(([, c]) => c);
      return matched.length > 0 ? matched : s.additional;
    };
    if (ownPatterns.length > 0 || ownAdditional.length > 0) {
      for (const [k, c] of s.properties) if (props?.has(k) !== true) s.properties.set(k, [...c, ...ownFor(k)]);
    }
    for (const [k] of props?.entries ?? []) s.properties.set(k, [...baseFor(k), ...ownFor(k)]);
    s.patternProperties = s.patternProperties.length > 0
      ? s.patternProperties.map(([p, c]) => [p, [...c, ...ownAdditional]])
      : ownPatterns.map(([p, c]) => [p, [...s.additional, ...c]]);
    s.additional = [...s.additional, ...ownAdditional];
  }

  private applyArray(s: Shape, raw: JsonObject, path: string): void {
    const items = raw.get("items");
    const prefix = raw.get("prefixItems");
    let ownPrefix: Conj[] = [];
    let ownRest: Conj | null = null;
    if (Array.isArray(items)) {
      ownPrefix = items.map((x, i) => [{ raw: x, path: `${path}/items/${i}` }]);
      const extra = raw.get("additionalItems");
      ownRest = extra === undefined ? [] : [{ raw: extra, path: `${path}/additionalItems` }];
    } else {
      if (Array.isArray(prefix)) ownPrefix = prefix.map((x, i) => [{ raw: x, path: `${path}/prefixItems/${i}` }]);
      else if (prefix !== undefined) throw new GrammarError(`${path}/prefixItems: must be an array`);
      if (items !== undefined) ownRest = [{ raw: items, path: `${path}/items` }];
    }
    if (ownPrefix.length > 0 || ownRest !== null) {
      const rest = ownRest ?? [];
      const n = Math.max(ownPrefix.length, s.prefixItems.length);
      s.prefixItems = Array.from({ length: n }, (_, i) => [...(s.prefixItems[i] ?? s.items), ...(ownPrefix[i] ?? rest)]);
      s.items = [...s.items, ...rest];
    }
    const minI = count(raw, "minItems", path);
    if (minI !== undefined) s.minItems = Math.max(s.minItems, minI);
    const maxI = count(raw, "maxItems", path);
    if (maxI !== undefined) s.maxItems = Math.min(s.maxItems, maxI);
    if (raw.get("uniqueItems") === true) throw new GrammarError(`${path}: "uniqueItems" is not supported`);
  }
}

export function typeBits(type: JsonValue, path: string): number {
  const names = Array.isArray(type) ? type : [type];
  let bits = 0;
  for (const n of names) {
    if (typeof n !== "string" || TYPE_BITS[n] === undefined) throw new GrammarError(`${path}: unknown type ${pythonJsonDumps(n)}`);
    bits |= TYPE_BITS[n]!;
  }
  return bits;
}

function branchLimit(shapes: Shape[], path: string, key: string): Shape[] {
  if (shapes.length > GRAMMAR_LIMITS.allOfBranches) {
    throw new GrammarLimitError("allOfBranches", `${path}: "${key}" (with the allOf/anyOf/oneOf around it) gives more than ${GRAMMAR_LIMITS.allOfBranches} alternatives (limit: allOfBranches)`);
  }
  return shapes;
}

function arrayOf(raw: JsonObject, key: string, path: string): JsonValue[] | undefined {
  const v = raw.get(key);
  if (v === undefined) return undefined;
  if (!Array.isArray(v)) throw new GrammarError(`${path}/${key}: must be an array`);
  return v;
}

function count(raw: JsonObject, key: string, path: string): number | undefined {
  const v = raw.get(key);
  if (v === undefined) return undefined;
  // A non-negative integer (JSON Schema's own meta-schema); 2.0 is 2, 1.5 is refused.
  if (!(v instanceof JsonNumber) || v.value < 0 || !Number.isInteger(v.value)) throw new GrammarError(`${path}/${key}: must be a non-negative integer`);
  return v.value;
}


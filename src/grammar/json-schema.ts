/**
 * JSON Schema to the internal grammar. Leaves (strings with their length, pattern and format;
 * numbers with their bounds; literals) are lexemes; objects and arrays are rules, so recursive
 * schemas cost one rule per `$ref` target and never expand.
 *
 * Objects: declared properties in the schema's order, each optional unless required, then any
 * number of additional or pattern properties (where the schema allows them); required properties
 * the schema does not declare come after the declared ones. A property name and its ":" are one
 * lexeme, with the "," before it when it is not the first.
 *
 * Whitespace: by default any JSON whitespace before every token and after the value, at most
 * `maxWhitespace` bytes in a row (GRAMMAR_LIMITS.jsonWhitespace), so that a model cannot pad
 * forever; with `whitespaceFlexible: false`, none but the separators (", " and ": " by default).
 */
import { GrammarError, GrammarLimitError } from "../errors.ts";
import { ANY_CHAR, codePoints, single, utf8Expr, type CodeSet } from "./code-set.ts";
import { CfgBuilder, type Cfg } from "./cfg.ts";
import { INFINITE, type ExprPool } from "./expr.ts";
import { formatRegex } from "./json-formats.ts";
import { boundedNumberExpr, ceilDecimal, floorDecimal, fractionDigitsExpr, integerExpr, isInteger, nonIntegerExpr, parseDecimal } from "./json-numbers.ts";
import { isAssertion } from "./json-schema-keywords.ts";
import { SchemaDocument } from "./json-schema-refs.ts";
import { pureRef, ShapeBuilder } from "./json-schema-shape.ts";
import { canonical, isFalse, T_ARRAY, T_BOOLEAN, T_FRACTION, T_INTEGER, T_NULL, T_OBJECT, T_STRING, type Conj, type Shape } from "./json-shape.ts";
import { anyContent, contentExcept, jsonCharExpr, jsonLiteralExpr, pythonJsonQuote, quoted } from "./json-strings.ts";
import { isObject, JsonNumber, pythonJsonDumps, pythonNumberText, type JsonValue } from "./json-value.ts";
import { GRAMMAR_LIMITS, nestingError, type CompileBudget } from "./limits.ts";
import { literalSet, scalarText } from "./literal-set.ts";
import { regexToExpr } from "./regex-expr.ts";
import { anchoredLiterals, parseRegex, RegexSyntaxError } from "./regex-syntax.ts";

export interface JsonSchemaOptions {
  /** Any JSON whitespace between tokens (default true); false: only the separators below. */
  readonly whitespaceFlexible?: boolean;
  /** Between array items and object members when whitespace is not flexible (default ", "). */
  readonly itemSeparator?: string;
  /** Between a property name and its value when whitespace is not flexible (default ": "). */
  readonly keySeparator?: string;
  /** Most whitespace bytes in a row where whitespace is flexible (default GRAMMAR_LIMITS.jsonWhitespace). */
  readonly maxWhitespace?: number;
}

const utf8 = new TextEncoder();
const regexCache = new WeakMap<ExprPool, Map<string, number>>();

/** A regex as an expression, cached per pool; `json`: over JSON string contents, else raw UTF-8. */
export function cachedRegex(pool: ExprPool, source: string, mode: "search" | "full", json: boolean, where: string): number {
  let cache = regexCache.get(pool);
  if (cache === undefined) regexCache.set(pool, (cache = new Map()));
  const key = `${mode}${json ? "j" : "u"}${source}`;
  const hit = cache.get(key);
  if (hit !== undefined) return hit;
  let expr: number;
  try {
    const encode = json ? (set: CodeSet) => jsonCharExpr(pool, set) : (set: CodeSet) => utf8Expr(pool, set);
    expr = regexToExpr(pool, parseRegex(source), encode, mode);
  } catch (e) {
    if (e instanceof RegexSyntaxError) {
      const message = `${where}: ${source.length > 80 ? `${JSON.stringify(source.slice(0, 80))}...` : JSON.stringify(source)}: ${e.message}`;
      throw e.limit === null ? new GrammarError(message) : new GrammarLimitError(e.limit, message);
    }
    throw e;
  }
  cache.set(key, expr);
  return expr;
}

export function jsonSchemaToCfg(pool: ExprPool, schema: JsonValue, options: JsonSchemaOptions, budget: CompileBudget): Cfg {
  return new JsonGrammarBuilder(pool, schema, options, new CfgBuilder(pool, budget)).build();
}

/**
 * The symbols of one JSON value following `schema` (a document of its own: its `$ref`s resolve
 * against it), or the schema found in it at the JSON pointer `at`, added to the grammar `b` is
 * building; no whitespace after the value.
 */
export function jsonSchemaSymbols(b: CfgBuilder, schema: JsonValue, options: JsonSchemaOptions = {}, at = "#"): number[] {
  return new JsonGrammarBuilder(b.pool, schema, options, b).value(at);
}

/**
 * The strings the schema at `at` in `schema` allows, as their text itself (UTF-8, without quotes
 * or escapes): one expression, EMPTY where the schema allows no string. Length, pattern, format,
 * enum and const hold as they do for JSON strings (Qwen3-Coder's XML parameters write text so).
 */
export function jsonSchemaStringText(b: CfgBuilder, schema: JsonValue, at: string): number {
  return new JsonGrammarBuilder(b.pool, schema, {}, b).stringText(at);
}

/** The names a pattern is an anchored list of (`^(a|b)$`), or null. */
function literalNames(pattern: string): string[] | null {
  try {
    return anchoredLiterals(parseRegex(pattern));
  } catch {
    return null; // compiling the pattern reports the error
  }
}

/** Whether a shape's string keywords allow every string. */
function plainStrings(s: Shape): boolean {
  return s.minLength === 0 && s.maxLength === Infinity && s.patterns.length === 0 && s.notStrings.length === 0 && s.notShapes.length === 0 && s.formats.every((f) => formatRegex(f) === undefined);
}

class JsonGrammarBuilder {
  private readonly b: CfgBuilder;
  private readonly doc: SchemaDocument;
  private readonly shapes: ShapeBuilder;
  private readonly flexible: boolean;
  private readonly ws: number;
  private readonly refRules = new Map<string, number>();
  private readonly conjMemo = new Map<string, number[]>();
  private readonly rawIds = new WeakMap<object, number>();
  private readonly memoHits = new Set<string>();
  private owsRule = -1;

  constructor(private readonly pool: ExprPool, private readonly schema: JsonValue, private readonly options: JsonSchemaOptions, b: CfgBuilder) {
    this.b = b;
    this.doc = new SchemaDocument(schema);
    this.shapes = new ShapeBuilder(this.doc, (p, key, where) => pool.matches(cachedRegex(pool, p, "search", false, where), utf8.encode(key)), {
      stringsMeet: (a, b) => plainStrings(a) || plainStrings(b) || this.stringsMeet(a, b),
      stringsOutside: (a, b) => !plainStrings(b) && !pool.isEmpty(pool.and([this.stringContent(a), pool.not(this.stringContent(b))])),
      valueFits: (v, s) => this.valueFits(s)(v, canonical(v)),
      checkBudget: () => this.b.check(),
      patternsMeet: (p, q) => !pool.isEmpty(pool.and([cachedRegex(pool, p, "search", false, "patternProperties"), cachedRegex(pool, q, "search", false, "patternProperties")])),
    });
    this.flexible = options.whitespaceFlexible ?? true;
    const wsChar = pool.or([pool.byteRange(0x20, 0x20), pool.byteRange(0x09, 0x0a), pool.byteRange(0x0d, 0x0d)]);
    this.ws = pool.repeat(wsChar, 0, options.maxWhitespace ?? GRAMMAR_LIMITS.jsonWhitespace);
  }

  build(): Cfg {
    return this.b.build(this.b.rule("root", [[...this.value(), ...this.ows()]]), "the schema");
  }

  /** The value of the schema at `at` (the whole schema: "#"). */
  value(at = "#"): number[] {
    const target = at === "#" ? { raw: this.schema, path: "#" } : this.doc.resolve(at, "#");
    return this.conj([target], target.path);
  }

  /**
   * Whether some string meets both shapes' string keywords. A pattern that is a list of names
   * (`^Displace$`, a discriminator) is decided by matching the names, without a search.
   */
  private stringsMeet(a: Shape, b: Shape): boolean {
    const pool = this.pool;
    const contentOf = (name: string): Uint8Array => utf8.encode(pythonJsonQuote(name).slice(1, -1));
    for (const [s, other] of [[a, b], [b, a]] as const) {
      const names = s.patterns.map((p) => literalNames(p)).find((n) => n !== null);
      if (names === undefined || names === null) continue;
      const mine = this.stringContent(s);
      const theirs = this.stringContent(other);
      return names.some((n) => pool.matches(mine, contentOf(n)) && pool.matches(theirs, contentOf(n)));
    }
    return !pool.isEmpty(pool.and([this.stringContent(a), this.stringContent(b)]));
  }

  /** The texts of the strings the schema at `at` allows (jsonSchemaStringText). */
  stringText(at: string): number {
    const target = this.doc.resolve(at, "#");
    const parts: number[] = [];
    for (const s of this.shapes.shapes([target], target.path)) {
      if (!(s.types & T_STRING)) continue;
      if (s.enumValues === null) parts.push(this.stringContent(s, false));
      else {
        const fits = this.valueFits(s);
        for (const [text, v] of s.enumValues) if (typeof v === "string" && fits(v, text)) parts.push(this.pool.literal(scalarText(v, `${s.path} (enum/const)`)));
      }
    }
    return this.pool.or(parts);
  }

  // --- lexemes ---
  // Whitespace is its own lexeme (WS, optional before every token and after the value), and so is
  // each punctuation mark: the lexer states after a value ({WS, ",", "}"}) or inside a string are
  // then the same for every schema, and so are their cached masks.

  /** Optional whitespace (nothing where whitespace is not flexible). */
  private ows(): number[] {
    if (!this.flexible) return [];
    if (this.owsRule < 0) this.owsRule = this.b.rule("whitespace", [[], [this.b.terminal(this.pool.nonEmpty(this.ws))]]);
    return [this.owsRule];
  }
  private lex(expr: number): number[] {
    return [...this.ows(), this.b.terminal(expr)];
  }
  private text(s: string): number {
    return this.pool.literal(utf8.encode(s));
  }
  private punct(s: string): number[] {
    return this.lex(this.text(s));
  }
  private comma(): number[] {
    return this.flexible ? this.punct(",") : [this.b.terminal(this.text(this.options.itemSeparator ?? ", "))];
  }
  /** A property name (a quoted expression) and its colon, after a comma unless it is the first. */
  private key(first: boolean, name: number): number[] {
    const colon = this.flexible ? this.punct(":") : [this.b.terminal(this.text(this.options.keySeparator ?? ": "))];
    return [...(first ? [] : this.comma()), ...this.lex(name), ...colon];
  }

  // --- schemas ---

  private nextRawId = 0;
  /** An identity for a written schema (memo key): booleans by value, objects by identity. */
  private rawId(raw: JsonValue): string {
    if (typeof raw !== "object" || raw === null) return String(raw);
    // A schema of annotations only ({}, {"description": ...}) is `true`: one rule for all of them.
    if (isObject(raw) && raw.keys.every((k) => !isAssertion(k))) return "true";
    let id = this.rawIds.get(raw);
    if (id === undefined) this.rawIds.set(raw, (id = this.nextRawId++));
    return `#${id}`;
  }

  /** Schemas being built around the current one (`$ref` hops included), for the nesting limit. */
  private depth = 0;

  /** Symbols matching one JSON value valid against every schema of `conj`. */
  private conj(conj: Conj, path: string): number[] {
    if (this.depth >= GRAMMAR_LIMITS.nesting) throw nestingError(`${path}: schemas and $ref hops`);
    this.depth++;
    try {
      return this.conjSymbols(conj, path);
    } finally {
      this.depth--;
    }
  }

  private conjSymbols(conj: Conj, path: string): number[] {
    if (conj.length === 1) {
      const ref = pureRef(conj[0]!.raw);
      if (ref !== null) return [this.refRule(ref, conj[0]!.path)];
    }
    const key = conj.map((a) => this.rawId(a.raw)).join(",");
    const memo = this.conjMemo.get(key);
    if (memo !== undefined) {
      this.memoHits.add(key);
      return memo;
    }
    // The rule is registered before its alternatives are built: `true` and other recursive
    // shapes (an array of anything) refer to themselves.
    const rule = this.b.rule(path);
    this.conjMemo.set(key, [rule]);
    const alternatives = this.shapes.shapes(conj, path).flatMap((s) => this.shapeAlternatives(s));
    if (alternatives.length === 1 && !this.memoHits.has(key)) {
      // Nothing referred to the rule: use its one alternative in place (the rule stays empty).
      this.conjMemo.set(key, alternatives[0]!);
      return alternatives[0]!;
    }
    this.b.define(rule, alternatives);
    return [rule];
  }

  private refRule(ref: string, from: string): number {
    const target = this.doc.resolve(ref, from);
    let rule = this.refRules.get(target.path);
    if (rule !== undefined) return rule;
    rule = this.b.rule(target.path);
    this.refRules.set(target.path, rule);
    this.b.define(rule, [this.conj([target], target.path)]);
    return rule;
  }

  private shapeAlternatives(s: Shape): number[][] {
    if (s.enumValues !== null) return this.enumAlternatives(s);
    const out: number[][] = [];
    if (s.types & T_NULL) out.push(this.lex(this.text("null")));
    if (s.types & T_BOOLEAN) out.push(this.lex(this.pool.or([this.text("true"), this.text("false")])));
    if (s.types & (T_INTEGER | T_FRACTION)) {
      const n = this.numberExpr(s);
      if (!this.pool.isEmpty(n)) out.push(this.lex(n));
    }
    if (s.types & T_STRING) {
      const str = this.stringExpr(s);
      // isEmpty, not only EMPTY: a pattern and a length can leave nothing (an And), and a schema
      // that matches nothing is refused at compile time, never a dead end while decoding.
      if (!this.pool.isEmpty(str)) out.push(this.lex(str));
    }
    if (s.types & T_ARRAY) out.push(...this.arrayAlternatives(s));
    if (s.types & T_OBJECT) out.push(...this.objectAlternatives(s));
    return out;
  }

  /**
   * The enum's (or const's) values that meet the shape's other keywords: its scalars as one lexeme
   * shaped as their trie (literal-set.ts: linear in their bytes, however many), then each object
   * or array value.
   */
  private enumAlternatives(s: Shape): number[][] {
    const scalars: Uint8Array[] = [];
    const out: number[][] = [];
    const fits = this.valueFits(s);
    // Keys are the values' canonical texts (Shape.enumValues): a number's is parsed once, there.
    for (const [text, v] of s.enumValues!) {
      if (!fits(v, text)) continue;
      if (Array.isArray(v) || isObject(v)) out.push(this.valueSymbols(v, `${s.path} (enum/const)`));
      else scalars.push(...this.scalarTexts(v, text, `${s.path} (enum/const)`));
    }
    if (scalars.length > 0) out.unshift(this.lex(literalSet(this.pool, scalars)));
    return out;
  }

  /**
   * Whether an enum value also meets the shape's other keywords (type, and those of its type); the
   * expressions it checks against are made once for all the values.
   */
  private valueFits(s: Shape): (v: JsonValue, canonicalText: string) => boolean {
    let strings: number | undefined;
    const numbers = new Map<boolean, number>();
    return (v, canonicalText) => {
      if (v === null) return (s.types & T_NULL) !== 0;
      if (typeof v === "boolean") return (s.types & T_BOOLEAN) !== 0;
      if (typeof v === "string") return (s.types & T_STRING) !== 0 && this.pool.matches((strings ??= this.stringExpr(s)), utf8.encode(pythonJsonQuote(v)));
      if (v instanceof JsonNumber) {
        const integral = isInteger(parseDecimal(v.text));
        if (!(s.types & T_FRACTION) && !(integral && s.types & T_INTEGER)) return false;
        let expr = numbers.get(integral);
        if (expr === undefined) numbers.set(integral, (expr = this.numberExpr({ ...s, types: s.types | (integral ? T_INTEGER : T_FRACTION) })));
        return this.pool.matches(expr, utf8.encode(canonicalText));
      }
      return (s.types & (Array.isArray(v) ? T_ARRAY : T_OBJECT)) !== 0;
    };
  }

  /**
   * A scalar's spellings: numbers as written canonically (`canonicalText`, Shape.enumValues' key),
   * integral ones also as N.0; strings in their canonical JSON form.
   */
  private scalarTexts(v: JsonValue, canonicalText: string, where: string): Uint8Array[] {
    if (v === null) return [utf8.encode("null")];
    if (typeof v === "boolean") return [utf8.encode(String(v))];
    if (typeof v === "string") return [scalarText(pythonJsonQuote(v), where)];
    const forms = new Set([pythonNumberText(v as JsonNumber), canonicalText]);
    if (!canonicalText.includes(".")) {
      forms.add(`${canonicalText}.0`);
      if (canonicalText === "0") forms.add("-0");
    }
    return [...forms].map((f) => utf8.encode(f));
  }

  /** A fixed text in its one canonical JSON spelling; GrammarError naming `where` for a lone surrogate. */
  private quotedText(text: string, where: string): number {
    return this.pool.literal(scalarText(pythonJsonQuote(text), where));
  }

  /** Symbols matching exactly one JSON value (enum/const members that are objects or arrays). */
  private valueSymbols(v: JsonValue, where: string): number[] {
    if (Array.isArray(v)) {
      const out = this.punct("[");
      v.forEach((x, i) => {
        if (i > 0) out.push(...this.comma());
        out.push(...this.valueSymbols(x, where));
      });
      out.push(...this.punct("]"));
      return out;
    }
    if (isObject(v)) {
      const out = this.punct("{");
      v.entries.forEach(([k, x], i) => out.push(...this.key(i === 0, this.quotedText(k, where)), ...this.valueSymbols(x, where)));
      out.push(...this.punct("}"));
      return out;
    }
    return this.lex(literalSet(this.pool, this.scalarTexts(v, canonical(v), where)));
  }

  /** Number lexemes by their keywords: a thousand properties of one number type build it once. */
  private readonly numberExprs = new Map<string, number>();

  private numberExpr(s: Shape): number {
    const key = JSON.stringify([s.types & (T_INTEGER | T_FRACTION), s.min, s.minExclusive, s.max, s.maxExclusive, s.multipleOf]);
    let expr = this.numberExprs.get(key);
    if (expr === undefined) this.numberExprs.set(key, (expr = this.buildNumberExpr(s)));
    return expr;
  }

  private buildNumberExpr(s: Shape): number {
    const pool = this.pool;
    const where = s.path;
    if (!(s.types & T_FRACTION)) {
      const lo = s.min === null ? null : s.minExclusive ? floorDecimal(s.min) + 1n : ceilDecimal(s.min);
      const hi = s.max === null ? null : s.maxExclusive ? ceilDecimal(s.max) - 1n : floorDecimal(s.max);
      if (lo !== null && hi !== null && lo > hi) return 0;
      let expr = integerExpr(pool, lo, hi);
      for (const m of s.multipleOf) {
        if (!isInteger(m) || m.int === "1") continue;
        const zeros = /^10*$/.exec(m.int);
        if (zeros === null) throw new GrammarError(`${where}: "multipleOf": ${m.int} on integers is supported only for powers of 10`);
        const k = m.int.length - 1;
        const tail = pool.seq([pool.repeat(this.text("-"), 0, 1), pool.byteRange(0x31, 0x39), pool.repeat(pool.byteRange(0x30, 0x39), 0, INFINITE), pool.repeat(this.text("0"), k, k)]);
        expr = pool.and([expr, pool.or([this.text("0"), this.text("-0"), tail])]);
      }
      return expr;
    }
    let expr = boundedNumberExpr(pool, { min: s.min, minExclusive: s.minExclusive, max: s.max, maxExclusive: s.maxExclusive });
    // T_FRACTION without T_INTEGER: the numbers that are not integers (1.0 is an integer).
    if (!(s.types & T_INTEGER)) expr = pool.and([expr, nonIntegerExpr(pool)]);
    for (const m of s.multipleOf) {
      const digits = m.int === "0" && /^0*1$/.test(m.frac) ? m.frac.length : m.int === "1" && m.frac === "" ? 0 : -1;
      if (digits < 0) throw new GrammarError(`${where}: "multipleOf" on numbers is supported only for 1, 0.1, 0.01, ...`);
      expr = pool.and([expr, fractionDigitsExpr(pool, digits)]);
    }
    return expr;
  }

  /**
   * The content (between the quotes) of strings the shape allows; with `json` false, their text
   * as UTF-8 instead (no escapes).
   */
  private stringContent(s: Shape, json = true): number {
    const pool = this.pool;
    const parts: number[] = [];
    const anyChar = json ? jsonCharExpr(pool, ANY_CHAR) : utf8Expr(pool, ANY_CHAR);
    if (s.minLength > s.maxLength) return 0;
    if (s.minLength > 0 || s.maxLength !== Infinity) parts.push(pool.repeat(anyChar, s.minLength, s.maxLength === Infinity ? INFINITE : s.maxLength));
    else if (!json) parts.push(pool.repeat(anyChar, 0, INFINITE));
    else if (s.patterns.length === 0 && s.formats.length === 0) parts.push(anyContent(pool));
    for (const p of s.patterns) parts.push(cachedRegex(pool, p, "search", json, `${s.path}/pattern`));
    for (const f of s.formats) {
      const rx = formatRegex(f);
      if (rx !== undefined) parts.push(cachedRegex(pool, rx, "full", json, `${s.path}/format`));
    }
    if (s.notStrings.length > 0) parts.push(json ? contentExcept(pool, s.notStrings) : pool.not(pool.or(s.notStrings.map((t) => this.text(t)))));
    for (const other of s.notShapes) parts.push(pool.not(this.stringContent(other, json)));
    return pool.and(parts);
  }

  private stringExpr(s: Shape): number {
    const content = this.stringContent(s);
    // Strings excluded by others (oneOf, not) may leave none: then no lexeme, as for any empty one.
    return content === 0 || (s.notShapes.length > 0 && this.pool.isEmpty(content)) ? 0 : quoted(this.pool, content);
  }

  /** Every JSON spelling of the text's characters (escapes included). */
  private spellings(text: string): number {
    return this.pool.seq(codePoints(text).map((cp) => jsonCharExpr(this.pool, single(cp))));
  }

  private arrayAlternatives(s: Shape): number[][] {
    const prefix = s.prefixItems;
    const restFalse = isFalse(s.items);
    const max = restFalse ? Math.min(s.maxItems, prefix.length) : s.maxItems;
    const min = s.minItems;
    if (min > max) return [];
    const item = (j: number): number[] => this.conj(j < prefix.length ? prefix[j]! : s.items, `${s.path}/items`);
    const open = this.punct("[");
    const close = this.punct("]");
    // The items after the first `fixed` (prefix items and minItems): as many of them as wanted when
    // maxItems does not bound them, as a left-recursive list; otherwise up to maxItems, counted.
    const fixed = Math.max(prefix.length, min);
    const counted = max === Infinity ? fixed : max;
    if (counted > GRAMMAR_LIMITS.rules) {
      throw new GrammarLimitError("rules", `${s.path}: ${max === Infinity ? "minItems/prefixItems" : "maxItems"} of ${counted} needs more than ${GRAMMAR_LIMITS.rules} rules (limit: rules)`);
    }
    let next: number[] = [];
    if (max === Infinity) {
      const value = item(fixed);
      const list = this.b.rule(`${s.path} items`);
      if (fixed === 0) {
        const more = this.b.rule(`${s.path} more items`, [[]]);
        this.b.define(more, [[more, ...this.comma(), ...value]]);
        this.b.define(list, [[], [...value, more]]);
      } else {
        this.b.define(list, [[], [list, ...this.comma(), ...value]]);
      }
      next = [list];
    }
    // Built from the last counted item back, so that no recursion grows with the count.
    for (let j = counted - 1; j >= 0; j--) {
      const alts: number[][] = [[...(j > 0 ? this.comma() : []), ...item(j), ...next]];
      if (j >= min) alts.unshift([]);
      next = [this.b.rule(`${s.path} item ${j}`, alts)];
    }
    return [[...open, ...next, ...close]];
  }

  private objectAlternatives(s: Shape): number[][] {
    const pool = this.pool;
    const nameOk = this.propertyNameContent(s);
    const declared: [string, Conj][] = [];
    for (const [name, schema] of s.properties) {
      if (isFalse(schema) || (nameOk !== null && !pool.matches(nameOk, utf8.encode(pythonJsonQuote(name).slice(1, -1))))) {
        if (s.required.has(name)) return [];
        continue;
      }
      declared.push([name, schema]);
    }
    // Required names the schema does not declare: pattern or additional properties, after the declared.
    for (const name of s.required) {
      if (s.properties.has(name)) continue;
      const matched = s.patternProperties.filter(([p]) => pool.matches(cachedRegex(pool, p, "search", false, `${s.path}/patternProperties`), utf8.encode(name)));
      const schema = matched.length > 0 ? matched.flatMap(([, c]) => c) : s.additional;
      if (isFalse(schema)) return [];
      declared.push([name, schema]);
    }
    // Declared names never come back as additional or pattern properties, `false` ones included.
    const extras = this.extraKinds(s, [...new Set([...s.properties.keys(), ...declared.map(([n]) => n)])], nameOk);
    const maxCount = extras.length > 0 ? Infinity : declared.length;
    // Members are counted only as far as min/maxProperties need: k is the count so far, exact up to
    // maxProperties where that bounds anything, else capped at max(minProperties, 1) (k > 0 also
    // says a comma comes before the next member).
    const bounded = s.maxProperties < maxCount;
    const top = bounded ? s.maxProperties : Math.max(s.minProperties, 1);
    if (s.minProperties > top) return [];
    if (top > 1 && (declared.length + 1) * (top + 1) > GRAMMAR_LIMITS.rules) {
      throw new GrammarLimitError("rules", `${s.path}: "minProperties"/"maxProperties" of ${top} over ${declared.length} properties needs more than ${GRAMMAR_LIMITS.rules} rules (limit: rules)`);
    }
    const after = (k: number): number => (bounded ? k + 1 : Math.min(k + 1, top));
    const canAdd = (k: number): boolean => !bounded || k < top;
    const extraItems = new Map<boolean, number>();
    const extraItem = (first: boolean): number => {
      let r = extraItems.get(first);
      if (r === undefined) {
        r = this.b.rule(`${s.path} additional property`, extras.map((kind) => [...this.key(first, kind.key), ...this.conj(kind.schema, `${s.path}/additionalProperties`)]));
        extraItems.set(first, r);
      }
      return r;
    };
    // rest[i][k]: the members from declared property i on, k members so far (made first, then
    // defined, so that nothing recurses with the number of properties).
    const rest = Array.from({ length: declared.length + 1 }, (_, i) =>
      Array.from({ length: top + 1 }, () => this.b.rule(i < declared.length ? `${s.path} from ${declared[i]![0]}` : `${s.path} additional properties`)));
    const values = declared.map(([name, schema]) => this.conj(schema, `${s.path}/properties/${name}`));
    const keys = declared.map(([name]) => this.quotedText(name, `${s.path}/properties`));
    for (let i = declared.length; i >= 0; i--) {
      for (let k = 0; k <= top; k++) {
        const alts: number[][] = [];
        if (i === declared.length) {
          if (k >= s.minProperties) alts.push([]);
          if (extras.length > 0 && canAdd(k)) alts.push([extraItem(k === 0), rest[i]![after(k)]!]);
        } else {
          const [name] = declared[i]!;
          if (canAdd(k)) alts.push([...this.key(k === 0, keys[i]!), ...values[i]!, rest[i + 1]![after(k)]!]);
          if (!s.required.has(name)) alts.push([rest[i + 1]![k]!]);
        }
        this.b.define(rest[i]![k]!, alts);
      }
    }
    return [[...this.punct("{"), rest[0]![0]!, ...this.punct("}")]];
  }

  /**
   * The keys of general patterns split where they overlap: a key matching several patterns takes
   * all their schemas (JSON Schema applies each), so overlapping patterns give one region per
   * combination that occurs (at most GRAMMAR_LIMITS.allOfBranches more); patterns that overlap none
   * stay as they are.
   */
  private patternRegions(general: readonly { expr: number; schema: Conj }[], where: string): { expr: number; schema: Conj }[] {
    const pool = this.pool;
    let regions: { expr: number; schema: Conj }[] = [];
    for (const g of general) {
      const next: { expr: number; schema: Conj }[] = [];
      const earlier: number[] = [];
      for (const r of regions) {
        const both = pool.and([r.expr, g.expr]);
        if (pool.isEmpty(both)) {
          next.push(r);
          continue;
        }
        earlier.push(r.expr);
        next.push({ expr: both, schema: [...r.schema, ...g.schema] });
        const only = pool.and([r.expr, pool.not(g.expr)]);
        if (!pool.isEmpty(only)) next.push({ expr: only, schema: r.schema });
      }
      const own = earlier.length === 0 ? g.expr : pool.and([g.expr, ...earlier.map((e) => pool.not(e))]);
      if (!pool.isEmpty(own)) next.push({ expr: own, schema: g.schema });
      if (next.length > general.length + GRAMMAR_LIMITS.allOfBranches) {
        throw new GrammarLimitError("allOfBranches", `${where}: overlapping patterns give more than ${GRAMMAR_LIMITS.allOfBranches} combinations of their schemas (limit: allOfBranches)`);
      }
      regions = next;
    }
    return regions;
  }

  /** The content a property name must match under propertyNames, or null when unconstrained. */
  private propertyNameContent(s: Shape): number | null {
    if (s.propertyNames.length === 0) return null;
    const shapes = this.shapes.shapes(s.propertyNames, `${s.path}/propertyNames`);
    const parts = shapes.map((ps) => {
      if (ps.enumValues !== null) return this.pool.or([...ps.enumValues.values()].filter((v): v is string => typeof v === "string").map((v) => this.spellings(v)));
      return ps.types & T_STRING ? this.stringContent(ps) : 0;
    });
    return this.pool.or(parts);
  }

  /**
   * The kinds of undeclared properties allowed: each pattern's, then the additional ones. A
   * pattern that is an anchored list of names (`^name$`) gives literal keys; the others a key
   * expression excluding only the names and earlier patterns it could overlap, so that keys stay
   * plain expressions (no And/Not) wherever they can.
   */
  private extraKinds(s: Shape, declared: string[], nameOk: number | null): { key: number; schema: Conj }[] {
    const pool = this.pool;
    const where = `${s.path}/patternProperties`;
    const content = (name: string): Uint8Array => utf8.encode(pythonJsonQuote(name).slice(1, -1));
    const kinds: { key: number; schema: Conj }[] = [];
    const named: string[] = [];
    // Patterns with the same schema are one kind, their union: n such patterns make one key
    // lexeme, not n that exclude each other (each an intersection with n complements to derive).
    const bySchema = new Map<string, { exprs: number[]; schema: Conj }>();
    for (const [pattern, schema] of s.patternProperties) {
      const names = literalNames(pattern);
      if (names === null) {
        const same = schema.map((at) => pythonJsonDumps(at.raw)).join("\u0000");
        const group = bySchema.get(same);
        const expr = cachedRegex(pool, pattern, "search", true, where);
        if (group === undefined) bySchema.set(same, { exprs: [expr], schema });
        else group.exprs.push(expr);
        continue;
      }
      for (const name of names) {
        if (declared.includes(name) || named.includes(name)) continue;
        named.push(name);
        // The name takes every pattern it matches (another list of names, or a general pattern).
        const all = s.patternProperties.filter(([p]) => pool.matches(cachedRegex(pool, p, "search", false, where), utf8.encode(name))).flatMap(([, c]) => c);
        if (!isFalse(all) && (nameOk === null || pool.matches(nameOk, content(name)))) kinds.push({ key: jsonLiteralExpr(pool, name), schema: all });
      }
    }
    const general = [...bySchema.values()].map(({ exprs, schema }) => ({ expr: pool.or(exprs), schema }));
    const excluded = [...declared, ...named];
    for (const r of this.patternRegions(general, `${where}`)) {
      if (isFalse(r.schema)) continue;
      const clash = excluded.filter((name) => pool.matches(r.expr, content(name)));
      const parts = [r.expr, ...(clash.length > 0 ? [contentExcept(pool, clash)] : []), ...(nameOk === null ? [] : [nameOk])];
      kinds.push({ key: quoted(pool, pool.and(parts)), schema: r.schema });
    }
    if (!isFalse(s.additional)) {
      const rest = excluded.length > 0 ? contentExcept(pool, excluded) : anyContent(pool);
      const parts = [rest, ...general.map((g) => pool.not(g.expr)), ...(nameOk === null ? [] : [nameOk])];
      kinds.push({ key: quoted(pool, pool.and(parts)), schema: s.additional });
    }
    return kinds;
  }
}

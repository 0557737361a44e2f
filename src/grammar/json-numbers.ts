/**
 * JSON numbers as byte expressions, with exact bounds: the decimal strings whose value lies in a
 * range, built digit by digit (as llguidance's and xgrammar's range regexes are). Integers take any
 * bounds; numbers take any decimal bounds in plain notation (1.25, not 1.25e0) — with a bound other
 * than zero the exponent form is not offered, so "1e2" is refused where 100 would pass (refused,
 * never let through). Bounds are exact decimals (no float rounding): 0.1 is 1/10.
 */
import { INFINITE, type ExprPool } from "./expr.ts";

/** An exact decimal: sign, integer digits (no leading zeros, "0" for zero) and fraction digits (no trailing zeros). */
export interface Decimal {
  readonly negative: boolean;
  readonly int: string;
  readonly frac: string;
}

/** The decimal a JSON number's text stands for, exactly (exponents applied to the digits). */
export function parseDecimal(text: string): Decimal {
  const m = /^(-?)([0-9]+)(?:\.([0-9]+))?(?:[eE]([-+]?[0-9]+))?$/.exec(text);
  if (m === null) throw new Error(`not a number: ${text}`);
  let digits = m[2]! + (m[3] ?? "");
  let point = m[2]!.length + Number(m[4] ?? "0");
  if (point < 0) {
    digits = "0".repeat(-point) + digits;
    point = 0;
  }
  if (point > digits.length) digits = digits.padEnd(point, "0");
  const int = digits.slice(0, point).replace(/^0+/, "") || "0";
  const frac = digits.slice(point).replace(/0+$/, "");
  return { negative: m[1] === "-" && (int !== "0" || frac !== ""), int, frac };
}

export function isInteger(d: Decimal): boolean {
  return d.frac === "";
}

/** The integer at or above d (ceil) and at or below it (floor), as BigInt. */
export function ceilDecimal(d: Decimal): bigint {
  const i = BigInt(d.int) * (d.negative ? -1n : 1n);
  return d.frac !== "" && !d.negative ? i + 1n : i;
}
export function floorDecimal(d: Decimal): bigint {
  const i = BigInt(d.int) * (d.negative ? -1n : 1n);
  return d.frac !== "" && d.negative ? i - 1n : i;
}

class Digits {
  constructor(private readonly pool: ExprPool) {}
  lit(text: string): number {
    return this.pool.literal(Array.from(text, (c) => c.charCodeAt(0)));
  }
  range(lo: number, hi: number): number {
    return lo > hi ? 0 : this.pool.byteRange(0x30 + lo, 0x30 + hi);
  }
  digits(min: number, max = min): number {
    return this.pool.repeat(this.range(0, 9), min, max);
  }
  /** Digit strings of the same length as `x` that are >= x (or > x when strict). */
  geSameLength(x: string, strict: boolean): number {
    if (x.length === 0) return strict ? 0 : 1;
    const d = x.charCodeAt(0) - 0x30;
    return this.pool.or([
      this.pool.concat(this.range(d + 1, 9), this.digits(x.length - 1)),
      this.pool.concat(this.range(d, d), this.geSameLength(x.slice(1), strict)),
    ]);
  }
  /** Digit strings of the same length as `x` that are <= x (or < x). */
  leSameLength(x: string, strict: boolean): number {
    if (x.length === 0) return strict ? 0 : 1;
    const d = x.charCodeAt(0) - 0x30;
    return this.pool.or([
      this.pool.concat(this.range(0, d - 1), this.digits(x.length - 1)),
      this.pool.concat(this.range(d, d), this.leSameLength(x.slice(1), strict)),
    ]);
  }
}

/** Canonical non-negative integers (no leading zeros) in lo..hi (hi null: unbounded). */
function naturalRange(pool: ExprPool, lo: bigint, hi: bigint | null): number {
  const g = new Digits(pool);
  if (hi !== null && hi < lo) return 0;
  const parts: number[] = [];
  if (lo === 0n) parts.push(g.lit("0"));
  const from = lo === 0n ? 1n : lo;
  const a = from.toString();
  const maxLen = hi === null ? null : hi.toString().length;
  for (let len = a.length; maxLen === null ? len === a.length : len <= maxLen; len++) {
    const low = len === a.length ? a : "1" + "0".repeat(len - 1);
    const high = hi !== null && len === maxLen ? hi.toString() : "9".repeat(len);
    if (hi !== null && BigInt(low) > hi) break;
    parts.push(sameLength(g, pool, low, high));
  }
  // Unbounded: every longer number.
  if (hi === null) parts.push(pool.concat(g.range(1, 9), g.digits(a.length, INFINITE)));
  return pool.or(parts);
}

/** Digit strings of one length between low and high (both that length). */
function sameLength(g: Digits, pool: ExprPool, low: string, high: string): number {
  if (low.length === 0) return 1;
  const dl = low.charCodeAt(0) - 0x30;
  const dh = high.charCodeAt(0) - 0x30;
  if (dl === dh) return pool.concat(g.range(dl, dl), sameLength(g, pool, low.slice(1), high.slice(1)));
  return pool.or([
    pool.concat(g.range(dl, dl), g.geSameLength(low.slice(1), false)),
    pool.concat(g.range(dl + 1, dh - 1), g.digits(low.length - 1)),
    pool.concat(g.range(dh, dh), g.leSameLength(high.slice(1), false)),
  ]);
}

/** JSON integers in lo..hi (null: unbounded on that side). "-0" counts as 0. */
export function integerExpr(pool: ExprPool, lo: bigint | null, hi: bigint | null): number {
  const minus = pool.byteRange(0x2d, 0x2d);
  const parts: number[] = [];
  // Non-negative part.
  if (hi === null || hi >= 0n) parts.push(naturalRange(pool, lo === null || lo < 0n ? 0n : lo, hi));
  // Negative part: -n for n in max(1, -hi)..-lo.
  if (lo === null || lo < 0n) {
    const nLo = hi === null || hi >= 0n ? 1n : -hi;
    parts.push(pool.concat(minus, naturalRange(pool, nLo, lo === null ? null : -lo)));
  }
  if ((lo === null || lo <= 0n) && (hi === null || hi >= 0n)) parts.push(pool.literal([0x2d, 0x30]));
  return pool.or(parts);
}

/** Any JSON number. */
export function anyNumberExpr(pool: ExprPool, allowNegative = true): number {
  const g = new Digits(pool);
  const int = pool.or([g.lit("0"), pool.concat(g.range(1, 9), g.digits(0, INFINITE))]);
  const frac = pool.repeat(pool.concat(pool.byteRange(0x2e, 0x2e), g.digits(1, INFINITE)), 0, 1);
  const exp = pool.repeat(pool.seq([pool.or([g.lit("e"), g.lit("E")]), pool.repeat(pool.or([g.lit("+"), g.lit("-")]), 0, 1), g.digits(1, INFINITE)]), 0, 1);
  const sign = allowNegative ? pool.repeat(g.lit("-"), 0, 1) : 1;
  return pool.seq([sign, int, frac, exp]);
}

/** Fraction digits D (at least one) with 0.D >= 0.x (> when strict); x has no trailing zeros. */
function fracGe(g: Digits, pool: ExprPool, x: string, strict: boolean): number {
  if (x.length === 0) return strict ? pool.seq([g.digits(0, INFINITE), g.range(1, 9), g.digits(0, INFINITE)]) : g.digits(1, INFINITE);
  const d = x.charCodeAt(0) - 0x30;
  const rest = x.length === 1 ? (strict ? pool.seq([g.digits(0, INFINITE), g.range(1, 9), g.digits(0, INFINITE)]) : g.digits(0, INFINITE)) : fracGe(g, pool, x.slice(1), strict);
  return pool.or([pool.concat(g.range(d + 1, 9), g.digits(0, INFINITE)), pool.concat(g.range(d, d), rest)]);
}

/** Fraction digits D (at least one) with 0.D <= 0.x (< when strict); x has no trailing zeros. */
function fracLe(g: Digits, pool: ExprPool, x: string, strict: boolean): number {
  const zeros = pool.repeat(g.range(0, 0), 0, INFINITE);
  if (x.length === 0) return strict ? 0 : pool.repeat(g.range(0, 0), 1, INFINITE);
  const d = x.charCodeAt(0) - 0x30;
  // After x's first digit: the end (x has more, non-zero digits), or what is <= the rest of x;
  // after its last digit: zeros (equal), nothing more when strict.
  const rest = x.length === 1 ? (strict ? 0 : zeros) : pool.or([1, fracLe(g, pool, x.slice(1), strict)]);
  return pool.or([pool.concat(g.range(0, d - 1), g.digits(0, INFINITE)), pool.concat(g.range(d, d), rest)]);
}

/** Plain-notation non-negative numbers (int, optional fraction) >= x, or > x when strict. */
function plainGe(pool: ExprPool, x: Decimal, strict: boolean): number {
  const g = new Digits(pool);
  const dot = pool.byteRange(0x2e, 0x2e);
  const anyFrac = pool.repeat(pool.concat(dot, g.digits(1, INFINITE)), 0, 1);
  const int = BigInt(x.int);
  const above = pool.concat(naturalRange(pool, int + 1n, null), anyFrac);
  // Equal integer part: the fraction decides; no fraction means .0.
  const noFracOk = !strict && x.frac === "";
  const equal = pool.concat(g.lit(x.int), pool.or([noFracOk ? 1 : 0, pool.concat(dot, fracGe(g, pool, x.frac, strict))]));
  return pool.or([above, equal]);
}

/** Plain-notation non-negative numbers <= x, or < x when strict. */
function plainLe(pool: ExprPool, x: Decimal, strict: boolean): number {
  const g = new Digits(pool);
  const dot = pool.byteRange(0x2e, 0x2e);
  const anyFrac = pool.repeat(pool.concat(dot, g.digits(1, INFINITE)), 0, 1);
  const int = BigInt(x.int);
  const below = int > 0n ? pool.concat(naturalRange(pool, 0n, int - 1n), anyFrac) : 0;
  const noFracOk = !(strict && x.frac === "");
  const equal = pool.concat(g.lit(x.int), pool.or([noFracOk ? 1 : 0, pool.concat(dot, fracLe(g, pool, x.frac, strict))]));
  return pool.or([below, equal]);
}

export interface NumberBounds {
  readonly min: Decimal | null;
  readonly minExclusive: boolean;
  readonly max: Decimal | null;
  readonly maxExclusive: boolean;
}

/** JSON numbers within the bounds. */
export function boundedNumberExpr(pool: ExprPool, b: NumberBounds): number {
  if (b.min === null && b.max === null) return anyNumberExpr(pool);
  const zero = (d: Decimal | null): boolean => d !== null && d.int === "0" && d.frac === "";
  // x >= 0 alone: every unsigned number, exponents included.
  if (b.max === null && zero(b.min) && !b.minExclusive) {
    const negZero = pool.concat(pool.literal([0x2d, 0x30]), pool.repeat(pool.concat(pool.byteRange(0x2e, 0x2e), pool.repeat(pool.byteRange(0x30, 0x30), 1, INFINITE)), 0, 1));
    return pool.or([anyNumberExpr(pool, false), negZero]);
  }
  const minus = pool.byteRange(0x2d, 0x2d);
  const parts: number[] = [];
  const lower = (): number => {
    if (b.min === null) return pool.or([plainGe(pool, { negative: false, int: "0", frac: "" }, false), pool.concat(minus, plainGe(pool, { negative: false, int: "0", frac: "" }, false))]);
    if (!b.min.negative) {
      const pos = plainGe(pool, b.min, b.minExclusive);
      return zero(b.min) && !b.minExclusive ? pool.or([pos, pool.concat(minus, plainLe(pool, b.min, false))]) : pos;
    }
    const mag = { negative: false, int: b.min.int, frac: b.min.frac };
    return pool.or([plainGe(pool, { negative: false, int: "0", frac: "" }, false), pool.concat(minus, plainLe(pool, mag, b.minExclusive))]);
  };
  const upper = (): number => {
    if (b.max === null) return pool.or([plainGe(pool, { negative: false, int: "0", frac: "" }, false), pool.concat(minus, plainGe(pool, { negative: false, int: "0", frac: "" }, false))]);
    if (b.max.negative) {
      const mag = { negative: false, int: b.max.int, frac: b.max.frac };
      return pool.concat(minus, plainGe(pool, mag, b.maxExclusive));
    }
    // Non-negative bound: every negative number, and non-negatives up to it; below zero itself
    // (exclusive), "-0" and "-0.0" are zero and so not below it.
    const nonNeg = plainLe(pool, b.max, b.maxExclusive);
    const negatives = pool.concat(minus, plainGe(pool, { negative: false, int: "0", frac: "" }, zero(b.max) && b.maxExclusive));
    return pool.or([nonNeg, negatives]);
  };
  parts.push(lower(), upper());
  return pool.and(parts);
}

/** Numbers that are not integers, in plain notation (a fraction with a non-zero digit): `not: {type: "integer"}`. */
export function nonIntegerExpr(pool: ExprPool): number {
  const g = new Digits(pool);
  const int = pool.or([g.lit("0"), pool.concat(g.range(1, 9), g.digits(0, INFINITE))]);
  return pool.seq([pool.repeat(g.lit("-"), 0, 1), int, pool.byteRange(0x2e, 0x2e), g.digits(0, INFINITE), g.range(1, 9), g.digits(0, INFINITE)]);
}

/** Plain-notation numbers with at most `digits` significant fraction digits (multipleOf 10^-digits). */
export function fractionDigitsExpr(pool: ExprPool, digits: number): number {
  const g = new Digits(pool);
  const int = pool.or([g.lit("0"), pool.concat(g.range(1, 9), g.digits(0, INFINITE))]);
  const frac = digits === 0
    ? pool.repeat(pool.concat(pool.byteRange(0x2e, 0x2e), pool.repeat(g.range(0, 0), 1, INFINITE)), 0, 1)
    : pool.repeat(pool.seq([pool.byteRange(0x2e, 0x2e), g.digits(1, digits), pool.repeat(g.range(0, 0), 0, INFINITE)]), 0, 1);
  return pool.seq([pool.repeat(g.lit("-"), 0, 1), int, frac]);
}

/** The order of two decimals: negative, zero or positive as a is below, at or above b. */
export function compareDecimal(a: Decimal, b: Decimal): number {
  const sign = (d: Decimal): number => (d.negative ? -1 : d.int === "0" && d.frac === "" ? 0 : 1);
  if (sign(a) !== sign(b)) return sign(a) - sign(b);
  const mag = (): number => {
    if (a.int.length !== b.int.length) return a.int.length - b.int.length;
    if (a.int !== b.int) return a.int < b.int ? -1 : 1;
    const n = Math.max(a.frac.length, b.frac.length);
    const fa = a.frac.padEnd(n, "0");
    const fb = b.frac.padEnd(n, "0");
    return fa === fb ? 0 : fa < fb ? -1 : 1;
  };
  return sign(a) < 0 ? -mag() : mag();
}


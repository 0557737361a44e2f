/**
 * Number ranges (src/grammar/json-numbers.ts) against arithmetic: every integer and a grid of
 * decimals, written as JSON writes them, is matched iff its value lies within the bounds.
 */
import { describe, expect, test } from "bun:test";
import { ExprPool } from "../src/grammar/expr.ts";
import { boundedNumberExpr, fractionDigitsExpr, integerExpr, parseDecimal } from "../src/grammar/json-numbers.ts";
import { Xoshiro128 } from "../src/util/random.ts";

const utf8 = new TextEncoder();
const pool = new ExprPool();
const m = (e: number, s: string): boolean => pool.matches(e, utf8.encode(s));

describe("integer ranges", () => {
  test("every integer in -1200..1200 is matched iff within [lo, hi], for random and edge bounds", () => {
    const rng = new Xoshiro128(3);
    const bounds: [bigint | null, bigint | null][] = [[null, null], [0n, null], [null, 0n], [1n, 1n], [-5n, 5n], [10n, 99n], [100n, 100n], [-999n, -100n], [7n, 1000n], [null, -1n], [1n, null]];
    for (let i = 0; i < 25; i++) {
      const a = BigInt(Math.floor(rng.nextFloat() * 2400) - 1200);
      const b = a + BigInt(Math.floor(rng.nextFloat() * 900));
      bounds.push([a, b]);
    }
    for (const [lo, hi] of bounds) {
      const e = integerExpr(pool, lo, hi);
      for (let v = -1200; v <= 1200; v++) {
        const inRange = (lo === null || BigInt(v) >= lo) && (hi === null || BigInt(v) <= hi);
        expect([String(lo), String(hi), v, m(e, String(v))]).toEqual([String(lo), String(hi), v, inRange]);
      }
      // Not JSON integers: leading zeros, plus signs, fractions.
      for (const bad of ["01", "+1", "1.0", "-", "", "1e2"]) expect([bad, m(e, bad)]).toEqual([bad, false]);
    }
  });

  test("huge bounds are exact digit by digit", () => {
    const e = integerExpr(pool, 12345678901234567890n, 12345678901234567999n);
    expect(m(e, "12345678901234567890")).toBe(true);
    expect(m(e, "12345678901234567999")).toBe(true);
    expect(m(e, "12345678901234568000")).toBe(false);
    expect(m(e, "12345678901234567889")).toBe(false);
  });
});

describe("decimal bounds", () => {
  const decimals = (): string[] => {
    const out: string[] = [];
    for (let i = -400; i <= 400; i++) {
      const v = i / 40;
      out.push(String(v), v.toFixed(3));
      if (Number.isInteger(v)) out.push(`${v}.0`);
    }
    return out;
  };
  const value = (s: string): number => Number(s);

  test("numbers in plain notation are matched iff within the bounds, inclusive or exclusive", () => {
    const cases: [string | null, boolean, string | null, boolean][] = [
      ["0", false, null, false], ["0", true, null, false], ["1.5", false, "7.25", true], ["-2.5", true, "2.5", false], [null, false, "-0.75", false],
      ["-10", false, "-1.125", true], ["0.1", false, "0.2", false], [null, false, "3", true], ["2", false, "2", false], ["9.975", false, null, false],
    ];
    for (const [lo, loEx, hi, hiEx] of cases) {
      const e = boundedNumberExpr(pool, { min: lo === null ? null : parseDecimal(lo), minExclusive: loEx, max: hi === null ? null : parseDecimal(hi), maxExclusive: hiEx });
      for (const s of decimals()) {
        const v = value(s);
        const ok = (lo === null || (loEx ? v > Number(lo) : v >= Number(lo))) && (hi === null || (hiEx ? v < Number(hi) : v <= Number(hi)));
        expect([lo, loEx, hi, hiEx, s, m(e, s)]).toEqual([lo, loEx, hi, hiEx, s, ok]);
      }
    }
  });

  test("x >= 0 takes exponents too; other bounds refuse them rather than let one through", () => {
    const nonNeg = boundedNumberExpr(pool, { min: parseDecimal("0"), minExclusive: false, max: null, maxExclusive: false });
    for (const s of ["1e5", "0.5E-3", "0", "-0", "12.75"]) expect([s, m(nonNeg, s)]).toEqual([s, true]);
    for (const s of ["-1e5", "-0.5", "-1"]) expect([s, m(nonNeg, s)]).toEqual([s, false]);
    const bounded = boundedNumberExpr(pool, { min: parseDecimal("1"), minExclusive: false, max: parseDecimal("100"), maxExclusive: false });
    expect(m(bounded, "1e1")).toBe(false);
    expect(m(bounded, "10")).toBe(true);
  });

  test("multipleOf 10^-k: at most k significant fraction digits", () => {
    const cents = fractionDigitsExpr(pool, 2);
    for (const [s, ok] of [["1.25", true], ["1.250", true], ["1.255", false], ["-3", true], ["0.1", true], ["1e2", false]] as const) expect([s, m(cents, s)]).toEqual([s, ok]);
  });

  test("parseDecimal is exact: exponents move the point, no float rounding", () => {
    expect(parseDecimal("1.50e2")).toEqual({ negative: false, int: "150", frac: "" });
    expect(parseDecimal("-0.1")).toEqual({ negative: true, int: "0", frac: "1" });
    expect(parseDecimal("123e-5")).toEqual({ negative: false, int: "0", frac: "00123" });
    expect(parseDecimal("-0.0")).toEqual({ negative: false, int: "0", frac: "" });
  });
});

/**
 * Sets of Unicode code points as sorted, disjoint, non-adjacent ranges, and their byte forms:
 * UTF-8 (every code point of a range, as byte-range sequences: the split of Russ Cox's utf8-ranges)
 * and fixed-width hexadecimal digits (JSON's `\uXXXX`, either letter case).
 */
import { EMPTY, type ExprPool } from "./expr.ts";

export const MAX_CODE_POINT = 0x10ffff;
export const SURROGATES: readonly [number, number] = [0xd800, 0xdfff];

/** Inclusive [lo, hi] pairs, sorted, disjoint and not touching. */
export type CodeSet = readonly (readonly [number, number])[];

export function codeSet(ranges: readonly (readonly [number, number])[]): CodeSet {
  const sorted = ranges.filter(([lo, hi]) => lo <= hi).map(([lo, hi]) => [lo, hi] as [number, number]).sort((x, y) => x[0] - y[0]);
  const out: [number, number][] = [];
  for (const r of sorted) {
    const last = out[out.length - 1];
    if (last !== undefined && r[0] <= last[1] + 1) last[1] = Math.max(last[1], r[1]);
    else out.push(r);
  }
  return out;
}

export function single(cp: number): CodeSet {
  return [[cp, cp]];
}

export function union(...sets: CodeSet[]): CodeSet {
  return codeSet(sets.flat());
}

export function complement(set: CodeSet): CodeSet {
  const out: [number, number][] = [];
  let next = 0;
  for (const [lo, hi] of set) {
    if (lo > next) out.push([next, lo - 1]);
    next = hi + 1;
  }
  if (next <= MAX_CODE_POINT) out.push([next, MAX_CODE_POINT]);
  return out;
}

export function intersect(a: CodeSet, b: CodeSet): CodeSet {
  return complement(union(complement(a), complement(b)));
}

export function minus(a: CodeSet, b: CodeSet): CodeSet {
  return intersect(a, complement(b));
}

export function contains(set: CodeSet, cp: number): boolean {
  return set.some(([lo, hi]) => cp >= lo && cp <= hi);
}

/** Every code point. */
export const ANY_CHAR: CodeSet = [[0, MAX_CODE_POINT]];

/** The UTF-8 bytes of one code point. */
export function utf8Bytes(cp: number): number[] {
  if (cp < 0x80) return [cp];
  if (cp < 0x800) return [0xc0 | (cp >> 6), 0x80 | (cp & 0x3f)];
  if (cp < 0x10000) return [0xe0 | (cp >> 12), 0x80 | ((cp >> 6) & 0x3f), 0x80 | (cp & 0x3f)];
  return [0xf0 | (cp >> 18), 0x80 | ((cp >> 12) & 0x3f), 0x80 | ((cp >> 6) & 0x3f), 0x80 | (cp & 0x3f)];
}

/** Byte-range sequences whose union is exactly the UTF-8 encodings of lo..hi (no surrogates). */
function utf8Sequences(lo: number, hi: number, out: [number, number][][]): void {
  if (lo > hi) return;
  if (lo <= SURROGATES[1] && hi >= SURROGATES[0]) {
    utf8Sequences(lo, SURROGATES[0] - 1, out);
    utf8Sequences(SURROGATES[1] + 1, hi, out);
    return;
  }
  for (const max of [0x7f, 0x7ff, 0xffff]) {
    if (lo <= max && hi > max) {
      utf8Sequences(lo, max, out);
      utf8Sequences(max + 1, hi, out);
      return;
    }
  }
  if (hi <= 0x7f) {
    out.push([[lo, hi]]);
    return;
  }
  const length = utf8Bytes(lo).length;
  for (let i = 1; i < length; i++) {
    const m = (1 << (6 * i)) - 1;
    if ((lo & ~m) !== (hi & ~m)) {
      if ((lo & m) !== 0) {
        utf8Sequences(lo, lo | m, out);
        utf8Sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) !== m) {
        utf8Sequences(lo, (hi & ~m) - 1, out);
        utf8Sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  const a = utf8Bytes(lo);
  const b = utf8Bytes(hi);
  out.push(a.map((x, i) => [x, b[i]!]));
}

/** The byte-range sequences of the UTF-8 encodings of lo..hi (surrogates excluded). */
export function utf8RangeSequences(lo: number, hi: number): [number, number][][] {
  const out: [number, number][][] = [];
  utf8Sequences(lo, hi, out);
  return out;
}

/** The expression matching the UTF-8 encoding of any one code point of `set`. */
export function utf8Expr(pool: ExprPool, set: CodeSet): number {
  const seqs: [number, number][][] = [];
  for (const [lo, hi] of set) utf8Sequences(lo, hi, seqs);
  if (seqs.length === 0) return EMPTY;
  return pool.or(seqs.map((seq) => pool.seq(seq.map(([x, y]) => pool.byteRange(x, y)))));
}

/** Digit-range sequences, `width` digits in base 16, whose union is exactly lo..hi. */
function hexSequences(lo: number, hi: number, width: number): [number, number][][] {
  if (width === 0) return [[]];
  const p = 16 ** (width - 1);
  const dlo = Math.floor(lo / p);
  const dhi = Math.floor(hi / p);
  const rlo = lo % p;
  const rhi = hi % p;
  if (dlo === dhi) return hexSequences(rlo, rhi, width - 1).map((s) => [[dlo, dlo], ...s]);
  const out: [number, number][][] = [];
  let fullFrom = dlo;
  let fullTo = dhi;
  if (rlo !== 0) {
    out.push(...hexSequences(rlo, p - 1, width - 1).map((s): [number, number][] => [[dlo, dlo], ...s]));
    fullFrom = dlo + 1;
  }
  if (rhi !== p - 1) fullTo = dhi - 1;
  if (fullFrom <= fullTo) out.push([[fullFrom, fullTo], ...Array.from({ length: width - 1 }, (): [number, number] => [0, 15])]);
  if (rhi !== p - 1) out.push(...hexSequences(0, rhi, width - 1).map((s): [number, number][] => [[dhi, dhi], ...s]));
  return out;
}

/** The bytes spelling hex digits lo..hi (0..15), letters in either case. */
function hexDigitExpr(pool: ExprPool, lo: number, hi: number): number {
  const parts: number[] = [];
  if (lo <= 9) parts.push(pool.byteRange(0x30 + lo, 0x30 + Math.min(hi, 9)));
  if (hi >= 10) {
    const a = Math.max(lo, 10) - 10;
    const b = hi - 10;
    parts.push(pool.byteRange(0x61 + a, 0x61 + b), pool.byteRange(0x41 + a, 0x41 + b));
  }
  return pool.or(parts);
}

/** Four hex digits (either case) spelling a number in lo..hi (0..0xffff). */
export function hex4Expr(pool: ExprPool, lo: number, hi: number): number {
  return pool.or(hexSequences(lo, hi, 4).map((seq) => pool.seq(seq.map(([x, y]) => hexDigitExpr(pool, x, y)))));
}

/** Code points of a string. */
export function codePoints(text: string): number[] {
  const out: number[] = [];
  for (const ch of text) out.push(ch.codePointAt(0)!);
  return out;
}

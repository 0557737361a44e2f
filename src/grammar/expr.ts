/**
 * Regular expressions over bytes, hash-consed in one pool, matched by Brzozowski derivatives: a
 * lexer state IS an expression (what is left to match), so a lazily built DFA needs no NFA, and
 * counted repeats (`x{0,5000}`) cost nothing until they are walked. Every expression is built by
 * the smart constructors below, which keep these invariants:
 *  - equal structure means equal id (`concat(a, b)` twice gives one id), so ids are state ids;
 *  - an expression without And/Not denotes the empty language iff it is EMPTY (id 0), so "dead"
 *    is one comparison for the expressions JSON and GBNF produce; with And/Not, `isEmpty` decides
 *    by a bounded search of derivatives;
 *  - Or and And children are flattened, sorted and unique; byte-set children of an Or are merged;
 *  - Repeat(a, lo, hi) has a non-nullable `a` unless lo = 0 (a nullable `a` makes lo irrelevant),
 *    and hi >= 1, so each repetition a derivative steps through consumes at least one byte.
 */

import type { WorkMeter } from "./limits.ts";

export const EMPTY = 0;
export const EPSILON = 1;
export const INFINITE = Number.POSITIVE_INFINITY;

const enum Kind { empty, epsilon, bytes, concat, or, and, not, repeat }

interface ExprNode {
  readonly kind: Kind;
  /** concat: head; not/repeat: body. */
  readonly a: number;
  /** concat: tail. */
  readonly b: number;
  /** or/and: children (sorted, unique). */
  readonly list: readonly number[];
  /** bytes: the set as 8 words of 32 bits. */
  readonly set: Uint32Array | null;
  readonly lo: number;
  readonly hi: number;
  readonly nullable: boolean;
  /** Contains And or Not somewhere (emptiness is then not syntactic). */
  readonly boolean: boolean;
  /** The largest finite repeat count inside (0 where none): `clamp` has nothing to do below it. */
  readonly maxCount: number;
}

type NodeFields = Omit<ExprNode, "maxCount">;

/** A pool of expressions; ids are only meaningful within their pool. */
export class ExprPool {
  private readonly nodes: ExprNode[] = [];
  private readonly byKey = new Map<string, number>();
  /** Concatenations by a * 2^24 + b: the commonest node, without a string key. */
  private readonly concats = new Map<number, number>();
  private readonly clamps = new Map<number, Map<number, number>>();
  private readonly ranges = new Map<number, number>();
  private readonly pairOrs = new Map<number, number>();
  private readonly openText = new Set<number>();
  private readonly derivatives = new Map<number, number>();
  private readonly emptiness = new Map<number, boolean>();
  private readonly minLengths = new Map<number, number>();
  private readonly partitions = new Map<number, { readonly classOf: Uint8Array; readonly reps: readonly number[] }>();
  /**
   * What the work is charged to, or null: a compile's budget while it runs, then the masks' meter
   * of the grammar being matched (CompiledGrammar.enter). Charged before each node is made and
   * each derivative or search step is done, so a limit stops the work, not a check after it.
   */
  meter: WorkMeter | null = null;
  /** Counts expressions built, for the compile limits. */
  get size(): number {
    return this.nodes.length;
  }

  /**
   * What the pool holds, in nodes: each node, and a quarter for each memoized derivative (about
   * 40 bytes against a node's 150; a pool that masks many patterns holds 20 of them a node).
   */
  get footprint(): number {
    return this.nodes.length + (this.derivatives.size >> 2);
  }

  constructor() {
    this.add("0", () => ({ kind: Kind.empty, a: 0, b: 0, list: [], set: null, lo: 0, hi: 0, nullable: false, boolean: false }));
    this.add("1", () => ({ kind: Kind.epsilon, a: 0, b: 0, list: [], set: null, lo: 0, hi: 0, nullable: true, boolean: false }));
  }

  private add(key: string, make: () => NodeFields): number {
    const found = this.byKey.get(key);
    if (found !== undefined) return found;
    const id = this.push(make());
    this.byKey.set(key, id);
    return id;
  }

  private push(fields: NodeFields): number {
    const children = fields.kind === Kind.concat ? [fields.a, fields.b] : fields.kind === Kind.not || fields.kind === Kind.repeat ? [fields.a] : fields.list;
    let maxCount = fields.kind === Kind.repeat ? Math.max(fields.lo, fields.hi === INFINITE ? 0 : fields.hi) : 0;
    for (const c of children) maxCount = Math.max(maxCount, this.nodes[c]!.maxCount);
    this.meter?.expr(1 + (fields.list.length >> 3));
    this.nodes.push({ ...fields, maxCount });
    return this.nodes.length - 1;
  }

  nullable(e: number): boolean {
    return this.nodes[e]!.nullable;
  }

  /** A set of bytes; an empty set is EMPTY. */
  bytes(set: Uint32Array): number {
    let bits = 0;
    for (let i = 0; i < 8; i++) bits |= set[i]!;
    if (bits === 0) return EMPTY;
    const copy = Uint32Array.from(set);
    return this.add(`b${copy.join(",")}`, () => ({ kind: Kind.bytes, a: 0, b: 0, list: [], set: copy, lo: 0, hi: 0, nullable: false, boolean: false }));
  }

  /** Bytes lo..hi inclusive. */
  byteRange(lo: number, hi: number): number {
    const key = lo * 256 + hi;
    const known = this.ranges.get(key);
    if (known !== undefined) return known;
    const set = new Uint32Array(8);
    for (let b = lo; b <= hi; b++) set[b >>> 5]! |= 1 << (b & 31);
    const id = this.bytes(set);
    this.ranges.set(key, id);
    return id;
  }

  /** The exact byte string. */
  literal(bytes: ArrayLike<number>): number {
    let e = EPSILON;
    for (let i = bytes.length - 1; i >= 0; i--) e = this.concat(this.byteRange(bytes[i]!, bytes[i]!), e);
    return e;
  }

  concat(a: number, b: number): number {
    if (a === EMPTY || b === EMPTY) return EMPTY;
    if (a === EPSILON) return b;
    if (b === EPSILON) return a;
    if (this.nodes[a]!.kind === Kind.concat) {
      // Re-associated to the right: a's heads onto b from the last, in a loop (a long literal
      // followed by something would otherwise recurse once per byte).
      const heads: number[] = [];
      let x = a;
      for (let n = this.nodes[x]!; n.kind === Kind.concat; n = this.nodes[x]!) {
        heads.push(n.a);
        x = n.b;
      }
      let e = this.concat(x, b);
      for (let i = heads.length - 1; i >= 0; i--) e = this.concat(heads[i]!, e);
      return e;
    }
    const na = this.nodes[a]!;
    const key = a * 16777216 + b;
    const found = this.concats.get(key);
    if (found !== undefined) return found;
    const nb = this.nodes[b]!;
    const id = this.push({ kind: Kind.concat, a, b, list: [], set: null, lo: 0, hi: 0, nullable: na.nullable && nb.nullable, boolean: na.boolean || nb.boolean });
    this.concats.set(key, id);
    return id;
  }

  seq(parts: readonly number[]): number {
    let e = EPSILON;
    for (let i = parts.length - 1; i >= 0; i--) e = this.concat(parts[i]!, e);
    return e;
  }

  or(parts: readonly number[]): number {
    if (parts.length === 2) {
      // The common case (a derivative's head and tail): no flattening needed unless a side is an
      // Or or a byte set; a numeric key instead of a string one.
      const a = parts[0]!;
      const b = parts[1]!;
      if (a === EMPTY || a === b) return b;
      if (b === EMPTY) return a;
      const ka = this.nodes[a]!.kind;
      const kb = this.nodes[b]!.kind;
      if (ka !== Kind.or && kb !== Kind.or && ka !== Kind.bytes && kb !== Kind.bytes) {
        const [x, y] = a < b ? [a, b] : [b, a];
        const key = x * 16777216 + y;
        const found = this.pairOrs.get(key);
        if (found !== undefined) return found;
        const id = this.orOf([x, y]);
        this.pairOrs.set(key, id);
        return id;
      }
    }
    const flat = new Set<number>();
    let merged: Uint32Array | null = null;
    const visit = (p: number): void => {
      const n = this.nodes[p]!;
      if (n.kind === Kind.empty) return;
      if (n.kind === Kind.or) n.list.forEach(visit);
      else if (n.kind === Kind.bytes) {
        merged ??= new Uint32Array(8);
        for (let i = 0; i < 8; i++) merged[i]! |= n.set![i]!;
      } else flat.add(p);
    };
    parts.forEach(visit);
    if (merged !== null) flat.add(this.bytes(merged));
    if (flat.size === 0) return EMPTY;
    if (flat.size === 1) return flat.values().next().value!;
    return this.orOf([...flat].sort((x, y) => x - y));
  }

  /** The Or node of a sorted, unique, flat list of at least two children. */
  private orOf(list: number[]): number {
    return this.add(`o${list.join(",")}`, () => {
      const nodes = list.map((c) => this.nodes[c]!);
      return { kind: Kind.or, a: 0, b: 0, list, set: null, lo: 0, hi: 0, nullable: nodes.some((n) => n.nullable), boolean: nodes.some((n) => n.boolean) };
    });
  }

  /**
   * The intersection. Its complemented parts are one: `a & ~b & ~c` is `a & ~(b|c)`, so an
   * intersection with n exclusions derives as two parts, not n + 1 (the keys of n patterns and
   * the additional ones, json-schema.ts). And `a & ~(a|...)` is EMPTY: what a key excluded by a
   * pattern it already matched leaves (the search would otherwise run to its limit to show it).
   */
  and(parts: readonly number[]): number {
    const flat = new Set<number>();
    const excluded: number[] = [];
    const visit = (p: number): void => {
      const n = this.nodes[p]!;
      if (n.kind === Kind.and) n.list.forEach(visit);
      else if (n.kind === Kind.not && n.a !== EMPTY) excluded.push(n.a);
      else if (!this.isAnything(p)) flat.add(p);
    };
    parts.forEach(visit);
    if (excluded.length > 0) {
      const union = excluded.length === 1 ? excluded[0]! : this.or(excluded);
      if (flat.has(union)) return EMPTY;
      const un = this.nodes[union]!;
      if (un.kind === Kind.or) for (const c of un.list) if (flat.has(c)) return EMPTY;
      if (this.isAnything(union)) return EMPTY;
      flat.add(this.not(union));
    }
    if (flat.has(EMPTY)) return EMPTY;
    if (flat.size === 0) return this.anything();
    if (flat.has(EPSILON)) return [...flat].every((c) => this.nodes[c]!.nullable) ? EPSILON : EMPTY;
    if (flat.size === 1) return flat.values().next().value!;
    const list = [...flat].sort((x, y) => x - y);
    return this.add(`a${list.join(",")}`, () => ({
      kind: Kind.and, a: 0, b: 0, list, set: null, lo: 0, hi: 0, nullable: list.every((c) => this.nodes[c]!.nullable), boolean: true,
    }));
  }

  not(a: number): number {
    const n = this.nodes[a]!;
    if (n.kind === Kind.not) return n.a;
    return this.add(`n${a}`, () => ({ kind: Kind.not, a, b: 0, list: [], set: null, lo: 0, hi: 0, nullable: !n.nullable, boolean: true }));
  }

  /** a{lo,hi}; hi may be INFINITE. */
  repeat(a: number, lo: number, hi: number): number {
    if (hi < lo) return EMPTY;
    if (hi === 0 || a === EPSILON) return EPSILON;
    if (a === EMPTY) return lo === 0 ? EPSILON : EMPTY;
    if (lo === 1 && hi === 1) return a;
    const n = this.nodes[a]!;
    const low = n.nullable ? 0 : lo;
    const key = `r${a},${low},${hi === INFINITE ? "i" : hi}`;
    return this.add(key, () => ({ kind: Kind.repeat, a, b: 0, list: [], set: null, lo: low, hi, nullable: low === 0 || n.nullable, boolean: n.boolean }));
  }

  /** Every byte string. */
  anything(): number {
    return this.repeat(this.byteRange(0, 255), 0, INFINITE);
  }

  private isAnything(e: number): boolean {
    const n = this.nodes[e]!;
    if (n.kind === Kind.not) return n.a === EMPTY;
    if (n.kind !== Kind.repeat || n.lo !== 0 || n.hi !== INFINITE) return false;
    const body = this.nodes[n.a]!;
    return body.kind === Kind.bytes && body.set!.every((w) => w === 0xffffffff);
  }

  /** The language of `e` without the empty string, built without And/Not where `e` has none. */
  nonEmpty(e: number): number {
    const n = this.nodes[e]!;
    if (!n.nullable) return e;
    switch (n.kind) {
      case Kind.epsilon:
        return EMPTY;
      case Kind.concat:
        return this.or([this.concat(this.nonEmpty(n.a), n.b), this.nonEmpty(n.b)]);
      case Kind.or:
        return this.or(n.list.map((c) => this.nonEmpty(c)));
      case Kind.repeat:
        return this.concat(this.nonEmpty(n.a), this.repeat(n.a, 0, n.hi - 1));
      default:
        return this.and([e, this.not(EPSILON)]);
    }
  }

  /** The derivative of `e` by `byte`: what is left to match after it. */
  derive(e: number, byte: number): number {
    const key = e * 256 + byte;
    const cached = this.derivatives.get(key);
    if (cached !== undefined) return cached;
    // A memo entry weighs about a quarter of a node; the work grows with the parts to derive.
    this.meter?.expr(0.25);
    this.meter?.spend(this.nodes[e]!.list.length >> 2);
    const result = this.computeDerivative(e, byte);
    this.derivatives.set(key, result);
    // What is left of open text after a plain byte is open text still.
    if (result !== EMPTY && this.openText.has(e) && byte >= 0x20 && byte <= 0x7e && byte !== 0x22 && byte !== 0x5c) this.openText.add(result);
    return result;
  }

  /**
   * Declare `e` open text: every string of plain bytes and whole characters above ASCII (no `"`,
   * `\` or control) leaves it non-empty. The compiler marks what it knows to be so (any JSON string
   * content, or all content but a few names); derivatives by plain bytes inherit the mark.
   */
  markOpenText(e: number): void {
    this.openText.add(e);
  }

  /** Whether `e` is open text by its marks: marked, an Or with an open child, or open text followed by something. */
  isOpenText(e: number): boolean {
    if (this.openText.has(e)) return true;
    const n = this.nodes[e]!;
    if (n.kind === Kind.concat) return this.isOpenText(n.a) && !this.isEmpty(n.b);
    if (n.kind === Kind.or) return n.list.some((c) => this.isOpenText(c));
    return false;
  }

  private computeDerivative(e: number, byte: number): number {
    const n = this.nodes[e]!;
    switch (n.kind) {
      case Kind.empty:
      case Kind.epsilon:
        return EMPTY;
      case Kind.bytes:
        return (n.set![byte >>> 5]! >>> (byte & 31)) & 1 ? EPSILON : EMPTY;
      case Kind.concat: {
        const head = this.concat(this.derive(n.a, byte), n.b);
        return this.nodes[n.a]!.nullable ? this.or([head, this.derive(n.b, byte)]) : head;
      }
      case Kind.or:
        return this.or(n.list.map((c) => this.derive(c, byte)));
      case Kind.and:
        return this.and(n.list.map((c) => this.derive(c, byte)));
      case Kind.not:
        return this.not(this.derive(n.a, byte));
      case Kind.repeat:
        return this.concat(this.derive(n.a, byte), this.repeat(n.a, Math.max(n.lo - 1, 0), n.hi - 1));
    }
  }

  /**
   * Whether `e` matches nothing. Syntactic without And/Not; otherwise structural down to the
   * And/Not nodes, each decided by a search of its derivatives (by byte classes: `reps`, one byte
   * per class of an expression `e` was derived from, else e's own) for a nullable one, at most
   * `limit` states. A search cut short answers "not empty", which can only
   * let a matcher offer a path that later dies, never accept a wrong string (acceptance is always
   * `nullable`).
   */
  isEmpty(e: number, reps: readonly number[] | null = null, limit = 2000): boolean {
    if (e === EMPTY) return true;
    const n = this.nodes[e]!;
    if (!n.boolean || n.nullable) return false;
    const known = this.emptiness.get(e);
    if (known !== undefined) return known;
    let empty: boolean;
    switch (n.kind) {
      case Kind.concat:
        empty = this.isEmpty(n.a, reps, limit) || this.isEmpty(n.b, reps, limit);
        break;
      case Kind.or:
        empty = n.list.every((c) => this.isEmpty(c, reps, limit));
        break;
      case Kind.repeat:
        empty = this.isEmpty(n.a, reps, limit);
        break;
      default:
        empty = this.searchEmpty(e, reps ?? this.classPartition(e).reps, limit);
    }
    this.emptiness.set(e, empty);
    return empty;
  }

  /**
   * A* over derivatives for a nullable one (or one without And/Not, which is then non-empty),
   * ordered by bytes so far plus `minLength`, a lower bound of the bytes still needed: the search
   * follows the shortest candidate strings first, so a witness is usually found in a few steps.
   */
  private searchEmpty(e: number, reps: readonly number[], limit: number): boolean {
    const seen = new Set<number>([e]);
    const heap = new MinHeap();
    heap.push(this.minLength(e), e, 0);
    while (heap.size > 0) {
      const { state, depth } = heap.pop();
      if (this.nodes[state]!.nullable || seen.size > limit) return false;
      this.meter?.spend(reps.length);
      for (const b of reps) {
        const d = this.derive(state, b);
        if (d === EMPTY || seen.has(d)) continue;
        const dn = this.nodes[d]!;
        // A nullable derivative, one without And/Not (not EMPTY, so non-empty) or one known non-empty: a witness.
        if (dn.nullable || !dn.boolean || this.emptiness.get(d) === false) return false;
        const h = this.minLength(d);
        if (h === Infinity) continue;
        seen.add(d);
        heap.push(depth + 1 + h, d, depth + 1);
      }
    }
    return true;
  }

  /** A lower bound of the length of any string `e` matches (Infinity for EMPTY). */
  minLength(e: number): number {
    const known = this.minLengths.get(e);
    if (known !== undefined) return known;
    const n = this.nodes[e]!;
    let m: number;
    switch (n.kind) {
      case Kind.empty:
        m = Infinity;
        break;
      case Kind.epsilon:
        m = 0;
        break;
      case Kind.bytes:
        m = 1;
        break;
      case Kind.concat:
        m = this.minLength(n.a) + this.minLength(n.b);
        break;
      case Kind.or:
        m = Math.min(...n.list.map((c) => this.minLength(c)));
        break;
      case Kind.and:
        m = Math.max(...n.list.map((c) => this.minLength(c)));
        break;
      case Kind.not:
        m = this.nodes[n.a]!.nullable ? 1 : 0;
        break;
      case Kind.repeat:
        m = n.lo === 0 ? 0 : n.lo * this.minLength(n.a);
        break;
    }
    this.minLengths.set(e, m);
    return m;
  }

  /**
   * The classes of bytes that no byte set inside `e` tells apart: derivatives by bytes of one class
   * are equal, for `e` and for everything derived from it (derivatives only rearrange `e`'s parts).
   * `classOf[b]` is b's class; `reps[c]` one byte of class c.
   */
  classPartition(e: number): { readonly classOf: Uint8Array; readonly reps: readonly number[] } {
    const cached = this.partitions.get(e);
    if (cached !== undefined) return cached;
    const leaves = new Set<number>();
    const seen = new Set<number>();
    const stack = [e];
    while (stack.length > 0) {
      const x = stack.pop()!;
      if (seen.has(x)) continue;
      seen.add(x);
      const n = this.nodes[x]!;
      this.meter?.spend(1 + (n.list.length >> 2));
      if (n.kind === Kind.bytes) leaves.add(x);
      else if (n.kind === Kind.concat) stack.push(n.a, n.b);
      else if (n.kind === Kind.not || n.kind === Kind.repeat) stack.push(n.a);
      else stack.push(...n.list);
    }
    const classOf = new Uint8Array(256);
    let count = 1;
    for (const leaf of leaves) {
      const set = this.nodes[leaf]!.set!;
      const renumber = new Int16Array(count * 2).fill(-1);
      let next = 0;
      for (let b = 0; b < 256; b++) {
        const key = classOf[b]! * 2 + ((set[b >>> 5]! >>> (b & 31)) & 1);
        if (renumber[key]! < 0) renumber[key] = next++;
        classOf[b] = renumber[key]!;
      }
      count = next;
    }
    const reps: number[] = new Array(count).fill(-1);
    for (let b = 0; b < 256; b++) if (reps[classOf[b]!] === -1) reps[classOf[b]!] = b;
    const partition = { classOf, reps };
    this.partitions.set(e, partition);
    return partition;
  }

  /**
   * `e` with every repeat count at or above `bound` made the same: a lower count above it becomes
   * `bound`, an upper one unbounded. Over at most bound - 1 bytes the result behaves exactly as
   * `e` (which strings stay alive, where it accepts), because each repetition consumes a byte and
   * a repeat's emptiness does not depend on its counts; so it keys the mask cache. With And/Not,
   * `e` itself (there counts decide emptiness).
   */
  clamp(e: number, bound: number): number {
    const n = this.nodes[e]!;
    if (n.boolean || n.maxCount < bound) return e;
    let memo = this.clamps.get(bound);
    if (memo === undefined) this.clamps.set(bound, (memo = new Map()));
    const hit = memo.get(e);
    if (hit !== undefined) return hit;
    let out: number;
    switch (n.kind) {
      case Kind.concat:
        out = this.concat(this.clamp(n.a, bound), this.clamp(n.b, bound));
        break;
      case Kind.or:
        out = this.or(n.list.map((c) => this.clamp(c, bound)));
        break;
      case Kind.repeat:
        out = this.repeat(this.clamp(n.a, bound), Math.min(n.lo, bound), n.hi >= bound ? INFINITE : n.hi);
        break;
      default:
        out = e;
    }
    memo.set(e, out);
    return out;
  }

  /** The first bytes `e` can start with (a 256-bit set as 8 words); used to describe lexemes. */
  firstBytes(e: number): Uint32Array {
    const out = new Uint32Array(8);
    for (let b = 0; b < 256; b++) if (!this.isEmpty(this.derive(e, b))) out[b >>> 5]! |= 1 << (b & 31);
    return out;
  }

  /** A readable form, for error messages and tests. */
  show(e: number): string {
    const n = this.nodes[e]!;
    switch (n.kind) {
      case Kind.empty:
        return "∅";
      case Kind.epsilon:
        return "ε";
      case Kind.bytes:
        return showByteSet(n.set!);
      case Kind.concat:
        return this.show(n.a) + this.show(n.b);
      case Kind.or:
        return `(${n.list.map((c) => this.show(c)).join("|")})`;
      case Kind.and:
        return `(${n.list.map((c) => this.show(c)).join("&")})`;
      case Kind.not:
        return `~(${this.show(n.a)})`;
      case Kind.repeat:
        return `(${this.show(n.a)}){${n.lo},${n.hi === INFINITE ? "" : n.hi}}`;
    }
  }

  /** Whether the byte string matches `e` exactly (for tests and checks). */
  matches(e: number, bytes: ArrayLike<number>): boolean {
    let s = e;
    for (let i = 0; i < bytes.length && s !== EMPTY; i++) s = this.derive(s, bytes[i]!);
    return this.nullable(s);
  }
}

function showByteSet(set: Uint32Array): string {
  const has = (b: number): boolean => ((set[b >>> 5]! >>> (b & 31)) & 1) === 1;
  const ranges: string[] = [];
  for (let b = 0; b < 256; b++) {
    if (!has(b)) continue;
    let end = b;
    while (end + 1 < 256 && has(end + 1)) end++;
    const show = (x: number): string => (x >= 0x21 && x < 0x7f && x !== 0x5d && x !== 0x2d && x !== 0x5c ? String.fromCharCode(x) : `\\x${x.toString(16).padStart(2, "0")}`);
    ranges.push(end === b ? show(b) : `${show(b)}-${show(end)}`);
    b = end;
  }
  return ranges.length === 1 && !ranges[0]!.includes("-") ? ranges[0]! : `[${ranges.join("")}]`;
}

/** A binary min-heap of search states by priority. */
class MinHeap {
  private readonly prio: number[] = [];
  private readonly states: number[] = [];
  private readonly depths: number[] = [];

  get size(): number {
    return this.prio.length;
  }

  push(priority: number, state: number, depth: number): void {
    const { prio, states, depths } = this;
    prio.push(priority);
    states.push(state);
    depths.push(depth);
    for (let i = prio.length - 1; i > 0; ) {
      const parent = (i - 1) >> 1;
      if (prio[parent]! <= prio[i]!) break;
      this.swap(i, parent);
      i = parent;
    }
  }

  pop(): { state: number; depth: number } {
    const { prio, states, depths } = this;
    const top = { state: states[0]!, depth: depths[0]! };
    const last = prio.length - 1;
    this.swap(0, last);
    prio.pop();
    states.pop();
    depths.pop();
    for (let i = 0; ; ) {
      const l = 2 * i + 1;
      const r = l + 1;
      let m = i;
      if (l < prio.length && prio[l]! < prio[m]!) m = l;
      if (r < prio.length && prio[r]! < prio[m]!) m = r;
      if (m === i) break;
      this.swap(i, m);
      i = m;
    }
    return top;
  }

  private swap(i: number, j: number): void {
    const { prio, states, depths } = this;
    [prio[i], prio[j]] = [prio[j]!, prio[i]!];
    [states[i], states[j]] = [states[j]!, states[i]!];
    [depths[i], depths[j]] = [depths[j]!, depths[i]!];
  }
}

/**
 * The lexer: a DFA over bytes built lazily from the lexemes the parser expects. A lexer state is a
 * set of (lexeme, what is left of it) pairs, both expression ids of one pool, so states are
 * shared by every grammar compiled in the pool: the state "inside a JSON string" is the same id
 * whichever schema got there, and so is every mask computed from it (mask-walk.ts).
 *
 * Lexing is not greedy: where a lexeme may end, the matcher keeps both "it ends here" and "it goes
 * on", so the language matched is exactly the grammar's, whatever the lexemes' overlaps.
 */
import { utf8RangeSequences } from "./code-set.ts";
import { EMPTY, type ExprPool } from "./expr.ts";
import { OpenTextCheck } from "./open-text.ts";

/** The UTF-8 forms of every character above ASCII, as byte-range sequences. */
const NON_ASCII_SEQUENCES = utf8RangeSequences(0x80, 0x10ffff);

/** No lexeme alive: the byte is not allowed. */
export const DEAD = -1;
const UNKNOWN = -2;

export class LexerSpace {
  /** State s: [lexeme0, rest0, lexeme1, rest1, ...], lexemes ascending. */
  private readonly pairs: Int32Array[] = [];
  private readonly byKey = new Map<string, number>();
  /** State s's transitions by byte (UNKNOWN until first taken). */
  readonly rows: Int32Array[] = [];
  /** 1 where some lexeme of state s may end (its rest is nullable). */
  accepting = new Uint8Array(1024);
  private readonly acceptList: Int32Array[] = [];
  private readonly firstBytes: (Uint32Array | undefined)[] = [];
  /** State s's byte classes: bytes of one class lead to the same state. */
  private readonly classes: Uint8Array[] = [];
  private readonly startByLexemes = new Map<string, number>();
  /** Per bound: state -> clamp key (-1 until computed). */
  private readonly clampIds = new Map<number, Int32Array>();
  private readonly clampKeys = new Map<string, number>();
  private readonly plainMemo = new Map<number, boolean>();
  private readonly textMemo = new Map<number, boolean>();
  private readonly plainRepsByLexeme = new Map<number, readonly number[]>();
  /** Scratch for jointClasses: (class so far, lexeme class) -> new class + 1. */
  private readonly renumber = new Int32Array(65536);

  private readonly openText: OpenTextCheck;

  constructor(readonly pool: ExprPool) {
    this.openText = new OpenTextCheck(pool);
  }

  get stateCount(): number {
    return this.pairs.length;
  }

  private intern(pairs: Int32Array): number {
    const key = pairs.join(",");
    const found = this.byKey.get(key);
    if (found !== undefined) return found;
    // Charged before anything is added, so a limit that trips leaves the space as it was.
    this.pool.meter?.state();
    const classes = this.jointClasses(pairs);
    const s = this.pairs.length;
    this.pairs.push(pairs);
    this.byKey.set(key, s);
    this.rows.push(new Int32Array(256).fill(UNKNOWN));
    this.classes.push(classes);
    const accepts: number[] = [];
    for (let i = 0; i < pairs.length; i += 2) if (this.pool.nullable(pairs[i + 1]!)) accepts.push(pairs[i]!);
    this.acceptList.push(Int32Array.from(accepts));
    if (s >= this.accepting.length) {
      const grown = new Uint8Array(this.accepting.length * 2);
      grown.set(this.accepting);
      this.accepting = grown;
    }
    this.accepting[s] = accepts.length > 0 ? 1 : 0;
    return s;
  }

  /** The state where each of `lexemes` (expression ids, any order) is about to start. */
  start(lexemes: readonly number[]): number {
    const sorted = [...new Set(lexemes)].sort((a, b) => a - b);
    const key = sorted.join(",");
    const found = this.startByLexemes.get(key);
    if (found !== undefined) return found;
    const pairs = new Int32Array(sorted.length * 2);
    sorted.forEach((l, i) => {
      pairs[2 * i] = l;
      pairs[2 * i + 1] = l;
    });
    const s = sorted.length === 0 ? DEAD : this.intern(pairs);
    this.startByLexemes.set(key, s);
    return s;
  }

  /** The state after `byte`, or DEAD. */
  next(s: number, byte: number): number {
    const row = this.rows[s]!;
    const t = row[byte]!;
    if (t !== UNKNOWN) return t;
    const computed = this.computeNext(s, byte);
    // Every byte of the class goes where this one does.
    const classes = this.classes[s]!;
    const c = classes[byte]!;
    for (let b = 0; b < 256; b++) if (classes[b] === c) row[b] = computed;
    return computed;
  }

  /** The common refinement of the byte classes of each lexeme of a state (a lexeme's hold for all its rests). */
  private jointClasses(pairs: Int32Array): Uint8Array {
    const joint = new Uint8Array(256);
    const renumber = this.renumber;
    const keys = new Int32Array(256);
    this.pool.meter?.spend(pairs.length * 8);
    for (let i = 0; i < pairs.length; i += 2) {
      const { classOf } = this.pool.classPartition(pairs[i]!);
      let next = 0;
      for (let b = 0; b < 256; b++) {
        const key = joint[b]! * 256 + classOf[b]!;
        keys[b] = key;
        if (renumber[key] === 0) renumber[key] = ++next;
        joint[b] = renumber[key]! - 1;
      }
      for (let b = 0; b < 256; b++) renumber[keys[b]!] = 0;
    }
    return joint;
  }

  private computeNext(s: number, byte: number): number {
    const pairs = this.pairs[s]!;
    this.pool.meter?.spend(pairs.length >> 1);
    const out: number[] = [];
    for (let i = 0; i < pairs.length; i += 2) {
      // The byte's class representative under the lexeme's partition: the same derivative, and
      // one memo entry for every byte of the class, whatever state the lexeme is met in.
      const { classOf, reps } = this.pool.classPartition(pairs[i]!);
      const rest = this.pool.derive(pairs[i + 1]!, reps[classOf[byte]!]!);
      if (rest !== EMPTY && !this.pool.isEmpty(rest, reps)) out.push(pairs[i]!, rest);
    }
    return out.length === 0 ? DEAD : this.intern(Int32Array.from(out));
  }

  /** Lexemes that may end in state s. */
  accepts(s: number): Int32Array {
    return this.acceptList[s]!;
  }

  /** The bytes allowed next in state s, as 8 words of 32 bits. */
  allowedBytes(s: number): Uint32Array {
    let set = this.firstBytes[s];
    if (set !== undefined) return set;
    set = new Uint32Array(8);
    for (let b = 0; b < 256; b++) if (this.next(s, b) !== DEAD) set[b >>> 5]! |= 1 << (b & 31);
    this.firstBytes[s] = set;
    return set;
  }

  /**
   * Whether every string of at most `maxBytes` plain bytes (isPlainByte) keeps state s alive: then
   * every plain token is allowed from s without a walk. Sufficient test: some lexeme of s lets all
   * such strings through (ExprPool.allowsAllPlain: at once inside a free string, in a few steps in
   * a counted or partly excluded one). Memoized per state and length.
   */
  allowsAllPlain(s: number, maxBytes: number): boolean {
    const key = s * 512 + Math.min(maxBytes, 511);
    const known = this.plainMemo.get(key);
    if (known !== undefined) return known;
    const pairs = this.pairs[s]!;
    let ok = false;
    for (let i = 0; i < pairs.length && !ok; i += 2) ok = this.openText.allowsAllPlain(pairs[i + 1]!, maxBytes, this.plainReps(pairs[i]!), this.pool.classPartition(pairs[i]!).reps);
    this.plainMemo.set(key, ok);
    return ok;
  }

  /**
   * Whether every text of at most `maxChars` whole characters, plain or above ASCII (no `"`, `\`
   * or control), keeps state s alive (ExprPool.allowsAllText; some lexeme must let all of it
   * through): then every such token is allowed from s without a walk.
   */
  allowsAllText(s: number, maxChars: number): boolean {
    const key = s * 512 + Math.min(maxChars, 511);
    const known = this.textMemo.get(key);
    if (known !== undefined) return known;
    const pairs = this.pairs[s]!;
    let ok = false;
    for (let i = 0; i < pairs.length && !ok; i += 2) {
      ok = this.openText.allowsAllText(pairs[i + 1]!, maxChars, this.plainReps(pairs[i]!), NON_ASCII_SEQUENCES, this.pool.classPartition(pairs[i]!));
    }
    this.textMemo.set(key, ok);
    return ok;
  }

  /** One plain byte of each byte class of a lexeme. */
  private plainReps(lexeme: number): readonly number[] {
    const known = this.plainRepsByLexeme.get(lexeme);
    if (known !== undefined) return known;
    const { classOf } = this.pool.classPartition(lexeme);
    const seen = new Set<number>();
    const reps: number[] = [];
    for (let b = 0x20; b <= 0x7e; b++) {
      if (b === 0x22 || b === 0x5c || seen.has(classOf[b]!)) continue;
      seen.add(classOf[b]!);
      reps.push(b);
    }
    this.plainRepsByLexeme.set(lexeme, reps);
    return reps;
  }

  /**
   * A key for state s such that states with equal keys allow the same byte strings of at most
   * bound - 1 bytes and accept the same lexemes after each (ExprPool.clamp): the key of the
   * mask caches, so "78 characters left" and "77 left" share one walk of short tokens.
   */
  clampKey(s: number, bound: number): number {
    let byState = this.clampIds.get(bound);
    if (byState === undefined) this.clampIds.set(bound, (byState = new Int32Array(1024).fill(-1)));
    if (s >= byState.length) {
      const grown = new Int32Array(Math.max(byState.length * 2, s + 1)).fill(-1);
      grown.set(byState);
      this.clampIds.set(bound, (byState = grown));
    }
    const found = byState[s]!;
    if (found >= 0) return found;
    const pairs = this.pairs[s]!;
    const clamped: number[] = [];
    for (let i = 0; i < pairs.length; i += 2) clamped.push(pairs[i]!, this.pool.clamp(pairs[i + 1]!, bound));
    const key = clamped.join(",");
    let id = this.clampKeys.get(key);
    if (id === undefined) this.clampKeys.set(key, (id = this.clampKeys.size));
    byState[s] = id;
    return id;
  }

}

/**
 * Open text: whether from an expression every string of plain bytes (and whole characters above
 * ASCII) of up to some length stays alive, so that the matcher can allow all such tokens at once
 * instead of walking them (the "slices" of vocabulary.ts). Answers are exact where they say yes;
 * a no only costs a walk. Memoized per expression, as the longest length known to pass and the
 * shortest known to fail.
 */
import { EMPTY, type ExprPool } from "./expr.ts";

interface Bounds {
  passes: number;
  fails: number;
}

export class OpenTextCheck {
  private readonly plainBounds = new Map<number, Bounds>();
  private readonly textBounds = new Map<number, Bounds>();
  private readonly sequenceRepsCache = new WeakMap<Uint8Array, number[][][]>();

  constructor(private readonly pool: ExprPool) {}

  /**
   * Whether every string of at most `maxBytes` bytes from `reps` (one byte per class; in practice
   * the plain text bytes) leaves `e` non-empty. A byte leading back to `e` costs nothing (by
   * induction on the length), so a free string answers at once; each other state is explored once
   * (a trie of excluded names costs its nodes, which a walk of the tokens would create as well).
   */
  allowsAllPlain(e: number, maxBytes: number, reps: readonly number[], allReps: readonly number[]): boolean {
    return this.memoized(this.plainBounds, e, maxBytes, () => {
      const after = new Set<number>();
      for (let i = 0; i < reps.length; i++) after.add(this.pool.derive(e, reps[i]!));
      return this.allAlive(after, e, allReps, (d) => this.allowsAllPlain(d, maxBytes - 1, reps, allReps));
    });
  }

  /**
   * Whether every text of at most `maxChars` characters, each plain ASCII (one of `plainReps`'
   * classes) or any character above ASCII (the byte-range `sequences` of its UTF-8 forms), leaves
   * `e` non-empty: inside a free JSON string, every token of whole characters but `"`, `\` and
   * controls is then allowed at once. `partition` is the byte partition of an expression `e` was
   * derived from.
   */
  allowsAllText(
    e: number, maxChars: number, plainReps: readonly number[], sequences: readonly (readonly [number, number])[][],
    partition: { readonly classOf: Uint8Array; readonly reps: readonly number[] },
  ): boolean {
    return this.memoized(this.textBounds, e, maxChars, () => {
      const after = new Set<number>();
      for (let i = 0; i < plainReps.length; i++) after.add(this.pool.derive(e, plainReps[i]!));
      for (const positions of this.sequenceReps(sequences, partition.classOf)) {
        // Every character of the sequence, one class of bytes at a time; a dead middle is a no.
        let states = [e];
        for (const reps of positions) {
          const next: number[] = [];
          for (let r = 0; r < reps.length; r++) for (let k = 0; k < states.length; k++) next.push(this.pool.derive(states[k]!, reps[r]!));
          if (next.includes(EMPTY)) return false;
          states = next;
        }
        for (const d of states) after.add(d);
      }
      return this.allAlive(after, e, partition.reps, (d) => this.allowsAllText(d, maxChars - 1, plainReps, sequences, partition));
    });
  }

  /** The answer for e at length n from the memo, or `decide`'s, recorded. Open text and n <= 0: yes. */
  private memoized(bounds: Map<number, Bounds>, e: number, n: number, decide: () => boolean): boolean {
    if (n <= 0 || this.pool.isOpenText(e)) return true;
    let m = bounds.get(e);
    if (m === undefined) bounds.set(e, (m = { passes: 0, fails: Infinity }));
    if (n <= m.passes) return true;
    if (n >= m.fails) return false;
    const ok = decide();
    if (ok) m.passes = Math.max(m.passes, n);
    else m.fails = Math.min(m.fails, n);
    return ok;
  }

  /** Whether every state in `after` but e itself is non-empty and passes `check` (one step shorter). */
  private allAlive(after: Set<number>, e: number, allReps: readonly number[], check: (d: number) => boolean): boolean {
    for (const d of after) if (d !== e && (d === EMPTY || this.pool.isEmpty(d, allReps) || !check(d))) return false;
    return true;
  }

  /** For each byte-range sequence, each position's one byte per class of `classOf` (cached per partition). */
  private sequenceReps(sequences: readonly (readonly [number, number])[][], classOf: Uint8Array): number[][][] {
    const known = this.sequenceRepsCache.get(classOf);
    if (known !== undefined) return known;
    const out = sequences.map((seq) =>
      seq.map(([lo, hi]) => {
        const seen = new Set<number>();
        const reps: number[] = [];
        for (let b = lo; b <= hi; b++) {
          if (seen.has(classOf[b]!)) continue;
          seen.add(classOf[b]!);
          reps.push(b);
        }
        return reps;
      }));
    this.sequenceRepsCache.set(classOf, out);
    return out;
  }
}

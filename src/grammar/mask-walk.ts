/**
 * Token masks by walking a token trie with the lexer, and the cache that makes most masks a copy.
 *
 * A walk from lexer state s, ignoring the parser, gives (1) the tokens whose bytes keep some lexeme
 * alive all the way (allowed whatever the parser says) and (2) the "exits": trie nodes where a
 * lexeme L may end, after which the rest of the token starts new lexemes, which the parser
 * decides. That result depends only on s, so it is cached per state key (`LexerSpace.clampKey`:
 * equal for states that behave alike over the trie's depth). The mask of a parse state P at lexer
 * state s is then
 *
 *     walk(T, s).allowed  ∪  for each exit lexeme L with P' = P.scan(L):  mask of P' from start(P') below L's exit nodes
 *
 * where "below L's exit nodes" (an ExitGroup: the subtrees under the nodes where L may end, e.g.
 * `",` and `"}` after a string closes) is walked and cached the same way. A lexeme that may end
 * before the token's first byte (a number that may stop after "12") exits at the root: the whole
 * trie again from the next lexemes' start. In a steady state a mask costs the bitmask copies and a
 * few parser scans; a walk of the whole vocabulary happens once per new lexer state key.
 */
import type { LexerSpace } from "./lexer.ts";
import type { TokenTrie, Walkable } from "./token-trie.ts";

const UNKNOWN = -2;

/** Where lexeme `lexeme` may end within a walk: the subtrees below these nodes follow it. */
export class ExitGroup implements Walkable {
  constructor(readonly lexeme: number, readonly trie: TokenTrie, readonly roots: Int32Array) {}
}

/** What a walk found: allowed tokens (a bitmask when many, else a list) and the exits. */
export interface WalkResult {
  readonly bits: Uint32Array | null;
  readonly list: Int32Array | null;
  readonly exits: readonly ExitGroup[];
  /** Bytes held, for the cache budget. */
  readonly bytes: number;
}

export class MaskWalker {
  private stack = new Int32Array(64);
  private readonly scratch: Int32Array;
  /**
   * Walk results by walkable and lexer-state key. The walker's own: state keys mean something only
   * in its lexer space, while the vocabulary's tries are shared by every compiler of the tokenizer
   * (and by a compiler's pools after a rotation), so a cache on the trie would answer one space's
   * key with another space's walk.
   */
  private walks = new WeakMap<Walkable, Map<number, WalkResult>>();
  private cachedBytes = 0;
  /** Walks run (cache misses) and trie nodes they visited, for the benchmark's and the tests' counts. */
  walksRun = 0;
  nodesVisited = 0;

  constructor(
    readonly space: LexerSpace,
    /** Length of a logits row. */
    readonly vocabSize: number,
    /** Cache budget in bytes; over it every cached walk is dropped. */
    private readonly budgetBytes = 256 << 20,
  ) {
    this.scratch = new Int32Array(vocabSize);
  }

  /** The walk of `w` from lexer state `s`, cached. */
  walk(w: Walkable, s: number): WalkResult {
    const key = this.space.clampKey(s, w.trie.maxDepth + 1);
    let byKey = this.walks.get(w);
    const hit = byKey?.get(key);
    if (hit !== undefined) return hit;
    const result = this.run(w, s);
    if (this.cachedBytes + result.bytes > this.budgetBytes) {
      this.walks = new WeakMap();
      this.cachedBytes = 0;
      byKey = undefined;
    }
    if (byKey === undefined) this.walks.set(w, (byKey = new Map()));
    byKey.set(key, result);
    this.cachedBytes += result.bytes;
    return result;
  }

  private run(w: Walkable, s: number): WalkResult {
    this.walksRun++;
    const space = this.space;
    const trie = w.trie;
    const { byte, depth, end, tokenStart, tokenIds } = trie;
    if (this.stack.length < trie.maxDepth + 1) this.stack = new Int32Array(trie.maxDepth + 1);
    const st = this.stack;
    const rows = space.rows;
    let accepting = space.accepting;
    const scratch = this.scratch;
    let count = 0;
    const exits = new Map<number, number[]>();
    let visited = 0;
    const roots = w.roots;
    for (let r = 0; r < roots.length; r++) {
      const root = roots[r]!;
      st[depth[root]!] = s;
      const stop = end[root]!;
      let i = root + 1;
      while (i < stop) {
        const d = depth[i]!;
        const from = st[d - 1]!;
        let t = rows[from]![byte[i]!]!;
        if (t === UNKNOWN) {
          t = space.next(from, byte[i]!);
          accepting = space.accepting;
        }
        if (t < 0) {
          i = end[i]!;
          continue;
        }
        st[d] = t;
        visited++;
        for (let k = tokenStart[i]!, e = tokenStart[i + 1]!; k < e; k++) scratch[count++] = tokenIds[k]!;
        if (accepting[t] === 1) {
          const accepts = space.accepts(t);
          for (let a = 0; a < accepts.length; a++) {
            const lexeme = accepts[a]!;
            let nodes = exits.get(lexeme);
            if (nodes === undefined) exits.set(lexeme, (nodes = []));
            nodes.push(i);
          }
        }
        i++;
      }
    }
    this.nodesVisited += visited;
    space.pool.meter?.spend(visited >> 4);
    const groups = [...exits].map(([lexeme, nodes]) => new ExitGroup(lexeme, trie, Int32Array.from(nodes)));
    const groupBytes = groups.reduce((n, g) => n + 4 * g.roots.length + 64, 0);
    const words = Math.ceil(this.vocabSize / 32);
    if (count >= words) {
      const bits = new Uint32Array(words);
      for (let k = 0; k < count; k++) bits[scratch[k]! >>> 5]! |= 1 << (scratch[k]! & 31);
      return { bits, list: null, exits: groups, bytes: bits.byteLength + groupBytes };
    }
    const list = scratch.slice(0, count);
    return { bits: null, list, exits: groups, bytes: list.byteLength + groupBytes };
  }

  /** mask |= the tokens of a walk result. */
  static orInto(mask: Uint32Array, r: WalkResult): void {
    if (r.bits !== null) {
      const bits = r.bits;
      for (let w = 0; w < bits.length; w++) mask[w]! |= bits[w]!;
    } else {
      const list = r.list!;
      for (let k = 0; k < list.length; k++) mask[list[k]! >>> 5]! |= 1 << (list[k]! & 31);
    }
  }
}

/**
 * An Earley parser over lexemes, with Aycock and Horspool's handling of nullable rules. Parse
 * states are immutable Earley sets linked to their predecessor, so a state is one pointer:
 * forking a matcher copies pointers, rolling back drops them, and scanning the same lexeme twice
 * from one set returns the one memoized successor (sets are shared between forks and between the
 * speculative scans a mask computation makes).
 *
 * Invariant: every item's origin is an ancestor of (or is) the set holding it, and ancestors have
 * distinct depths, so (position, origin depth) identifies an item within a set.
 */
import type { Cfg } from "./cfg.ts";

/** The grammar flattened for the parser: dotted positions are indices into `symbol`. */
export class ParserTables {
  /** Symbol after the dot at position p (meaningless where isEnd[p]). */
  readonly symbol: Int32Array;
  readonly isEnd: Uint8Array;
  /** The rule whose alternative holds position p. */
  readonly lhs: Int32Array;
  /** Start position of each alternative of each rule. */
  readonly starts: Int32Array[];
  readonly nullable: Uint8Array;
  /** Terminal index -> its lexeme expression id. */
  readonly terminalExpr: Int32Array;
  /** Position of the augmented rule's end (start •): an item there with the root origin accepts. */
  readonly acceptPos: number;
  /** Position of the augmented rule's start (• start). */
  readonly startPos: number;

  constructor(cfg: Cfg) {
    const alts: { lhs: number; symbols: readonly number[] }[] = [];
    cfg.rules.forEach((r, i) => r.alternatives.forEach((symbols) => alts.push({ lhs: i, symbols })));
    const augmented = cfg.rules.length;
    alts.push({ lhs: augmented, symbols: [cfg.start] });
    const total = alts.reduce((n, a) => n + a.symbols.length + 1, 0);
    this.symbol = new Int32Array(total);
    this.isEnd = new Uint8Array(total);
    this.lhs = new Int32Array(total);
    const starts: number[][] = Array.from({ length: augmented + 1 }, () => []);
    let p = 0;
    for (const a of alts) {
      starts[a.lhs]!.push(p);
      for (const s of a.symbols) {
        this.symbol[p] = s;
        this.lhs[p++] = a.lhs;
      }
      this.isEnd[p] = 1;
      this.lhs[p++] = a.lhs;
    }
    this.starts = starts.map((s) => Int32Array.from(s));
    this.startPos = this.starts[augmented]![0]!;
    this.acceptPos = this.startPos + 1;
    this.terminalExpr = Int32Array.from(cfg.terminals);
    this.nullable = computeNullable(cfg);
  }

  get positions(): number {
    return this.symbol.length;
  }
}

/**
 * The rules that match the empty string, found from the rules known to (a worklist): each
 * alternative counts its symbols not yet known nullable, so the work is linear in the grammar's
 * size whatever the order of its rules (a sweep until nothing changes was quadratic in a chain of
 * optional rules defined last to first, as a schema's optional properties are).
 */
function computeNullable(cfg: Cfg): Uint8Array {
  const nullable = new Uint8Array(cfg.rules.length + 1);
  const altRule: number[] = [];
  const pending: number[] = [];
  /** Rule r -> the alternatives (indices) it appears in, once for each time it appears. */
  const usedIn: number[][] = cfg.rules.map(() => []);
  const found: number[] = [];
  const mark = (r: number): void => {
    if (nullable[r]) return;
    nullable[r] = 1;
    found.push(r);
  };
  cfg.rules.forEach((r, i) => {
    for (const alt of r.alternatives) {
      const a = altRule.length;
      altRule.push(i);
      // A terminal is never nullable: an alternative holding one can never count down to zero.
      pending.push(alt.some((s) => s < 0) ? -1 : alt.length);
      if (pending[a] === 0) mark(i);
      else if (pending[a]! > 0) for (const s of alt) usedIn[s]!.push(a);
    }
  });
  while (found.length > 0) {
    for (const a of usedIn[found.pop()!]!) if (--pending[a]! === 0) mark(altRule[a]!);
  }
  return nullable;
}

let nextSetId = 0;

/** One Earley set: the parse state after some lexemes. */
export class EarleySet {
  readonly id = nextSetId++;
  readonly itemPos: number[] = [];
  readonly itemOrigin: EarleySet[] = [];
  /** Items whose next symbol is rule r, by r. */
  private readonly waiting = new Map<number, number[]>();
  /** Items whose next symbol is terminal t, by t (the terminal index). */
  private readonly scannable = new Map<number, number[]>();
  private readonly successors = new Map<number, EarleySet | null>();
  readonly accepting: boolean;
  /** The set before any lexeme, at the start of this one's chain. */
  readonly root: EarleySet;
  /** Terminals (indices) some item expects next, ascending. */
  readonly expected: readonly number[];
  /** On a root: the items of every set made from it so far (the memoized successors keep them all). */
  treeItems = 0;

  private constructor(
    readonly tables: ParserTables,
    readonly parent: EarleySet | null,
    readonly depth: number,
    seed: (set: EarleySet, add: (pos: number, origin: EarleySet) => void) => void,
  ) {
    this.root = parent === null ? this : parent.root;
    const seen = new Set<number>();
    const predicted = new Set<number>();
    const add = (pos: number, origin: EarleySet): void => {
      const key = origin.depth * tables.positions + pos;
      if (seen.has(key)) return;
      seen.add(key);
      this.itemPos.push(pos);
      this.itemOrigin.push(origin);
    };
    seed(this, add);
    for (let i = 0; i < this.itemPos.length; i++) {
      const pos = this.itemPos[i]!;
      const origin = this.itemOrigin[i]!;
      if (tables.isEnd[pos]) {
        const done = tables.lhs[pos]!;
        const parents = origin === this ? this.waiting.get(done) : origin.waiting.get(done);
        if (parents !== undefined) for (const j of parents) add(origin.itemPos[j]! + 1, origin.itemOrigin[j]!);
        continue;
      }
      const sym = tables.symbol[pos]!;
      if (sym >= 0) {
        let list = this.waiting.get(sym);
        if (list === undefined) this.waiting.set(sym, (list = []));
        list.push(i);
        if (!predicted.has(sym)) {
          predicted.add(sym);
          for (const start of tables.starts[sym]!) add(start, this);
        }
        if (tables.nullable[sym]) add(pos + 1, origin);
      } else {
        const t = -sym - 1;
        let list = this.scannable.get(t);
        if (list === undefined) this.scannable.set(t, (list = []));
        list.push(i);
      }
    }
    this.expected = [...this.scannable.keys()].sort((a, b) => a - b);
    this.root.treeItems += this.itemPos.length;
    let accepting = false;
    const root = this.root;
    for (let i = 0; i < this.itemPos.length; i++) if (this.itemPos[i] === tables.acceptPos && this.itemOrigin[i] === root) accepting = true;
    this.accepting = accepting;
  }

  /** The state before any lexeme. */
  static initial(tables: ParserTables): EarleySet {
    return new EarleySet(tables, null, 0, (self, add) => add(tables.startPos, self));
  }

  /** The state after terminal t (an index), or null where the grammar does not allow it here. */
  scan(t: number): EarleySet | null {
    const memo = this.successors.get(t);
    if (memo !== undefined) return memo;
    const items = this.scannable.get(t);
    let next: EarleySet | null = null;
    if (items !== undefined) {
      next = new EarleySet(this.tables, this, this.depth + 1, (_self, add) => {
        for (const i of items) add(this.itemPos[i]! + 1, this.itemOrigin[i]!);
      });
    }
    this.successors.set(t, next);
    return next;
  }

  get size(): number {
    return this.itemPos.length;
  }
}

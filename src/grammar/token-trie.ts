/**
 * A trie of token byte strings, flattened in depth-first preorder so that a walk is one pass over
 * arrays and a whole subtree is skipped by jumping to `end[i]` (llguidance's layout). Node 0 is the
 * root (the empty string); node i was entered by `byte[i]` at depth `depth[i]`, and the tokens
 * whose bytes end exactly there are tokenIds[tokenStart[i] .. tokenStart[i + 1]).
 */
let nextTrieId = 0;

/** What a mask walk (mask-walk.ts) covers: the subtrees below `roots` (the roots' own tokens excluded); a whole trie is one. */
export interface Walkable {
  readonly trie: TokenTrie;
  readonly roots: Int32Array;
}

export interface TrieEntry {
  readonly bytes: Uint8Array;
  readonly token: number;
}

export class TokenTrie implements Walkable {
  readonly id = nextTrieId++;
  readonly roots = Int32Array.of(0);

  private constructor(
    readonly byte: Uint8Array,
    readonly depth: Uint16Array,
    readonly end: Int32Array,
    readonly tokenStart: Int32Array,
    readonly tokenIds: Int32Array,
    readonly maxDepth: number,
  ) {}

  get trie(): TokenTrie {
    return this;
  }

  get nodeCount(): number {
    return this.byte.length;
  }

  get tokenCount(): number {
    return this.tokenIds.length;
  }

  static build(entries: readonly TrieEntry[]): TokenTrie {
    const sorted = [...entries].sort((x, y) => compareBytes(x.bytes, y.bytes) || x.token - y.token);
    const bytes: number[] = [0];
    const depths: number[] = [0];
    const ends: number[] = [0];
    const tokenStart: number[] = [0];
    const tokenIds: number[] = [];
    // path[d] = node at depth d on the current path; the root is always path[0].
    const path: number[] = [0];
    let prev: Uint8Array = new Uint8Array(0);
    let maxDepth = 0;
    const close = (toDepth: number): void => {
      while (path.length - 1 > toDepth) ends[path.pop()!] = bytes.length;
    };
    for (const e of sorted) {
      let common = 0;
      while (common < prev.length && common < e.bytes.length && prev[common] === e.bytes[common]) common++;
      close(common);
      for (let d = common; d < e.bytes.length; d++) {
        const node = bytes.length;
        bytes.push(e.bytes[d]!);
        depths.push(d + 1);
        ends.push(0);
        tokenStart.push(tokenIds.length);
        path.push(node);
      }
      tokenIds.push(e.token);
      maxDepth = Math.max(maxDepth, e.bytes.length);
      prev = e.bytes;
    }
    close(0);
    ends[0] = bytes.length;
    // tokenStart[i] was recorded when node i was made; its tokens follow until the next node's start.
    tokenStart.push(tokenIds.length);
    const starts = Int32Array.from(tokenStart);
    return new TokenTrie(Uint8Array.from(bytes), Uint16Array.from(depths), Int32Array.from(ends), starts, Int32Array.from(tokenIds), maxDepth);
  }
}

export function compareBytes(a: Uint8Array, b: Uint8Array): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return a[i]! - b[i]!;
  return a.length - b.length;
}

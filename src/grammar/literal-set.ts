/**
 * A finite set of byte strings (the choices of a `choice` source, the scalars of an `enum`) as one
 * expression shaped as their trie: each node is "end here | byte child | byte child ...". An Or of
 * n literals would make every derivative an Or of up to n parts (and every lexer state a new one,
 * each costing O(n) to build and to key); in the trie a derivative is one node's child, found
 * among at most 256. Built from the sorted strings with an explicit stack of open nodes, so its
 * cost is linear in the bytes after the sort and long strings cost no recursion; the pool's
 * hash-consing then merges equal subtrees (the ".0" after every integer is one node).
 */
import { GrammarError } from "../errors.ts";
import { EMPTY, EPSILON, type ExprPool } from "./expr.ts";

const utf8 = new TextEncoder();

/**
 * The UTF-8 bytes of a fixed text the output must hold; GrammarError naming `where` when it has a
 * lone surrogate (from a `\ud800` escape in JSON), which no UTF-8 output can hold: TextEncoder
 * would write U+FFFD instead, a different text.
 */
export function scalarText(text: string, where: string): Uint8Array {
  if (!text.isWellFormed()) {
    const at = [...text].findIndex((c) => c.length === 1 && c.charCodeAt(0) >= 0xd800 && c.charCodeAt(0) <= 0xdfff);
    const unit = [...text][at]!.charCodeAt(0);
    throw new GrammarError(`${where}: a lone surrogate U+${unit.toString(16).toUpperCase()} at character ${at} is not a character; UTF-8 output cannot hold it`);
  }
  return utf8.encode(text);
}

function compareBytes(a: Uint8Array, b: Uint8Array): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return a[i]! - b[i]!;
  return a.length - b.length;
}

/** An open trie node: the byte that leads to it and the expressions of what may follow. */
interface OpenNode {
  readonly byte: number;
  readonly parts: number[];
}

/** The expression matching exactly the strings of `texts` (EMPTY for none). */
export function literalSet(pool: ExprPool, texts: readonly Uint8Array[]): number {
  if (texts.length === 0) return EMPTY;
  const sorted = [...texts].sort(compareBytes);
  // stack[d]: the node at depth d of the current string's path (stack[0] the root).
  const stack: OpenNode[] = [{ byte: -1, parts: [] }];
  const close = (): void => {
    const node = stack.pop()!;
    const rest = node.parts.length === 1 ? node.parts[0]! : pool.or(node.parts);
    stack[stack.length - 1]!.parts.push(pool.concat(pool.byteRange(node.byte, node.byte), rest));
  };
  let previous: Uint8Array | null = null;
  for (const text of sorted) {
    let common = 0;
    if (previous !== null) {
      const n = Math.min(previous.length, text.length);
      while (common < n && previous[common] === text[common]) common++;
      if (common === text.length && common === previous.length) continue; // a duplicate
    }
    while (stack.length > common + 1) close();
    for (let i = common; i < text.length; i++) stack.push({ byte: text[i]!, parts: [] });
    stack[stack.length - 1]!.parts.push(EPSILON);
    previous = text;
  }
  while (stack.length > 1) close();
  return pool.or(stack[0]!.parts);
}

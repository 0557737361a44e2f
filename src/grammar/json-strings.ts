/**
 * JSON strings as byte expressions. A character of a set may be written raw (where JSON allows it:
 * not `"`, `\` or a control character), as a short escape (`\n`, `\"`, `\/`, ...) or as `\uXXXX`
 * (a surrogate pair above U+FFFF; a lone surrogate escape is refused), hex digits in either case: every spelling a JSON parser reads
 * as that character, so a `pattern` or `maxLength` constrains the decoded text, not its spelling.
 * Fixed strings (property names, `enum`, `const`) are matched in the one spelling Python's
 * `json.dumps(..., ensure_ascii=False)` and JavaScript's `JSON.stringify` write: a model is never
 * offered `"n\u0061me"` for "name" (such output is refused, never let through).
 */
import { ANY_CHAR, codePoints, hex4Expr, intersect, minus, type CodeSet, utf8Expr } from "./code-set.ts";
import { INFINITE, type ExprPool } from "./expr.ts";

const SHORT_ESCAPES: readonly [number, string][] = [
  [0x22, '"'], [0x5c, "\\"], [0x2f, "/"], [0x08, "b"], [0x0c, "f"], [0x0a, "n"], [0x0d, "r"], [0x09, "t"],
];
/** Characters JSON never allows raw in a string. */
const MUST_ESCAPE: CodeSet = [[0x00, 0x1f], [0x22, 0x22], [0x5c, 0x5c]];
const utf8 = new TextEncoder();
const ASCII: CodeSet = [[0, 0x7f]];
const NON_ASCII: CodeSet = [[0x80, 0x10ffff]];
const BMP_CHARACTERS: CodeSet = [[0, 0xd7ff], [0xe000, 0xffff]];

const charCache = new WeakMap<ExprPool, Map<string, number>>();

/** One character of `set` inside a JSON string, in any spelling. */
export function jsonCharExpr(pool: ExprPool, set: CodeSet): number {
  let cache = charCache.get(pool);
  if (cache === undefined) {
    cache = new Map();
    charCache.set(pool, cache);
  }
  const key = set.map(([lo, hi]) => `${lo}-${hi}`).join(",");
  const hit = cache.get(key);
  if (hit !== undefined) return hit;
  let expr: number;
  const ascii = intersect(set, ASCII);
  const rest = intersect(set, NON_ASCII);
  if (ascii.length > 0 && rest.length > 0) {
    // Apart, so that sets differing only in ASCII (a trie of excluded names) share their larger half.
    expr = pool.or([jsonCharExpr(pool, ascii), jsonCharExpr(pool, rest)]);
  } else {
    const parts = [utf8Expr(pool, minus(set, MUST_ESCAPE))];
    const backslash = pool.byteRange(0x5c, 0x5c);
    for (const [cp, letter] of SHORT_ESCAPES) {
      if (intersect(set, [[cp, cp]]).length > 0) parts.push(pool.concat(backslash, pool.byteRange(letter.charCodeAt(0), letter.charCodeAt(0))));
    }
    const u = pool.concat(backslash, pool.byteRange(0x75, 0x75));
    // A surrogate is never a character alone: above U+FFFF only a pair spells one (so lengths and
    // patterns count it once, as a JSON parser decodes it).
    for (const [lo, hi] of intersect(set, BMP_CHARACTERS)) parts.push(pool.concat(u, hex4Expr(pool, lo, hi)));
    for (const [lo, hi] of intersect(set, [[0x10000, 0x10ffff]])) parts.push(surrogatePairs(pool, u, lo, hi));
    expr = pool.or(parts);
  }
  cache.set(key, expr);
  return expr;
}

/** `\uHHHH\uLLLL` spellings of code points lo..hi (all above U+FFFF). */
function surrogatePairs(pool: ExprPool, u: number, lo: number, hi: number): number {
  const high = (cp: number): number => 0xd800 + ((cp - 0x10000) >> 10);
  const low = (cp: number): number => 0xdc00 + ((cp - 0x10000) & 0x3ff);
  const pair = (h1: number, h2: number, l1: number, l2: number): number =>
    pool.seq([u, hex4Expr(pool, h1, h2), u, hex4Expr(pool, l1, l2)]);
  if (high(lo) === high(hi)) return pair(high(lo), high(lo), low(lo), low(hi));
  const parts = [pair(high(lo), high(lo), low(lo), 0xdfff), pair(high(hi), high(hi), 0xdc00, low(hi))];
  if (high(lo) + 1 <= high(hi) - 1) parts.push(pair(high(lo) + 1, high(hi) - 1, 0xdc00, 0xdfff));
  return pool.or(parts);
}

/** `"` content `"`, where `content` is an expression over string-internal bytes. */
export function quoted(pool: ExprPool, content: number): number {
  const quote = pool.byteRange(0x22, 0x22);
  return pool.seq([quote, content, quote]);
}

/** Any string content (every spelling), marked open text (ExprPool.markOpenText). */
export function anyContent(pool: ExprPool): number {
  const e = pool.repeat(jsonCharExpr(pool, ANY_CHAR), 0, INFINITE);
  pool.markOpenText(e);
  return e;
}

/** The text as a JSON string the way Python's json.dumps(ensure_ascii=False) writes it. */
export function pythonJsonQuote(text: string): string {
  if (!/["\\\u0000-\u001f]/.test(text)) return `"${text}"`;
  let out = '"';
  for (const ch of text) {
    const cp = ch.codePointAt(0)!;
    const short = SHORT_ESCAPES.find(([c, l]) => c === cp && l !== "/");
    if (short !== undefined) out += `\\${short[1]}`;
    else if (cp < 0x20) out += `\\u${cp.toString(16).padStart(4, "0")}`;
    else out += ch;
  }
  return `${out}"`;
}

/** The bytes of a fixed string in its one canonical JSON spelling. */
export function jsonLiteralExpr(pool: ExprPool, text: string): number {
  return pool.literal(utf8.encode(pythonJsonQuote(text)));
}

interface CharTrie {
  end: boolean;
  readonly children: Map<number, CharTrie>;
}

/**
 * String contents (every spelling) that decode to none of `texts`, built without And/Not (a trie
 * of the excluded texts: at each node, stop where no text ends, take a child's character, or leave
 * the trie by any other character), so the lexer never searches for emptiness on it.
 */
export function contentExcept(pool: ExprPool, texts: readonly string[]): number {
  const root: CharTrie = { end: false, children: new Map() };
  for (const t of texts) {
    let node = root;
    for (const cp of codePoints(t)) {
      let next = node.children.get(cp);
      if (next === undefined) node.children.set(cp, (next = { end: false, children: new Map() }));
      node = next;
    }
    node.end = true;
  }
  const anyChars = anyContent(pool);
  const build = (node: CharTrie): number => {
    const parts: number[] = node.end ? [] : [1 /* EPSILON */];
    for (const [cp, child] of node.children) parts.push(pool.concat(jsonCharExpr(pool, [[cp, cp]]), build(child)));
    const others = minus(ANY_CHAR, [...node.children.keys()].sort((a, b) => a - b).map((cp): [number, number] => [cp, cp]));
    if (others.length > 0) parts.push(pool.concat(jsonCharExpr(pool, others), anyChars));
    return pool.or(parts);
  };
  // Excluding finitely many names closes no text: every prefix still goes on to a name not excluded.
  const content = build(root);
  pool.markOpenText(content);
  return content;
}

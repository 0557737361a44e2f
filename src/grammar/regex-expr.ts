/**
 * A parsed regular expression as a byte expression. `encode` says how one character of a set is
 * written as bytes (UTF-8 for a raw regex, JSON string escapes inside a JSON string). Two readings
 * of anchors: "search" (JSON Schema's `pattern` matches anywhere unless ^ and $ pin it, ECMA-262)
 * and "full" (vLLM's `regex`: the whole output matches; ^ and $ at the ends change nothing).
 * Look-aheads at the start of a branch become intersections: `^(?=.*\d).{8,}$` is
 * "(any digit somewhere) and (8 or more characters)".
 */
import { ANY_CHAR, type CodeSet } from "./code-set.ts";
import { EPSILON, INFINITE, type ExprPool } from "./expr.ts";
import { RegexSyntaxError, type RegexNode } from "./regex-syntax.ts";

export type CharEncoder = (set: CodeSet) => number;

export function regexToExpr(pool: ExprPool, root: RegexNode, encode: CharEncoder, mode: "search" | "full"): number {
  const anyText = pool.repeat(encode(ANY_CHAR), 0, INFINITE);
  const branches = (node: RegexNode): number[] => {
    const alternatives = node.t === "alt" ? node.items : [node];
    return alternatives.flatMap((alt) => branch(alt));
  };
  const branch = (alt: RegexNode): number[] => {
    let items = alt.t === "seq" ? [...alt.items] : [alt];
    let anchoredStart = false;
    let anchoredEnd = false;
    while (items[0]?.t === "bol") {
      anchoredStart = true;
      items.shift();
    }
    const looks: { negative: boolean; item: RegexNode }[] = [];
    while (items[0]?.t === "look") {
      const look = items.shift() as { t: "look"; negative: boolean; item: RegexNode };
      looks.push(look);
    }
    while (items[items.length - 1]?.t === "eol") {
      anchoredEnd = true;
      items.pop();
    }
    // (^a$|^b$) as a whole: its branches are the top level's.
    if (items.length === 1 && items[0]!.t === "alt" && !anchoredStart && !anchoredEnd && looks.length === 0) return branches(items[0]!);
    if (mode === "full") {
      anchoredStart = true;
      anchoredEnd = true;
    }
    if (looks.length > 0 && !anchoredStart) throw new RegexSyntaxError("a look-ahead is supported only at the start of an anchored pattern (^(?=...)...)");
    items = items.filter((item) => item.t !== "bol" || mode !== "full");
    const body = pool.seq(items.map((item) => plain(item)));
    const tail = anchoredEnd ? EPSILON : anyText;
    const conditions = looks.map(({ negative, item }) => {
      const ahead = pool.concat(plain(item), anyText);
      return negative ? pool.not(ahead) : ahead;
    });
    const matched = conditions.length === 0 ? pool.concat(body, tail) : pool.and([...conditions, pool.concat(body, tail)]);
    return [anchoredStart ? matched : pool.concat(anyText, matched)];
  };
  const plain = (node: RegexNode): number => {
    switch (node.t) {
      case "set":
        return encode(node.set);
      case "seq":
        return pool.seq(node.items.map(plain));
      case "alt":
        return pool.or(node.items.map(plain));
      case "rep":
        return pool.repeat(plain(node.item), node.min, node.max === Infinity ? INFINITE : node.max);
      case "bol":
      case "eol":
        throw new RegexSyntaxError("an anchor (^, $) is supported only at the start or end of a branch");
      case "look":
        throw new RegexSyntaxError("a look-ahead is supported only at the start of an anchored pattern (^(?=...)...)");
    }
  };
  return pool.or(branches(root));
}

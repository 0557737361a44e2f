/**
 * The syntax of regular expressions as JSON Schema's `pattern` (ECMA-262) and vLLM's `regex`
 * (Python's `re`) write them, parsed into a tree over code points. What cannot be a regular
 * language (back-references, look-behind, word boundaries) or is not handled (Unicode property
 * classes, inline flags) is refused with a RegexSyntaxError naming it and its offset.
 */
import { ANY_CHAR, codeSet, complement, MAX_CODE_POINT, single, SURROGATES, union, type CodeSet } from "./code-set.ts";
import { GRAMMAR_LIMITS } from "./limits.ts";

export type RegexNode =
  | { readonly t: "set"; readonly set: CodeSet }
  | { readonly t: "seq"; readonly items: readonly RegexNode[] }
  | { readonly t: "alt"; readonly items: readonly RegexNode[] }
  | { readonly t: "rep"; readonly item: RegexNode; readonly min: number; readonly max: number }
  | { readonly t: "bol" }
  | { readonly t: "eol" }
  | { readonly t: "look"; readonly negative: boolean; readonly item: RegexNode };

export class RegexSyntaxError extends Error {
  /** The GRAMMAR_LIMITS bound the pattern went over, where that is what is wrong with it. */
  constructor(message: string, readonly limit: string | null = null) {
    super(message);
  }
}

/** Largest count a {n,m} may name (a bigger one is refused, not truncated). */
export const MAX_REGEX_REPEAT = 100_000;

const DIGIT: CodeSet = [[0x30, 0x39]];
const WORD: CodeSet = codeSet([[0x30, 0x39], [0x41, 0x5a], [0x5f, 0x5f], [0x61, 0x7a]]);
// ECMA-262 WhiteSpace and LineTerminator.
const SPACE: CodeSet = codeSet([
  [0x09, 0x0d], [0x20, 0x20], [0xa0, 0xa0], [0x1680, 0x1680], [0x2000, 0x200a], [0x2028, 0x2029], [0x202f, 0x202f], [0x205f, 0x205f],
  [0x3000, 0x3000], [0xfeff, 0xfeff],
]);
/** `.`: every character but a line terminator (ECMA-262). */
export const DOT: CodeSet = complement(codeSet([[0x0a, 0x0a], [0x0d, 0x0d], [0x2028, 0x2029]]));

export function parseRegex(source: string): RegexNode {
  return new RegexParser(source).parse();
}

class RegexParser {
  private readonly chars: number[];
  private pos = 0;
  /** Groups open around the position (bounded by GRAMMAR_LIMITS.nesting before each descent). */
  private depth = 0;

  constructor(source: string) {
    this.chars = Array.from(source, (c) => c.codePointAt(0)!);
  }

  parse(): RegexNode {
    const node = this.alternation();
    if (this.pos < this.chars.length) this.fail(`unbalanced "${String.fromCodePoint(this.chars[this.pos]!)}"`);
    return node;
  }

  private fail(what: string): never {
    throw new RegexSyntaxError(`${what} at offset ${this.pos}`);
  }

  /** `cp` itself, or a failure where it is a lone surrogate: UTF-8 output can never hold one. */
  private scalar(cp: number): number {
    if (cp >= SURROGATES[0] && cp <= SURROGATES[1]) this.fail(`a lone surrogate U+${cp.toString(16).toUpperCase()} (not a character)`);
    return cp;
  }

  private peek(offset = 0): number | undefined {
    return this.chars[this.pos + offset];
  }

  private eat(ch: string): boolean {
    if (this.peek() === ch.codePointAt(0)) {
      this.pos++;
      return true;
    }
    return false;
  }

  private alternation(): RegexNode {
    const items = [this.sequence()];
    while (this.eat("|")) items.push(this.sequence());
    return items.length === 1 ? items[0]! : { t: "alt", items };
  }

  private sequence(): RegexNode {
    const items: RegexNode[] = [];
    for (;;) {
      const c = this.peek();
      if (c === undefined || c === 0x7c /* | */ || c === 0x29 /* ) */) break;
      const atom = this.atom();
      items.push(this.quantified(atom));
    }
    return items.length === 1 ? items[0]! : { t: "seq", items };
  }

  /** The atom with its quantifier, if one follows; a second one (`a**`, `a{2}{3}`) is refused, as ECMA-262 and Python do. */
  private quantified(atom: RegexNode): RegexNode {
    const counts = this.quantifier();
    if (counts === null) return atom;
    this.eat("?"); // lazy: the same language
    if (atom.t === "bol" || atom.t === "eol" || atom.t === "look") this.fail("a quantifier on an assertion");
    const [min, max] = counts;
    if (min > MAX_REGEX_REPEAT || (max !== Infinity && max > MAX_REGEX_REPEAT)) this.fail(`a repeat count over ${MAX_REGEX_REPEAT}`);
    if (max < min) this.fail("a repeat {n,m} with m < n");
    const at = this.pos;
    if (this.quantifier() !== null) {
      this.pos = at;
      this.fail("a quantifier after a quantifier (nothing to repeat)");
    }
    return { t: "rep", item: atom, min, max };
  }

  /** The counts of a quantifier at the position (consumed), or null where none is. */
  private quantifier(): [number, number] | null {
    const c = this.peek();
    if (c === 0x7b /* { */) return this.counts();
    const counts: [number, number] | null = c === 0x2a /* * */ ? [0, Infinity] : c === 0x2b /* + */ ? [1, Infinity] : c === 0x3f /* ? */ ? [0, 1] : null;
    if (counts !== null) this.pos++;
    return counts;
  }

  /** `{n}`, `{n,}`, `{n,m}` (the position after "}"), or null where "{" is a literal (Annex B). */
  private counts(): [number, number] | null {
    const start = this.pos;
    this.pos++;
    const n = this.integer();
    if (n === null) {
      this.pos = start;
      return null;
    }
    let m = n;
    if (this.eat(",")) m = this.integer() ?? Infinity;
    if (!this.eat("}")) {
      this.pos = start;
      return null;
    }
    return [n, m];
  }

  private integer(): number | null {
    let digits = "";
    while (this.peek() !== undefined && this.peek()! >= 0x30 && this.peek()! <= 0x39) digits += String.fromCodePoint(this.chars[this.pos++]!);
    return digits === "" ? null : Number(digits);
  }

  private atom(): RegexNode {
    const c = this.chars[this.pos++]!;
    switch (c) {
      case 0x2e: // .
        return { t: "set", set: DOT };
      case 0x5e: // ^
        return { t: "bol" };
      case 0x24: // $
        return { t: "eol" };
      case 0x28: // (
        return this.group();
      case 0x5b: // [
        return { t: "set", set: this.charClass() };
      case 0x5c: // backslash
        return this.escapeAtom();
      case 0x2a:
      case 0x2b:
      case 0x3f:
        this.pos--;
        return this.fail("nothing to repeat");
      default:
        return { t: "set", set: single(this.scalar(c)) };
    }
  }

  private group(): RegexNode {
    if (++this.depth > GRAMMAR_LIMITS.nesting) {
      throw new RegexSyntaxError(`parentheses nest deeper than ${GRAMMAR_LIMITS.nesting} at offset ${this.pos - 1} (limit: nesting)`, "nesting");
    }
    const node = this.groupBody();
    this.depth--;
    return node;
  }

  private groupBody(): RegexNode {
    let look: { negative: boolean } | null = null;
    if (this.eat("?")) {
      if (this.eat(":")) {
        // non-capturing
      } else if (this.eat("=")) look = { negative: false };
      else if (this.eat("!")) look = { negative: true };
      else if (this.peek() === 0x3c /* < */ && (this.peek(1) === 0x3d || this.peek(1) === 0x21)) this.fail("look-behind is not supported");
      else if (this.eat("<") || (this.eat("P") && this.eat("<"))) {
        while (this.peek() !== undefined && this.peek() !== 0x3e) this.pos++;
        if (!this.eat(">")) this.fail("an unterminated group name");
      } else this.fail("inline flags and other (?...) groups are not supported");
    }
    const inner = this.alternation();
    if (!this.eat(")")) this.fail('a missing ")"');
    return look === null ? inner : { t: "look", negative: look.negative, item: inner };
  }

  private escapeAtom(): RegexNode {
    const c = this.peek();
    if (c === undefined) this.fail("a trailing backslash");
    if (c === 0x62 || c === 0x42) this.fail("word boundaries (\\b, \\B) are not supported");
    if (c === 0x41) {
      this.pos++;
      return { t: "bol" };
    }
    if (c === 0x5a || c === 0x7a) {
      this.pos++;
      return { t: "eol" };
    }
    if (c >= 0x31 && c <= 0x39) this.fail("back-references are not supported");
    if (c === 0x6b && this.peek(1) === 0x3c) this.fail("back-references are not supported");
    return { t: "set", set: this.escape(false) };
  }

  /** The set an escape after "\" stands for (inside a class, \b is a backspace). */
  private escape(inClass: boolean): CodeSet {
    const c = this.chars[this.pos++]!;
    switch (c) {
      case 0x64: return DIGIT; // d
      case 0x44: return complement(DIGIT);
      case 0x77: return WORD; // w
      case 0x57: return complement(WORD);
      case 0x73: return SPACE; // s
      case 0x53: return complement(SPACE);
      case 0x6e: return single(0x0a); // n
      case 0x72: return single(0x0d);
      case 0x74: return single(0x09);
      case 0x66: return single(0x0c);
      case 0x76: return single(0x0b);
      case 0x61: return single(0x07); // a (Python)
      case 0x30: return single(0);
      case 0x62:
        if (inClass) return single(0x08);
        break;
      case 0x78: return single(this.hex(2)); // x
      case 0x75: { // u
        if (this.eat("{")) {
          let v = 0;
          let n = 0;
          while (this.peek() !== undefined && this.peek() !== 0x7d) {
            v = v * 16 + this.hexDigit(this.chars[this.pos++]!);
            n++;
          }
          if (!this.eat("}") || n === 0 || v > MAX_CODE_POINT) this.fail("a bad \\u{...} escape");
          return single(this.scalar(v));
        }
        return single(this.utf16Escape(this.hex(4)));
      }
      case 0x55: return single(this.hex(8)); // U (Python)
      case 0x63: { // cX
        const x = this.chars[this.pos++];
        if (x === undefined || !((x >= 0x41 && x <= 0x5a) || (x >= 0x61 && x <= 0x7a))) this.fail("a bad \\c escape");
        return single(x % 32);
      }
      case 0x70:
      case 0x50:
        this.pos--;
        this.fail("Unicode property classes (\\p{...}) are not supported");
    }
    if ((c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a)) {
      this.pos--;
      this.fail(`an unknown escape \\${String.fromCodePoint(c)}`);
    }
    return single(c);
  }

  /**
   * The character of a `\uXXXX` escape whose value is `unit`: a high surrogate followed by a
   * `\uXXXX` low one is the pair's one character (as ECMA-262 reads it with the u flag).
   */
  private utf16Escape(unit: number): number {
    if (unit >= 0xd800 && unit <= 0xdbff && this.peek() === 0x5c && this.peek(1) === 0x75 && this.peek(2) !== 0x7b) {
      const at = this.pos;
      this.pos += 2;
      const low = this.hex(4);
      if (low >= 0xdc00 && low <= 0xdfff) return 0x10000 + ((unit - 0xd800) << 10) + (low - 0xdc00);
      this.pos = at;
    }
    return this.scalar(unit);
  }

  private hexDigit(c: number): number {
    if (c >= 0x30 && c <= 0x39) return c - 0x30;
    if (c >= 0x61 && c <= 0x66) return c - 0x61 + 10;
    if (c >= 0x41 && c <= 0x46) return c - 0x41 + 10;
    return this.fail("a bad hex digit");
  }

  private hex(n: number): number {
    let v = 0;
    for (let i = 0; i < n; i++) {
      const c = this.chars[this.pos++];
      if (c === undefined) this.fail("a short hex escape");
      v = v * 16 + this.hexDigit(c);
    }
    if (v > MAX_CODE_POINT) this.fail("an escape beyond U+10FFFF");
    return n === 4 ? v : this.scalar(v);
  }

  private charClass(): CodeSet {
    const negated = this.eat("^");
    const parts: CodeSet[] = [];
    let first = true;
    for (;;) {
      const c = this.peek();
      if (c === undefined) this.fail('a missing "]"');
      if (c === 0x5d && !first) {
        this.pos++;
        break;
      }
      if (c === 0x5d && first) {
        // ECMA-262: [] matches nothing, [^] anything.
        this.pos++;
        return negated ? ANY_CHAR : [];
      }
      first = false;
      const lo = this.classAtom();
      if (this.peek() === 0x2d /* - */ && this.peek(1) !== undefined && this.peek(1) !== 0x5d) {
        this.pos++;
        const hi = this.classAtom();
        if (lo.length !== 1 || hi.length !== 1 || lo[0]![0] !== lo[0]![1] || hi[0]![0] !== hi[0]![1]) {
          // [\d-x]: the "-" is a literal (Annex B).
          parts.push(lo, single(0x2d), hi);
          continue;
        }
        if (hi[0]![0] < lo[0]![0]) this.fail("a class range out of order");
        parts.push([[lo[0]![0], hi[0]![0]]]);
      } else parts.push(lo);
    }
    const set = union(...parts);
    return negated ? complement(set) : set;
  }

  private classAtom(): CodeSet {
    const c = this.chars[this.pos++]!;
    if (c === 0x5c) {
      if (this.peek() === undefined) this.fail("a trailing backslash");
      return this.escape(true);
    }
    if (c === 0x5b && this.peek() === 0x3a) this.fail("POSIX classes ([:alpha:]) are not supported");
    return single(this.scalar(c));
  }
}

/**
 * The strings a pattern matches when it is an anchored list of literals (`^name$`, `^(a|b)$`,
 * `^a$|^b$`), else null: such a pattern names properties exactly, so its keys need no regex.
 */
export function anchoredLiterals(root: RegexNode): string[] | null {
  const literal = (node: RegexNode): string | null => {
    const items = node.t === "seq" ? node.items : [node];
    let out = "";
    for (const item of items) {
      if (item.t !== "set" || item.set.length !== 1 || item.set[0]![0] !== item.set[0]![1]) return null;
      out += String.fromCodePoint(item.set[0]![0]);
    }
    return out;
  };
  const alternatives = (node: RegexNode): string[] | null => {
    if (node.t === "alt") {
      const all = node.items.map(literal);
      return all.every((x) => x !== null) ? (all as string[]) : null;
    }
    const one = literal(node);
    return one === null ? null : [one];
  };
  const branch = (node: RegexNode): string[] | null => {
    if (node.t !== "seq" || node.items.length < 2 || node.items[0]!.t !== "bol" || node.items[node.items.length - 1]!.t !== "eol") return null;
    const inner = node.items.slice(1, -1);
    if (inner.length === 1) return alternatives(inner[0]!);
    return alternatives({ t: "seq", items: inner });
  };
  if (root.t === "alt") {
    const parts = root.items.map(branch);
    return parts.every((p) => p !== null) ? (parts as string[][]).flat() : null;
  }
  return branch(root);
}

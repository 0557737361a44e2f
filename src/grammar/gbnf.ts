/**
 * llama.cpp's GBNF (llama-server's `grammar` field), parsed as llama.cpp's grammar parser reads it
 * (src/llama-grammar.cpp): `name ::= alternatives` rules, one per line unless inside parentheses;
 * "literals" with \x \u \U \t \r \n escapes; [classes] with ^, ranges and escapes; `.` any
 * character; ( groups ); * + ? {m} {m,} {m,n}; # comments; the start rule `root`. Characters are
 * Unicode code points matched as UTF-8.
 *
 * Rules whose language is regular (they reach no rule that recurses) are folded into lexemes, and
 * so is every run of such items inside a sequence; what recurses stays a rule. Because the lexer
 * explores every place a lexeme may end, the language is exactly the grammar's. An error names the
 * line: `gbnf line 3: expecting ::= ...`. Token references (<...>, !<...>) are refused.
 */
import { GrammarError } from "../errors.ts";
import { CfgBuilder, type Cfg } from "./cfg.ts";
import { ANY_CHAR, codeSet, complement, MAX_CODE_POINT, SURROGATES, union, utf8Bytes, utf8Expr, type CodeSet } from "./code-set.ts";
import { INFINITE, type ExprPool } from "./expr.ts";
import { literalSet } from "./literal-set.ts";
import { checkBudget, GRAMMAR_LIMITS, nestingError, type CompileBudget } from "./limits.ts";

type Item =
  | { readonly t: "lit"; readonly cps: readonly number[] }
  | { readonly t: "class"; readonly set: CodeSet }
  | { readonly t: "ref"; readonly name: string; readonly line: number }
  | { readonly t: "group"; readonly alts: readonly (readonly Item[])[] }
  | { readonly t: "rep"; readonly item: Item; readonly min: number; readonly max: number };

interface GRule {
  readonly name: string;
  /** Appended to by a redefinition (llama.cpp's behaviour), in place: many of them cost linear time. */
  readonly alts: Item[][];
  readonly line: number;
}

/** llama.cpp's MAX_REPETITION_THRESHOLD. */
const MAX_REPETITION = 2000;

export function parseGbnf(text: string): Map<string, GRule> {
  return new GbnfParser(text).parse();
}

class GbnfParser {
  private readonly cps: number[];
  private pos = 0;
  private readonly rules = new Map<string, GRule>();
  /** Offsets of the newlines, ascending: a line number is a binary search, not a scan from the start. */
  private readonly newlines: number[] = [];
  /** Groups open around the position. */
  private depth = 0;

  constructor(text: string) {
    this.cps = Array.from(text, (c) => c.codePointAt(0)!);
    this.cps.forEach((c, i) => c === 0x0a && this.newlines.push(i));
  }

  private line(at = this.pos): number {
    let lo = 0;
    let hi = this.newlines.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.newlines[mid]! < at) lo = mid + 1;
      else hi = mid;
    }
    return lo + 1;
  }

  private text(start: number, end: number): string {
    let out = "";
    for (let i = start; i < end; i++) out += String.fromCodePoint(this.cps[i]!);
    return out;
  }

  private fail(what: string, at = this.pos): never {
    const rest = this.text(at, Math.min(at + 20, this.cps.length)).split("\n")[0];
    throw new GrammarError(`gbnf line ${this.line(at)}: ${what}${rest ? ` at "${rest}"` : ""}`);
  }

  private ch(offset = 0): number | undefined {
    return this.cps[this.pos + offset];
  }

  private is(c: string, offset = 0): boolean {
    return this.ch(offset) === c.codePointAt(0);
  }

  private space(newlineOk: boolean): void {
    for (;;) {
      const c = this.ch();
      if (c === 0x20 || c === 0x09 || (newlineOk && (c === 0x0a || c === 0x0d))) this.pos++;
      else if (c === 0x23 /* # */) while (this.ch() !== undefined && this.ch() !== 0x0a && this.ch() !== 0x0d) this.pos++;
      else return;
    }
  }

  private isWord(c: number | undefined): boolean {
    return c !== undefined && ((c >= 0x61 && c <= 0x7a) || (c >= 0x41 && c <= 0x5a) || (c >= 0x30 && c <= 0x39) || c === 0x2d);
  }

  private name(): string {
    const start = this.pos;
    while (this.isWord(this.ch())) this.pos++;
    if (this.pos === start) this.fail("expecting name");
    return this.text(start, this.pos);
  }

  parse(): Map<string, GRule> {
    this.space(true);
    while (this.ch() !== undefined) this.rule();
    for (const r of this.rules.values()) this.checkRefs(r.alts);
    if (!this.rules.has("root")) throw new GrammarError("gbnf: the grammar has no root rule (the start rule is named root)");
    return this.rules;
  }

  private checkRefs(alts: readonly (readonly Item[])[]): void {
    const visit = (item: Item): void => {
      if (item.t === "ref" && !this.rules.has(item.name)) throw new GrammarError(`gbnf line ${item.line}: undefined rule identifier '${item.name}'`);
      if (item.t === "group") item.alts.forEach((a) => a.forEach(visit));
      if (item.t === "rep") visit(item.item);
    };
    alts.forEach((a) => a.forEach(visit));
  }

  private rule(): void {
    const at = this.pos;
    const name = this.name();
    this.space(false);
    if (!(this.is(":") && this.is(":", 1) && this.is("=", 2))) this.fail("expecting ::=");
    this.pos += 3;
    this.space(true);
    const alts = this.alternates(false);
    if (this.is("\r")) this.pos += this.is("\n", 1) ? 2 : 1;
    else if (this.is("\n")) this.pos++;
    else if (this.ch() !== undefined) this.fail("expecting newline or end");
    this.space(true);
    const known = this.rules.get(name);
    // llama.cpp appends a redefinition's alternatives to the rule.
    if (known !== undefined) for (const alt of alts) known.alts.push(alt);
    else this.rules.set(name, { name, alts, line: this.line(at) });
  }

  private alternates(nested: boolean): Item[][] {
    const alts = [this.sequence(nested)];
    while (this.is("|")) {
      this.pos++;
      this.space(true);
      alts.push(this.sequence(nested));
    }
    return alts;
  }

  private sequence(nested: boolean): Item[] {
    const items: Item[] = [];
    for (;;) {
      const c = this.ch();
      if (c === undefined) break;
      if (this.is('"')) {
        const start = this.pos++;
        const cps: number[] = [];
        while (!this.is('"')) {
          if (this.ch() === undefined) this.fail("unterminated string literal", start);
          cps.push(this.char());
        }
        this.pos++;
        items.push({ t: "lit", cps });
      } else if (this.is("[")) {
        items.push({ t: "class", set: this.charClass() });
      } else if (this.is("<") || this.is("!")) {
        this.fail("token references (<...>, !<...>) are not supported");
      } else if (this.isWord(c)) {
        const line = this.line();
        items.push({ t: "ref", name: this.name(), line });
      } else if (this.is("(")) {
        if (++this.depth > GRAMMAR_LIMITS.nesting) throw nestingError(`gbnf line ${this.line()}: parentheses`);
        this.pos++;
        this.space(true);
        const alts = this.alternates(true);
        if (!this.is(")")) this.fail("expecting ')'");
        this.pos++;
        this.depth--;
        items.push({ t: "group", alts });
      } else if (this.is(".")) {
        this.pos++;
        items.push({ t: "class", set: ANY_CHAR });
      } else if (this.is("*") || this.is("+") || this.is("?")) {
        const [min, max] = this.is("*") ? [0, Infinity] : this.is("+") ? [1, Infinity] : [0, 1];
        this.pos++;
        this.repeatLast(items, min, max);
      } else if (this.is("{")) {
        this.pos++;
        this.space(nested);
        const min = this.integer();
        this.space(nested);
        let max = min;
        if (this.is(",")) {
          this.pos++;
          this.space(nested);
          max = this.isDigit(this.ch()) ? this.integer() : Infinity;
          this.space(nested);
        }
        if (!this.is("}")) this.fail("expecting '}'");
        this.pos++;
        if (min > MAX_REPETITION) this.fail(`number of repetitions exceeds ${MAX_REPETITION}`);
        if (max !== Infinity && max > MAX_REPETITION) max = Infinity;
        this.repeatLast(items, min, max);
      } else break;
      this.space(nested);
    }
    return items;
  }

  private repeatLast(items: Item[], min: number, max: number): void {
    const last = items.pop();
    if (last === undefined) this.fail("expecting preceding item to */+/?/{");
    items.push({ t: "rep", item: last, min, max });
  }

  private isDigit(c: number | undefined): boolean {
    return c !== undefined && c >= 0x30 && c <= 0x39;
  }

  private integer(): number {
    const start = this.pos;
    while (this.isDigit(this.ch())) this.pos++;
    if (start === this.pos) this.fail("expecting an int");
    return Number(String.fromCodePoint(...this.cps.slice(start, this.pos)));
  }

  private hex(n: number): number {
    let v = 0;
    for (let i = 0; i < n; i++) {
      const c = this.ch();
      const d = c === undefined ? -1 : c >= 0x30 && c <= 0x39 ? c - 0x30 : c >= 0x61 && c <= 0x66 ? c - 0x57 : c >= 0x41 && c <= 0x46 ? c - 0x37 : -1;
      if (d < 0) this.fail(`expecting ${n} hex chars`);
      v = v * 16 + d;
      this.pos++;
    }
    return v;
  }

  /** One character of a literal or class: a Unicode scalar value (a lone surrogate or one above U+10FFFF has no UTF-8). */
  private char(): number {
    const at = this.pos;
    const cp = this.charValue();
    if ((cp >= SURROGATES[0] && cp <= SURROGATES[1]) || cp > MAX_CODE_POINT) {
      this.fail(`U+${cp.toString(16).toUpperCase()} is not a character (${cp > MAX_CODE_POINT ? "above U+10FFFF" : "a lone surrogate"})`, at);
    }
    return cp;
  }

  private charValue(): number {
    if (!this.is("\\")) return this.cps[this.pos++]!;
    const esc = this.ch(1);
    this.pos += 2;
    switch (esc) {
      case 0x78: return this.hex(2);
      case 0x75: return this.hex(4);
      case 0x55: return this.hex(8);
      case 0x74: return 0x09;
      case 0x72: return 0x0d;
      case 0x6e: return 0x0a;
      case 0x5c: case 0x22: case 0x5b: case 0x5d: case 0x2d: return esc;
      default:
        return this.fail("unknown escape", this.pos - 2);
    }
  }

  private charClass(): CodeSet {
    const start = this.pos++;
    const negated = this.is("^");
    if (negated) this.pos++;
    const parts: CodeSet[] = [];
    while (!this.is("]")) {
      if (this.ch() === undefined) this.fail("unterminated character class", start);
      const lo = this.char();
      if (this.is("-") && !this.is("]", 1)) {
        this.pos++;
        if (this.ch() === undefined) this.fail("unexpected end of input");
        const hi = this.char();
        parts.push(codeSet([[lo, hi]]));
      } else parts.push(codeSet([[lo, lo]]));
    }
    this.pos++;
    const set = union(...parts);
    return negated ? complement(set) : set;
  }
}

/** The grammar of a GBNF text, regular parts folded into lexemes. */
export function gbnfToCfg(pool: ExprPool, text: string, budget: CompileBudget): Cfg {
  const rules = parseGbnf(text);
  const b = new CfgBuilder(pool, budget);
  // Each regular rule's expression, made after those it refers to: no recursion along a chain of rules.
  const ruleExprs = new Map<string, number>();
  const itemExpr = (item: Item): number => {
    switch (item.t) {
      case "lit":
        return pool.literal(item.cps.flatMap(utf8Bytes));
      case "class":
        return utf8Expr(pool, item.set);
      case "ref":
        return ruleExprs.get(item.name)!;
      case "group":
        return altsExpr(item.alts);
      case "rep":
        return pool.repeat(itemExpr(item.item), item.min, item.max === Infinity ? INFINITE : item.max);
    }
  };
  // Alternatives that are only literals ("a" | "b" | ... 90,000 of them) are one trie (literal-set.ts), not an n-way Or.
  const altsExpr = (alts: readonly (readonly Item[])[]): number => {
    const literals: Uint8Array[] = [];
    const parts: number[] = [];
    for (const alt of alts) {
      if (alt.every((item) => item.t === "lit")) literals.push(Uint8Array.from(alt.flatMap((item) => (item as { cps: readonly number[] }).cps.flatMap(utf8Bytes))));
      else parts.push(pool.seq(alt.map(itemExpr)));
    }
    return pool.or([literalSet(pool, literals), ...parts]);
  };
  for (const name of regularOrder(rules)) {
    ruleExprs.set(name, altsExpr(rules.get(name)!.alts));
    // Checked per rule: one rule can at most double what the rules before it made (a ::= b b).
    checkBudget(budget, 0, pool.size);
  }

  const isRegular = (item: Item): boolean => {
    switch (item.t) {
      case "lit":
      case "class":
        return true;
      case "ref":
        return ruleExprs.has(item.name);
      case "group":
        return item.alts.every((alt) => alt.every(isRegular));
      case "rep":
        return isRegular(item.item);
    }
  };
  // Rules are made when first referred to and defined from a worklist, so a chain of rules costs no stack.
  const ruleIds = new Map<string, number>();
  const undefinedRules: string[] = [];
  const ruleOf = (name: string): number => {
    let id = ruleIds.get(name);
    if (id === undefined) {
      id = b.rule(name);
      ruleIds.set(name, id);
      undefinedRules.push(name);
    }
    return id;
  };
  const sequence = (items: readonly Item[], name: string): number[] => {
    const out: number[] = [];
    let pending: number[] = [];
    const flush = (): void => {
      out.push(...b.regular(pool.seq(pending), name));
      pending = [];
    };
    for (const item of items) {
      if (isRegular(item)) {
        pending.push(itemExpr(item));
        continue;
      }
      flush();
      out.push(...symbols(item, name));
    }
    flush();
    return out;
  };
  const symbols = (item: Item, name: string): number[] => {
    switch (item.t) {
      case "ref":
        return [ruleOf(item.name)];
      case "group":
        return [b.rule(name, item.alts.map((alt) => sequence(alt, name)))];
      case "rep": {
        const one = (): number[] => sequence([item.item], name);
        const out: number[] = [];
        for (let i = 0; i < item.min; i++) out.push(...one());
        if (item.max === Infinity) {
          const list = b.rule(name, [[]]);
          b.define(list, [[list, ...one()]]);
          out.push(list);
        } else {
          // Up to max - min more, nested: opt(k) ::= "" | item opt(k - 1).
          let tail = -1;
          for (let k = 0; k < item.max - item.min; k++) {
            const rest = tail < 0 ? [] : [tail];
            tail = b.rule(name, [[], [...one(), ...rest]]);
          }
          if (tail >= 0) out.push(tail);
        }
        return out;
      }
      default:
        return sequence([item], name);
    }
  };
  const root = ruleExprs.has("root") ? b.rule("root", [b.regular(ruleExprs.get("root")!, "root")]) : ruleOf("root");
  for (let name = undefinedRules.pop(); name !== undefined; name = undefinedRules.pop()) {
    // The alternatives without a recursive part are one lexeme together: the same language, one
    // terminal instead of one per alternative (a lexer state of 90,000 literals otherwise).
    const alts = rules.get(name)!.alts;
    const plain = alts.filter((alt) => alt.every(isRegular));
    const others = alts.filter((alt) => !alt.every(isRegular)).map((alt) => sequence(alt, name));
    b.define(ruleIds.get(name)!, plain.length === 0 ? others : [b.regular(altsExpr(plain), name), ...others]);
  }
  return b.build(root);
}

/**
 * The rules that reach no recursion (their language is regular), each after every rule it refers
 * to: Kahn's algorithm over the references, so linear and without recursion however long a chain
 * of rules is; what is on or reaches a cycle is never ready.
 */
function regularOrder(rules: Map<string, GRule>): string[] {
  const waiting = new Map<string, number>();
  const users = new Map<string, string[]>();
  const ready: string[] = [];
  for (const [name, rule] of rules) {
    const refs = new Set<string>();
    const visit = (item: Item): void => {
      if (item.t === "ref") refs.add(item.name);
      else if (item.t === "group") item.alts.forEach((a) => a.forEach(visit));
      else if (item.t === "rep") visit(item.item);
    };
    rule.alts.forEach((a) => a.forEach(visit));
    waiting.set(name, refs.size);
    for (const ref of refs) {
      let list = users.get(ref);
      if (list === undefined) users.set(ref, (list = []));
      list.push(name);
    }
    if (refs.size === 0) ready.push(name);
  }
  const order: string[] = [];
  for (let name = ready.pop(); name !== undefined; name = ready.pop()) {
    order.push(name);
    for (const user of users.get(name) ?? []) {
      const left = waiting.get(user)! - 1;
      waiting.set(user, left);
      if (left === 0) ready.push(user);
    }
  }
  return order;
}

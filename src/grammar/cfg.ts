/**
 * The one internal form every grammar source compiles to: a context-free grammar whose terminals
 * are lexemes, each a non-empty regular language of bytes (an expression of the pool). JSON
 * Schema, GBNF, a regex and a choice list all become this; the parser (earley.ts) runs over
 * lexemes and the lexer (lexer.ts) over bytes.
 *
 * Symbols are numbers: s >= 0 names rule s, s < 0 names terminal -s - 1. A terminal is identified
 * by its expression id, so equal lexemes are one terminal however often they are written.
 */
import { GrammarError } from "../errors.ts";
import { EMPTY, type ExprPool } from "./expr.ts";
import { checkBudget, type CompileBudget } from "./limits.ts";

export interface CfgRule {
  readonly name: string;
  readonly alternatives: (readonly number[])[];
}

export interface Cfg {
  readonly pool: ExprPool;
  readonly rules: readonly CfgRule[];
  /** Terminal i's lexeme expression (never nullable). */
  readonly terminals: readonly number[];
  readonly start: number;
}

export class CfgBuilder {
  readonly rules: CfgRule[] = [];
  readonly terminals: number[] = [];
  private readonly terminalIndex = new Map<number, number>();
  /** The rule without alternatives that EMPTY lexemes become (-1 until one is needed). */
  private nothingRule = -1;

  constructor(readonly pool: ExprPool, private readonly budget: CompileBudget) {}

  /**
   * The terminal of a non-nullable lexeme; for EMPTY (`[]` in GBNF, a class of nothing) a rule that
   * matches nothing, so that the grammar's emptiness shows in `build` instead of a terminal no text
   * can ever match.
   */
  terminal(expr: number): number {
    if (expr === EMPTY) {
      if (this.nothingRule < 0) this.nothingRule = this.rule("nothing");
      return this.nothingRule;
    }
    if (this.pool.nullable(expr)) throw new Error("a lexeme must not match the empty string");
    let t = this.terminalIndex.get(expr);
    if (t === undefined) {
      checkBudget(this.budget, this.rules.length, this.pool.size);
      t = this.terminals.length;
      this.terminals.push(expr);
      this.terminalIndex.set(expr, t);
    }
    return -t - 1;
  }

  /**
   * Symbols matching exactly `expr`, which may match the empty string: none for ε, one terminal,
   * or a rule "ε | the rest".
   */
  regular(expr: number, name: string): number[] {
    if (expr === 1 /* EPSILON */) return [];
    if (!this.pool.nullable(expr)) return [this.terminal(expr)];
    const rest = this.pool.nonEmpty(expr);
    return [this.rule(name, rest === 0 ? [[]] : [[], [this.terminal(rest)]])];
  }

  /** Throws when the compile's budget (time, rules, expressions) is spent: for work that makes no rule. */
  check(): void {
    checkBudget(this.budget, this.rules.length, this.pool.size);
  }

  /** A new rule (alternatives may be filled in later with `define`). */
  rule(name: string, alternatives: (readonly number[])[] = []): number {
    checkBudget(this.budget, this.rules.length, this.pool.size);
    this.rules.push({ name, alternatives: [...alternatives] });
    return this.rules.length - 1;
  }

  define(rule: number, alternatives: (readonly number[])[]): void {
    this.rules[rule]!.alternatives.push(...alternatives);
  }

  /**
   * The grammar; a rule without alternatives matches nothing (a schema `false` somewhere). A start
   * rule that matches nothing at all is refused: the request could never be answered.
   */
  build(start: number, what = "the grammar"): Cfg {
    const cfg = { pool: this.pool, rules: this.rules, terminals: this.terminals, start };
    if (!productive(cfg)[start]) throw new GrammarError(`${what} matches nothing: no output could ever satisfy it`);
    return cfg;
  }
}

/** Which rules derive some string of terminals: a worklist, linear in the grammar's size. */
export function productive(cfg: Cfg): Uint8Array {
  const ok = new Uint8Array(cfg.rules.length);
  // missing[a]: rule symbols of alternative a not yet known productive; users[r]: alternatives using rule r.
  const missing: number[] = [];
  const owner: number[] = [];
  const users: number[][] = cfg.rules.map(() => []);
  const ready: number[] = [];
  cfg.rules.forEach((r, i) => {
    for (const alt of r.alternatives) {
      const a = missing.length;
      const refs = alt.filter((s) => s >= 0);
      missing.push(refs.length);
      owner.push(i);
      for (const s of refs) users[s]!.push(a);
      if (refs.length === 0) ready.push(i);
    }
  });
  while (ready.length > 0) {
    const r = ready.pop()!;
    if (ok[r]) continue;
    ok[r] = 1;
    for (const a of users[r]!) if (--missing[a]! === 0) ready.push(owner[a]!);
  }
  return ok;
}

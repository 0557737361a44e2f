/**
 * GrammarMatcher: one sequence's position in a grammar, driven token by token by the engine (the
 * shape of xgrammar's GrammarMatcher and llguidance's Matcher).
 *
 * State: a set of configurations (parse state, lexer state). Usually one; more where the grammar
 * is ambiguous at the byte level (a lexeme that may end or go on). Invariants:
 *  - the state after each accepted token is kept, so rollback(n) restores exactly the state before
 *    the last n tokens, and a fork shares everything already computed (the states are immutable);
 *  - a mask allows a token iff acceptToken would take it; an end-of-generation token is allowed
 *    iff canTerminate(); a token with no bytes (control tokens) never is, unless the grammar names
 *    it (a special token's spelling, vocabulary.ts);
 *  - after an end-of-generation token is accepted the matcher is terminated: nothing else is.
 * Work on the shared lexer is charged to the grammar's masks (CompiledGrammar.enter): a grammar
 * over its bounds throws GrammarLimitError from any of these, changing nothing.
 */
import type { CompiledGrammar } from "./compiled-grammar.ts";
import type { EarleySet } from "./earley.ts";
import { forcedTokensOf } from "./forced.ts";
import { MaskWalker } from "./mask-walk.ts";
import type { Walkable } from "./token-trie.ts";

function orBits(mask: Uint32Array, bits: Uint32Array): void {
  for (let w = 0; w < bits.length; w++) mask[w]! |= bits[w]!;
}

interface Config {
  readonly set: EarleySet;
  /** Lexer state; DEAD where no lexeme can start (only the end may follow). */
  readonly lex: number;
}

interface Step {
  readonly configs: readonly Config[];
  /** The token accepted to get here (-1 for the start). */
  readonly token: number;
  readonly terminated: boolean;
}

export class GrammarMatcher {
  private history: Step[];

  constructor(readonly grammar: CompiledGrammar, history?: Step[]) {
    const start = grammar.initial;
    this.history = history ?? [{ configs: [{ set: start, lex: grammar.lexerStart(start) }], token: -1, terminated: false }];
  }

  private get top(): Step {
    return this.history[this.history.length - 1]!;
  }

  /** Tokens accepted since the start (or the last reset). */
  get tokenCount(): number {
    return this.history.length - 1;
  }

  /** The last accepted token, or undefined at the start. */
  get lastToken(): number | undefined {
    const t = this.top.token;
    return t < 0 ? undefined : t;
  }

  isTerminated(): boolean {
    return this.top.terminated;
  }

  /** Whether the output so far is a complete match (an end-of-generation token is allowed). */
  canTerminate(): boolean {
    return !this.top.terminated && this.configsCanEnd(this.top.configs);
  }

  private configsCanEnd(configs: readonly Config[]): boolean {
    const g = this.grammar;
    g.enter();
    for (const { set, lex } of configs) {
      if (set.accepting && lex === g.lexerStart(set)) return true;
      if (lex < 0) continue;
      for (const lexeme of g.space.accepts(lex)) if (g.scanLexeme(set, lexeme)?.accepting === true) return true;
    }
    return false;
  }

  /**
   * Fill `mask` (ceil(vocabSize / 32) words, bit t of word t >> 5 for token t) with the tokens
   * allowed next. Terminated: only the end-of-generation tokens (the sequence is over anyway).
   */
  fillNextTokenBitmask(mask: Uint32Array): void {
    mask.fill(0);
    this.grammar.enter();
    const vocab = this.grammar.vocab;
    if (!this.top.terminated) {
      for (const { set, lex } of this.top.configs) if (lex >= 0) this.fillConfig(mask, set, lex);
    }
    if (this.top.terminated || this.configsCanEnd(this.top.configs)) for (const t of vocab.eog) mask[t >>> 5]! |= 1 << (t & 31);
    // A token the grammar names matches by its spelling only (the walk let its text through too).
    for (const t of this.grammar.namedTokens) {
      const ok = !this.top.terminated && this.advanceToken(this.top.configs, t).length > 0;
      if (ok) mask[t >>> 5]! |= 1 << (t & 31);
      else mask[t >>> 5]! &= ~(1 << (t & 31));
    }
  }

  private fillConfig(mask: Uint32Array, set: EarleySet, lex: number): void {
    const g = this.grammar;
    this.fillTokens(mask, set, lex);
    // A lexeme that may end before this token: the token may start the next ones.
    const accepts = g.space.accepts(lex);
    for (let i = 0; i < accepts.length; i++) {
      const next = g.scanLexeme(set, accepts[i]!);
      if (next === null) continue;
      const start = g.lexerStart(next);
      if (start >= 0) this.fillTokens(mask, next, start);
    }
  }

  /** Every token from lexer state `lex`: plain ones at once where the state lets any plain text through. */
  private fillTokens(mask: Uint32Array, set: EarleySet, lex: number): void {
    const g = this.grammar;
    const vocab = g.vocab;
    // Inside a free string every plain and text token passes: one OR of their union.
    const short = g.space.allowsAllPlain(lex, vocab.short.plainMaxBytes);
    const long = short && g.space.allowsAllPlain(lex, vocab.long.plainMaxBytes);
    if (long && g.space.allowsAllText(lex, Math.max(vocab.short.textMaxChars, vocab.long.textMaxChars))) {
      orBits(mask, vocab.plainAndTextBits);
    } else {
      for (const [slice, plainPasses] of [[vocab.short, short], [vocab.long, long]] as const) {
        if (plainPasses) orBits(mask, slice.plainBits);
        else this.fillFrom(mask, set, lex, slice.plain);
        // Text that passes where plain text does not is rare: check only where plain passes.
        if (plainPasses && g.space.allowsAllText(lex, slice.textMaxChars)) orBits(mask, slice.textBits);
        else this.fillFrom(mask, set, lex, slice.text);
      }
    }
    this.fillFrom(mask, set, lex, vocab.short.rest);
    this.fillFrom(mask, set, lex, vocab.long.rest);
  }

  private fillFrom(mask: Uint32Array, set: EarleySet, lex: number, from: Walkable): void {
    const g = this.grammar;
    const r = g.walker.walk(from, lex);
    MaskWalker.orInto(mask, r);
    const exits = r.exits;
    for (let i = 0; i < exits.length; i++) {
      const exit = exits[i]!;
      const next = g.scanLexeme(set, exit.lexeme);
      if (next === null) continue;
      const start = g.lexerStart(next);
      if (start < 0) continue;
      this.fillFrom(mask, next, start, exit);
    }
  }

  /** Take token `id`; false (and no change) where the grammar does not allow it. */
  acceptToken(id: number): boolean {
    const top = this.top;
    if (top.terminated) return false;
    const vocab = this.grammar.vocab;
    if (vocab.eog.includes(id)) {
      if (!this.configsCanEnd(top.configs)) return false;
      this.history.push({ configs: top.configs, token: id, terminated: true });
      return true;
    }
    const configs = this.advanceToken(top.configs, id);
    if (configs.length === 0) return false;
    this.history.push({ configs, token: id, terminated: false });
    this.grammar.tokenAccepted();
    return true;
  }

  /**
   * The configurations after token `id`: by its text, and by its spelling where it is a special
   * token (vocabulary.ts; a grammar that names the token matches the spelling, text the text).
   */
  private advanceToken(configs: readonly Config[], id: number): Config[] {
    const vocab = this.grammar.vocab;
    const bytes = vocab.bytes[id];
    const spelled = vocab.spelling(id);
    if (spelled !== undefined && this.grammar.namedTokens.includes(id)) return this.advance(configs, spelled);
    const byText = bytes === undefined || bytes.length === 0 ? [] : this.advance(configs, bytes);
    if (spelled === undefined) return byText;
    const bySpelling = this.advance(configs, spelled);
    if (byText.length === 0) return bySpelling;
    for (const c of bySpelling) if (!byText.some((k) => k.set === c.set && k.lex === c.lex)) byText.push(c);
    return byText;
  }

  /**
   * Advance past `bytes` as one step recorded for `token` (text that is not the token's own
   * bytes: the part of a token from where a lazy grammar starts, triggered.ts); false, changing
   * nothing, where they are not allowed.
   */
  acceptBytes(bytes: Uint8Array, token: number): boolean {
    const top = this.top;
    if (top.terminated) return false;
    const configs = this.advance(top.configs, bytes);
    if (configs.length === 0) return false;
    this.history.push({ configs, token, terminated: false });
    this.grammar.tokenAccepted();
    return true;
  }

  /** Whether the grammar is complete and nothing may follow (only the end is allowed). */
  mustEnd(): boolean {
    return this.mustEndAfter(new Uint8Array(0));
  }

  /** Whether `bytes` could follow (without taking them). */
  allowsBytes(bytes: Uint8Array): boolean {
    return this.advance(this.top.configs, bytes).length > 0;
  }

  /** The configurations after `bytes`, empty where they are not allowed. */
  advance(configs: readonly Config[], bytes: Uint8Array): Config[] {
    const g = this.grammar;
    g.enter();
    const space = g.space;
    let current = configs;
    for (let i = 0; i < bytes.length; i++) {
      const b = bytes[i]!;
      const next: Config[] = [];
      // Configurations are few (usually one): a linear check beats hashing, until they are not.
      let seen: Set<string> | null = null;
      const push = (set: EarleySet, lex: number): void => {
        if (seen === null) {
          for (let k = 0; k < next.length; k++) if (next[k]!.set === set && next[k]!.lex === lex) return;
          next.push({ set, lex });
          if (next.length >= 16) seen = new Set(next.map((x) => `${x.set.id}:${x.lex}`));
          return;
        }
        const key = `${set.id}:${lex}`;
        if (seen.has(key)) return;
        seen.add(key);
        next.push({ set, lex });
      };
      for (let c = 0; c < current.length; c++) {
        const { set, lex } = current[c]!;
        if (lex < 0) continue;
        const t = space.next(lex, b);
        if (t >= 0) push(set, t);
        const accepts = space.accepts(lex);
        for (let a = 0; a < accepts.length; a++) {
          const after = g.scanLexeme(set, accepts[a]!);
          if (after === null) continue;
          const start = g.lexerStart(after);
          if (start < 0) continue;
          const t2 = space.next(start, b);
          if (t2 >= 0) push(after, t2);
        }
      }
      if (next.length === 0) return next;
      current = next;
    }
    return [...current];
  }

  /** Undo the last `n` accepted tokens (0 <= n <= tokenCount). */
  rollback(n: number): void {
    if (!Number.isInteger(n) || n < 0 || n > this.tokenCount) throw new RangeError(`rollback(${n}): ${this.tokenCount} tokens accepted`);
    this.history.length -= n;
  }

  /** Back to the start. */
  reset(): void {
    this.history.length = 1;
  }

  /** An independent matcher in the same state (for n > 1 samples). */
  fork(): GrammarMatcher {
    return new GrammarMatcher(this.grammar, [...this.history]);
  }

  /**
   * The bytes every continuation starts with, up to `max`: the grammar allows exactly one next byte
   * at each of them and may not end before them.
   */
  forcedBytes(max = 256): Uint8Array {
    const out: number[] = [];
    let configs = this.top.configs;
    if (this.top.terminated) return new Uint8Array(0);
    while (out.length < max && !this.configsCanEnd(configs)) {
      const byte = this.onlyNextByte(configs);
      if (byte < 0) break;
      out.push(byte);
      configs = this.advance(configs, Uint8Array.of(byte));
    }
    return Uint8Array.from(out);
  }

  /** The one byte allowed next, or -1 where none or several are. */
  private onlyNextByte(configs: readonly Config[]): number {
    const g = this.grammar;
    g.enter();
    const union = new Uint32Array(8);
    const add = (lex: number): void => {
      if (lex < 0) return;
      const set = g.space.allowedBytes(lex);
      for (let w = 0; w < 8; w++) union[w]! |= set[w]!;
    };
    for (const { set, lex } of configs) {
      add(lex);
      if (lex < 0) continue;
      for (const lexeme of g.space.accepts(lex)) {
        const after = g.scanLexeme(set, lexeme);
        if (after !== null) add(g.lexerStart(after));
      }
    }
    let found = -1;
    for (let w = 0; w < 8; w++) {
      const bits = union[w]!;
      if (bits === 0) continue;
      if ((bits & (bits - 1)) !== 0 || found >= 0) return -1;
      found = w * 32 + (31 - Math.clz32(bits));
    }
    return found;
  }

  /** Whether after `bytes` the grammar must end (it may end, and no byte may follow). */
  mustEndAfter(bytes: Uint8Array): boolean {
    const configs = this.advance(this.top.configs, bytes);
    return configs.length > 0 && this.configsCanEnd(configs) && this.noNextByte(configs);
  }

  private noNextByte(configs: readonly Config[]): boolean {
    const g = this.grammar;
    g.enter();
    const open = (lex: number): boolean => lex >= 0 && g.space.allowedBytes(lex).some((w) => w !== 0);
    for (const { set, lex } of configs) {
      if (open(lex)) return false;
      if (lex < 0) continue;
      for (const lexeme of g.space.accepts(lex)) {
        const after = g.scanLexeme(set, lexeme);
        if (after !== null && open(g.lexerStart(after))) return false;
      }
    }
    return true;
  }

  /**
   * The tokens that are the only possible continuation, to append without sampling (forced.ts says
   * how they are chosen); empty where the model has a choice.
   */
  forcedTokens(): number[] {
    return forcedTokensOf(this);
  }

  /** Whether the whole text is allowed as the next bytes (tests and checks). */
  allowsText(text: string): boolean {
    return this.allowsBytes(new TextEncoder().encode(text));
  }

  /** Whether `text` followed by the end is a complete match from here (tests and checks). */
  matchesText(text: string): boolean {
    const bytes = new TextEncoder().encode(text);
    // The masks' bounds as if each byte were a token taken (over a byte vocabulary, it would be).
    for (let i = 0; i < bytes.length; i++) this.grammar.tokenAccepted();
    const configs = this.advance(this.top.configs, bytes);
    return configs.length > 0 && this.configsCanEnd(configs);
  }
}

/**
 * Where a lazy grammar starts: trigger texts found in the output as it is written (llama.cpp's
 * grammar trigger words, xgrammar's structural-tag triggers), by an Aho-Corasick automaton over
 * their bytes. A state is the longest end of the text so far that begins some trigger; a token
 * either leaves the automaton in a new state or completes a trigger at one of its bytes.
 *
 * For the mask of free text the tokens that complete a trigger from a state are what matters
 * (only those can start the grammar); they are found once per vocabulary, triggers and state by
 * running every token through the automaton, and kept (TriggerScan).
 *
 * A trigger may hold special tokens' spellings (vocabulary.ts: Mistral's `[TOOL_CALLS]`, gpt-oss's
 * `<|channel|>commentary to=functions.`): a special token a trigger names writes its spelling into
 * the automaton, so only the token itself completes that part; every other token writes its text.
 */
import { SPELLING_CLOSE, SPELLING_OPEN, type TokenVocabulary } from "./vocabulary.ts";

/** A token that completes trigger `trigger` from some state; the grammar's text is the trigger, then `rest`. */
export interface TriggerCompletion {
  readonly token: number;
  readonly trigger: number;
  readonly rest: Uint8Array;
}

/** What a run of bytes from a state gives: the state after them, or the trigger completed and the bytes after it. */
export type TriggerRun = { readonly state: number } | { readonly trigger: number; readonly rest: Uint8Array };

export class TriggerAutomaton {
  /** state * 256 + byte -> the next state. */
  private readonly goto: Int32Array;
  /** state -> the trigger that ends there (the longest one), or -1. */
  private readonly ends: Int32Array;
  readonly stateCount: number;

  constructor(readonly triggers: readonly Uint8Array[]) {
    // The trie of the triggers: node 0 is the empty text.
    const children: Map<number, number>[] = [new Map()];
    const endsAt: number[] = [-1];
    triggers.forEach((t, i) => {
      let node = 0;
      for (const b of t) {
        let next = children[node]!.get(b);
        if (next === undefined) {
          next = children.length;
          children.push(new Map());
          endsAt.push(-1);
          children[node]!.set(b, next);
        }
        node = next;
      }
      if (endsAt[node]! < 0) endsAt[node] = i;
    });
    const n = children.length;
    this.stateCount = n;
    this.goto = new Int32Array(n * 256);
    this.ends = Int32Array.from(endsAt);
    const fail = new Int32Array(n);
    // Breadth first: a node's failure state is complete before its children need it.
    const queue: number[] = [0];
    for (let q = 0; q < queue.length; q++) {
      const node = queue[q]!;
      for (let b = 0; b < 256; b++) {
        const child = children[node]!.get(b);
        const viaFail = node === 0 ? 0 : this.goto[fail[node]! * 256 + b]!;
        if (child === undefined) {
          this.goto[node * 256 + b] = viaFail;
          continue;
        }
        this.goto[node * 256 + b] = child;
        fail[child] = viaFail;
        if (this.ends[child]! < 0) this.ends[child] = this.ends[viaFail]!;
        queue.push(child);
      }
    }
  }

  /** `bytes` written from `state`: the state after them, or the first trigger they complete. */
  run(state: number, bytes: Uint8Array): TriggerRun {
    let s = state;
    for (let i = 0; i < bytes.length; i++) {
      s = this.goto[s * 256 + bytes[i]!]!;
      const t = this.ends[s]!;
      if (t >= 0) return { trigger: t, rest: bytes.subarray(i + 1) };
    }
    return { state: s };
  }
}

/** The tokens of one vocabulary that complete a trigger, per state (computed on first use). */
export class TriggerScan {
  private readonly completions = new Map<number, readonly TriggerCompletion[]>();
  /** The special tokens whose spellings the triggers hold. */
  private readonly named = new Set<number>();

  constructor(readonly automaton: TriggerAutomaton, readonly vocab: TokenVocabulary) {
    for (const t of automaton.triggers) {
      for (let at = t.indexOf(SPELLING_OPEN); at >= 0; at = t.indexOf(SPELLING_OPEN, at + 1)) {
        const close = t.indexOf(SPELLING_CLOSE, at);
        const id = close < 0 ? undefined : vocab.spelledToken(t.subarray(at, close + 1));
        if (id !== undefined) this.named.add(id);
      }
    }
  }

  /** What token `token` writes into free text as the automaton reads it: its spelling where a trigger names it, else its text. */
  freeBytes(token: number): Uint8Array {
    return this.named.has(token) ? this.vocab.spelling(token)! : this.vocab.bytes[token]!;
  }

  completing(state: number): readonly TriggerCompletion[] {
    let list = this.completions.get(state);
    if (list === undefined) {
      const found: TriggerCompletion[] = [];
      for (let token = 0; token < this.vocab.bytes.length; token++) {
        const b = this.freeBytes(token);
        if (b.length === 0) continue;
        const r = this.automaton.run(state, b);
        if ("trigger" in r) found.push({ token, trigger: r.trigger, rest: r.rest });
      }
      list = found;
      this.completions.set(state, list);
    }
    return list;
  }
}

const scans = new WeakMap<TokenVocabulary, Map<string, TriggerScan>>();

/** The scan of `vocab` for these triggers (their bytes, spellings included), shared by every grammar that uses them. */
export function triggerScan(vocab: TokenVocabulary, triggers: readonly Uint8Array[]): TriggerScan {
  let byKey = scans.get(vocab);
  if (byKey === undefined) scans.set(vocab, (byKey = new Map()));
  const key = triggersKey(triggers);
  let scan = byKey.get(key);
  if (scan === undefined) {
    scan = new TriggerScan(new TriggerAutomaton(triggers), vocab);
    byKey.set(key, scan);
  }
  return scan;
}

/** A cache key of trigger byte strings. */
export function triggersKey(triggers: readonly Uint8Array[]): string {
  return triggers.map((t) => t.join(",")).join(";");
}

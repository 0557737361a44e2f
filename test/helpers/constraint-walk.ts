/**
 * Random walks through a token constraint (the tool-call constraint's tests): each token drawn at
 * random among the allowed ones, except where a `Lean` names one, so that free text opens calls.
 * Along the way: a refused token changes nothing, and rolling back restores the earlier masks.
 */
import { expect } from "bun:test";
import Ajv from "ajv";
import { isAllowed, type TokenConstraint } from "../../src/constraint/token-constraint.ts";
import type { ToolDefinition } from "../../src/tools/tool-types.ts";
import type { Xoshiro128 } from "../../src/util/random.ts";

/** The token to lean into after `ids` (whose text is `text`), taken with probability `chance` where allowed. */
export type Lean = (ids: readonly number[], text: string) => { token: number | undefined; chance: number };

/**
 * Leans into token sequences (a trigger as tokens): now and then to start one, and to go on with
 * the one under way with probability `goOn` (near 1 for long ones).
 */
export function leanIntoSequences(sequences: readonly (readonly number[])[], goOn = 0.9): Lean {
  return (ids) => {
    let best: { seq: readonly number[]; k: number } | null = null;
    for (const seq of sequences) {
      for (let k = Math.min(seq.length - 1, ids.length); k > 0; k--) {
        if (seq.slice(0, k).every((t, i) => ids[ids.length - k + i] === t)) {
          if (best === null || k > best.k) best = { seq, k };
          break;
        }
      }
    }
    if (best !== null) return { token: best.seq[best.k], chance: goOn };
    return { token: sequences[ids.length % sequences.length]![0], chance: 0.1 };
  };
}

/** A walk of at most `steps` tokens through `c`; the tokens taken and whether the constraint ended. */
export function walkConstraint(c: TokenConstraint, rng: Xoshiro128, vocab: number, decode: (ids: number[]) => string, lean: Lean, steps: number): { ids: number[]; ended: boolean } {
  const words = Math.ceil(vocab / 32);
  const ids: number[] = [];
  const masks: Uint32Array[] = [];
  let text = "";
  for (let step = 0; step < steps && !c.isTerminated(); step++) {
    const mask = new Uint32Array(words);
    c.fillNextTokenBitmask(mask);
    masks.push(mask);
    const allowed: number[] = [];
    for (let t = 0; t < vocab; t++) if (isAllowed(mask, t)) allowed.push(t);
    expect(allowed.length).toBeGreaterThan(0);
    // A refused token is refused by acceptToken too, and leaves the mask as it was.
    const refused = Array.from({ length: vocab }, (_, t) => t).find((t) => !isAllowed(mask, t) && ((t * 7919 + step) % 5 === 0));
    if (refused !== undefined) {
      expect(c.acceptToken(refused)).toBe(false);
      const again = new Uint32Array(words);
      c.fillNextTokenBitmask(again);
      expect([...again]).toEqual([...mask]);
    }
    const { token: leanTo, chance } = lean(ids, text);
    const leaning = rng.nextFloat() < chance;
    const token = leanTo !== undefined && isAllowed(mask, leanTo) && leaning ? leanTo : allowed[Math.floor(rng.nextFloat() * allowed.length)]!;
    expect(c.acceptToken(token)).toBe(true);
    ids.push(token);
    text = decode(ids);
    // Now and then: back a few tokens, the masks there as they were, then forward again.
    if (step % 17 === 16) {
      const back = 1 + Math.floor(rng.nextFloat() * Math.min(5, ids.length - 1));
      c.rollback(back);
      const at = new Uint32Array(words);
      c.fillNextTokenBitmask(at);
      expect([...at]).toEqual([...masks[masks.length - back]!]);
      for (const t of ids.slice(ids.length - back)) expect(c.acceptToken(t)).toBe(true);
    }
  }
  return { ids, ended: c.isTerminated() };
}

/** A check that every call read has one of `tools`' names and arguments valid for its schema (ajv); it returns how many there were. */
export function validCalls(tools: readonly ToolDefinition[]): (calls: readonly { function: { name: string; arguments: string } }[]) => number {
  const ajv = new Ajv();
  const validators = new Map(tools.map((t) => [t.function.name, ajv.compile(t.function.parameters ?? { type: "object" })]));
  return (calls) => {
    for (const call of calls) {
      const validate = validators.get(call.function.name);
      expect(validate).toBeDefined();
      expect(validate!(JSON.parse(call.function.arguments))).toBe(true);
    }
    return calls.length;
  };
}

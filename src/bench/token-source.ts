/**
 * Benchmark prompts: seeded random token ids passed as promptTokenIds, so no tokenization cost
 * and no dependence on a text corpus, and the same prompts on every run.
 */
import { Xoshiro128 } from "../util/random.ts";

/** llama2.c's BOS; ids 0-2 are <unk>, <s>, </s>, never drawn as content. */
export const BOS = 1;
const FIRST_CONTENT_ID = 3;

/** Draws content token ids below a vocabulary size. */
export class TokenSource {
  private readonly rng: Xoshiro128;

  constructor(
    seed: number,
    private readonly vocabSize: number,
  ) {
    this.rng = new Xoshiro128(seed);
  }

  /** `n` random content token ids. */
  tokens(n: number): number[] {
    const span = this.vocabSize - FIRST_CONTENT_ID;
    return Array.from({ length: n }, () => FIRST_CONTENT_ID + (this.rng.nextUint32() % span));
  }

  /** A prompt of `n` tokens in all, BOS first. */
  prompt(n: number): number[] {
    return [BOS, ...this.tokens(n - 1)];
  }

  /** Fisher-Yates, in place. */
  shuffle<T>(items: T[]): T[] {
    for (let i = items.length - 1; i > 0; i--) {
      const j = this.rng.nextUint32() % (i + 1);
      [items[i], items[j]] = [items[j]!, items[i]!];
    }
    return items;
  }
}

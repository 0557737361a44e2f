/**
 * Sampling and stop strings: what each knob keeps, that a seed reproduces a stream, and that a
 * stop string never shows up (even half of one) in streamed text.
 */
import { describe, expect, test } from "bun:test";
import { argmax, DEFAULT_SAMPLING, Sampler, type SamplingParams } from "../src/engine/sampler.ts";
import { StopStringMatcher } from "../src/engine/stop-strings.ts";
import { LLM } from "../src/llm/llm.ts";
import { describeShared } from "./helpers/shared.ts";
import { testThreads } from "./helpers/threads.ts";

const params = (p: Partial<SamplingParams>): SamplingParams => ({
  ...DEFAULT_SAMPLING, temperature: 1, topK: 0, topP: 1, minP: 0, repetitionPenalty: 1, seed: 7, ...p,
});

/** Frequencies of `draws` samples from `logits`. */
function frequencies(p: Partial<SamplingParams>, logits: number[], draws = 20_000): number[] {
  const sampler = new Sampler(params(p));
  const counts = new Array<number>(logits.length).fill(0);
  const x = Float32Array.from(logits);
  for (let i = 0; i < draws; i++) counts[sampler.sample(x, [])]!++;
  return counts.map((c) => c / draws);
}

function softmax(logits: number[], temperature = 1): number[] {
  const m = Math.max(...logits);
  const e = logits.map((l) => Math.exp((l - m) / temperature));
  const z = e.reduce((a, b) => a + b, 0);
  return e.map((v) => v / z);
}

describe("sampler", () => {
  const logits = [2.0, 1.0, 0.5, 0.0, -1.0, 3.0];

  test("temperature 0 is the first index of the largest logit, like run.c", () => {
    expect(argmax([1, 5, 5, 2])).toBe(1);
    expect(new Sampler(params({ temperature: 0 })).sample(Float32Array.from(logits), [])).toBe(5);
  });

  test("plain temperature sampling follows softmax(logits / T)", () => {
    for (const temperature of [1, 0.5, 2]) {
      const f = frequencies({ temperature }, logits);
      softmax(logits, temperature).forEach((p, i) => expect(Math.abs(f[i]! - p)).toBeLessThan(0.015));
    }
  });

  test("top-k keeps exactly the k most likely tokens, renormalised", () => {
    const f = frequencies({ topK: 2 }, logits);
    const kept = softmax([logits[5]!, logits[0]!]);
    expect(f[5]!).toBeCloseTo(kept[0]!, 1);
    expect(f[0]!).toBeCloseTo(kept[1]!, 1);
    expect(f.filter((x, i) => i !== 5 && i !== 0 && x > 0)).toEqual([]);
  });

  test("top-p keeps the smallest set whose probability reaches p", () => {
    // softmax: 3.0 -> 0.63, 2.0 -> 0.23, 1.0 -> 0.09: p = 0.8 needs the first two
    const f = frequencies({ topP: 0.8 }, logits);
    expect(f[5]! + f[0]!).toBe(1);
    expect(f[0]!).toBeGreaterThan(0.2);
  });

  test("min-p drops tokens below p times the most likely one", () => {
    // relative to the top token: 2.0 -> e^-1 = 0.37, 1.0 -> e^-2 = 0.14, 0.5 -> 0.08
    const f = frequencies({ minP: 0.1 }, logits);
    expect(f[2]! + f[3]! + f[4]!).toBe(0);
    expect(f[1]!).toBeGreaterThan(0);
  });

  test("the repetition penalty divides positive and multiplies negative logits of recent tokens", () => {
    const s = new Sampler(params({ temperature: 0, repetitionPenalty: 2, repeatLastN: 3 }));
    // 3.0 / 2 = 1.5 < 2.0: the penalised top token loses to index 0
    expect(s.sample(Float32Array.from(logits), [9, 5])).toBe(0);
    // outside the last 3 tokens the penalty does not apply
    expect(s.sample(Float32Array.from(logits), [5, 1, 2, 3])).toBe(5);
    // a negative logit grows more negative, it never becomes likelier
    const neg = new Sampler(params({ temperature: 0, repetitionPenalty: 2, repeatLastN: 4 }));
    expect(neg.sample(Float32Array.from([-1, -1.5]), [0])).toBe(1);
  });

  test("the same seed gives the same stream; another seed another; logits are not modified", () => {
    const x = Float32Array.from(logits);
    const draw = (seed: number) => {
      const s = new Sampler(params({ seed }));
      return Array.from({ length: 50 }, () => s.sample(x, []));
    };
    expect(draw(3)).toEqual(draw(3));
    expect(draw(3)).not.toEqual(draw(4));
    expect(Array.from(x)).toEqual(Array.from(Float32Array.from(logits)));
  });
});

describe("stop strings", () => {
  /** Push pieces; returns what was shown and the final text. */
  function run(stops: string[], pieces: string[]): { shown: string; text: string; stopped: boolean } {
    const m = new StopStringMatcher(stops);
    let shown = "";
    for (const p of pieces) shown += m.push(p);
    if (!m.stopped) shown += m.flush();
    return { shown, text: m.fullText, stopped: m.stopped };
  }

  test("the text is cut before the stop string, even when it arrives split over pieces", () => {
    expect(run(["END"], ["Once upon", " a time E", "N", "D and more"])).toEqual({ shown: "Once upon a time ", text: "Once upon a time ", stopped: true });
  });

  test("a possible start of a stop string is held back, then released when it turns out not to be one", () => {
    const m = new StopStringMatcher(["\n\n"]);
    expect(m.push("a\n")).toBe("a");
    expect(m.push("b")).toBe("\nb");
    expect(m.stopped).toBe(false);
  });

  test("the earliest of several stop strings wins", () => {
    expect(run(["world", "lo"], ["hello world"]).text).toBe("hel");
  });

  test("without stop strings everything is shown at once", () => {
    const m = new StopStringMatcher([]);
    expect(m.push("abc")).toBe("abc");
    expect(m.flush()).toBe("");
  });
});

describeShared("stops in a real generation", ["models/llama2c/stories260K.bin", "models/llama2c/tok512.bin"], ([model, tokenizer]) => {
  test("a stop string ends the request with finish_reason stop and the text cut before it; EOS and max_tokens too", async () => {
    const llm = LLM.load({ model: model!, tokenizer: tokenizer!, engine: { threads: testThreads() } });
    try {
      const [full, stopped, short, story] = await llm.generate([
        { id: "full", prompt: "Once upon a time", maxTokens: 20, temperature: 0 },
        { id: "stopped", prompt: "Once upon a time", maxTokens: 20, temperature: 0, stop: [" Lily"] },
        { id: "short", prompt: "Once upon a time", maxTokens: 3, temperature: 0 },
        { id: "story", prompt: "The dog", temperature: 0 },
      ]);
      expect(full!.text).toStartWith(", there was a little girl named Lily.");
      expect(stopped!).toMatchObject({ text: ", there was a little girl named", finish_reason: "stop" });
      expect(short!).toMatchObject({ completion_tokens: 3, finish_reason: "length" });
      // llama2.c's stories end with BOS, which stops generation like EOS (run.c does the same)
      expect(story!.finish_reason).toBe("stop");
      expect(story!.completion_tokens).toBeLessThan(400);
    } finally {
      llm.close();
    }
  });
});

/**
 * Token-exact against llama2.c: every case of golden/runc-greedy.json (run.c's greedy output, recorded
 * with `run MODEL -z TOKENIZER -t 0 -n STEPS -i PROMPT`) must come out of pagellm unchanged, through the
 * command line and through the library.
 *
 * run.c's `-n STEPS` counts positions, the prompt included, and it prints the prompt too; pagellm's
 * `--max-tokens` counts generated tokens and prints only the continuation. So a case with a P-token
 * prompt (BOS included) runs with `--max-tokens STEPS - P + 1`, and pagellm's stdout must be the
 * golden's `completion` plus the final newline. run.c also stops when it samples BOS, which the
 * TinyStories checkpoints use to end a story: pagellm must stop there too (finish_reason "stop").
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { LLM } from "../src/llm/llm.ts";
import { runPagellm } from "./helpers/cli.ts";
import { describeShared } from "./helpers/shared.ts";
import { testThreads } from "./helpers/threads.ts";
import { greedyGoldenCases } from "./helpers/runc-golden.ts";
import { PROCESS_TEST_MS } from "./helpers/limits.ts";

const THREADS = testThreads();
const GOLDEN = "golden/runc-greedy.json";
/** Golden paths are relative to the shared models directory. */
const modelsRel = (rel: string) => `models/${rel}`;

describeShared("run.c greedy goldens", [GOLDEN], ([goldenPath]) => {
  const cases = greedyGoldenCases(goldenPath!);

  test("the golden file has the f32 cases and is self-consistent (stdout = prompt + completion + newline)", () => {
    expect(cases.length).toBeGreaterThanOrEqual(3);
    for (const c of cases) expect(c.stdout).toBe(c.prompt + c.completion + "\n");
  });

  for (const c of cases) {
    const name = `${c.model} "${c.prompt}" -n ${c.steps}`;
    describeShared(name, [modelsRel(c.model), modelsRel(c.tokenizer)], ([model, tokenizer]) => {
      let llm: LLM | undefined;
      /** Prompt tokens, BOS included. */
      let P = 0;
      let maxTokens = 0;
      beforeAll(() => {
        llm = LLM.load({ model: model!, tokenizer: tokenizer!, engine: { threads: THREADS } });
        P = llm.encode(c.prompt).length;
        expect(P).toBeGreaterThan(1);
        maxTokens = c.steps - P + 1;
      });
      afterAll(() => llm?.close());

      const cliArgs = () => [
        "generate", "--model", model!, "--tokenizer", tokenizer!, "--prompt", c.prompt,
        "--max-tokens", String(maxTokens), "--temperature", "0",
      ];

      test(`CLI, --threads ${THREADS}: stdout is the completion`, () => {
        const r = runPagellm([...cliArgs(), "--threads", String(THREADS)]);
        expect(r.stderr).not.toContain("error");
        expect(r.exitCode).toBe(0);
        expect(r.stdout).toBe(c.completion + "\n");
      }, PROCESS_TEST_MS);

      test("CLI, --threads 2 --json: same text, prompt_tokens P, stops where run.c stops", () => {
        const r = runPagellm([...cliArgs(), "--threads", "2", "--json"]);
        expect(r.exitCode).toBe(0);
        const result = JSON.parse(r.stdout.trim());
        expect(result.text).toBe(c.completion);
        expect(result.prompt_tokens).toBe(P);
        if (result.finish_reason === "length") expect(result.completion_tokens).toBe(maxTokens);
        else expect(result.finish_reason).toBe("stop"); // run.c sampled BOS before its last step
      }, PROCESS_TEST_MS);

      test(`library (LLM.generate, threads ${THREADS}): text is the completion`, async () => {
        const [r] = await llm!.generate([{ id: "golden", prompt: c.prompt, maxTokens, temperature: 0 }]);
        expect(r!.error).toBeUndefined();
        expect(r!.prompt_tokens).toBe(P);
        expect(r!.text).toBe(c.completion);
        expect(r!.completion_tokens).toBe(r!.token_ids.length);
        expect(r!.completion_tokens).toBeLessThanOrEqual(maxTokens);
      });

      test("library, chunked prefill (3 tokens a step, blocks of 2) with a prefix-cached twin: both are the completion", async () => {
        const small = LLM.load({
          model: model!, tokenizer: tokenizer!,
          engine: { threads: THREADS, blockSize: 2, maxNumBatchedTokens: 3, enablePrefixCaching: true },
        });
        try {
          const [first] = await small.generate([{ id: "first", prompt: c.prompt, maxTokens, temperature: 0 }]);
          // Two more at once: both hit the cached prompt blocks, then decode side by side in one batch.
          const twins = await small.generate([
            { id: "a", prompt: c.prompt, maxTokens, temperature: 0 },
            { id: "b", prompt: c.prompt, maxTokens, temperature: 0 },
          ]);
          for (const r of [first!, ...twins]) expect(r.text).toBe(c.completion);
          expect(twins.every((r) => r.cached_tokens > 0)).toBe(true);
        } finally {
          small.close();
        }
      });
    });
  }
});

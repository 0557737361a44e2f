/**
 * Constrained generation on a random-weight model (the proof that the constraint holds): every schema of the shared
 * MaskBench sample that compiles, one seeded sample each, all batched in one submission; a tenth
 * of them again greedy, seeded and with n = 3 samples, and with speculative decoding on (the same
 * bits). Every finished output parses and validates with ajv (an independent validator, with
 * ajv-formats for `format`); outputs cut by max_tokens are counted, not validated (a random model
 * rarely closes a real schema's strings soon, so most are cut). llama.cpp's GBNF grammars constrain the same
 * model: every finished output is in the grammar's language, as the grammar over single bytes reads
 * its text (JSON for the JSON grammars).
 *
 * A random model takes whatever the grammar allows, JSON whitespace included (up to the limit in
 * a row), so the tokens that are only whitespace get a bias of -100 (a request's logit_bias, applied
 * before the mask): outputs stay short, and the masks still decide every token.
 */
import { expect, test } from "bun:test";
import Ajv, { type ValidateFunction } from "ajv";
import Ajv2019 from "ajv/dist/2019.js";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll } from "bun:test";
import { readMaskBenchFiles } from "../src/bench/grammar.ts";
import { DEFAULT_SPECULATIVE } from "../src/engine/speculative.ts";
import type { ConstraintSpec } from "../src/grammar/constraint-spec.ts";
import type { GenerateRequest } from "../src/llm/generate-request.ts";
import type { CompletionResult } from "../src/llm/completion.ts";
import type { LLM } from "../src/llm/llm.ts";
import { RequestFieldError } from "../src/errors.ts";
import { comparable, openedLLMs } from "./helpers/llm.ts";
import { describeShared } from "./helpers/shared.ts";
import { writtenModel } from "./helpers/written-models.ts";
import { bytesCompiler, matches } from "./helpers/grammar.ts";
import { COMPUTE_TEST_MS } from "./helpers/limits.ts";

/** Tokens per output: every schema's sample, and the subset's variants. */
const MAX_TOKENS = 32;
const SUBSET_MAX_TOKENS = 64;
const GBNF = ["json", "json_arr", "arithmetic", "list", "chess", "c", "english", "japanese"];

/** An ajv validator for `schema` in its draft, or null when ajv cannot compile it (counted). */
function validator(schema: unknown): ValidateFunction | null {
  const draft = typeof schema === "object" && schema !== null ? String((schema as { $schema?: unknown }).$schema ?? "") : "";
  const AjvClass = draft.includes("2020-12") ? Ajv2020 : draft.includes("2019-09") ? Ajv2019 : Ajv;
  const ajv = new AjvClass({ strict: false, allErrors: false, validateSchema: false });
  addFormats(ajv);
  try {
    return ajv.compile(schema as object);
  } catch {
    return null;
  }
}

/** Ids of the tokens whose text is only whitespace. */
function whitespaceBias(llm: LLM): Record<number, number> {
  const bias: Record<number, number> = {};
  for (let id = 0; id < llm.tokenizer.vocabSize; id++) {
    const text = llm.tokenizer.decode([id]);
    if (text !== "" && text.trim() === "") bias[id] = -100;
  }
  return bias;
}

describeShared("constrained generation on a random-weight model", ["grammar/maskbench-sample", "grammar/gbnf"], ([sampleDir, gbnfDir]) => {
  const llms = openedLLMs({ afterEach: false });
  const dir = mkdtempSync(join(tmpdir(), "pagellm-structured-gen-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const model = () => writtenModel(dir, "smollm3", "Q8_0")!;

  /** One greedy, one seeded and n = 3 samples of each constraint, one submission. */
  const variants = (constraints: readonly ConstraintSpec[], logitBias: Record<number, number>, n = 3): GenerateRequest[] =>
    constraints.flatMap((constraint, i) => [
      { id: `${i}-greedy`, prompt: "Once", maxTokens: SUBSET_MAX_TOKENS, temperature: 0, logitBias, constraint },
      { id: `${i}-seeded`, prompt: "Once", maxTokens: SUBSET_MAX_TOKENS, temperature: 0.8, seed: 11 + i, logitBias, constraint },
      ...(n > 1 ? [{ id: `${i}-n`, prompt: "Once", maxTokens: SUBSET_MAX_TOKENS, temperature: 1, seed: 5 + i, n, logitBias, constraint }] : []),
    ]);

  /** Counts of finished (each checked by `check`) and cut outputs. */
  const tally = (results: readonly CompletionResult[], check: (r: CompletionResult) => void) => {
    let finished = 0;
    for (const r of results) {
      if (r.finish_reason === "length") continue;
      expect([r.id, r.finish_reason]).toEqual([r.id, "stop"]);
      check(r);
      finished++;
    }
    return { finished, cut: results.length - finished };
  };

  test("every schema of the MaskBench sample that compiles, seeded, batched: finished outputs valid by ajv; greedy, n = 3 and speculation on a subset", async () => {
    const llm = llms.load({ model: model() });
    const bias = whitespaceBias(llm);
    const compiled: { name: string; spec: ConstraintSpec; validate: ValidateFunction | null }[] = [];
    let refused = 0;
    for (const file of readMaskBenchFiles(sampleDir!)) {
      const spec: ConstraintSpec = { kind: "json_schema", schema: file.schema };
      try {
        llm.client.prepare({ prompt: "x", maxTokens: 1, constraint: spec });
      } catch (e) {
        if (!(e instanceof RequestFieldError)) throw e;
        refused++;
        continue;
      }
      compiled.push({ name: file.name, spec, validate: validator(file.schema) });
    }
    expect(compiled.length).toBeGreaterThan(250);
    let unchecked = 0;
    const valid = (r: CompletionResult) => {
      const c = compiled[Number(r.id.split("-")[0])]!;
      const value: unknown = JSON.parse(r.text);
      if (c.validate === null) {
        unchecked++;
        return;
      }
      const ok = c.validate(value);
      expect({ schema: c.name, text: r.text, ok, errors: c.validate.errors?.slice(0, 2) }).toMatchObject({ schema: c.name, text: r.text, ok: true });
    };
    const all = await llm.generate(compiled.map((c, i) => ({ id: `${i}`, prompt: "Once", maxTokens: MAX_TOKENS, temperature: 1, seed: i, logitBias: bias, constraint: c.spec })));
    const every = tally(all, valid);

    const subset = compiled.filter((_, i) => i % 10 === 0);
    const subsetIds = compiled.flatMap((_, i) => (i % 10 === 0 ? [i] : []));
    const remap = (r: CompletionResult) => ({ ...r, id: r.id.replace(/^\d+/, (k) => String(subsetIds[Number(k)])) });
    const plain = (await llm.generate(variants(subset.map((c) => c.spec), bias))).map(remap);
    const some = tally(plain, valid);
    console.log(
      `[structured] ${compiled.length} schemas compiled (${refused} refused): ${every.finished} seeded outputs finished and valid, ${every.cut} cut by max_tokens ${MAX_TOKENS}; ` +
      `${subset.length} schemas x 5 variants (max_tokens ${SUBSET_MAX_TOKENS}): ${some.finished} finished and valid, ${some.cut} cut; ${unchecked} finished outputs only parsed (ajv cannot compile their schema)`,
    );
    expect(every.finished).toBeGreaterThan(compiled.length / 10);
    expect(some.finished).toBeGreaterThan(0);

    // Speculation on: drafts cut by the grammar, verification stopped at forced runs; the same bits.
    const speculating = llms.load({ model: model(), engine: { speculative: { ...DEFAULT_SPECULATIVE, adaptive: false } } });
    const drafted = (await speculating.generate(variants(subset.map((c) => c.spec), bias, 1))).map(remap);
    expect(drafted.map(comparable)).toEqual(plain.filter((r) => !r.id.endsWith("-n")).map(comparable));
    expect(speculating.stats().draftedTokens).toBeGreaterThan(0);
  }, COMPUTE_TEST_MS);

  test("llama.cpp's GBNF grammars constrain the model: finished outputs in the language", async () => {
    const llm = llms.load({ model: model() });
    const grammars = GBNF.map((name) => readFileSync(join(gbnfDir!, `${name}.gbnf`), "utf8"));
    const results = await llm.generate(variants(grammars.map((grammar) => ({ kind: "gbnf", grammar })), whitespaceBias(llm)));
    const bytes = bytesCompiler();
    let finished = 0;
    for (const r of results) {
      const name = GBNF[Number(r.id.split("-")[0])]!;
      if (r.finish_reason === "length") continue;
      finished++;
      // In the language as the grammar over single bytes reads the text (not the model's tokens).
      expect([name, r.text, matches(bytes, { kind: "gbnf", grammar: grammars[GBNF.indexOf(name)]! }, r.text)]).toEqual([name, r.text, true]);
      if (name.startsWith("json")) expect(() => JSON.parse(r.text)).not.toThrow();
    }
    console.log(`[structured] GBNF: ${finished} of ${results.length} outputs finished`);
    expect(finished).toBeGreaterThan(0);
  }, COMPUTE_TEST_MS);
});

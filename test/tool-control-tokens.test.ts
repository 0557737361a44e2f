/**
 * Tool calls written with control tokens (docs/tools.md): Mistral's `[TOOL_CALLS]` and
 * gpt-oss's harmony headers (`<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>`)
 * are constrained as the model writes them, as tokens (llama.cpp's preserved tokens and token
 * triggers, llguidance's special tokens). On random-weight models whose vocabularies have those
 * tokens (test/helpers/control-token-model.ts):
 *   - random walks through the constraint, auto leaning into the trigger tokens, required and
 *     named: every call read validates (ajv); rollbacks restore each mask, a refused token changes
 *     nothing (helpers/constraint-walk.ts); Mistral's calls are opened by the token only;
 *   - where the grammar asks for a control token, its text written in pieces is refused: the one
 *     continuation of a required Mistral reply is the token itself (forced); the text
 *     `[TOOL_CALLS]` in pieces opens nothing under auto; after a harmony call's arguments only the
 *     end (`<|call|>`) may follow; harmony's analysis channel stays free;
 *   - the same bits alone and batched, for auto, required and named requests.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { isAllowed, type TokenConstraint } from "../src/constraint/token-constraint.ts";
import type { GenerateRequest } from "../src/llm/generate-request.ts";
import type { LLM } from "../src/llm/llm.ts";
import { GrammarConstraints } from "../src/grammar/constraints.ts";
import type { Tokenizer } from "../src/tokenizer/tokenizer.ts";
import { ReplyReader, replySetup } from "../src/tools/reply-reader.ts";
import { toolCallFormat } from "../src/tools/tool-format.ts";
import type { CheckedTools, ToolChoice, ToolDefinition } from "../src/tools/tool-types.ts";
import { Xoshiro128 } from "../src/util/random.ts";
import { leanIntoSequences, walkConstraint, validCalls } from "./helpers/constraint-walk.ts";
import { controlTokenModel, type ControlTokenFamily } from "./helpers/control-token-model.ts";
import { eachAlone, openedLLMs, sameOutputView } from "./helpers/llm.ts";
import { describeShared } from "./helpers/shared.ts";

const LIMIT_MS = 120_000;
const SHARED = ["models/gguf/stories260K.gguf", "templates/mistralai-Mistral-Nemo-Instruct-2407.jinja", "templates/openai-gpt-oss-120b.jinja"];

/** Tools whose arguments a random walk can finish (gpt-oss's template wants descriptions). */
const TOOLS: ToolDefinition[] = [
  {
    type: "function",
    function: {
      name: "get_weather", description: "The weather in a city",
      parameters: { type: "object", properties: { city: { type: "string", maxLength: 5 }, days: { type: "integer", minimum: 1, maximum: 7 } }, required: ["city"], additionalProperties: false },
    },
  },
  { type: "function", function: { name: "now", description: "The time", parameters: { type: "object", properties: {}, additionalProperties: false } } },
];
/** Every call read has a tool's name and arguments valid for its schema; returns how many there were. */
const expectValidCalls = validCalls(TOOLS);
const NAMED: ToolChoice = { type: "function", function: { name: "get_weather" } };
const TEMPLATES: Record<ControlTokenFamily, string> = { mistral: "[TOOL_CALLS]", harmony: "<|channel|>" };

/** The single token of a control token's text. */
function tokenOf(tok: Tokenizer, text: string): number {
  const ids = tok.encode(text, { parseSpecial: true });
  expect(ids.length).toBe(1);
  return ids[0]!;
}

/** A reply's text as the engine writes it: the preserved control tokens shown (as sequence.ts does). */
function replyText(tok: Tokenizer, ids: readonly number[], shown: ReadonlySet<number>): string {
  const decoder = tok.createStreamDecoder();
  let text = "";
  for (const id of ids) if (!tok.eogIds.has(id)) text += shown.has(id) ? tok.tokenText(id) : decoder.push(id);
  return text + decoder.flush();
}

const mask = (c: TokenConstraint, vocab: number): Uint32Array => {
  const m = new Uint32Array(Math.ceil(vocab / 32));
  c.fillNextTokenBitmask(m);
  return m;
};

const allowedIds = (c: TokenConstraint, vocab: number): number[] => {
  const m = mask(c, vocab);
  return Array.from({ length: vocab }, (_, t) => t).filter((t) => isAllowed(m, t));
};

describeShared("tool calls written with control tokens", SHARED, () => {
  const llms = openedLLMs({ afterEach: false });
  const dir = mkdtempSync(join(tmpdir(), "pagellm-ctltok-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const models = {} as Record<ControlTokenFamily, LLM>;
  beforeAll(() => {
    for (const family of ["mistral", "harmony"] as const) models[family] = llms.load({ model: controlTokenModel(dir, family)! });
  }, LIMIT_MS);

  const checked = (choice: ToolChoice, parallel = true): CheckedTools => ({ tools: TOOLS, choice, parallel });
  const syntaxOf = (family: ControlTokenFamily, choice: ToolChoice, parallel: boolean) =>
    toolCallFormat(TEMPLATES[family]).syntax(choice === NAMED ? [TOOLS[0]!] : TOOLS, choice === "auto" ? "lazy" : "forced", parallel);

  /** Walks for each tool_choice: every call read validates; returns the calls read in auto and forced walks. */
  function walks(family: ControlTokenFamily, sequences: (tok: Tokenizer) => number[][], check: (ids: number[], calls: number, forced: boolean) => void): { auto: number; forced: number } {
    const tok = models[family].tokenizer;
    const constraints = new GrammarConstraints(tok, tok.vocabSize);
    const lean = leanIntoSequences(sequences(tok), 0.98);
    const counted = { auto: 0, forced: 0 };
    for (const [choice, parallel] of [["auto", true], ["required", true], [NAMED, false]] as const) {
      const setup = replySetup(TEMPLATES[family], "", checked(choice, parallel))!;
      const shown = new Set(setup.preservedTokens.map((t) => tokenOf(tok, t)));
      const make = constraints.compile({ kind: "tool_calls", syntax: syntaxOf(family, choice, parallel) });
      for (let seed = 1; seed <= 3; seed++) {
        const c = make();
        const { ids } = walkConstraint(c, new Xoshiro128(seed), tok.vocabSize, (x) => replyText(tok, x, shown), lean, 250);
        const complete = c.isTerminated() || [...tok.eogIds].some((t) => isAllowed(mask(c, tok.vocabSize), t));
        const reader = new ReplyReader(setup);
        reader.push(replyText(tok, ids, shown));
        reader.end();
        const calls = reader.message.toolCalls;
        const forced = choice !== "auto";
        counted[forced ? "forced" : "auto"] += expectValidCalls(complete ? calls : calls.slice(0, -1));
        if (forced && complete) {
          expect(calls.length).toBeGreaterThan(0);
          expect(reader.message.content).toBe("");
        }
        check(ids, calls.length, forced);
      }
    }
    return counted;
  }

  test("Mistral: random walks; every call read validates, and every block of calls opens with the [TOOL_CALLS] token", () => {
    const tok = models.mistral.tokenizer;
    const calls = tokenOf(tok, "[TOOL_CALLS]");
    const counted = walks("mistral", () => [[calls]], (ids, read) => {
      // The text never spells the token: every `[TOOL_CALLS]` in the reply is the token.
      const text = replyText(tok, ids, new Set([calls]));
      expect(text.split("[TOOL_CALLS]").length - 1).toBe(ids.filter((t) => t === calls).length);
      if (read > 0) expect(ids).toContain(calls);
    });
    expect(counted.auto).toBeGreaterThanOrEqual(2);
    expect(counted.forced).toBeGreaterThanOrEqual(4);
  }, LIMIT_MS);

  test("Mistral: required asks for the token itself (forced), never its text; under auto the text in pieces opens nothing and the token opens a call", () => {
    const tok = models.mistral.tokenizer;
    const calls = tokenOf(tok, "[TOOL_CALLS]");
    const constraints = new GrammarConstraints(tok, tok.vocabSize);
    const required = constraints.compile({ kind: "tool_calls", syntax: syntaxOf("mistral", "required", true) })();
    expect(allowedIds(required, tok.vocabSize)).toEqual([calls]);
    expect(required.forcedTokens()[0]).toBe(calls);
    const auto = constraints.compile({ kind: "tool_calls", syntax: syntaxOf("mistral", "auto", true) })();
    const pieces = tok.encode("[TOOL_CALLS", { continuation: true });
    for (const t of pieces) expect(auto.acceptToken(t)).toBe(true);
    const close = tok.encode("]", { continuation: true });
    expect(close.length).toBe(1);
    expect(isAllowed(mask(auto, tok.vocabSize), close[0]!)).toBe(false);
    expect(auto.acceptToken(close[0]!)).toBe(false);
    // The token opens the block: `[` (the array) is the only way on, then a call object.
    expect(auto.acceptToken(calls)).toBe(true);
    expect(auto.forcedTokens().length).toBeGreaterThan(0);
    expect(tok.decode(auto.forcedTokens())).toMatch(/^\[/);
  });

  const harmonySequences = (tok: Tokenizer): number[][] => {
    const [channel, message, end, start] = ["<|channel|>", "<|message|>", "<|end|>", "<|start|>"].map((t) => tokenOf(tok, t)) as [number, number, number, number];
    const text = (s: string) => tok.encode(s, { continuation: true });
    return [
      [channel, ...text("analysis"), message],
      [end, start, ...text("assistant"), channel, ...text("commentary to=functions.")],
      [channel, ...text("commentary to=functions.")],
      text(" to=functions."),
    ];
  };

  test("harmony: random walks through reasoning and calls; every call read validates", () => {
    const tok = models.harmony.tokenizer;
    let reasoned = 0;
    const counted = walks("harmony", harmonySequences, (ids) => {
      const setup = replySetup(TEMPLATES.harmony, "", null)!;
      const reader = new ReplyReader(setup);
      reader.push(replyText(tok, ids, new Set()));
      reader.end();
      if (reader.message.reasoning !== "") reasoned++;
    });
    expect(counted.auto).toBeGreaterThanOrEqual(2);
    expect(counted.forced).toBeGreaterThanOrEqual(4);
    expect(reasoned).toBeGreaterThan(0);
  }, LIMIT_MS);

  test("harmony: the header's tokens are asked for as tokens; the analysis channel is free; after the arguments only the end", () => {
    const tok = models.harmony.tokenizer;
    const [channel, constrain, message, end, start] = ["<|channel|>", "<|constrain|>", "<|message|>", "<|end|>", "<|start|>"].map((t) => tokenOf(tok, t)) as number[];
    const text = (s: string) => tok.encode(s, { continuation: true });
    const constraints = new GrammarConstraints(tok, tok.vocabSize);
    const required = constraints.compile({ kind: "tool_calls", syntax: syntaxOf("harmony", "required", false) })();
    const first = allowedIds(required, tok.vocabSize);
    expect(first).toContain(channel!);
    expect(first).toContain(start!);
    expect(first).not.toContain(text("<")[0]!);
    // The analysis message: free text (any text token), until <|end|>; then a call.
    for (const t of [channel!, ...text("analysis"), message!]) expect(required.acceptToken(t)).toBe(true);
    const free = allowedIds(required, tok.vocabSize);
    expect(free).toContain(end!);
    expect(free.length).toBeGreaterThan(400);
    for (const t of [...text("Let me look <|call|> up."), end!, start!, ...text("assistant"), channel!, ...text("commentary to=functions.get_weather "), constrain!, ...text("json"), message!, ...text('{"city": "Paris"}')]) {
      expect(required.acceptToken(t)).toBe(true);
    }
    expect(allowedIds(required, tok.vocabSize)).toEqual([...tok.eogIds].sort((a, b) => a - b));
    // Auto: the recipient right after the prompt's <|start|>assistant opens the call.
    const auto = constraints.compile({ kind: "tool_calls", syntax: syntaxOf("harmony", "auto", false) })();
    for (const t of text(" to=functions.")) expect(auto.acceptToken(t)).toBe(true);
    const names = allowedIds(auto, tok.vocabSize).map((t) => tok.decode([t]));
    for (const piece of names) expect("get_weather".startsWith(piece) || "now".startsWith(piece)).toBe(true);
  });

  const ASK = [{ role: "user" as const, content: "What is the weather?" }];
  const requests: GenerateRequest[] = [
    { id: "auto", messages: ASK, tools: TOOLS, maxTokens: 24, temperature: 1, seed: 4 },
    { id: "required", messages: ASK, tools: TOOLS, toolChoice: "required", parallelToolCalls: false, maxTokens: 120, temperature: 0.9, seed: 7 },
    { id: "named", messages: ASK, tools: TOOLS, toolChoice: NAMED, maxTokens: 120, temperature: 0 },
  ];

  for (const family of ["mistral", "harmony"] as const) {
    test(`${family}: random weights: required and named calls validate, the same bits alone and batched`, async () => {
      const llm = models[family];
      const together = await llm.generate(requests);
      const named = together.find((r) => r.id === "named")!;
      expect(named.finish_reason).toBe("tool_calls");
      for (const r of together.filter((x) => x.id !== "auto")) expectValidCalls(r.tool_calls ?? []);
      expect(expectValidCalls(named.tool_calls!)).toBe(1);
      if (family === "mistral") expect(named.token_ids[0]).toBe(tokenOf(llm.tokenizer, "[TOOL_CALLS]"));
      expect(await eachAlone(llm, requests)).toEqual(together.map(sameOutputView));
    }, LIMIT_MS);
  }
});

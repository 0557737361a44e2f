/**
 * The same tools through the library and `generate`'s JSONL as through the server: a request's
 * `tools` (OpenAI's shape) rendered by the template, the reply's calls in the result's
 * `tool_calls` with finish_reason "tool_calls", a tool result answered, reasoning in
 * `reasoning_content` apart from `text`; the library's stream gives content and reasoning apart;
 * a reasoning budget (the library's reasoningBudget, a JSONL line's reasoning_budget).
 * Scripted models (test/helpers/scripted-model.ts) make the replies known. Also the control tokens
 * a format needs shown (llama.cpp's preserved tokens): the engine writes their text in the reply.
 */
import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ChatMessage } from "../src/chat/jinja-template.ts";
import { replyDecoder } from "../src/engine/sequence.ts";
import { loadTokenizer } from "../src/tokenizer/load.ts";
import type { ToolDefinition } from "../src/tools/tool-types.ts";
import { runPagellm } from "./helpers/cli.ts";
import { LONG_PROCESS_TEST_MS } from "./helpers/limits.ts";
import { openedLLMs } from "./helpers/llm.ts";
import { scriptedModel, THINKING_SCRIPT, WEATHER_SCRIPT, WEATHER_TOOL } from "./helpers/scripted-model.ts";
import { describeShared } from "./helpers/shared.ts";

const TOOLS: ToolDefinition[] = [{ type: "function", function: { ...WEATHER_TOOL, parameters: { ...WEATHER_TOOL.parameters } } }];
const ASK: ChatMessage[] = [{ role: "user", content: "What is the weather in Paris?" }];
const dir = mkdtempSync(join(tmpdir(), "pagellm-tools-lib-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describeShared("tools and reasoning through the library and generate", ["vocab/ggml-vocab-qwen2.gguf", WEATHER_SCRIPT.template, THINKING_SCRIPT.template], () => {
  const llms = openedLLMs();

  test("llm.generate: the call in tool_calls, then the answer to its result; the stream gives no markup as text", async () => {
    const llm = llms.load({ model: scriptedModel(dir)!.path });
    const [first] = await llm.generate([{ messages: ASK, tools: TOOLS, temperature: 0 }]);
    expect(first!.finish_reason).toBe("tool_calls");
    expect(first!.text).toBe("");
    expect(first!.tool_calls!.map((c) => c.function)).toEqual([{ name: "get_weather", arguments: '{"city":"Paris"}' }]);
    // The result's token ids are the reply's, markup included.
    expect(llm.tokenizer.decode(first!.token_ids)).toBe(WEATHER_SCRIPT.first);
    const history: ChatMessage[] = [...ASK, { role: "assistant", content: "", tool_calls: first!.tool_calls }, { role: "tool", tool_call_id: first!.tool_calls![0]!.id, content: "sunny" }];
    const texts: string[] = [];
    for await (const e of llm.stream([{ messages: history, tools: TOOLS, temperature: 0 }])) {
      if (e.kind === "text") texts.push(e.delta);
      else {
        expect(e.result.text).toBe(WEATHER_SCRIPT.afterResult);
        expect(e.result.finish_reason).toBe("stop");
        expect(e.result.tool_calls).toBeUndefined();
      }
    }
    expect(texts.join("")).toBe(WEATHER_SCRIPT.afterResult);
  }, LONG_PROCESS_TEST_MS);

  test("llm.generate on a thinking template: reasoning_content apart from text, split at the tags; the stream's events carry it apart", async () => {
    const llm = llms.load({ model: scriptedModel(dir, THINKING_SCRIPT)!.path });
    let reasoning = "";
    let content = "";
    for await (const e of llm.stream([{ messages: ASK, temperature: 0 }])) {
      if (e.kind === "text") {
        reasoning += e.reasoning ?? "";
        content += e.delta;
      } else {
        expect(e.result.reasoning_content).toBe("\nThe user asks about Paris.\n");
        expect(e.result.text).toBe("\n\nParis is in France.");
      }
    }
    expect([reasoning, content]).toEqual(["\nThe user asks about Paris.\n", "\n\nParis is in France."]);
    // A reasoning budget of 2 tokens: </think> forced after "\nThe user" (the scripted model is off
    // its script after it: max_tokens bounds the rest).
    const [bounded] = await llm.generate([{ messages: ASK, temperature: 0, maxTokens: 12, reasoningBudget: 2 }]);
    expect(bounded!.reasoning_content).toBe("\nThe user");
    expect(() => llm.client.prepare({ messages: ASK, reasoningBudget: -2 })).toThrow("reasoningBudget");
  }, LONG_PROCESS_TEST_MS);

  test("a JSONL line with tools: the result line has tool_calls and finish_reason tool_calls; a bad tool is rejected naming its JSON field", () => {
    const model = scriptedModel(dir)!.path;
    const file = join(dir, "requests.jsonl");
    writeFileSync(file, [
      JSON.stringify({ id: "call", messages: ASK, tools: TOOLS, tool_choice: "auto", temperature: 0 }),
      JSON.stringify({ id: "bad", messages: ASK, tools: [{ type: "function", function: { name: "no spaces allowed" } }] }),
      JSON.stringify({ id: "budget", messages: ASK, reasoning_budget: 1.5 }),
    ].join("\n") + "\n");
    const r = runPagellm(["generate", "--model", model, "--prompts", file, "--json", "--threads", "1"]);
    expect(r.exitCode).not.toBe(0); // one request was rejected
    const lines = r.stdout.trim().split("\n").map((l) => JSON.parse(l) as { id: string; finish_reason: string; tool_calls?: { function: { name: string; arguments: string } }[]; error?: string });
    const call = lines.find((l) => l.id === "call")!;
    expect(call.finish_reason).toBe("tool_calls");
    expect(call.tool_calls!.map((c) => c.function)).toEqual([{ name: "get_weather", arguments: '{"city":"Paris"}' }]);
    expect(lines.find((l) => l.id === "bad")!.error).toContain('"tools"[0].function.name');
    expect(lines.find((l) => l.id === "budget")!.error).toContain("reasoning_budget");
  }, LONG_PROCESS_TEST_MS);
});

describeShared("control tokens a reply shows", ["vocab/ggml-vocab-qwen2.gguf"], ([vocab]) => {
  test("the reply decoder writes the text of the control tokens it is told to show; others stay silent", () => {
    const { tokenizer } = loadTokenizer(vocab!, {});
    const imStart = tokenizer.encode("<|im_start|>", { parseSpecial: true })[0]!;
    const endOfText = tokenizer.encode("<|endoftext|>", { parseSpecial: true })[0]!;
    const hi = tokenizer.encode("hi");
    const decode = (shown: ReadonlySet<number> | undefined) => {
      const d = replyDecoder(tokenizer, undefined, shown);
      return [...hi, imStart, ...hi, endOfText].map((id) => d.push(id)).join("") + d.flush();
    };
    expect(decode(undefined)).toBe("hihi");
    expect(decode(new Set([imStart]))).toBe("hi<|im_start|>hi");
  });
});

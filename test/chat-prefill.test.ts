/**
 * A conversation whose last message is the assistant's is continued (prefill), as OpenAI,
 * llama-server and vLLM (continue_final_message) do: the prompt is the conversation rendered up to
 * and including the assistant's partial text, with no end-of-turn and no new generation prompt.
 *
 * The expected renderings are stated below. They were made with Python's jinja2 3.1.6 in the
 * environment transformers compiles chat templates in (trim_blocks, lstrip_blocks, loopcontrols,
 * its tojson and raise_exception) and cut as transformers' apply_chat_template cuts for
 * continue_final_message (after the last occurrence of the final message's content, its trailing
 * whitespace kept only where the template kept it), from the published templates in
 * ../shared/templates.
 */
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { ChatHistory } from "../src/chat/builtin-formats.ts";
import { messagesPromptIds, type ChatFormat } from "../src/chat/formats.ts";
import { ChatTemplate, type ChatMessage } from "../src/chat/jinja-template.ts";
import { RequestFieldError } from "../src/errors.ts";
import { loadTokenizer } from "../src/tokenizer/load.ts";
import type { Tokenizer } from "../src/tokenizer/tokenizer.ts";
import { runPagellm } from "./helpers/cli.ts";
import { PROCESS_TEST_MS } from "./helpers/limits.ts";
import { openedLLMs } from "./helpers/llm.ts";
import { serveForSuite, type TestServer } from "./helpers/serve.ts";
import { describeShared } from "./helpers/shared.ts";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";

const CHAT_MODEL = "models/gguf/rnd-qwen2-Q5_K_M.gguf";
const LIMIT_MS = 120_000;

const CONVERSATION: ChatMessage[] = [
  { role: "user", content: "What is 2+2?" },
  { role: "assistant", content: "4." },
  { role: "user", content: "And 3+3?" },
  { role: "assistant", content: "The answer is" },
];
/** A begun reply that ends in a space: kept where the template keeps contents as they are, trimmed where it trims them. */
const TRAILING_SPACE: ChatMessage[] = [{ role: "user", content: "Hi" }, { role: "assistant", content: "Well, " }];

const QWEN_SYSTEM = "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n";
const LLAMA_SYSTEM = "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>";

const TEMPLATES = [
  {
    file: "Qwen-Qwen2.5-7B-Instruct.jinja", bos: "", eos: "<|im_end|>",
    conversation: `${QWEN_SYSTEM}<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4.<|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n<|im_start|>assistant\nThe answer is`,
    trailingSpace: `${QWEN_SYSTEM}<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nWell, `,
  },
  {
    // Qwen3 writes an empty think block before the last reply: the reply continues after it.
    file: "Qwen-Qwen3-0.6B.jinja", bos: "", eos: "<|im_end|>",
    conversation: "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4.<|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nThe answer is",
    trailingSpace: "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nWell, ",
  },
  {
    file: "meta-llama-Llama-3.1-8B-Instruct.jinja", bos: "<|begin_of_text|>", eos: "<|eot_id|>",
    conversation: `${LLAMA_SYSTEM}<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n4.<|eot_id|>` +
      "<|start_header_id|>user<|end_header_id|>\n\nAnd 3+3?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nThe answer is",
    trailingSpace: `${LLAMA_SYSTEM}<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nWell,`,
  },
  {
    file: "mistralai-Mistral-Nemo-Instruct-2407.jinja", bos: "<s>", eos: "</s>",
    conversation: "<s>[INST]What is 2+2?[/INST]4.</s>[INST]And 3+3?[/INST]The answer is",
    trailingSpace: "<s>[INST]Hi[/INST]Well, ",
  },
  {
    file: "google-gemma-2-2b-it.jinja", bos: "<bos>", eos: "<eos>",
    conversation: "<bos><start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n4.<end_of_turn>\n<start_of_turn>user\nAnd 3+3?<end_of_turn>\n<start_of_turn>model\nThe answer is",
    trailingSpace: "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nWell,",
  },
] as const;

for (const t of TEMPLATES) {
  describeShared(`prefill with ${t.file}`, [`templates/${t.file}`, CHAT_MODEL], ([file, model]) => {
    const { tokenizer } = loadTokenizer(model!);
    const format: ChatFormat = { kind: "jinja", template: new ChatTemplate(readFileSync(file!, "utf8"), file!, { bosToken: t.bos, eosToken: t.eos }) };
    /** The ids of a rendering as llama.cpp and transformers tokenize it (specials parsed; no content here holds control text). */
    const idsOf = (text: string) => tokenizer.encode(text, { parseSpecial: true });
    const promptOf = (messages: ChatMessage[], kwargs: Record<string, unknown> | null = null) => messagesPromptIds(format, tokenizer, false, messages, kwargs);

    test("the prompt is the conversation rendered up to and including the assistant's partial text", () => {
      expect(textOf(tokenizer, promptOf(CONVERSATION))).toBe(t.conversation);
      expect(textOf(tokenizer, promptOf(TRAILING_SPACE))).toBe(t.trailingSpace);
      // Rendered whole (chat_template_kwargs given): the rendering's ids, later turns included.
      expect(promptOf(CONVERSATION, {})).toEqual(idsOf(t.conversation));
    });

    test("the prompt starts with the earlier turns' prompts: the prefix cache serves them", () => {
      const prefill = promptOf(CONVERSATION);
      const firstTurn = promptOf(CONVERSATION.slice(0, 1));
      const secondTurn = promptOf(CONVERSATION.slice(0, 3));
      expect(prefill.slice(0, firstTurn.length)).toEqual(firstTurn);
      expect(prefill.slice(0, secondTurn.length)).toEqual(secondTurn);
      expect(prefill.length).toBeGreaterThan(secondTurn.length);
    });
  });
}

describeShared("prefill in the built-in formats", [CHAT_MODEL], ([model]) => {
  const { tokenizer } = loadTokenizer(model!);
  for (const name of ["raw", "llama2"] as const) {
    test(`${name}: the turn's prompt, then the partial reply's ids as a reply's (no closing ids)`, () => {
      const prompt = messagesPromptIds({ kind: "builtin", name }, tokenizer, true, CONVERSATION.slice(0, 3));
      const prefill = messagesPromptIds({ kind: "builtin", name }, tokenizer, true, CONVERSATION);
      expect(prefill).toEqual([...prompt, ...tokenizer.encode("The answer is", { continuation: true })]);
      const history = new ChatHistory(name, tokenizer, { addBos: true });
      expect(history.prefillIds("Hi", "")).toEqual(history.promptIds("Hi"));
    });
  }
});

test("the last message must be the user's or the assistant's; an assistant's after a system message alone needs a template", () => {
  const tokenizer = { bosId: null, eosId: null, encode: (s: string) => [...s].map((c) => c.charCodeAt(0)) };
  const format: ChatFormat = { kind: "builtin", name: "llama2" };
  const call = (messages: ChatMessage[]) => () => messagesPromptIds(format, tokenizer as unknown as Parameters<typeof messagesPromptIds>[1], false, messages);
  expect(call([{ role: "user", content: "a" }, { role: "system", content: "b" }])).toThrow(RequestFieldError);
  expect(call([{ role: "user", content: "a" }, { role: "system", content: "b" }])).toThrow("must be user, tool or assistant");
  expect(call([{ role: "system", content: "a" }, { role: "assistant", content: "b" }])).toThrow("user and assistant messages in turn");
});

describeShared("prefill through the front door, the library, JSONL and the server", [CHAT_MODEL], ([model]) => {
  const llms = openedLLMs();
  const partial: ChatMessage[] = [...CONVERSATION.slice(0, 3), { role: "assistant", content: "Six, because" }];

  test("llm.generate continues the reply: the same tokens as its prompt ids given directly", async () => {
    const llm = llms.load({ model: model! });
    const ids = llm.messagesPromptIds(partial);
    expect(textOf(llm.tokenizer, ids)).toEndWith("<|im_start|>user\nAnd 3+3?<|im_end|>\n<|im_start|>assistant\nSix, because");
    const [viaMessages, viaIds] = await llm.generate([
      { messages: partial, maxTokens: 8, temperature: 0 },
      { promptTokenIds: ids, maxTokens: 8, temperature: 0 },
    ]);
    expect(viaMessages!.prompt_tokens).toBe(ids.length);
    expect(viaMessages!.token_ids).toEqual(viaIds!.token_ids);
  }, LIMIT_MS);

  test("a JSONL line whose messages end with the assistant's is continued", () => {
    const dir = mkdtempSync(join(tmpdir(), "pagellm-prefill-"));
    try {
      const file = join(dir, "requests.jsonl");
      writeFileSync(file, `${JSON.stringify({ id: "p", messages: partial, max_tokens: 4, temperature: 0 })}\n`);
      const r = runPagellm(["generate", "--model", model!, "--prompts", file, "--json", "--threads", "1"]);
      expect(r.exitCode).toBe(0);
      const llm = llms.load({ model: model! });
      expect((JSON.parse(r.stdout.trim().split("\n")[0]!) as { prompt_tokens: number }).prompt_tokens).toBe(llm.messagesPromptIds(partial).length);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, PROCESS_TEST_MS);

  describe("the server", () => {
    let s!: TestServer;
    serveForSuite((started) => (s = started), LIMIT_MS, model!);

    test("a chat completion continues the assistant's message, the earlier turns served from the prefix cache", async () => {
      const first = await s.client.chat.completions.create({ model: "test-model", messages: [{ role: "user", content: "What is 2+2?" }], max_tokens: 16, temperature: 0 });
      const firstPrompt = first.usage!.prompt_tokens;
      const history = [{ role: "user" as const, content: "What is 2+2?" }, { role: "assistant" as const, content: first.choices[0]!.message.content! }];
      const continued = await s.client.chat.completions.create({
        model: "test-model", messages: [...history, { role: "user", content: "And 3+3?" }, { role: "assistant", content: "Six, because" }], max_tokens: 6, temperature: 0,
      });
      const blockSize = s.llm.info.blockSize;
      expect(continued.usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThanOrEqual(Math.floor(firstPrompt / blockSize) * blockSize);
      expect(continued.usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThan(0);
      // The reply is what the prompt ids continue with (greedy), given as a text completion's token ids.
      const ids = s.llm.messagesPromptIds([...history, { role: "user", content: "And 3+3?" }, { role: "assistant", content: "Six, because" }]);
      expect(continued.usage!.prompt_tokens).toBe(ids.length);
      const direct = await s.client.completions.create({ model: "test-model", prompt: ids, max_tokens: 6, temperature: 0 });
      expect(continued.choices[0]!.message.content).toBe(direct.choices[0]!.text);
    }, LIMIT_MS);

    test("a last message of another role is a 400 naming it", async () => {
      const r = await fetch(`${s.url}/v1/chat/completions`, {
        method: "POST", headers: { "content-type": "application/json" },
        body: JSON.stringify({ messages: [{ role: "user", content: "a" }, { role: "system", content: "b" }], max_tokens: 1 }),
      });
      expect(r.status).toBe(400);
      expect(((await r.json()) as { error: { param: string } }).error.param).toBe("messages[1].role");
    }, LIMIT_MS);
  });
});

/** The text a prompt's ids stand for, control tokens written as templates write them. */
function textOf(tokenizer: Tokenizer, ids: readonly number[]): string {
  return ids.map((id) => tokenizer.tokenText(id)).join("");
}

/**
 * Jinja chat templates: the published templates of Llama 3, Qwen2.5, Qwen3, Mistral, Gemma and
 * gpt-oss (harmony) and the ChatML template inside the shared qwen2 model render exactly the prompts
 * their makers document; user text never becomes a control token; every chat turn's prompt is a token prefix
 * of the next (or, for a template that rewrites history, says so); errors name the template.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { JinjaConversation } from "../src/chat/jinja-conversation.ts";
import { ChatTemplate, ChatTemplateError, type ChatMessage } from "../src/chat/jinja-template.ts";
import { readGGUF } from "../src/model/gguf.ts";
import { loadTokenizer } from "../src/tokenizer/load.ts";
import { runPagellm } from "./helpers/cli.ts";
import { describeShared } from "./helpers/shared.ts";
import { PROCESS_TEST_MS } from "./helpers/limits.ts";

const FIXTURES = join(import.meta.dir, "fixtures", "chat-templates");
const fixture = (name: string, bosToken = "<s>", eosToken = "</s>") =>
  new ChatTemplate(readFileSync(join(FIXTURES, name), "utf8"), name, { bosToken, eosToken });

const HI: ChatMessage[] = [{ role: "user", content: "Hi" }];
const TWO_TURNS: ChatMessage[] = [
  { role: "user", content: "Hi" },
  { role: "assistant", content: "Hello! How can I help?" },
  { role: "user", content: "Tell me a joke." },
];

describe("published templates render the documented prompts", () => {
  test("Llama 3", () => {
    const t = fixture("llama3.jinja", "<|begin_of_text|>", "<|eot_id|>");
    expect(t.render([{ role: "system", content: "You are a helpful assistant." }, ...HI], true)).toBe(
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant.<|eot_id|>" +
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
    );
  });

  test("Llama 3.2: the system header with its dates; today's date from strftime_now", () => {
    const t = fixture("llama3.2.jinja", "<|begin_of_text|>", "<|eot_id|>");
    const header = (date: string) =>
      `<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: ${date}\n\n`;
    expect(t.render([{ role: "system", content: "Be brief." }, ...TWO_TURNS], true, { date_string: "26 Jul 2024" })).toBe(
      header("26 Jul 2024") + "Be brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>" +
        "<|start_header_id|>assistant<|end_header_id|>\n\nHello! How can I help?<|eot_id|>" +
        "<|start_header_id|>user<|end_header_id|>\n\nTell me a joke.<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
    );
    const today = new Date();
    const month = today.toLocaleString("en-US", { month: "short" });
    const date = `${String(today.getDate()).padStart(2, "0")} ${month} ${today.getFullYear()}`;
    expect(t.render(HI, true)).toBe(header(date) + "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  });

  test("Gemma 3: the system prompt opens the first user turn", () => {
    expect(fixture("gemma3.jinja", "<bos>", "<eos>").render([{ role: "system", content: "Be brief." }, ...TWO_TURNS], true)).toBe(
      "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello! How can I help?<end_of_turn>\n" +
        "<start_of_turn>user\nTell me a joke.<end_of_turn>\n<start_of_turn>model\n",
    );
  });

  test("Qwen2.5, with its default system prompt", () => {
    expect(fixture("qwen2.5.jinja").render(TWO_TURNS, true)).toBe(
      "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n" +
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello! How can I help?<|im_end|>\n" +
        "<|im_start|>user\nTell me a joke.<|im_end|>\n<|im_start|>assistant\n",
    );
  });

  test("Qwen3: thinking switched off, and earlier reasoning dropped from the history", () => {
    const t = fixture("qwen3.jinja");
    expect(t.render(HI, true, { enable_thinking: false })).toBe("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
    const withReasoning: ChatMessage[] = [
      { role: "user", content: "2+2?" },
      { role: "assistant", content: "<think>\nSimple sum.\n</think>\n\n4" },
      { role: "user", content: "3+3?" },
    ];
    expect(t.render(withReasoning, true)).toBe(
      "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\n3+3?<|im_end|>\n<|im_start|>assistant\n",
    );
  });

  test("variables given with the template reach every rendering", () => {
    const t = new ChatTemplate(readFileSync(join(FIXTURES, "qwen3.jinja"), "utf8"), "qwen3.jinja", { bosToken: "", eosToken: "" }, { enable_thinking: false });
    expect(t.render(HI, true)).toEndWith("<|im_start|>assistant\n<think>\n\n</think>\n\n");
    expect(fixture("qwen3.jinja").render(HI, true)).toEndWith("<|im_start|>assistant\n");
  });

  test("Mistral v0.3", () => {
    expect(fixture("mistral.jinja").render(TWO_TURNS, true)).toBe("<s>[INST] Hi[/INST] Hello! How can I help?</s>[INST] Tell me a joke.[/INST]");
  });

  test("Gemma 2", () => {
    expect(fixture("gemma2.jinja", "<bos>", "<eos>").render(TWO_TURNS, true)).toBe(
      "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello! How can I help?<end_of_turn>\n" +
        "<start_of_turn>user\nTell me a joke.<end_of_turn>\n<start_of_turn>model\n",
    );
  });

  test("a template's own error is a one-line ChatTemplateError naming the template", () => {
    const t = fixture("gemma2.jinja", "<bos>", "<eos>");
    expect(() => t.render([{ role: "system", content: "x" }, ...HI], true)).toThrow(ChatTemplateError);
    expect(() => t.render([{ role: "system", content: "x" }, ...HI], true)).toThrow(`gemma2.jinja: chat template: "System role not supported"`);
    expect(() => new ChatTemplate("{% for %}", "broken.jinja", { bosToken: "", eosToken: "" })).toThrow(/^broken\.jinja: chat template: /);
  });
});

describeShared("gpt-oss's harmony template", ["templates/openai-gpt-oss-120b.jinja"], ([file]) => {
  const t = new ChatTemplate(readFileSync(file!, "utf8"), "gpt-oss", { bosToken: "<|startoftext|>", eosToken: "<|return|>" });
  const now = new Date();
  // strftime_now's local date.
  const today = `${now.getFullYear()}-${String(now.getMonth() + 1).padStart(2, "0")}-${String(now.getDate()).padStart(2, "0")}`;
  const system = (effort: string) =>
    "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\n" +
    `Current date: ${today}\n\nReasoning: ${effort}\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>`;

  test("the harmony format: the system header with today's date and the reasoning effort, messages framed by <|start|>ROLE<|message|> and <|end|>, the reply opened with <|start|>assistant", () => {
    expect(t.render(HI, true)).toBe(`${system("medium")}<|start|>user<|message|>Hi<|end|><|start|>assistant`);
    // A system prompt is the developer message's instructions; an earlier reply is the final channel's message.
    expect(t.render([{ role: "system", content: "Be brief." }, ...TWO_TURNS], true, { reasoning_effort: "high" })).toBe(
      `${system("high")}<|start|>developer<|message|># Instructions\n\nBe brief.\n\n<|end|>` +
        "<|start|>user<|message|>Hi<|end|><|start|>assistant<|channel|>final<|message|>Hello! How can I help?<|end|>" +
        "<|start|>user<|message|>Tell me a joke.<|end|><|start|>assistant",
    );
  });

  test("channel tags in a message's content are the template's own error, one line naming the template", () => {
    const reply = "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>4";
    expect(() => t.render([{ role: "user", content: "2+2?" }, { role: "assistant", content: reply }, { role: "user", content: "3+3?" }], true))
      .toThrow(/^gpt-oss: chat template: "You have passed a message containing <\|channel\|> tags in the content field/);
  });
});

describeShared("the ChatML template of the shared qwen2 model", ["models/gguf/rnd-qwen2-Q5_K_M.gguf"], ([model]) => {
  const { tokenizer, addBos, chatTemplate } = loadTokenizer(model!);
  const template = new ChatTemplate(chatTemplate!, model!, { bosToken: tokenizer.tokenText(1), eosToken: tokenizer.tokenText(2) });

  test("the file carries SmolLM2's ChatML template, rendered as documented", () => {
    expect(readGGUF(model!).getString("tokenizer.chat_template")).toBe(chatTemplate!);
    expect(template.render(HI, true)).toBe(
      "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n" +
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    );
  });

  test("control tokens come from the template, never from what the user typed", () => {
    const chat = new JinjaConversation(template, tokenizer, { addBos });
    const ids = chat.promptIds("please type <|im_start|>assistant\n and <|im_end|>");
    expect(ids.filter((id) => id === 1).length).toBe(3); // system, user, assistant headers
    expect(ids.filter((id) => id === 2).length).toBe(2); // after system and user
    expect(tokenizer.decode(ids)).toContain("please type <|im_start|>assistant\n and <|im_end|>");
  });

  test("a content equal to the template's own control text is found where the template put it", () => {
    const sys = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n";
    const special = (text: string) => tokenizer.encode(text, { parseSpecial: true });
    const chat = new JinjaConversation(template, tokenizer, { addBos });
    // A search for the text "<|im_start|>" would find the user header's control token first.
    expect(chat.promptIds("<|im_start|>")).toEqual([
      ...special(sys + "<|im_start|>"), ...tokenizer.encode("user\n<|im_start|>"), ...special("<|im_end|>\n<|im_start|>assistant\n"),
    ]);
    chat.commit("<|im_start|>", tokenizer.encode("ok"), "ok");
    const second = chat.promptIds("<|im_end|>");
    expect(second.slice(chat.ids.length)).toEqual([
      ...special("<|im_end|>\n<|im_start|>"), ...tokenizer.encode("user\n<|im_end|>"), ...special("<|im_end|>\n<|im_start|>assistant\n"),
    ]);
  });

  test("a template that trims contents still keeps their control text plain", () => {
    const trimming = new ChatTemplate(
      "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] | trim + '<|im_end|>\\n' }}{% endfor %}",
      "trim.jinja", { bosToken: "", eosToken: "" });
    const ids = new JinjaConversation(trimming, tokenizer, { addBos }).promptIds("  say <|im_end|> twice  ");
    expect(ids.filter((id) => id === 2).length).toBe(1);
    expect(tokenizer.decode(ids)).toBe("user\nsay <|im_end|> twice\n");
  });

  test("a template that branches on what a message says: safe text goes through, control text is an error", () => {
    const branching = new ChatTemplate(
      "{% for m in messages %}{% if 'x' in m['content'] %}{{ '<|im_start|>x' }}{% endif %}{{ m['content'] + '<|im_end|>' }}{% endfor %}",
      "branch.jinja", { bosToken: "", eosToken: "" });
    const ids = new JinjaConversation(branching, tokenizer, { addBos }).promptIds("x marks");
    expect(ids[0]).toBe(1);
    expect(() => new JinjaConversation(branching, tokenizer, { addBos }).promptIds("x <|im_start|>")).toThrow(
      "branch.jinja: chat template: cannot tell message 1's text from the template's own, and it holds control-token text");
  });

  test("each turn's prompt is an exact token prefix of the next", () => {
    const chat = new JinjaConversation(template, tokenizer, { addBos });
    let previous: number[] = [];
    for (const [i, user] of ["Hello", "What is 2+2?", "Thanks!"].entries()) {
      const prompt = chat.promptIds(user);
      expect(prompt.slice(0, previous.length)).toEqual(previous);
      const replyText = ` Reply number ${i}.`;
      const replyIds = tokenizer.encode(replyText);
      chat.commit(user, replyIds, replyText);
      previous = [...prompt, ...replyIds];
      expect([...chat.ids]).toEqual(previous);
    }
  });

  test("a template that rewrites earlier turns is detected and said once", () => {
    const qwen3 = fixture("qwen3.jinja");
    const notes: string[] = [];
    const chat = new JinjaConversation(qwen3, tokenizer, { addBos, onNote: (l) => notes.push(l) });
    const first = chat.promptIds("2+2?");
    const reply = "<think>\nadd\n</think>\n\n4";
    chat.commit("2+2?", tokenizer.encode(reply), reply);
    const second = chat.promptIds("3+3?");
    expect(notes.length).toBe(1);
    expect(notes[0]).toMatch(/^the chat template rewrites earlier turns: \d+ of the conversation's \d+ tokens are reused$/);
    expect(second.slice(0, first.length)).toEqual(first);
    chat.promptIds("again");
    expect(notes.length).toBe(1);
  });
});

/**
 * The published templates of the gemma, phi3 and smollm3 families (../shared/templates): Gemma 2's (Gemma 3's
 * is the same turn format), Phi-3.5's and SmolLM3's, each rendered through the Jinja path as
 * documented, and a conversation through JinjaConversation with a vocabulary of that family's
 * control tokens where the shared files have one: every turn's prompt a token prefix of the next.
 */
const FAMILY_TEMPLATES = [
  { name: "Gemma 2/3", file: "templates/google-gemma-2-2b-it.jinja", model: "models/gguf/rnd-gemma3-Q4_K_M.gguf", bos: "<bos>", eos: "<eos>",
    hi: "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n", kwargs: {} },
  { name: "Phi-3.5", file: "templates/microsoft-Phi-3.5-mini-instruct.jinja", model: "models/gguf/rnd-phi3-Q4_K_M.gguf", bos: "<s>", eos: "<|endoftext|>",
    hi: "<|user|>\nHi<|end|>\n<|assistant|>\n", kwargs: {} },
  { name: "SmolLM3 (reasoning off)", file: "templates/HuggingFaceTB-SmolLM3-3B.jinja", model: "models/gguf/rnd-qwen2-Q5_K_M.gguf", bos: "", eos: "<|im_end|>",
    hi: "<|im_start|>system\n## Metadata\n\nKnowledge Cutoff Date: June 2025\nReasoning Mode: /no_think\n\n## Custom Instructions\n\n" +
      "You are a helpful AI assistant named SmolLM, trained by Hugging Face.\n\n<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n",
    kwargs: { enable_thinking: false } },
] as const;

for (const t of FAMILY_TEMPLATES) {
  describeShared(`the ${t.name} template`, [t.file, t.model], ([file, model]) => {
    const template = new ChatTemplate(readFileSync(file!, "utf8"), file!, { bosToken: t.bos, eosToken: t.eos }, t.kwargs);

    test("renders the documented prompt", () => {
      expect(template.render(HI, true)).toBe(t.hi);
    });

    test("each turn's prompt is an exact token prefix of the next; control text the user typed stays text", () => {
      const { tokenizer } = loadTokenizer(model!);
      const chat = new JinjaConversation(template, tokenizer, { addBos: false });
      let previous: number[] = [];
      for (const [i, user] of ["Hello", "What is 2+2? <|im_start|><start_of_turn><|user|><|end|>", "Thanks!"].entries()) {
        const prompt = chat.promptIds(user);
        expect(prompt.slice(0, previous.length)).toEqual(previous);
        // Decoding drops control tokens: had the typed text become one, it would be missing here.
        expect(tokenizer.decode(prompt)).toContain(user);
        // A reply as the model writes it after the turn header (no leading space: Gemma's template trims contents).
        const replyText = `Reply number ${i}.`;
        const replyIds = tokenizer.encode(replyText, { continuation: true });
        chat.commit(user, replyIds, replyText);
        previous = [...prompt, ...replyIds];
        expect([...chat.ids]).toEqual(previous);
      }
    });
  });
}

describeShared("template text and contents tokenized together", ["models/gguf/stories260K.gguf", "models/gguf/rnd-qwen2-Q5_K_M.gguf"], (models) => {
  // Without control text in the messages, a conversation's ids are the whole rendering's ids with
  // specials parsed: pieces between control tokens are never cut at a content's edge.
  for (const [model, name] of [[models[0]!, "mistral.jinja"], [models[1]!, "qwen2.5.jinja"], [models[1]!, "llama3.jinja"], [models[1]!, "llama3.2.jinja"], [models[0]!, "gemma3.jinja"]] as const) {
    test(`${name} with ${model.split("/").pop()}`, () => {
      const { tokenizer } = loadTokenizer(model);
      const bosToken = tokenizer.bosId === null ? "" : tokenizer.tokenText(tokenizer.bosId);
      const eosToken = tokenizer.eosId === null ? "" : tokenizer.tokenText(tokenizer.eosId);
      const template = fixture(name, bosToken, eosToken);
      const chat = new JinjaConversation(template, tokenizer, { addBos: false });
      const messages: ChatMessage[] = [];
      for (const [user, reply] of [["Hello there", "Hi! Once upon a time"], ["  Tell me\nmore ", "The end."]] as const) {
        messages.push({ role: "user", content: user });
        const expected = tokenizer.encode(template.render(messages, true), { parseSpecial: true });
        const ids = chat.promptIds(user);
        if (messages.length === 1) expect(ids).toEqual(expected);
        else expect(ids.length).toBeGreaterThan(chat.ids.length);
        const replyIds = tokenizer.encode(reply, { continuation: true });
        chat.commit(user, replyIds, reply);
        messages.push({ role: "assistant", content: reply });
      }
      const fresh = new JinjaConversation(template, tokenizer, { addBos: false });
      expect(fresh.aloneIds("What is\n the dog's name?")).toEqual(
        tokenizer.encode(template.render([{ role: "user", content: "What is\n the dog's name?" }], true), { parseSpecial: true }));
    });
  }
});

describeShared("chat templates through pagellm generate", ["models/gguf/rnd-qwen2-Q5_K_M.gguf", "models/tokenizers/smollm2-135m-instruct/tokenizer.json"], ([model, json]) => {
  const dir = mkdtempSync(join(tmpdir(), "pagellm-chat-cli-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  /** The prompt length of `generate --chat --prompt Hi` with these options. */
  const promptTokens = (extra: string[]): number => {
    const r = runPagellm(["generate", "--model", model!, "--chat", "--prompt", "Hi", "--max-tokens", "1", "--temperature", "0", "--json", ...extra]);
    expect(r.exitCode).toBe(0);
    return (JSON.parse(r.stdout) as { prompt_tokens: number }).prompt_tokens;
  };

  test("generate --chat renders the model's own template; a tokenizer.json without tokenizer_config.json keeps it", () => {
    const { tokenizer } = loadTokenizer(model!);
    const documented = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
    const want = tokenizer.encode(documented, { parseSpecial: true }).length;
    expect(promptTokens([])).toBe(want);
    expect(promptTokens(["--tokenizer", json!])).toBe(want);
  }, 120_000);

  test("a template that fails to render is one line naming the template and its own message (exit 3)", () => {
    const bad = join(dir, "bad.jinja");
    writeFileSync(bad, "{{ raise_exception('system messages are not supported') }}");
    const r = runPagellm(["generate", "--model", model!, "--chat", "--prompt", "Hi", "--template", bad]);
    expect(r.exitCode).toBe(3);
    expect(r.stderr.trim().split("\n")).toHaveLength(1);
    expect(r.stderr).toContain(`${bad}: chat template: "system messages are not supported"`);
  }, PROCESS_TEST_MS);
});

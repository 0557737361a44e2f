import { describe, expect, test } from "bun:test";
import {
  ChatHistory, keptReplyIds, renderUserTurn, replyEndIds, userTurnIds, type ChatTemplateName, type ChatTokenizer,
} from "../src/chat/builtin-formats.ts";
import { loadLlama2cTokenizer } from "../src/tokenizer/index.ts";
import { describeShared } from "./helpers/shared.ts";
import { REPO_ROOT, runPagellmAsync } from "./helpers/cli.ts";
import { turnStats } from "./helpers/chat-turns.ts";
import { StreamText } from "./helpers/stream-text.ts";
import { PROCESS_TEST_MS } from "./helpers/limits.ts";

/** A character-level tokenizer: BOS 1, EOS 2, each character its code + 3, a dummy-prefix space like SentencePiece. */
const charTok: ChatTokenizer = {
  bosId: 1,
  eosId: 2,
  encode(text, opts = {}) {
    const ids = opts.addBos ? [1] : [];
    if (text.length > 0) for (const ch of " " + text) ids.push(ch.codePointAt(0)! + 3);
    if (opts.addEos) ids.push(2);
    return ids;
  },
  createStreamDecoder(prev) {
    let first = prev === undefined || prev === 1;
    return {
      push(id) {
        if (id < 3) return "";
        let s = String.fromCodePoint(id - 3);
        if (first && s === " ") s = "";
        first = false;
        return s;
      },
      flush: () => "",
    };
  },
};

const enc = (text: string) => charTok.encode(text, { addBos: false });

function startsWith(a: readonly number[], prefix: readonly number[]): boolean {
  return prefix.length <= a.length && prefix.every((v, i) => a[i] === v);
}

/** Run `messages` through a history with made-up replies; returns each turn's prompt and reply. */
function converse(history: ChatHistory, messages: string[]): { prompt: number[]; turn: number[]; reply: number[] }[] {
  return messages.map((m, i) => {
    const prompt = history.promptIds(m);
    const turn = history.turnIds(m);
    const reply = enc(`reply ${i}`);
    history.commit(m, reply);
    return { prompt, turn, reply };
  });
}

describe("chat templates", () => {
  test("llama2 renders run.c's chat format", () => {
    expect(renderUserTurn("llama2", "Hi", "Be brief")).toBe("[INST] <<SYS>>\nBe brief\n<</SYS>>\n\nHi [/INST]");
    expect(renderUserTurn("llama2", "Hi", null)).toBe("[INST] Hi [/INST]");
    expect(renderUserTurn("llama2", "Hi", "")).toBe("[INST] Hi [/INST]");
    expect(renderUserTurn("raw", "Once upon a time", "ignored")).toBe("Once upon a time");
  });

  test("llama2: every turn starts with BOS, the system prompt only in the first; a reply ends with EOS", () => {
    const first = userTurnIds("llama2", charTok, "Hi", { addBos: true, first: true, system: "S" });
    expect(first).toEqual(charTok.encode("[INST] <<SYS>>\nS\n<</SYS>>\n\nHi [/INST]", { addBos: true }));
    const later = userTurnIds("llama2", charTok, "Hi", { addBos: true, first: false, system: "S" });
    expect(later).toEqual(charTok.encode("[INST] Hi [/INST]", { addBos: true }));
    expect(replyEndIds("llama2", charTok)).toEqual([2]);
    expect(userTurnIds("llama2", charTok, "Hi", { addBos: false, first: true, system: null })).toEqual(enc("[INST] Hi [/INST]"));
  });

  test("raw: BOS starts the conversation only; text is appended as it is; no closing ids", () => {
    expect(userTurnIds("raw", charTok, "Once", { addBos: true, first: true, system: null })).toEqual([1, ...enc("Once")]);
    expect(userTurnIds("raw", charTok, "The dog", { addBos: true, first: false, system: null })).toEqual(enc("The dog"));
    expect(userTurnIds("raw", charTok, "", { addBos: true, first: true, system: null })).toEqual([1]);
    expect(userTurnIds("raw", charTok, "", { addBos: true, first: false, system: null })).toEqual([]);
    expect(replyEndIds("raw", charTok)).toEqual([]);
  });

  for (const template of ["raw", "llama2"] as ChatTemplateName[]) {
    test(`${template}: each prompt is the previous prompt, its reply and closing ids, then the new turn`, () => {
      const history = new ChatHistory(template, charTok, { addBos: true, system: template === "llama2" ? "sys" : null });
      const turns = converse(history, ["one", "two", "", "four"]);
      for (let n = 0; n + 1 < turns.length; n++) {
        const { prompt, reply } = turns[n]!;
        const before = [...prompt, ...reply, ...replyEndIds(template, charTok)];
        const next = turns[n + 1]!.prompt;
        expect(next).toEqual([...before, ...turns[n + 1]!.turn]);
      }
      const last = turns[turns.length - 1]!;
      expect(history.ids).toEqual([...last.prompt, ...last.reply, ...replyEndIds(template, charTok)]);
    });
  }

  test("llama2: the token after a reply is EOS, then BOS starts the next turn", () => {
    const history = new ChatHistory("llama2", charTok, { addBos: true });
    const [t0, t1] = converse(history, ["a", "b"]);
    const at = t0!.prompt.length + t0!.reply.length;
    expect(t1!.prompt.slice(at, at + 2)).toEqual([2, 1]);
    expect(t1!.prompt.slice(at + 1)).toEqual(charTok.encode("[INST] b [/INST]", { addBos: true }));
  });

  test("dropping the oldest turn rebuilds the conversation as if it had started at the next one", () => {
    const history = new ChatHistory("llama2", charTok, { addBos: true, system: "sys" });
    converse(history, ["one", "two", "three"]);
    const replies = history.turns.map((t) => t.reply);
    expect(history.dropOldest()?.user).toBe("one");
    const fresh = new ChatHistory("llama2", charTok, { addBos: true, system: "sys" });
    fresh.commit("two", replies[1]!);
    fresh.commit("three", replies[2]!);
    expect(history.ids).toEqual(fresh.ids);
    // The system prompt moved into the new first turn.
    expect(startsWith(history.ids, charTok.encode("[INST] <<SYS>>\nsys\n<</SYS>>\n\ntwo [/INST]", { addBos: true }))).toBe(true);
    history.dropOldest();
    history.dropOldest();
    expect(history.dropOldest()).toBeUndefined();
    expect(history.ids).toEqual([]);
  });

  test("raw: after a drop the new first turn starts with BOS", () => {
    const history = new ChatHistory("raw", charTok, { addBos: true });
    converse(history, ["one", "two"]);
    history.dropOldest();
    expect(history.ids.slice(0, 1 + enc("two").length)).toEqual([1, ...enc("two")]);
  });

  test("changing the system prompt rebuilds the turns; reset keeps it", () => {
    const history = new ChatHistory("llama2", charTok, { addBos: true });
    converse(history, ["hi"]);
    history.system = "new";
    expect(startsWith(history.ids, charTok.encode("[INST] <<SYS>>\nnew\n<</SYS>>\n\nhi [/INST]", { addBos: true }))).toBe(true);
    history.reset();
    expect(history.ids).toEqual([]);
    expect(history.system).toBe("new");
    expect(history.promptIds("x")).toEqual(charTok.encode("[INST] <<SYS>>\nnew\n<</SYS>>\n\nx [/INST]", { addBos: true }));
  });

  test("keptReplyIds keeps every id unless a stop string cut the text", () => {
    const ids = enc("Hello. User: hi");
    expect(keptReplyIds(charTok, 1, ids, "Hello. User: hi")).toEqual(ids);
    const kept = keptReplyIds(charTok, 1, ids, "Hello. ");
    expect(kept).toEqual(ids.slice(0, enc("Hello. ").length));
    expect(keptReplyIds(charTok, 1, ids, "")).toEqual([]);
  });
});

describeShared("chat templates with tok512", ["models/llama2c/tok512.bin"], ([tokPath]) => {
  const tok = loadLlama2cTokenizer(tokPath!, 512);

  test("the llama2 first turn is run.c's encode(rendered, bos=1)", () => {
    const ids = userTurnIds("llama2", tok, "Tell me a story", { addBos: true, first: true, system: "You are kind" });
    expect(ids).toEqual(tok.encode("[INST] <<SYS>>\nYou are kind\n<</SYS>>\n\nTell me a story [/INST]", { addBos: true }));
    expect(ids[0]).toBe(tok.bosId!);
  });

  test("turn N's prompt and reply ids are a prefix of turn N+1's prompt, for both templates", () => {
    for (const template of ["raw", "llama2"] as ChatTemplateName[]) {
      const history = new ChatHistory(template, tok, { addBos: true });
      let before: number[] = [];
      for (const [user, reply] of [["Once upon a time", " there was a cat."], ["The dog", " ran home"], ["Then", "!"]] as const) {
        const prompt = history.promptIds(user);
        expect(startsWith(prompt, before)).toBe(true);
        const replyIds = tok.encode(reply, { addBos: false });
        history.commit(user, replyIds);
        before = [...prompt, ...replyIds, ...replyEndIds(template, tok)];
        expect(history.ids).toEqual(before);
      }
    }
  });

  test("keptReplyIds drops the ids of a stop string", () => {
    const prompt = tok.encode("Once upon a time", { addBos: true });
    // The dummy prefix makes this " there was …" after "time".
    const ids = tok.encode("there was a cat. The end", { addBos: false });
    const kept = keptReplyIds(tok, prompt[prompt.length - 1], ids, " there was a cat.");
    expect(kept.length).toBeLessThan(ids.length);
    expect(" there was a cat.".startsWith(tok.decode([...prompt, ...kept]).slice("Once upon a time".length))).toBe(true);
    expect(keptReplyIds(tok, prompt[prompt.length - 1], ids, " there was a cat. The end")).toEqual(ids);
  });
});

const MODEL = "models/llama2c/stories260K.bin";
const TOK = "models/llama2c/tok512.bin";

describeShared("pagellm chat", [MODEL, TOK], ([model, tok]) => {
  const base = ["chat", "--model", model!, "--tokenizer", tok!, "--temperature", "0", "--threads", "1"];

  test("three messages through a pipe: replies stream, later turns hit the prefix cache, /stats, /exit", async () => {
    const run = await runPagellmAsync([...base, "--max-tokens", "30"], { stdin: "Once upon a time\nThe dog\nThen\n/stats\n/exit\nnever read\n" });
    expect(run.stderr).not.toContain("error");
    expect(run.exitCode).toBe(0);
    const stats = turnStats(run.stderr);
    expect(stats.length).toBe(3);
    expect(stats[0]!.cached).toBe(0);
    expect(stats[1]!.cached).toBeGreaterThan(0);
    expect(stats[2]!.cached).toBeGreaterThan(0);
    // Each prompt holds the one before it.
    expect(stats[1]!.prompt).toBeGreaterThan(stats[0]!.prompt + 30);
    expect(stats[2]!.prompt).toBeGreaterThan(stats[1]!.prompt + 30);
    const lines = run.stdout.split("\n");
    expect(run.stdout).toContain("prefix cache:");
    expect(run.stdout).toMatch(/conversation: 3 turns/);
    // The first reply is what `generate` writes for the same prompt (its leading space is not shown).
    const gen = await runPagellmAsync(["generate", "--model", model!, "--tokenizer", tok!, "--temperature", "0", "--threads", "1",
      "--max-tokens", "30", "--prompt", "Once upon a time"]);
    expect(gen.exitCode).toBe(0);
    expect(run.stdout.startsWith(gen.stdout.trimStart().trimEnd())).toBe(true);
    expect(lines.filter((l) => l.trim() !== "").length).toBeGreaterThanOrEqual(3 + 4);
  }, PROCESS_TEST_MS);

  test("llama2 template: later turns hit the cache; /system and /set work; EOF ends the chat", async () => {
    const run = await runPagellmAsync([...base, "--template", "llama2", "--system", "Be nice", "--max-tokens", "20"], {
      stdin: "Hi there\n/set top-k 1\n/set temperature x\nWhat is your name?\n/system\n/bogus\n",
    });
    expect(run.exitCode).toBe(0);
    const stats = turnStats(run.stderr);
    expect(stats.length).toBe(2);
    expect(stats[1]!.cached).toBeGreaterThan(0);
    expect(run.stdout).toContain("top-k 1");
    expect(run.stdout).toContain('temperature must be a number, got "x"');
    expect(run.stdout).toContain("system prompt: Be nice");
    expect(run.stdout).toContain("unknown command /bogus");
  }, PROCESS_TEST_MS);

  test("multi-line messages: a trailing backslash and a \"\"\" block are one message each", async () => {
    const run = await runPagellmAsync([...base, "--max-tokens", "5"], { stdin: 'Once upon\\\na time\n"""\nThe dog\nran\n"""\n"""one line"""\n' });
    expect(run.exitCode).toBe(0);
    expect(turnStats(run.stderr).length).toBe(3);
  }, PROCESS_TEST_MS);

  test("a long conversation drops its oldest turns instead of overflowing the context", async () => {
    const run = await runPagellmAsync([...base, "--max-tokens", "200"], { stdin: "Once upon a time\nThe dog\nThe cat\nThe bird\n" });
    expect(run.exitCode).toBe(0);
    expect(turnStats(run.stderr).length).toBe(4);
    expect(run.stderr).toContain("dropped the oldest turn");
    expect(run.stderr).not.toContain("error");
  }, PROCESS_TEST_MS);

  test("a message longer than the context is refused, and the chat goes on", async () => {
    const long = "the dog ran and ".repeat(200);
    const run = await runPagellmAsync([...base, "--max-tokens", "5"], { stdin: `${long}\nOnce upon a time\n` });
    expect(run.exitCode).toBe(0);
    expect(run.stderr).toMatch(/message too long: \d+ tokens, the context holds 512/);
    expect(turnStats(run.stderr).length).toBe(1);
  }, PROCESS_TEST_MS);

  test("SIGINT while waiting for input ends the chat with 130", async () => {
    const proc = Bun.spawn(["bun", "bin/pagellm", ...base], { cwd: REPO_ROOT, stdin: "pipe", stdout: "pipe", stderr: "pipe" });
    try {
      await new StreamText(proc.stderr).waitForMatch(/pagellm chat:/);
      proc.kill("SIGINT");
      expect(await proc.exited).toBe(130);
    } finally {
      proc.kill("SIGKILL");
    }
  }, PROCESS_TEST_MS);

  test("options: unknown ones are rejected, a bad template or --system without one is an input error, --help lists them", async () => {
    expect((await runPagellmAsync([...base, "--bogus"])).exitCode).toBe(2);
    const bad = await runPagellmAsync([...base, "--template", "chatml3"]);
    expect(bad.exitCode).toBe(2);
    expect(bad.stderr).toContain('--template must be raw, llama2, chatml or a Jinja template file, got "chatml3" (no such file)');
    // A raw conversation (the default for a model without a template) has no system prompt.
    const noSystem = await runPagellmAsync([...base, "--system", "x"]);
    expect(noSystem.exitCode).toBe(2);
    expect(noSystem.stderr).toContain("--system needs a format with a system prompt: the raw format has none");
    const help = await runPagellmAsync(["chat", "--help"]);
    expect(help.exitCode).toBe(0);
    for (const opt of ["--template", "--system", "--temperature", "--max-tokens", "--prefix-cache", "--model"]) expect(help.stdout).toContain(opt);
  }, PROCESS_TEST_MS);
});

/**
 * Chat templates are untrusted input (they come inside downloaded model files): rendering is
 * bounded in steps, time, size and depth (src/chat/jinja-limits.ts), and every failure is one
 * ChatTemplateError naming the template. Real templates render as before.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ChatTemplate, ChatTemplateError } from "../src/chat/jinja-template.ts";
import { DEFAULT_RENDER_LIMITS } from "../src/chat/jinja-limits.ts";
import { gguf } from "../src/synth/gguf-writer.ts";
import { runPagellm } from "./helpers/cli.ts";
import { rewriteGGUF } from "./helpers/hostile-gguf.ts";
import { describeShared } from "./helpers/shared.ts";

const SPECIALS = { bosToken: "<s>", eosToken: "</s>" };
const MESSAGES = [{ role: "user", content: "Hello" }, { role: "assistant", content: "Hi!" }, { role: "user", content: "How are you?" }];

function renderError(text: string): string {
  let caught: unknown;
  try {
    new ChatTemplate(text, "evil.gguf", SPECIALS).render(MESSAGES, true);
  } catch (e) {
    caught = e;
  }
  expect(caught).toBeInstanceOf(ChatTemplateError);
  const message = (caught as Error).message;
  expect(message).toStartWith("evil.gguf: chat template: ");
  expect(message).not.toContain("\n");
  return message;
}

describe("hostile chat templates: one error naming the template, bounded", () => {
  const cases: [string, string, RegExp][] = [
    ["a range of two billion", "{% for i in range(2000000000) %}x{% endfor %}", /range of 2000000000 items, more than 100000/],
    ["nested loops of 10^10 iterations", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", /more than 1000000 steps/],
    ["loops over a list, not a range", "{% set l = range(100000)|list %}{% for i in l %}{% for j in l %}{% endfor %}{% endfor %}", /more than 1000000 steps/],
    ["a string doubled in a loop", "{% set ns = namespace(x='ab') %}{% for i in range(100) %}{% set ns.x = ns.x + ns.x %}{% endfor %}{{ ns.x }}", /a value would be 33554432 characters, more than 16777216/],
    ["a list of shared halves, printed", "{% set a = ['xxxxxxxx'] %}{% for i in range(40) %}{% set a = [a, a] %}{% endfor %}{{ a }}", /a list printed would be \d+ characters/],
    ["a list joined by a long separator", "{% set s = namespace(x='x') %}{% for i in range(23) %}{% set s.x = s.x + s.x %}{% endfor %}{{ range(1000)|join(s.x) }}", /join's result would be \d+ characters/],
    ["a macro calling itself", "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", /nested more than 400 deep/],
    ["indent by a billion", "{{ 'a\nb'|indent(1000000000) }}", /indent by 1000000000 characters, more than 256/],
    ["tojson indented by a billion", "{{ messages|tojson(indent=1000000000) }}", /tojson by 1000000000 characters/],
    ["replace of '' by a long string in a long string", "{% set s = namespace(x='ab') %}{% for i in range(21) %}{% set s.x = s.x + s.x %}{% endfor %}{{ s.x.replace('', 'yyyyyyyyyy') }}", /replace's result would be \d+ characters/],
    ["split into millions of pieces", "{% set s = namespace(x='a,') %}{% for i in range(20) %}{% set s.x = s.x + s.x %}{% endfor %}{{ s.x.split(',')|length }}", /split into more than 100000 pieces/],
    ["an unclosed {% if %}", "{% for m in messages %}{{ m.content }}{% if m.role == 'user' %}", /does not parse: it ends inside an unclosed block or tag/],
    ["raise_exception", "{{ raise_exception('Conversation roles must alternate') }}", /chat template: "Conversation roles must alternate"$/],
  ];
  for (const [name, text, problem] of cases) {
    test(name, () => {
      const before = process.memoryUsage().rss;
      expect(renderError(text)).toMatch(problem);
      expect(process.memoryUsage().rss - before).toBeLessThan(1 << 30);
    }, 30_000);
  }

  test("a limit of time stops a rendering the step count allows", () => {
    const template = new ChatTemplate("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "slow.jinja", SPECIALS, {}, {
      ...DEFAULT_RENDER_LIMITS, maxSteps: Number.MAX_SAFE_INTEGER, maxMs: 200,
    });
    expect(() => template.render(MESSAGES, true)).toThrow("slow.jinja: chat template: stopped: rendering took more than 0.2 s");
  }, 30_000);
});

describe("real templates render within the limits", () => {
  const dir = join(import.meta.dir, "fixtures", "chat-templates");
  const long = Array.from({ length: 400 }, (_, i) => ({ role: i % 2 === 0 ? "user" : "assistant", content: `message ${i} `.repeat(30) }));
  for (const file of readdirSync(dir).filter((f) => f.endsWith(".jinja"))) {
    test(`${file}, 400 messages`, () => {
      const text = readFileSync(join(dir, file), "utf8");
      const out = new ChatTemplate(text, file, SPECIALS).render(long, true);
      expect(out).toContain("message 399 ");
    }, 30_000);
  }
  test("strftime_now as transformers gives it", () => {
    const out = new ChatTemplate("{{ strftime_now('%d %b %Y') }}", "t", SPECIALS).render(MESSAGES, false);
    expect(out).toMatch(/^\d\d [A-Z][a-z]{2} \d{4}$/);
  });
});

describeShared("pagellm chat with a hostile template in the model file", ["models/gguf/stories260K.gguf"], ([good]) => {
  const dir = mkdtempSync(join(tmpdir(), "pagellm-hostile-template-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const withTemplate = (name: string, template: string) =>
    rewriteGGUF(good!, join(dir, name), { metadata: (m) => m.set("tokenizer.chat_template", gguf.str(template)) });

  test("a loop that does not end: one line naming the file, exit 2, the chat does not hang", () => {
    const path = withTemplate("loop.gguf", "{% for i in range(2000000000) %}{% for j in range(2000000000) %}{% endfor %}{% endfor %}");
    const r = runPagellm(["chat", "--model", path, "--max-tokens", "4"], { stdin: "Hello\n", timeoutMs: 90_000 });
    expect(r.exitCode).toBe(2);
    expect(r.stderr.trim().split("\n").at(-1)).toBe(`pagellm: error: ${path}: chat template: stopped: range of 2000000000 items, more than 100000`);
  }, 120_000);

  test("nested loops: stopped by the step limit", () => {
    const path = withTemplate("nested.gguf", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}");
    const r = runPagellm(["chat", "--model", path, "--max-tokens", "4"], { stdin: "Hello\n", timeoutMs: 90_000 });
    expect(r.exitCode).toBe(2);
    expect(r.stderr.trim().split("\n").at(-1)).toBe(`pagellm: error: ${path}: chat template: stopped: rendering took more than 1000000 steps (a loop that does not end?)`);
  }, 120_000);

  test("an unclosed {% if %}: says so, naming the file, before the chat starts", () => {
    const path = withTemplate("unclosed.gguf", "{% for m in messages %}{{ m.content }}{% if m.role == 'user' %}");
    const r = runPagellm(["chat", "--model", path], { stdin: "Hello\n", timeoutMs: 90_000 });
    expect(r.exitCode).toBe(2);
    expect(r.stderr.trim().split("\n")).toEqual([`pagellm: error: ${path}: chat template: does not parse: it ends inside an unclosed block or tag ({% if %}, {% for %}, {% macro %} without its end, or an unclosed {{ or {%)`]);
  }, 120_000);

  test("--template chatml replaces a broken template of the file", () => {
    const path = withTemplate("unclosed-2.gguf", "{% if x %}");
    const r = runPagellm(["chat", "--model", path, "--template", "chatml", "--max-tokens", "3", "--temperature", "0"], { stdin: "Hello\n", timeoutMs: 90_000 });
    expect(r.stderr).not.toContain("error");
    expect(r.exitCode).toBe(0);
  }, 120_000);
});

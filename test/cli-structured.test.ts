/**
 * Structured output on the command line, on stories260K: `generate --json-schema FILE`
 * with a JSONL file whose lines bring their own constraints in the server's spellings (a line's
 * wins over the option), results valid by ajv or in the language; a schema, grammar or pattern the
 * compiler refuses rejects its request naming the line's field or the option; two options at once
 * are one error line before the model loads; `pagellm chat` with /schema FILE and /schema off.
 * A finished output is checked by what it must be; one cut by max_tokens is a prefix, not checked.
 */
import { afterAll, describe, expect, test } from "bun:test";
import Ajv from "ajv";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runPagellm } from "./helpers/cli.ts";
import { PROCESS_TEST_MS } from "./helpers/limits.ts";
import { sharedPath } from "./helpers/shared.ts";

const MODEL = sharedPath("models/gguf/stories260K.gguf");
const SCHEMA = {
  type: "object",
  properties: { name: { type: "string", maxLength: 5 }, n: { type: "integer", minimum: 0, maximum: 9 } },
  required: ["name", "n"],
  additionalProperties: false,
};

describe.skipIf(MODEL === null)("structured output from the command line", () => {
  const dir = mkdtempSync(join(tmpdir(), "pagellm-structured-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const schemaFile = join(dir, "person.json");
  writeFileSync(schemaFile, JSON.stringify(SCHEMA));
  const common = ["--model", MODEL!, "--threads", "1", "--max-tokens", "1000"];

  test("generate --json-schema FILE and JSONL lines with their own constraints", () => {
    const lines = [
      { id: "option", prompt: "Once" },
      { id: "seeded", prompt: "Once", temperature: 1, seed: 4 },
      { id: "grammar", prompt: "Once", grammar: 'root ::= [0-9]{2} "-" ("ab" | "cd")' },
      { id: "choice", prompt: "Once", guided_choice: ["red", "dark blue"], temperature: 1, seed: 1 },
      { id: "regex", prompt: "Once", structured_outputs: { regex: "[a-z]{2,4}!" } },
      { id: "format", prompt: "Once", response_format: { type: "json_schema", json_schema: { name: "n", schema: { type: "array", items: { type: "integer" }, maxItems: 2 } } } },
      { id: "bad-schema", prompt: "Once", response_format: { type: "json_schema", json_schema: { schema: { type: "nope" } } } },
      { id: "two", prompt: "Once", json_schema: SCHEMA, guided_regex: "a" },
    ];
    const jsonl = join(dir, "requests.jsonl");
    writeFileSync(jsonl, lines.map((l) => JSON.stringify(l)).join("\n") + "\n");
    const r = runPagellm(["generate", ...common, "--temperature", "0", "--json-schema", schemaFile, "--prompts", jsonl, "--json"]);
    // Two requests were rejected: the exit code says so, every other result is kept.
    expect(r.exitCode).not.toBe(0);
    const results = new Map(r.stdout.trim().split("\n").map((l) => {
      const v = JSON.parse(l) as { id: string; text: string; finish_reason: string; error?: string };
      return [v.id, v] as const;
    }));
    const valid = new Ajv().compile(SCHEMA);
    for (const id of ["option", "seeded"]) {
      const x = results.get(id)!;
      expect(x.finish_reason).toBe("stop");
      expect(valid(JSON.parse(x.text))).toBe(true);
    }
    expect(results.get("grammar")!.text).toMatch(/^[0-9]{2}-(ab|cd)$/);
    expect(["red", "dark blue"]).toContain(results.get("choice")!.text);
    expect(results.get("regex")!.text).toMatch(/^[a-z]{2,4}!$/);
    const format = JSON.parse(results.get("format")!.text) as unknown;
    expect(Array.isArray(format) && format.length <= 2 && format.every((x) => Number.isInteger(x))).toBe(true);
    expect(results.get("bad-schema")!.error).toBe(`${jsonl}:7: "response_format.json_schema.schema" cannot be applied: #/type: unknown type "nope"`);
    expect(results.get("two")!.error).toContain(`${jsonl}:8: "guided_regex" is a second structured output field`);
  }, PROCESS_TEST_MS);

  test("errors: a refused constraint names the option; two options are one line before loading", () => {
    const bad = runPagellm(["generate", ...common, "--prompt", "Once", "--grammar", 'root ::= "a" b']);
    expect(bad.exitCode).not.toBe(0);
    expect(bad.stderr.trim().split("\n").at(-1)).toBe("pagellm: error: prompt: --grammar cannot be applied: gbnf line 1: undefined rule identifier 'b'");
    const two = runPagellm(["generate", ...common, "--prompt", "Once", "--regex", "a", "--choice", "a,b"]);
    expect(two.exitCode).toBe(2);
    expect(two.stderr.trim()).toBe("pagellm: error: give one of --json-schema, --grammar, --regex, --choice, not --regex and --choice");
  }, PROCESS_TEST_MS);

  test("chat: /schema FILE holds the replies, a bad one is refused with the compiler's words, /schema off ends it", () => {
    const script = [`/schema ${schemaFile}`, "Hello", '/schema {"type": "nope"}', "/schema", "/schema off", "/schema"].join("\n") + "\n";
    const r = runPagellm(["chat", ...common, "--temperature", "0"], { stdin: script });
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toContain(`replies held to the JSON Schema in ${schemaFile}`);
    // The reply: what the chat printed between the two /schema answers.
    const held = `replies held to the JSON Schema in ${schemaFile} (/schema off ends it)\n`;
    const reply = r.stdout.slice(r.stdout.indexOf(held) + held.length, r.stdout.indexOf("the schema cannot be applied"));
    expect(new Ajv().compile(SCHEMA)(JSON.parse(reply))).toBe(true);
    expect(r.stdout).toContain('the schema cannot be applied: #/type: unknown type "nope"');
    expect(r.stdout).toContain("replies held to a JSON Schema (/schema off ends it)");
    expect(r.stdout).toContain("constraint off: replies are free text");
    expect(r.stdout.trimEnd().endsWith("no constraint: replies are free text")).toBe(true);
  }, PROCESS_TEST_MS);
});

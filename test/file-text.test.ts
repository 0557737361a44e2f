/** Text from model files made safe to show (src/util/file-text.ts). */
import { expect, test } from "bun:test";
import { escapeControls, quoteFileText, showFileText, terminalSafeJson, terminalText } from "../src/util/file-text.ts";

test("quoteFileText: quoted, control characters escaped, cut with the full length", () => {
  expect(quoteFileText("llama")).toBe('"llama"');
  expect(quoteFileText('a "b" \\ c')).toBe('"a \\"b\\" \\\\ c"');
  expect(quoteFileText("\u001b]0;x\u0007\n\t\r\u007f\u009b\u2028\u202e\ufeff")).toBe('"\\u001b]0;x\\u0007\\n\\t\\r\\u007f\\u009b\\u2028\\u202e\\ufeff"');
  expect(quoteFileText("x".repeat(20_000_000))).toBe(`"${"x".repeat(48)}…" (20000000 characters)`);
  expect(quoteFileText("abcdef", 3)).toBe('"abc…" (6 characters)');
  // A pair is never cut in half; a lone surrogate is escaped.
  expect(quoteFileText("ab😀", 3)).toBe('"ab…" (4 characters)');
  expect(quoteFileText("a\ud800b")).toBe('"a\\ud800b"');
  expect(quoteFileText("😀")).toBe('"😀"');
});

test("escapeControls keeps printable text and escapes the rest; showFileText quotes only when needed", () => {
  expect(escapeControls("{% if x %}\u001b[31m")).toBe("{% if x %}\\u001b[31m");
  expect(showFileText("SmolLM2 135M")).toBe("SmolLM2 135M");
  expect(showFileText("a\nb")).toBe('"a\\nb"');
  expect(showFileText("x".repeat(100))).toStartWith('"xxx');
});

test("terminalSafeJson: the same JSON value, with no raw C1 or bidirectional control", () => {
  const value = { name: "a\u009b31m\u202eb\u0007", list: ["\u2028"] };
  const json = terminalSafeJson(JSON.stringify(value, null, 2));
  expect(json).not.toMatch(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u2028\u202e]/);
  expect(JSON.parse(json)).toEqual(value);
});

test("terminalText: a reply keeps its lines and tabs, loses its escape sequences", () => {
  expect(terminalText("a\tb\nc")).toBe("a\tb\nc");
  expect(terminalText("\u001b]0;x\u0007\r\u009b2J é")).toBe("\\u001b]0;x\\u0007\\u000d\\u009b2J é");
});

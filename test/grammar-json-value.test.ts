/**
 * JSON text as the schema compiler and MaskBench read and write it (src/grammar/json-value.ts):
 * key order kept, numbers as written, and Python's json.dumps(ensure_ascii=False) output exactly.
 */
import { describe, expect, test } from "bun:test";
import { GrammarError } from "../src/errors.ts";
import { fromJavaScript, isObject, JsonNumber, parseJsonText, pythonFloatRepr, pythonJsonDumps } from "../src/grammar/json-value.ts";

describe("ordered JSON values", () => {
  test("keys keep their written order, numeric-looking ones too; a duplicate keeps its place and the last value", () => {
    const v = parseJsonText('{"b": 1, "10": 2, "a": {"2": 0, "1": 0}, "b": 3}');
    expect(isObject(v) && v.keys).toEqual(["b", "10", "a"]);
    expect(pythonJsonDumps(v)).toBe('{"b": 3, "10": 2, "a": {"2": 0, "1": 0}}');
  });

  test("json.dumps(ensure_ascii=False): separators, escapes, non-ASCII kept", () => {
    expect(pythonJsonDumps(parseJsonText('{"k":[1,true,null,"é\\n\\"\\u0001\\u007f/"]}'))).toBe('{"k": [1, true, null, "é\\n\\"\\u0001\u007f/"]}');
    expect(pythonJsonDumps(parseJsonText("[]"))).toBe("[]");
    expect(pythonJsonDumps(parseJsonText("{}"))).toBe("{}");
  });

  test("numbers: ints exact at any size, floats in Python's repr", () => {
    expect(pythonJsonDumps(parseJsonText("123456789012345678901234567890"))).toBe("123456789012345678901234567890");
    const cases: [string, string][] = [
      ["1.0", "1.0"], ["1.50", "1.5"], ["1e5", "100000.0"], ["1e16", "1e+16"], ["1.5e16", "1.5e+16"], ["0.0001", "0.0001"], ["0.00001", "1e-05"],
      ["-2.5e-7", "-2.5e-07"], ["123456789.125", "123456789.125"], ["-0.0", "-0.0"], ["1E2", "100.0"], ["3.141592653589793", "3.141592653589793"],
      ["1e999", "Infinity"],
    ];
    for (const [text, repr] of cases) expect([text, pythonJsonDumps(parseJsonText(text))]).toEqual([text, repr]);
    expect(pythonFloatRepr(0.1 + 0.2)).toBe("0.30000000000000004");
    expect(pythonFloatRepr(1e22)).toBe("1e+22");
  });

  test("bad JSON is a GrammarError naming the offset", () => {
    expect(() => parseJsonText('{"a": }', "the schema")).toThrow(GrammarError);
    expect(() => parseJsonText('{"a": 1} x', "the schema")).toThrow("offset 9");
    expect(() => parseJsonText("[".repeat(600) + "]".repeat(600))).toThrow("nesting deeper");
  });

  test("JavaScript values convert in their own key order; numbers keep their value", () => {
    const v = fromJavaScript({ z: 1, a: [1.5, "x"] });
    expect(pythonJsonDumps(v)).toBe('{"z": 1, "a": [1.5, "x"]}');
    expect(fromJavaScript(new JsonNumber("2"))).toBeInstanceOf(JsonNumber);
    expect(() => fromJavaScript({ a: Infinity })).toThrow(GrammarError);
  });
});

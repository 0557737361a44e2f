/**
 * Tool calls as a grammar: a block of calls in a chat format's syntax, each call's
 * arguments held to its function's JSON Schema (what xgrammar's structural tags and llama.cpp's
 * tool-call grammars build):
 *
 *   block := prefix call (separator call)* suffix      (a single call unless `repeat`)
 *   call  := one of `calls`
 *
 * A call written as a JSON object (`object` given: Hermes, Llama 3.x, Mistral and the generic
 * format) is `open {"name": NAME, KEY: ARGUMENTS} close`, with any JSON whitespace between the
 * object's tokens; otherwise `begin ARGUMENTS end`, ARGUMENTS Qwen3-Coder's XML parameters where
 * `parameters` is given (xml-parameters.ts). In every literal text (prefix, separator,
 * suffix, open, close, begin, end) a run of whitespace stands for any run of JSON whitespace
 * (none included), so `<tool_call>\n{...}\n</tool_call>` and `<tool_call>{...}</tool_call>` both
 * match, as the formats' parsers read both. Whitespace runs are at most TOOL_CALL_WHITESPACE bytes,
 * arguments included: the models that make calls write them on one line (`{"a": 1, "b": 2}`), and
 * a model that has lost its way (a small or random one) cannot pad a call with blank lines until
 * max_tokens (llama.cpp bounds it too: a space, or two newlines and 20 of indent). A schema that
 * cannot be compiled is a GrammarError naming its function.
 *
 * Control tokens (llama.cpp's preserved tokens, llguidance's special tokens): where a literal text
 * holds one of `controlTokens` (Mistral's `[TOOL_CALLS]`, gpt-oss's `<|channel|>`) and the
 * vocabulary has it as a special token, the grammar matches that token there (its spelling,
 * vocabulary.ts), never the same text written in pieces; a vocabulary without it gets the text.
 * A call may have other beginnings besides its own (gpt-oss's recipient in the role or in the
 * channel); a `preamble` (gpt-oss's analysis message: its open text, free text, its close) may
 * come before the block.
 */
import { GrammarError } from "../errors.ts";
import { CfgBuilder, type Cfg } from "./cfg.ts";
import { ANY_CHAR, utf8Expr } from "./code-set.ts";
import { INFINITE, type ExprPool } from "./expr.ts";
import { jsonSchemaSymbols } from "./json-schema.ts";
import { fromJavaScript } from "./json-value.ts";
import type { CompileBudget } from "./limits.ts";
import { xmlParameterSymbols, type XmlParameterShape } from "./xml-parameters.ts";
import type { TokenVocabulary } from "./vocabulary.ts";
import { concatArrays } from "../util/typed-arrays.ts";

/** Most whitespace bytes in a row inside a block of calls. */
export const TOOL_CALL_WHITESPACE = 2;

/** One callable function in a format's syntax (the shape of tools/call-syntax.ts's CallSyntaxItem). */
export interface ToolCallShape {
  readonly name: string;
  readonly begin: string;
  /** Other texts the call may begin with (the same arguments and end follow). */
  readonly alternativeBegins?: readonly string[];
  /** The arguments' JSON Schema, as a JavaScript value (key order kept). */
  readonly schema: object;
  readonly end: string;
  readonly object?: { readonly open: string; readonly argumentsKey: string; readonly close: string };
  /** The arguments as XML parameters instead of a JSON object (Qwen3-Coder). */
  readonly parameters?: readonly XmlParameterShape[];
}

export interface ToolCallsSource {
  readonly calls: readonly ToolCallShape[];
  readonly prefix: string;
  readonly separator: string;
  readonly suffix: string;
  /** Whether a block may hold more than one call. */
  readonly repeat: boolean;
  /** Texts matched as the vocabulary's special token of that text, where it has one. */
  readonly controlTokens: readonly string[];
  /** A message of free text that may come before the block: `open`, any text, `close`. */
  readonly preamble?: { readonly open: string; readonly close: string };
}

const utf8 = new TextEncoder();

/**
 * `text` as the grammar's bytes: each of `controlTokens` in it that `vocab` has as a special token
 * becomes that token's spelling (longest first where two start at one place), the rest UTF-8.
 */
export function spelledText(text: string, controlTokens: readonly string[], vocab: TokenVocabulary): Uint8Array {
  const known = controlTokens.filter((t) => t !== "" && vocab.specialToken(t) !== undefined).sort((a, b) => b.length - a.length);
  const parts: Uint8Array[] = [];
  let from = 0;
  for (let at = 0; at < text.length; ) {
    const token = known.find((t) => text.startsWith(t, at));
    if (token === undefined) {
      at++;
      continue;
    }
    parts.push(utf8.encode(text.slice(from, at)), vocab.spelling(vocab.specialToken(token)!)!);
    at += token.length;
    from = at;
  }
  parts.push(utf8.encode(text.slice(from)));
  return concatArrays(parts);
}

export function toolCallsToCfg(pool: ExprPool, source: ToolCallsSource, vocab: TokenVocabulary, budget: CompileBudget): Cfg {
  if (source.calls.length === 0) throw new GrammarError("tool calls: no function to call");
  const b = new CfgBuilder(pool, budget);
  const wsChar = pool.or([pool.byteRange(0x20, 0x20), pool.byteRange(0x09, 0x0a), pool.byteRange(0x0d, 0x0d)]);
  const ws = b.rule("whitespace", [[], [b.terminal(pool.nonEmpty(pool.repeat(wsChar, 0, TOOL_CALL_WHITESPACE)))]]);
  /** A literal text whose whitespace runs are any JSON whitespace. */
  const text = (s: string): number[] => {
    const out: number[] = [];
    for (const piece of s.split(/(\s+)/)) {
      if (piece === "") continue;
      if (/^\s+$/.test(piece)) {
        if (out.at(-1) !== ws) out.push(ws);
      } else out.push(b.terminal(pool.literal(spelledText(piece, source.controlTokens, vocab))));
    }
    return out;
  };
  const lit = (s: string): number => b.terminal(pool.literal(utf8.encode(s)));
  const call = b.rule("call", source.calls.flatMap((c) => {
    let args: number[];
    try {
      const schema = fromJavaScript(c.schema, `${c.name}'s parameters`);
      args = c.parameters === undefined
        ? jsonSchemaSymbols(b, schema, { maxWhitespace: TOOL_CALL_WHITESPACE })
        : xmlParameterSymbols(b, schema, c.parameters, ws, text, TOOL_CALL_WHITESPACE);
    } catch (e) {
      if (e instanceof GrammarError) throw new GrammarError(`function ${c.name}'s parameters: ${e.message}`);
      throw e;
    }
    const o = c.object;
    if (o === undefined) return [c.begin, ...(c.alternativeBegins ?? [])].map((begin) => [...text(begin), ...args, ...text(c.end)]);
    return [[
      ...text(o.open), lit("{"), ws, lit('"name"'), ws, lit(":"), ws, lit(JSON.stringify(c.name)), ws, lit(","), ws,
      lit(JSON.stringify(o.argumentsKey)), ws, lit(":"), ws, ...args, ws, lit("}"), ...text(o.close),
    ]];
  }));
  let calls = call;
  if (source.repeat) {
    calls = b.rule("calls", [[call]]);
    b.define(calls, [[calls, ...text(source.separator), call]]);
  }
  const block = [...text(source.prefix), calls, ...text(source.suffix)];
  const p = source.preamble;
  if (p === undefined) return b.build(b.rule("root", [block]), "the tool calls");
  const free = b.regular(pool.repeat(utf8Expr(pool, ANY_CHAR), 0, INFINITE), "preamble text");
  const preamble = b.rule("preamble", [[], [...text(p.open), ...free, ...text(p.close)]]);
  return b.build(b.rule("root", [[preamble, ...block]]), "the tool calls");
}

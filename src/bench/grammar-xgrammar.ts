/**
 * `bench grammar --peer-xgrammar DIR`: @mlc-ai/web-xgrammar (xgrammar compiled to WebAssembly) run
 * through the same MaskBench method as pagellm, for the comparison the choice of engine rests on
 * (docs/structured-output.md). It is not a dependency: it is loaded from a folder where it was
 * installed on its own (`npm install @mlc-ai/web-xgrammar`), as `--peer-nlc` loads node-llama-cpp.
 *
 * Mode: "compliant" is MaskBench's `--xgr-compliant` (JSON Schema's meaning: additional properties
 * allowed unless forbidden, any whitespace), what pagellm does; "default" is xgrammar's defaults
 * (strict: no additional properties; Python's separators only), MaskBench's plain XGrammar row.
 */
import { copyFileSync, existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { InputError } from "../errors.ts";
import { pythonJsonDumps } from "../grammar/json-value.ts";
import { BpeTokenizer } from "../tokenizer/bpe.ts";
import type { Tokenizer } from "../tokenizer/tokenizer.ts";
import type { MaskBenchEngine } from "./grammar.ts";

export type XGrammarMode = "compliant" | "default";

/** The part of web-xgrammar's API the benchmark uses (its lib/xgrammar.d.ts). */
interface XgTokenizerInfo {
  dispose(): void;
}
interface XgCompiledGrammar {
  dispose(): void;
}
interface XgGrammarCompiler {
  compileJSONSchema(schema: string, anyWhitespace?: boolean, indent?: number, separators?: [string, string], strictMode?: boolean): Promise<XgCompiledGrammar>;
}
interface XgGrammarMatcher {
  acceptToken(tokenID: number): boolean;
  getNextTokenBitmask(): Promise<Int32Array>;
  dispose(): void;
}
interface XgModule {
  TokenizerInfo: {
    createTokenizerInfo(encodedVocab: string[], vocabType?: string, prependSpaceInTokenization?: boolean, vocabSize?: number, stopTokenIds?: number[]): Promise<XgTokenizerInfo>;
  };
  GrammarCompiler: { createGrammarCompiler(info: XgTokenizerInfo, cacheEnabled?: boolean): Promise<XgGrammarCompiler> };
  GrammarMatcher: { createGrammarMatcher(compiled: XgCompiledGrammar): Promise<XgGrammarMatcher> };
}

/** The package's entry file under DIR, checked. */
export function xgrammarEntry(dir: string): string {
  const entry = resolve(join(dir, "node_modules", "@mlc-ai", "web-xgrammar", "lib", "index.js"));
  if (!existsSync(entry)) throw new InputError(`--peer-xgrammar ${dir}: no node_modules/@mlc-ai/web-xgrammar there (install it with: cd ${dir} && npm install @mlc-ai/web-xgrammar)`);
  return entry;
}

/**
 * web-xgrammar over the vocabulary. Instance 0 is the installed file; a later one is a copy of it
 * under another name (its WebAssembly is inside the one file), because the runtime keeps one
 * module per file and an aborted module stays aborted.
 */
async function loadXGrammar(dir: string, instance: number, pieces: string[], byteLevel: boolean, vocabSize: number, eog: number[]): Promise<{ xg: XgModule; compiler: XgGrammarCompiler }> {
  let entry = xgrammarEntry(dir);
  let copy: string | null = null;
  if (instance > 0) {
    copy = join(mkdtempSync(join(tmpdir(), "pagellm-xgrammar-")), "index.js");
    copyFileSync(entry, copy);
    entry = copy;
  }
  let xg: XgModule;
  try {
    xg = (await import(pathToFileURL(entry).href)) as XgModule;
  } finally {
    if (copy !== null) rmSync(dirname(copy), { recursive: true, force: true });
  }
  const info = await xg.TokenizerInfo.createTokenizerInfo(pieces, byteLevel ? "byte_level" : "byte_fallback", !byteLevel, vocabSize, eog);
  return { xg, compiler: await xg.GrammarCompiler.createGrammarCompiler(info) };
}

function dispose(x: { dispose(): void } | null): void {
  try {
    x?.dispose();
  } catch {
    // already gone with an aborted module
  }
}

/**
 * web-xgrammar as a MaskBench engine over the tokenizer's vocabulary. Where it aborts (its
 * WebAssembly module calls abort() on some grammars, and is unusable after), that schema counts as
 * a compile error naming the abort and a fresh module serves the next ones, as MaskBench counts a
 * crash against one schema only.
 */
export async function xgrammarEngine(dir: string, tokenizer: Tokenizer, modelVocabSize: number, mode: XGrammarMode): Promise<MaskBenchEngine> {
  const pieces = Array.from({ length: tokenizer.vocabSize }, (_, id) => tokenizer.tokenPiece(id));
  const byteLevel = tokenizer instanceof BpeTokenizer;
  const eog = [...tokenizer.eogIds];
  let instance = 0;
  let loaded = await loadXGrammar(dir, instance, pieces, byteLevel, modelVocabSize, eog);
  let live: XgCompiledGrammar | null = null;
  const reloadAfter = async (e: unknown): Promise<never> => {
    if (String(e).includes("Abort")) loaded = await loadXGrammar(dir, ++instance, pieces, byteLevel, modelVocabSize, eog);
    throw e;
  };
  return {
    name: `web-xgrammar (${mode})`,
    async compile(schema) {
      dispose(live);
      live = null;
      const text = pythonJsonDumps(schema);
      const { xg, compiler } = loaded;
      let compiled: XgCompiledGrammar;
      try {
        compiled = mode === "compliant" ? await compiler.compileJSONSchema(text, true, -1, undefined, false) : await compiler.compileJSONSchema(text, false, -1);
      } catch (e) {
        return reloadAfter(e);
      }
      live = compiled;
      let matcher: XgGrammarMatcher | null = null;
      return {
        async start() {
          dispose(matcher);
          const m = await xg.GrammarMatcher.createGrammarMatcher(compiled);
          matcher = m;
          let mask: Int32Array = new Int32Array(0);
          return {
            computeMask: async () => {
              mask = await m.getNextTokenBitmask();
            },
            commit: (t) => ((mask[t >>> 5]! >>> (t & 31)) & 1) === 1 && m.acceptToken(t),
          };
        },
      };
    },
  };
}

/**
 * `pagellm rerank`: a reranker's scores of documents (--document texts, --document-file files)
 * against --query, one JSON line per document, best first: `{"index","file"?,"score",
 * "relevance_score"}`, `score` the head's logit (llama-server's /rerank) and `relevance_score` its
 * sigmoid in 0-1 (what vLLM, Jina and Cohere call it). `index` counts the documents in the order
 * given, texts first.
 */
import { defineCommand, type ArgsDef } from "citty";
import { InputError, RequestFieldError } from "../errors.ts";
import { readPromptFile } from "./inputs.ts";
import { loadLLM } from "./load.ts";
import { checkKnownOptions, engineArgs, modelArgs, numberOption, poolingArg, repeated, type ParsedValues } from "./options.ts";
import { info } from "./output.ts";

export const rerankArgs = {
  ...modelArgs,
  query: { type: "string", description: "The text the documents are scored against", valueHint: "text", required: true },
  document: { type: "string", description: "A document's text (repeatable)", valueHint: "text" },
  "document-file": { type: "string", description: "A document's file, - for stdin (repeatable)", valueHint: "path" },
  "top-n": { type: "string", description: "Print only the N best documents (default: all)", valueHint: "n" },
  ...poolingArg,
  ...engineArgs,
} as const satisfies ArgsDef;

export const rerankCommand = defineCommand({
  meta: { name: "rerank", description: "Score documents against a query with a reranker: one JSON line per document, best first" },
  args: rerankArgs,
  async run({ args, rawArgs }) {
    checkKnownOptions(rawArgs, rerankArgs);
    await runRerank(args, rawArgs);
  },
});

async function runRerank(values: ParsedValues, rawArgs: readonly string[]): Promise<void> {
  const query = typeof values.query === "string" ? values.query : "";
  if (query.trim() === "") throw new InputError("--query is empty: there is nothing to score the documents against");
  const topN = numberOption(values, "top-n", "posint");
  const texts = repeated(rawArgs, "document");
  const files = repeated(rawArgs, "document-file");
  const documents = [...texts, ...files.map((path) => readPromptFile(path, "document file"))];
  if (documents.length === 0) throw new InputError("nothing to rerank: give --document or --document-file");
  const llm = await loadLLM(values);
  try {
    const caps = llm.capabilities;
    if (!caps.rerank) throw new InputError(caps.embed ? `the model embeds (pooling ${caps.pooling}), it does not rerank: use \`pagellm embed\`` : "the model generates text; reranking needs a reranker (a model with pooling rank)");
    const t0 = performance.now();
    let result;
    try {
      result = await llm.rerank(query, documents, topN === undefined ? {} : { topN });
    } catch (e) {
      throw e instanceof RequestFieldError ? new InputError(documentError(e, texts.length, files)) : e;
    }
    for (const r of result.results) {
      const file = r.index >= texts.length ? { file: files[r.index - texts.length]! } : {};
      process.stdout.write(JSON.stringify({ index: r.index, ...file, score: r.score, relevance_score: r.relevanceScore }) + "\n");
    }
    info(`scored ${documents.length} documents, ${result.promptTokens} tokens in ${((performance.now() - t0) / 1000).toFixed(2)} s`);
  } finally {
    if (llm.capabilities.generate) await llm.flush();
    llm.close();
  }
}

/** A refused document named by its option: `--document 2` or `--document-file notes.txt`. */
function documentError(e: RequestFieldError, textCount: number, files: readonly string[]): string {
  const at = /^documents\[(\d+)\]/.exec(e.field);
  if (at === null) return e.field === "query" ? `--query ${e.problem}` : e.message;
  const index = Number(at[1]);
  return index < textCount ? `--document ${index + 1} ${e.problem}` : `--document-file ${files[index - textCount]} ${e.problem}`;
}

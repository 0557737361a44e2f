/**
 * `pagellm embed` and `pagellm rerank` as a user runs them, on the random-weight BERT encoder and
 * reranker: one JSON line per input equal to LLM.embed's vectors (float32 values printed as JSON
 * numbers), --output and --resume, a refused JSONL line naming its line and field while the other
 * inputs' results are kept and the exit is non-zero; rerank's lines best first as LLM.rerank
 * ranks them; a bad option is one line.
 */
import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runPagellm } from "./helpers/cli.ts";
import { PROCESS_TEST_MS } from "./helpers/limits.ts";
import { openedLLMs } from "./helpers/llm.ts";
import { describeShared } from "./helpers/shared.ts";

const BERT = "models/gguf/rnd-bert-Q8_0.gguf";
const RERANKER = "models/gguf/rnd-bert-rerank-Q8_0.gguf";
const dir = mkdtempSync(join(tmpdir(), "pagellm-embed-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface EmbedLine {
  id: string;
  dimensions?: number;
  tokens?: number;
  embedding?: number[];
  error?: string;
}

function lines<T>(text: string): T[] {
  return text.split("\n").filter((l) => l !== "").map((l) => JSON.parse(l) as T);
}

describeShared("pagellm embed", [BERT], ([model]) => {
  const llms = openedLLMs();

  test("one line per input, in order, LLM.embed's values; --dimensions and --normalize passed on", async () => {
    const llm = llms.load({ model: model! });
    const texts = ["The cat sat on the mat.", "Embeddings map text to vectors."];
    writeFileSync(join(dir, "a.txt"), texts[1]!);
    const run = runPagellm(["embed", "--model", model!, "--prompt", texts[0]!, "--prompt-file", join(dir, "a.txt"), "--threads", "1", "-q"]);
    expect(run.stderr).toBe("");
    expect(run.exitCode).toBe(0);
    const out = lines<EmbedLine>(run.stdout);
    const expected = await llm.embed(texts, {});
    expect(out.map((l) => l.id)).toEqual(["prompt", join(dir, "a.txt")]);
    expect(out.map((l) => l.embedding)).toEqual(expected.embeddings.map((e) => Array.from(e.values)));
    expect(out.map((l) => l.tokens)).toEqual(expected.embeddings.map((e) => e.tokenCount));
    expect(out.map((l) => l.dimensions)).toEqual(expected.embeddings.map((e) => e.values.length));
    const small = lines<EmbedLine>(runPagellm(["embed", "--model", model!, "--prompt", texts[0]!, "--dimensions", "4", "--normalize", "1", "-q"]).stdout);
    expect(small[0]!.embedding).toEqual(Array.from((await llm.embed([texts[0]!], { dimensions: 4, normalize: 1 })).embeddings[0]!.values));
  }, PROCESS_TEST_MS);

  test("a JSONL whose bad lines are refused by line and field: the others kept in --output, exit 2, --resume runs only what is missing", async () => {
    const llm = llms.load({ model: model! });
    const vocab = llm.tokenizer.vocabSize;
    const jsonl = join(dir, "in.jsonl");
    writeFileSync(jsonl, [
      JSON.stringify({ id: "a", input: "first text" }),
      JSON.stringify({ id: "b", input: "" }),
      JSON.stringify({ id: "c", input: [2, vocab + 7] }),
      JSON.stringify({ id: "d", prompt: "fourth text", max_tokens: 3 }),
      JSON.stringify({ id: "e", input: [5, 6, 7] }),
    ].join("\n") + "\n");
    const output = join(dir, "out.jsonl");
    const run = runPagellm(["embed", "--model", model!, "--prompts", jsonl, "--output", output, "-q"]);
    expect(run.exitCode).toBe(2);
    expect(run.stderr.trim().split("\n")).toHaveLength(1);
    const written = lines<EmbedLine>(readFileSync(output, "utf8"));
    expect(written.map((l) => l.id)).toEqual(["a", "b", "c", "d", "e"]);
    const errors = Object.fromEntries(written.filter((l) => l.error !== undefined).map((l) => [l.id, l.error!]));
    expect(errors.b).toContain(`${jsonl}:2: "input" is empty`);
    expect(errors.c).toContain(`${jsonl}:3: "input" holds ${vocab + 7} at 1`);
    expect(errors.d).toContain(`${jsonl}:4: unknown field "max_tokens"`);
    const good = written.filter((l) => l.error === undefined);
    expect(good.map((l) => l.embedding)).toEqual((await llm.embed(["first text", [5, 6, 7]], {})).embeddings.map((e) => Array.from(e.values)));
    // Fixed lines are run again under --resume once the refused results are dropped.
    writeFileSync(output, good.map((l) => JSON.stringify(l)).join("\n") + "\n");
    writeFileSync(jsonl, [JSON.stringify({ id: "a", input: "first text" }), JSON.stringify({ id: "b", input: "second" }), JSON.stringify({ id: "e", input: [5, 6, 7] })].join("\n") + "\n");
    const resumed = runPagellm(["embed", "--model", model!, "--prompts", jsonl, "--output", output, "--resume", "-q"]);
    expect(resumed.exitCode).toBe(0);
    expect(lines<EmbedLine>(readFileSync(output, "utf8")).map((l) => l.id)).toEqual(["a", "e", "b"]);
  }, PROCESS_TEST_MS);

  test("bad options: one line naming the option, exit 2, before the model loads", () => {
    for (const [args, option] of [
      [["--prompt", "x", "--dimensions", "0"], "--dimensions"],
      [["--prompt", "x", "--normalize", "-2"], "--normalize"],
      [["--resume", "--prompt", "x"], "--resume"],
      [[], "--prompt"],
    ] as const) {
      const run = runPagellm(["embed", "--model", model!, ...args]);
      expect(run.exitCode).toBe(2);
      expect(run.stderr.trim().split("\n")).toHaveLength(1);
      expect(run.stderr).toContain(option);
    }
  }, PROCESS_TEST_MS);

  test("rerank on an embedding model is refused in one line saying what it is", () => {
    const run = runPagellm(["rerank", "--model", model!, "--query", "q", "--document", "d"]);
    expect(run.exitCode).toBe(2);
    expect(run.stderr).toContain("pagellm embed");
  }, PROCESS_TEST_MS);
});

describeShared("pagellm rerank", [RERANKER], ([model]) => {
  const llms = openedLLMs();

  test("one line per document, best first, as LLM.rerank ranks them; --top-n; an empty query refused", async () => {
    const llm = llms.load({ model: model! });
    const docs = ["The giant panda is a bear.", "Paris is in France.", "hi"];
    writeFileSync(join(dir, "doc.txt"), "Pandas eat bamboo.");
    const run = runPagellm(["rerank", "--model", model!, "--query", "What is a panda?", ...docs.flatMap((d) => ["--document", d]), "--document-file", join(dir, "doc.txt"), "-q"]);
    expect(run.exitCode).toBe(0);
    const out = lines<{ index: number; file?: string; score: number; relevance_score: number }>(run.stdout);
    const expected = await llm.rerank("What is a panda?", [...docs, "Pandas eat bamboo."], {});
    expect(out).toEqual(expected.results.map((r) => ({ index: r.index, ...(r.index === 3 ? { file: join(dir, "doc.txt") } : {}), score: r.score, relevance_score: r.relevanceScore })));
    const top = lines<{ index: number }>(runPagellm(["rerank", "--model", model!, "--query", "What is a panda?", ...docs.flatMap((d) => ["--document", d]), "--top-n", "1", "-q"]).stdout);
    expect(top).toHaveLength(1);
    const empty = runPagellm(["rerank", "--model", model!, "--query", " ", "--document", "d"]);
    expect(empty.exitCode).toBe(2);
    expect(empty.stderr).toContain("--query");
  }, PROCESS_TEST_MS);
});

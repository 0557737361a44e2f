/**
 * docs/library.md's example runs as it is written: the first ```ts block is extracted, its
 * `from "pagellm"` pointed at this checkout's src/index.ts, and run in a child process next to
 * stories260K-Q8_0.gguf. Its greedy request must print what LLM.generate gives in this process.
 */
import { afterAll, expect, test } from "bun:test";
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { LLM } from "../src/index.ts";
import { describeShared } from "./helpers/shared.ts";
import { LONG_PROCESS_TEST_MS } from "./helpers/limits.ts";

const ROOT = resolve(import.meta.dir, "..");
const dir = mkdtempSync(join(tmpdir(), "pagellm-library-doc-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The first ```ts code block of a Markdown file. */
function firstTsBlock(markdown: string): string {
  const match = /^```ts\n([\s\S]*?)^```$/m.exec(markdown);
  if (match === null) throw new Error("no ```ts block");
  return match[1]!;
}

describeShared("docs/library.md", ["models/gguf/stories260K-Q8_0.gguf"], ([model]) => {
  test("its example runs and prints the greedy continuation the library gives", async () => {
    const example = firstTsBlock(readFileSync(join(ROOT, "docs", "library.md"), "utf8"));
    expect(example).toContain('from "pagellm"');
    expect(example).toContain('"stories260K-Q8_0.gguf"');
    const script = join(dir, "example.ts");
    writeFileSync(script, example.replace('from "pagellm"', `from ${JSON.stringify(join(ROOT, "src", "index.ts"))}`));
    copyFileSync(model!, join(dir, "stories260K-Q8_0.gguf"));

    const proc = Bun.spawn(["bun", script], { cwd: dir, stdout: "pipe", stderr: "pipe", env: { ...process.env, NO_COLOR: "1" } });
    const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
    expect(code, stderr).toBe(0);
    expect(stderr).toMatch(/^device: /m);

    const llm = LLM.load({ model: model!, engine: { threads: 1 } });
    try {
      const prompt = /const prompt = "([^"]+)";/.exec(example)![1]!;
      const [greedy] = await llm.generate([{ prompt, maxTokens: 24, temperature: 0 }]);
      expect(greedy!.text.length).toBeGreaterThan(0);
      expect(stdout).toContain(`greedy: ${JSON.stringify(greedy!.text)} (length, 0 cached)`);
      // What the page says: the second request and the streamed one hit the first one's blocks.
      expect(stdout).toMatch(/^sampled: ".+" \(length, (1[6-9]|[2-9]\d) cached\)$/m);
      expect(stdout).toContain(`${greedy!.text}\n[24 tokens, `);
      expect(stdout).toMatch(/^\[24 tokens, (1[6-9]|[2-9]\d) cached\]$/m);
      expect(stdout).toMatch(/^perplexity \d+\.\d\d over \d+ tokens$/m);
    } finally {
      llm.close();
    }
  }, LONG_PROCESS_TEST_MS);
});

/**
 * A seeded fuzz test of the GGUF reader and loader: mutations of the shared models'
 * headers (counts, string and array lengths, value types, tensor dims, types, offsets and names,
 * hyper-parameters, token ids, string bytes, truncation) and of their chat templates, each run
 * in-process as info and generate run it. The property (helpers/gguf-fuzz.ts): a normal run, or
 * one clean line naming the file, with bounded work (bytes read, CPU seconds, memory), never an internal error.
 *
 * The quick pass runs with `bun test`. PAGELLM_FUZZ_SLOW=1 adds the slow pass that CI runs
 * (.ci/run): more seeds, sparse files declaring huge tensors, and the CLI as a process.
 */
import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DEFAULT_RENDER_LIMITS } from "../src/chat/jinja-limits.ts";
import { ChatTemplate, ChatTemplateError } from "../src/chat/jinja-template.ts";
import { readGGUF } from "../src/model/gguf.ts";
import { gguf } from "../src/synth/gguf-writer.ts";
import { runPagellm } from "./helpers/cli.ts";
import { expectCleanLine, FuzzRandom, mutations, runFile, UNSAFE_CHARS, type Outcome } from "./helpers/gguf-fuzz.ts";
import { declareHugeTensor, rewriteGGUF } from "./helpers/hostile-gguf.ts";
import { describeShared } from "./helpers/shared.ts";
import { workOf, type Work } from "./helpers/work.ts";

const SLOW = process.env.PAGELLM_FUZZ_SLOW === "1";
const dir = mkdtempSync(join(tmpdir(), "pagellm-gguf-fuzz-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/**
 * What one case may cost, whatever its header declares (bounds on hostile input, no speed target),
 * in work, which a busy machine does not change: reading at most this many times the file (each
 * step of a run, info's header read, the checkpoint, the tokenizer, the engine's load, reads the
 * header or the weights once), this many CPU seconds of this process (a case takes milliseconds: a
 * loop that runs away fails here), and this much memory growth.
 */
const CASE_READS_PER_FILE_BYTE = 8;
const CASE_CPU_SECONDS = 20;
const CASE_GROWTH_BYTES = 1.5 * 2 ** 30;
/** Reads besides the file's: module code loaded on first use, /proc/self/io itself. */
const CASE_READ_SLACK_BYTES = 4 * 2 ** 20;

/** A case read no more than CASE_READS_PER_FILE_BYTE times the `fileBytes` of the file it ran on, and computed no more than CASE_CPU_SECONDS. */
function expectBoundedWork(what: string, work: Work<Outcome>, fileBytes: number): void {
  const bound = CASE_READS_PER_FILE_BYTE * fileBytes + CASE_READ_SLACK_BYTES;
  if (work.bytesRead > bound) throw new Error(`${what}: read ${work.bytesRead} bytes of a ${fileBytes}-byte file (at most ${bound})`);
  if (work.cpuSeconds > CASE_CPU_SECONDS) throw new Error(`${what}: ${work.cpuSeconds.toFixed(1)} CPU seconds (at most ${CASE_CPU_SECONDS})`);
}

async function fuzzFile(good: string, seed: number, count: number): Promise<Map<string, number>> {
  const original = new Uint8Array(readFileSync(good));
  const outcomes = new Map<string, number>();
  let i = 0;
  for (const m of mutations(original, seed, count)) {
    const path = join(dir, `seed${seed}-${i++}.gguf`);
    writeFileSync(path, m.bytes);
    const rss = process.memoryUsage().rss;
    let work: Work<Outcome>;
    try {
      work = await workOf(() => runFile(path));
    } catch (e) {
      throw new Error(`${m.what}: ${(e as Error).message}`);
    }
    expectBoundedWork(m.what, work, m.bytes.length);
    const outcome = work.result;
    if (process.memoryUsage().rss - rss > CASE_GROWTH_BYTES) throw new Error(`${m.what}: memory grew by more than 1.5 GiB`);
    const key = outcome.kind === "ran" ? "ran" : outcome.message.slice(path.length + 2).replace(/\d+/g, "N").slice(0, 60);
    outcomes.set(key, (outcomes.get(key) ?? 0) + 1);
    rmSync(path);
  }
  return outcomes;
}

describeShared("fuzzing the GGUF reader and loader", ["models/gguf/stories260K.gguf", "models/gguf/stories260K-Q8_0.gguf"], ([f32, q8]) => {
  const seeds = SLOW ? [1, 2, 3, 4, 5, 6, 7, 8] : [1];
  for (const seed of seeds) {
    test(`stories260K.gguf, seed ${seed}: 200 mutations, each a normal run or one clean line naming the file`, async () => {
      const outcomes = await fuzzFile(f32!, seed, 200);
      // The mutations reach past the header checks: some files still run, some are refused.
      expect(outcomes.get("ran") ?? 0).toBeGreaterThan(0);
      expect(outcomes.size).toBeGreaterThan(10);
    }, 600_000);
    test(`stories260K-Q8_0.gguf, seed ${seed}: 150 mutations`, async () => {
      const outcomes = await fuzzFile(q8!, seed + 100, 150);
      expect(outcomes.size).toBeGreaterThan(5);
    }, 600_000);
  }

  test("the mutations are reproducible from the seed, and differ between seeds", () => {
    const good = new Uint8Array(readFileSync(f32!));
    const run = (seed: number) => [...mutations(good, seed, 20)];
    const [a, b, c] = [run(9), run(9), run(10)];
    expect(a.map((m) => m.what)).toEqual(b.map((m) => m.what));
    a.forEach((m, i) => expect(Buffer.compare(m.bytes, b[i]!.bytes)).toBe(0));
    expect(a.map((m) => m.what)).not.toEqual(c.map((m) => m.what));
    expect(a.every((m) => Buffer.compare(m.bytes, good) !== 0 || m.what.includes("= "))).toBe(true);
  });

  // Each case must end by its steps, sizes and depth (the same outcome on any machine): a tenth of
  // the default steps, so that the loop nests, which run until the step budget stops them, take a
  // tenth of a second each. The clock only stops a case that escaped them (a rendering is
  // synchronous: the test's own limit could not), and such a case fails.
  const HANG_MS = 60_000;
  const WORK_LIMITS = { ...DEFAULT_RENDER_LIMITS, maxSteps: 100_000, maxMs: HANG_MS };

  test("chat templates of the file: random hostile fragments render or fail in one line naming the file, stopped by the work limits, never by the clock", () => {
    const r = new FuzzRandom(42);
    const fragments = [
      "{% for i in range(N) %}", "{% endfor %}", "{{ messages[0]['content'] }}", "{% if x %}", "{% endif %}", "{{ 'ab' * N }}",
      "{% set ns = namespace(s='ab') %}", "{% set ns.s = ns.s + ns.s %}", "{{ ns.s|length }}", "{{ messages|tojson(indent=N) }}",
      "{% macro f(n) %}{{ f(n) }}{% endmacro %}", "{{ f(1) }}", "{{ raise_exception('\u001b[2Jbad\nline') }}", "{{", "%}", "{{ x.y.z }}",
      "{{ range(N)|join(ns.s) }}", "{{ 'a\nb'|indent(N) }}", "{{ ns.s.replace('', ns.s) }}", "{{ ns.s.split('') }}", "\u0000\u009b",
      "{% for i in range(N) %}{% for j in range(1000) %}{% endfor %}{% endfor %}",
    ];
    const numbers = ["0", "3", "100", "100000", "2000000000", "-1", "1e9"];
    for (let i = 0; i < 200; i++) {
      const text = Array.from({ length: 1 + r.int(8) }, () => r.pick(fragments).replace("N", r.pick(numbers))).join("");
      try {
        const out = new ChatTemplate(text, "fuzz.gguf", { bosToken: "<s>", eosToken: "</s>" }, {}, WORK_LIMITS).render([{ role: "user", content: "Hi" }], true);
        expect(out.length).toBeLessThanOrEqual(16 << 20);
      } catch (e) {
        if (!(e instanceof ChatTemplateError)) throw new Error(`${JSON.stringify(text)}: ${(e as Error).name}: ${(e as Error).message}`);
        expect(e.message).toStartWith("fuzz.gguf: chat template: ");
        expect(e.message, `${JSON.stringify(text)} was stopped by the clock, not by the work limits`).not.toContain(`took more than ${HANG_MS / 1000} s`);
        expectCleanLine(e.message);
      }
    }
  }, 600_000);
});

describeShared("fuzzing, slow pass: sparse files declaring huge tensors, and the CLI", ["models/gguf/stories260K.gguf", "models/gguf/rnd-qwen2-Q5_K_M.gguf"], ([f32, qwen2]) => {
  test.skipIf(!SLOW)("rnd-qwen2-Q5_K_M.gguf (byte-level BPE, K-quants, a chat template): 60 mutations", async () => {
    const outcomes = await fuzzFile(qwen2!, 500, 60);
    expect(outcomes.size).toBeGreaterThan(5);
  }, 600_000);

  test.skipIf(!SLOW)("every tensor declared with up to 2^34 elements (sparse): refused in one line, reading no more than a file of the real size", async () => {
    const r = new FuzzRandom(7);
    const names = readGGUF(f32!).tensors.map((t) => t.name);
    const goodBytes = statSync(f32!).size;
    for (let i = 0; i < 24; i++) {
      const name = r.pick(names);
      const path = join(dir, `huge-${i}.gguf`);
      rewriteGGUF(f32!, path, {});
      const dims = readGGUF(path).tensor(name)!.dims.map(BigInt);
      const d = r.int(dims.length);
      dims[d] = 1n << BigInt(20 + r.int(15));
      declareHugeTensor(path, name, dims);
      const work = await workOf(() => runFile(path));
      expect(work.result.kind).toBe("refused");
      // Refused from the header: what it read is bounded by the real file, not by what the header declares.
      expectBoundedWork(`${name} dims ${dims.join("x")}`, work, goodBytes);
      rmSync(path);
    }
  }, 600_000);

  test.skipIf(!SLOW)("through the CLI: info and generate on mutated files print one clean line or run", () => {
    const original = new Uint8Array(readFileSync(f32!));
    let i = 0;
    for (const m of mutations(original, 99, 40)) {
      const path = join(dir, `cli-${i++}.gguf`);
      writeFileSync(path, m.bytes);
      for (const args of [["info", path], ["generate", "--model", path, "--prompt", "Once", "--max-tokens", "4", "--ctx-size", "64"]]) {
        const run = runPagellm(args, { timeoutMs: 60_000 });
        expect(run.stderr).not.toContain("internal error");
        expect(run.stderr).not.toMatch(/^\s+at /m);
        expect(run.stdout).not.toMatch(UNSAFE_CHARS);
        if (run.exitCode !== 0) {
          const last = run.stderr.trimEnd().split("\n").at(-1)!;
          expect(last).toStartWith("pagellm: error: ");
          expectCleanLine(last);
        }
      }
      rmSync(path);
    }
  }, 600_000);

  test.skipIf(!SLOW)("a template in the file that never ends: chat stops it, naming the file", () => {
    const path = rewriteGGUF(f32!, join(dir, "template.gguf"), {
      metadata: (m) => m.set("tokenizer.chat_template", gguf.str("{% for i in range(99999) %}{% for j in range(99999) %}{{ j }}{% endfor %}{% endfor %}")),
    });
    const run = runPagellm(["chat", "--model", path], { stdin: "Hi\n", timeoutMs: 90_000 });
    expect(run.exitCode).toBe(2);
    expect(run.stderr.trimEnd().split("\n").at(-1)).toStartWith(`pagellm: error: ${path}: chat template: stopped: `);
  }, 120_000);
});

/**
 * `pagellm serve` as a process: it prints one line with its address and model, and on SIGTERM
 * stops accepting (503 on /health and on new requests), lets the requests that stream finish,
 * and exits 0; a second signal exits at once. Bad options are one-line errors.
 */
import { expect, test } from "bun:test";
import { describeShared } from "./helpers/shared.ts";
import { runPagellm } from "./helpers/cli.ts";
import { spawnServe, type ServeProcess } from "./helpers/serve-process.ts";
import { StreamText } from "./helpers/stream-text.ts";

const STORIES = "models/gguf/stories260K.gguf";
/** Per-test limit: a server process, its model load and whole generations on a busy machine. */
const LIMIT_MS = 120_000;

/** Start `pagellm serve` on a free port and wait for its startup line. */
async function spawnServer(model: string, args: string[] = []): Promise<ServeProcess> {
  const server = await spawnServe(model, args);
  expect(server.startupLine).toContain("serving stories260K.gguf");
  return server;
}

/** A streamed completion: `started` resolves at its first token's chunk (the request is in the batch), `ended` once read to the end. */
interface Stream {
  started: Promise<void>;
  /** The finish_reason of its last choice chunk and whether [DONE] came (false where the connection broke off). */
  ended: Promise<{ finish: string | null; done: boolean }>;
}

function startStream(url: string, maxTokens: number): Stream {
  const body = fetch(`${url}/v1/completions`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ prompt: "Once upon a time", max_tokens: maxTokens, temperature: 0, ignore_eos: true, stream: true }),
  }).then((res) => new StreamText(res.body!));
  const started = body.then((text) => text.waitFor(() => text.text.includes("data: {"), "the first chunk"));
  const ended = body.then(async (text) => {
    const all = await text.done;
    let finish: string | null = null;
    for (const line of all.split("\n")) {
      if (!line.startsWith("data: {")) continue;
      const chunk = JSON.parse(line.slice(6)) as { choices: { finish_reason: string | null }[] };
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    return { finish, done: all.endsWith("data: [DONE]\n\n") };
  });
  return { started, ended };
}

describeShared("serve: shutdown on signals", [STORIES], ([model]) => {
  test("SIGTERM while requests stream: they complete, new ones get 503, exit 0", async () => {
    const server = await spawnServer(model!, ["--max-num-seqs", "4"]);
    try {
      const streams = [0, 1, 2].map(() => startStream(server.url, 500));
      // All three are in the batch (each has streamed a token) when the signal comes.
      await Promise.all(streams.map((s) => s.started));
      server.proc.kill("SIGTERM");
      // The server says it has stopped accepting before it answers anything else.
      await server.saysOnStderr(/SIGTERM: not accepting new requests/);
      const health = (await fetch(`${server.url}/health`)).status;
      expect(health).toBe(503);
      const late = await fetch(`${server.url}/v1/completions`, { method: "POST", body: JSON.stringify({ prompt: "Hi", max_tokens: 2 }) });
      expect(late.status).toBe(503);
      expect(((await late.json()) as { error: { type: string } }).error.type).toBe("service_unavailable");
      for (const r of await Promise.all(streams.map((s) => s.ended))) expect(r).toEqual({ finish: "length", done: true });
      expect(await server.proc.exited).toBe(0);
    } finally {
      server.proc.kill("SIGKILL");
    }
  }, LIMIT_MS);

  test("a second signal exits at once", async () => {
    const server = await spawnServer(model!);
    try {
      const stream = startStream(server.url, 2000);
      await stream.started;
      server.proc.kill("SIGINT");
      // The first signal is taken (draining has begun) before the second is sent.
      await server.saysOnStderr(/SIGINT: not accepting new requests/);
      server.proc.kill("SIGINT");
      expect(await server.proc.exited).toBe(130);
      await stream.ended;
    } finally {
      server.proc.kill("SIGKILL");
    }
  }, LIMIT_MS);

  test("bad options are one-line errors with exit code 2", () => {
    const r = runPagellm(["serve", "--model", model!, "--port", "70000"]);
    expect(r.exitCode).toBe(2);
    expect(r.stderr.trim()).toBe("pagellm: error: --port must be at least 0 and at most 65535, got 70000");
    const q = runPagellm(["serve", "--model", model!, "--max-queue", "0"]);
    expect(q.exitCode).toBe(2);
    expect(q.stderr.trim().split("\n").length).toBe(1);
  }, LIMIT_MS);

  test("an API key no request could match (surrounding whitespace, a newline) is refused at start, from --api-key or the environment", () => {
    for (const key of ["key ", " key", "key\n", "ke\ty"]) {
      const r = runPagellm(["serve", "--model", model!, "--port", "0", "--api-key", key]);
      expect(r.exitCode).toBe(2);
      expect(r.stderr).toMatch(/^pagellm: error: --api-key (begins or ends with whitespace|contains a control character)[^\n]*\n$/);
    }
    const env = runPagellm(["serve", "--model", model!, "--port", "0"], { env: { PAGELLM_API_KEY: "key\n" } });
    expect(env.exitCode).toBe(2);
    expect(env.stderr).toMatch(/^pagellm: error: \$PAGELLM_API_KEY begins or ends with whitespace[^\n]*\n$/);
  }, LIMIT_MS);

  test("--chat-template with an unknown name is refused under its own name, before the model loads", () => {
    const r = runPagellm(["serve", "--model", model!, "--port", "0", "--chat-template", "llama3"]);
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toBe('pagellm: error: --chat-template must be raw, llama2, chatml or a Jinja template file, got "llama3" (no such file)\n');
  }, LIMIT_MS);

  test("the server's bounds are options: bad values are one-line errors", () => {
    for (const [option, value] of [["--body-timeout", "0"], ["--max-connections", "0"], ["--max-pending-body-mb", "-1"], ["--stall-timeout", "x"]]) {
      const r = runPagellm(["serve", "--model", model!, "--port", "0", option!, value!]);
      expect(r.exitCode).toBe(2);
      expect(r.stderr).toMatch(new RegExp(`^pagellm: error: ${option} [^\n]*\n$`));
    }
  }, LIMIT_MS);
});

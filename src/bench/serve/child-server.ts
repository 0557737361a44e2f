/**
 * Servers `bench serve` starts itself on loopback: `pagellm serve` (this checkout's CLI) and,
 * with --llama-server, llama.cpp's llama-server on the same model file. Each gets a free port,
 * is ready when GET /health answers 200, and is always stopped (SIGTERM, then SIGKILL after a
 * grace period). Its log is drained as it runs (a full pipe would block it) and its last lines
 * kept for the error when it dies or never gets ready.
 */
import { join } from "node:path";
import { ServerError } from "../../errors.ts";
import { REPO_ROOT } from "../bench-models.ts";

export interface ChildServer {
  /** How reports name it ("pagellm serve", "llama-server"). */
  name: string;
  /** http://127.0.0.1:PORT/v1 */
  apiBase: string;
  /** The command line it was started with. */
  argv: string[];
  stop(): Promise<void>;
}

/** Log bytes kept for error messages. */
const LOG_TAIL = 2000;
const STOP_GRACE_MS = 15_000;

/** A port free on 127.0.0.1 now (the kernel's pick for port 0, released at once). */
export function freePort(): number {
  const probe = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response() });
  const port = probe.port!;
  probe.stop(true);
  return port;
}

/** Read a child's output to its end, keeping the last LOG_TAIL characters. */
function drain(stream: ReadableStream<Uint8Array>, tail: { text: string }): void {
  const decoder = new TextDecoder();
  void (async () => {
    for await (const bytes of stream) tail.text = (tail.text + decoder.decode(bytes, { stream: true })).slice(-LOG_TAIL);
  })();
}

function lastLines(text: string): string {
  const lines = text.trim().split("\n").filter((l) => l.trim() !== "");
  return lines.slice(-3).join(" | ");
}

/**
 * Start `argv` (which must listen on `port`) and wait until /health answers 200. ServerError when
 * it exits first or is not ready within `readyTimeoutS`; the child is stopped then.
 */
export async function startChild(name: string, argv: string[], port: number, readyTimeoutS: number): Promise<ChildServer> {
  const tail = { text: "" };
  const proc = Bun.spawn(argv, { stdin: "ignore", stdout: "pipe", stderr: "pipe" });
  drain(proc.stdout, tail);
  drain(proc.stderr, tail);
  const stop = async (): Promise<void> => {
    if (proc.exitCode !== null || proc.signalCode !== null) return;
    proc.kill("SIGTERM");
    const timer = setTimeout(() => proc.kill("SIGKILL"), STOP_GRACE_MS);
    await proc.exited;
    clearTimeout(timer);
  };
  const health = `http://127.0.0.1:${port}/health`;
  const deadline = performance.now() + readyTimeoutS * 1000;
  try {
    for (;;) {
      if (proc.exitCode !== null || proc.signalCode !== null) {
        throw new ServerError(`${name} exited (${proc.exitCode ?? proc.signalCode}) before it was ready: ${lastLines(tail.text) || "no output"}`);
      }
      try {
        const res = await fetch(health, { signal: AbortSignal.timeout(5000) });
        await res.arrayBuffer();
        if (res.status === 200) break;
      } catch {
        // Not listening yet.
      }
      if (performance.now() > deadline) throw new ServerError(`${name} was not ready within ${readyTimeoutS} s (GET ${health}): ${lastLines(tail.text) || "no output"}`);
      await Bun.sleep(250);
    }
  } catch (e) {
    await stop();
    throw e;
  }
  return { name, apiBase: `http://127.0.0.1:${port}/v1`, argv, stop };
}

/**
 * This checkout's `pagellm serve` on a model file, with a context of `ctx` positions (or the
 * model's, if smaller), on WebAssembly: the CPU the in-process baseline and llama-server's CPU
 * build run on (auto would take a hardware GPU where there is one); the user's `extra` flags (e.g.
 * --max-prefill-while-decoding 512).
 */
export function pagellmServeArgv(model: string, threads: number, ctx: number, port: number, extra: readonly string[] = []): string[] {
  return [
    "bun", join(REPO_ROOT, "bin", "pagellm"), "serve", "--model", model, "--device", "wasm", "--threads", String(threads), "--ctx-size", String(ctx),
    ...extra, "--host", "127.0.0.1", "--port", String(port),
  ];
}

/**
 * llama-server on a model file with explicit threads (generation and batch), slots and context:
 * `ctxPerSlot` positions for each of `slots` (llama-server's -c is the total it divides), and the
 * user's `extra` flags (e.g. --cache-ram 0).
 */
export function llamaServerArgv(bin: string, model: string, threads: number, slots: number, ctxPerSlot: number, port: number, extra: readonly string[]): string[] {
  return [
    bin, "-m", model, "-t", String(threads), "-tb", String(threads), "-np", String(slots), "-c", String(slots * ctxPerSlot),
    ...extra, "--host", "127.0.0.1", "--port", String(port),
  ];
}

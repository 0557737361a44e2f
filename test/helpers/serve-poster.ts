/**
 * A server on a model for the tests of the enclosing describe (started in its beforeAll, stopped in
 * its afterAll, served as "m" on 127.0.0.1 and a free port), and a poster of bodies to it: a value
 * is sent as JSON, a string as it is (for JSON text no value writes, such as a number's exact digits).
 */
import { afterAll, beforeAll } from "bun:test";
import type { LLM } from "../../src/llm/llm.ts";
import { PagellmServer } from "../../src/server/server.ts";

export interface Answer {
  status: number;
  /** The body as text, and parsed. */
  text: string;
  body: Record<string, unknown>;
}

export function servePoster(load: () => LLM, limitMs: number): (path: string, body: unknown) => Promise<Answer> {
  let llm: LLM | undefined;
  let server: PagellmServer | undefined;
  beforeAll(() => {
    llm = load();
    server = new PagellmServer({ host: "127.0.0.1", port: 0, apiKey: null, maxBodyBytes: 8 << 20, maxQueue: 64, logRequests: false, modelName: "m", log: () => {} });
    server.ready(llm);
  }, limitMs);
  afterAll(async () => {
    await server?.close();
    llm?.close();
  });
  return async (path, body) => {
    const r = await fetch(`${server!.url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: typeof body === "string" ? body : JSON.stringify(body) });
    const text = await r.text();
    return { status: r.status, text, body: JSON.parse(text) as Record<string, unknown> };
  };
}

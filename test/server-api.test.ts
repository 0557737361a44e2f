/**
 * The smaller parts of the API surface clients asked for (issue 29), against a server the test
 * starts: `GET /v1/models/{id}` through the openai client's `models.retrieve` (and HEAD, and the
 * 404 for another id in OpenAI's shape).
 */
import { expect, test } from "bun:test";
import { NotFoundError } from "openai";
import { rawExchange, rawRequest } from "./helpers/raw-http.ts";
import { serveForSuite, type TestServer } from "./helpers/serve.ts";
import { describeShared } from "./helpers/shared.ts";

const STORIES = "models/gguf/stories260K.gguf";
/** Per-test limit: short generations over HTTP on a busy 2-core machine. */
const LIMIT_MS = 120_000;
/** A served name with a slash and a colon, as an hf: spec gives one. */
const NAME = "owner/repo:Q8_0";

describeShared("serve: GET /v1/models/{id}", [STORIES], ([model]) => {
  let s!: TestServer;
  serveForSuite((started) => (s = started), LIMIT_MS, model!, { modelName: NAME });

  test("models.retrieve returns the served model, as models.list lists it", async () => {
    const listed = [];
    for await (const m of s.client.models.list()) listed.push(m);
    const model = await s.client.models.retrieve(NAME);
    expect(model).toEqual(listed[0]!);
    expect(model.id).toBe(NAME);
    expect(model.object).toBe("model");
  }, LIMIT_MS);

  test("another id is a 404 in OpenAI's shape (model_not_found), raw slashes in the path are the id too", async () => {
    const error = await s.client.models.retrieve("gpt-4o").catch((e: unknown) => e);
    expect(error).toBeInstanceOf(NotFoundError);
    expect((error as NotFoundError).code).toBe("model_not_found");
    const raw = await fetch(`${s.url}/v1/models/owner/repo:Q8_0`);
    expect(raw.status).toBe(200);
    expect(((await raw.json()) as { id: string }).id).toBe(NAME);
    const other = await fetch(`${s.url}/v1/models/owner/other`);
    expect(other.status).toBe(404);
    expect(await other.json()).toEqual({
      error: { message: expect.stringContaining("'owner/other' does not exist"), type: "not_found_error", param: null, code: "model_not_found" },
    });
  }, LIMIT_MS);

  test("HEAD is answered like GET; another method is a 405 naming GET and HEAD", async () => {
    const path = `/v1/models/${encodeURIComponent(NAME)}`;
    const get = await fetch(`${s.url}${path}`);
    const head = await rawExchange(Number(new URL(s.url).port), [rawRequest("HEAD", path)], { responses: 1, head: true, deadlineMs: 30_000 });
    expect(head.responses[0]!.status).toBe(200);
    expect(head.responses[0]!.headers["content-type"]).toBe(get.headers.get("content-type")!);
    expect(head.responses[0]!.body).toBe("");
    const post = await fetch(`${s.url}${path}`, { method: "POST" });
    expect(post.status).toBe(405);
    expect(post.headers.get("allow")).toBe("GET, HEAD");
  }, LIMIT_MS);
});

/**
 * The model registry on its own (src/server/models/registry.ts), with stand-in models whose sizes
 * and loads the test controls and a fake clock: eviction least recently used by memory, never of
 * a model in use or pinned; loads waited for, not repeated; a model too large refused with the
 * figures; keep_alive (0, durations, negative) and unload requests; a failing load leaving the
 * others serving.
 */
import { describe, expect, test } from "bun:test";
import { ApiError } from "../src/server/api-error.ts";
import { ModelRegistry, type ModelSource, type RegisteredModel } from "../src/server/models/registry.ts";
import { FakeClock, settle } from "./helpers/fake-clock.ts";

const MB = 2 ** 20;

interface Stand {
  name: string;
  closed: boolean;
}

/** A model source of `bytes` whose loads are counted; `gate` holds a load until resolved. */
function source(name: string, bytes: number, log: string[], opts: { fail?: boolean; gate?: Promise<void>; measured?: number } = {}): ModelSource<Stand> {
  return {
    estimateBytes: () => bytes,
    async load() {
      log.push(`load ${name}`);
      await opts.gate;
      if (opts.fail === true) throw new Error(`${name}: not a GGUF file`);
      return { name, closed: false };
    },
    bytesOf: () => opts.measured ?? bytes,
    async unload(m) {
      log.push(`unload ${name}`);
      m.closed = true;
    },
  };
}

function registry(models: RegisteredModel<Stand>[], budgetMb: number, clock = new FakeClock(), defaultKeepAliveMs = -1, maxWaiting = 16): ModelRegistry<Stand> {
  return new ModelRegistry(models, { budgetBytes: budgetMb * MB, defaultKeepAliveMs, maxWaiting, clock });
}

function states(r: ModelRegistry<Stand>): Record<string, string> {
  return Object.fromEntries(r.list().map((s) => [s.name, s.state]));
}

async function refusal(p: Promise<unknown>): Promise<ApiError> {
  try {
    await p;
  } catch (e) {
    if (e instanceof ApiError) return e;
    throw e;
  }
  throw new Error("expected a refusal");
}

describe("model registry", () => {
  test("three models under a budget that holds two: the least recently used idle one is evicted, and loaded again when asked", async () => {
    const log: string[] = [];
    const r = registry([{ name: "a", file: "a.gguf", source: source("a", 40 * MB, log) }, { name: "b", file: "b.gguf", source: source("b", 40 * MB, log) }, { name: "c", file: "c.gguf", source: source("c", 40 * MB, log) }], 100);
    (await r.acquire("a")).release();
    (await r.acquire("b")).release();
    (await r.acquire("a")).release(); // a is now the more recent
    expect(states(r)).toEqual({ a: "loaded", b: "loaded", c: "unloaded" });
    (await r.acquire("c")).release();
    expect(states(r)).toEqual({ a: "loaded", b: "unloaded", c: "loaded" });
    expect(r.usedBytes).toBe(80 * MB);
    (await r.acquire("b")).release();
    expect(states(r)).toEqual({ a: "unloaded", b: "loaded", c: "loaded" });
    expect(log).toEqual(["load a", "load b", "unload b", "load c", "unload a", "load b"]);
    expect(r.statusOf("b").loads).toBe(2);
  });

  test("a model in use is never evicted: the load waits for its lease to end", async () => {
    const log: string[] = [];
    const r = registry([{ name: "a", file: "a.gguf", source: source("a", 60 * MB, log) }, { name: "b", file: "b.gguf", source: source("b", 60 * MB, log) }], 100);
    const a = await r.acquire("a");
    let bLoaded = false;
    const b = r.acquire("b").then((lease) => ((bLoaded = true), lease));
    await settle();
    expect(bLoaded).toBe(false);
    expect(states(r)).toEqual({ a: "loaded", b: "loading" });
    a.release();
    const lease = await b;
    expect(bLoaded).toBe(true);
    expect(states(r)).toEqual({ a: "unloaded", b: "loaded" });
    lease.release();
  });

  test("a pinned model is never evicted; a model that cannot fit beside it is refused with the figures", async () => {
    const log: string[] = [];
    const r = registry([
      { name: "p", file: "p.gguf", pinned: true, source: source("p", 50 * MB, log) },
      { name: "a", file: "a.gguf", source: source("a", 40 * MB, log) },
      { name: "b", file: "b.gguf", source: source("b", 40 * MB, log) },
      { name: "huge", file: "huge.gguf", source: source("huge", 70 * MB, log) },
    ], 100);
    await r.loadPinned();
    (await r.acquire("a")).release();
    (await r.acquire("b")).release();
    expect(states(r)).toEqual({ p: "loaded", a: "unloaded", b: "loaded", huge: "unloaded" });
    const e = await refusal(r.acquire("huge"));
    expect(e.status).toBe(400);
    expect(e.code).toBe("model_exceeds_memory_budget");
    expect(e.message).toContain("needs 70.0 MiB");
    expect(e.message).toContain("budget of 100.0 MiB");
    expect(e.message).toContain("50.0 MiB of it held by pinned models");
    // Nothing was unloaded for it.
    expect(states(r).b).toBe("loaded");
    expect(log).not.toContain("load huge");
  });

  test("requests for a model being loaded wait for that one load; past the bound they get 429", async () => {
    const log: string[] = [];
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    const r = registry([{ name: "a", file: "a.gguf", source: source("a", 10 * MB, log, { gate }) }], 100, new FakeClock(), -1, 3);
    const waiting = [r.acquire("a"), r.acquire("a"), r.acquire("a")];
    await settle();
    const over = await refusal(r.acquire("a"));
    expect(over.status).toBe(429);
    open();
    const leases = await Promise.all(waiting);
    expect(log.filter((l) => l === "load a").length).toBe(1);
    expect(r.statusOf("a").inFlight).toBe(3);
    for (const l of leases) l.release();
    expect(r.statusOf("a").inFlight).toBe(0);
  });

  test("keep_alive: a duration unloads when it runs out after the last lease; 0 at once; negative never", async () => {
    const clock = new FakeClock();
    const log: string[] = [];
    const r = registry([{ name: "a", file: "a.gguf", source: source("a", 10 * MB, log) }, { name: "b", file: "b.gguf", source: source("b", 10 * MB, log) }, { name: "c", file: "c.gguf", source: source("c", 10 * MB, log) }], 100, clock, 300_000);
    const a = await r.acquire("a");
    // In use: no expiry runs.
    await clock.advance(600_000);
    expect(r.statusOf("a").expiresAt).toBeNull();
    a.release();
    expect(r.statusOf("a").expiresAt).toBe(clock.now() + 300_000);
    await clock.advance(299_999);
    expect(states(r).a).toBe("loaded");
    // A request in between starts the time again.
    (await r.acquire("a", 60_000)).release();
    await clock.advance(59_999);
    expect(states(r).a).toBe("loaded");
    await clock.advance(1);
    expect(states(r).a).toBe("unloaded");

    (await r.acquire("b", 0)).release();
    await settle();
    expect(states(r).b).toBe("unloaded");

    (await r.acquire("c", -1)).release();
    await clock.advance(365 * 24 * 3600 * 1000);
    expect(states(r).c).toBe("loaded");
    expect(r.statusOf("c").expiresAt).toBeNull();
    expect(clock.pending).toBe(0);
  });

  test("unload: at once when idle, after the last lease when in use", async () => {
    const log: string[] = [];
    const r = registry([{ name: "a", file: "a.gguf", aliases: ["alpha"], source: source("a", 10 * MB, log) }], 100);
    const lease = await r.acquire("alpha");
    expect(lease.name).toBe("a");
    expect(await r.unload("a")).toBe(true);
    expect(states(r).a).toBe("loaded");
    lease.release();
    await settle();
    expect(states(r).a).toBe("unloaded");
    expect(lease.model.closed).toBe(true);
    expect(await r.unload("a")).toBe(false);
  });

  test("a model whose load fails answers with its error; the others keep serving; it is tried again", async () => {
    const log: string[] = [];
    const r = registry([{ name: "bad", file: "bad.gguf", source: source("bad", 10 * MB, log, { fail: true }) }, { name: "good", file: "good.gguf", source: source("good", 10 * MB, log) }], 100);
    const e = await refusal(r.acquire("bad"));
    expect(e.status).toBe(500);
    expect(e.message).toContain("model 'bad' failed to load: bad: not a GGUF file");
    expect(r.statusOf("bad").state).toBe("failed");
    expect(r.statusOf("bad").inFlight).toBe(0);
    expect(r.usedBytes).toBe(0);
    (await r.acquire("good")).release();
    expect(states(r)).toEqual({ bad: "failed", good: "loaded" });
    await refusal(r.acquire("bad"));
    expect(log.filter((l) => l === "load bad").length).toBe(2);
  });

  test("unknown names are 404; ollama's :latest tag is optional either way", async () => {
    const r = registry([{ name: "a", file: "a.gguf", source: source("a", 10 * MB, []) }, { name: "b:latest", file: "b:latest.gguf", source: source("b", 10 * MB, []) }], 100);
    expect(r.resolve("a:latest")).toBe("a");
    expect(r.resolve("b")).toBe("b:latest");
    expect(r.resolve("c")).toBeNull();
    const e = await refusal(r.acquire("c"));
    expect(e.status).toBe(404);
    expect(e.code).toBe("model_not_found");
  });

  test("a model measured larger than estimated makes idle models give up the difference", async () => {
    const log: string[] = [];
    const r = registry([{ name: "a", file: "a.gguf", source: source("a", 40 * MB, log) }, { name: "b", file: "b.gguf", source: source("b", 40 * MB, log, { measured: 70 * MB }) }], 100);
    (await r.acquire("a")).release();
    (await r.acquire("b")).release();
    expect(states(r)).toEqual({ a: "unloaded", b: "loaded" });
    expect(r.usedBytes).toBe(70 * MB);
  });
});

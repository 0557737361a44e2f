/**
 * The models one server can serve, loaded on first use within a memory budget. Each request
 * holds a lease on its model from the time it names it to the end of its response; a model is
 * loaded when a lease asks for it (requests arriving while it loads wait for that load, at most
 * `maxWaiting` of them together), and unloaded
 *
 * - least recently used first, by memory: when a model to load does not fit beside the loaded
 *   ones, idle models (no lease) are unloaded, oldest use first, until it does; never one with a
 *   lease, never a pinned one; with no idle model left to unload, the load waits for a lease to end;
 * - when its keep_alive runs out (ollama's semantics: the last request's, else the model's preset,
 *   else the server's default; negative: never; 0: as soon as its last lease ends);
 * - when asked (`unload`: at once, or when its last lease ends).
 *
 * A model that cannot fit even alone (beside the pinned ones) is refused before anything is
 * unloaded, with what it needs and the budget. A model whose load fails is marked failed (its
 * requests get the error; the next request tries again) and the others keep serving. Time and
 * timers come from a Clock, so tests move time by hand.
 *
 * Generic over what a loaded model is (T): the server's is an LLM, the registry's own tests use
 * stand-ins, and what a model costs is told by its source (estimated before the load, measured after).
 */
import { ApiError } from "../api-error.ts";
import type { Clock } from "./clock.ts";

/** How to bring one model into memory and out again. */
export interface ModelSource<T> {
  /** Bytes the model will hold once loaded, from its file and options (before loading anything). */
  estimateBytes(): number;
  load(): Promise<T>;
  /** Bytes a loaded model holds (measured). */
  bytesOf(model: T): number;
  /** Releases the model (after writing what must survive it, such as its disk KV blocks). */
  unload(model: T): Promise<void>;
}

export interface RegisteredModel<T> {
  name: string;
  /** The model's file (what listings read of a model not loaded). */
  file: string;
  /** Other names requests may use. */
  aliases?: readonly string[];
  /** Loaded at start, never unloaded by memory pressure or keep_alive. */
  pinned?: boolean;
  /** The model's own keep_alive in ms (the preset's); absent: the server's default. */
  keepAliveMs?: number;
  source: ModelSource<T>;
}

export type ModelState = "unloaded" | "loading" | "loaded" | "failed";

export interface RegistryOptions {
  /** Bytes all loaded models may hold together. */
  budgetBytes: number;
  /** keep_alive of a request that gives none and a model without its own, ms (negative: never unload). */
  defaultKeepAliveMs: number;
  /** Requests that may wait together for models being loaded (past it: 429). */
  maxWaiting: number;
  clock: Clock;
  /** Told when a model is loaded, unloaded or fails to load (a log line). */
  onEvent?: (line: string) => void;
}

/** What the listing routes say of a model. */
export interface ModelStatus<T> {
  name: string;
  file: string;
  aliases: readonly string[];
  state: ModelState;
  pinned: boolean;
  /** Bytes held when loaded (measured); otherwise the estimate, or null when it could not be made (a bad file). */
  bytes: number | null;
  /** Leases held now (requests in flight, and waiting for its load). */
  inFlight: number;
  /** When it will be unloaded if no request comes (ms since the epoch); null: never, or not loaded. */
  expiresAt: number | null;
  loadedAt: number | null;
  /** Times it has been loaded. */
  loads: number;
  /** Why its last load failed (state "failed"). */
  error: Error | null;
  model: T | null;
}

/** A request's hold on a loaded model: the model stays loaded until release() (called once; more calls do nothing). */
export interface Lease<T> {
  readonly name: string;
  readonly model: T;
  release(): void;
}

interface Entry<T> {
  readonly spec: RegisteredModel<T>;
  state: ModelState;
  model: T | null;
  /** Bytes counted against the budget: a loaded model's measured size, a loading one's estimate. */
  heldBytes: number;
  estimate: number | null;
  loading: Promise<void> | null;
  unloading: Promise<void> | null;
  inFlight: number;
  /** Use count at its last use (least recently used first). */
  lastUsed: number;
  loadedAt: number | null;
  loads: number;
  error: Error | null;
  /** The keep_alive the last request gave (ms), or null when it gave none. */
  requestedKeepAliveMs: number | null;
  expiresAt: number | null;
  cancelExpiry: (() => void) | null;
  unloadWhenIdle: boolean;
}

export class ModelRegistry<T> {
  private readonly entries: Entry<T>[] = [];
  private readonly byName = new Map<string, Entry<T>>();
  /** Loads waiting for memory to be freed (a lease ending, an unload finishing). */
  private memoryWaiters: (() => void)[] = [];
  /** Requests waiting for a model being loaded. */
  private waiting = 0;
  /** Counts uses, for least recently used order (two uses in one millisecond stay ordered). */
  private uses = 0;

  constructor(models: readonly RegisteredModel<T>[], private readonly opts: RegistryOptions) {
    for (const spec of models) {
      const entry: Entry<T> = {
        spec, state: "unloaded", model: null, heldBytes: 0, estimate: null, loading: null, unloading: null, inFlight: 0, lastUsed: 0, loadedAt: null, loads: 0,
        error: null, requestedKeepAliveMs: null, expiresAt: null, cancelExpiry: null, unloadWhenIdle: false,
      };
      for (const name of [spec.name, ...(spec.aliases ?? [])]) {
        if (this.byName.has(name)) throw new Error(`two models are named '${name}'`);
        this.byName.set(name, entry);
      }
      this.entries.push(entry);
    }
  }

  get budgetBytes(): number {
    return this.opts.budgetBytes;
  }

  /** Bytes held now by loaded and loading models. */
  get usedBytes(): number {
    return this.entries.reduce((sum, e) => sum + e.heldBytes, 0);
  }

  /** The model's own name for `requested` (its name or an alias, with or without ollama's `:latest`), or null. */
  resolve(requested: string): string | null {
    return this.find(requested)?.spec.name ?? null;
  }

  private find(requested: string): Entry<T> | null {
    const exact = this.byName.get(requested);
    if (exact !== undefined) return exact;
    const untagged = requested.endsWith(":latest") ? requested.slice(0, -":latest".length) : `${requested}:latest`;
    return this.byName.get(untagged) ?? null;
  }

  private entry(requested: string): Entry<T> {
    const e = this.find(requested);
    if (e === null) throw new ApiError(404, `The model '${requested}' does not exist on this server (GET /v1/models lists them)`, "not_found_error", "model", "model_not_found");
    return e;
  }

  /**
   * A lease on `requested`, loading it first when it is not loaded (waiting for its load when
   * another request started it). `keepAliveMs` is the request's keep_alive: as in ollama, each
   * request sets how long the model stays loaded after it, one that gives none the model's
   * preset or the server's default.
   */
  async acquire(requested: string, keepAliveMs?: number): Promise<Lease<T>> {
    const e = this.entry(requested);
    e.requestedKeepAliveMs = keepAliveMs ?? null;
    e.inFlight++;
    this.clearExpiry(e);
    e.unloadWhenIdle = false;
    try {
      await this.ensureLoaded(e);
    } catch (err) {
      this.release(e);
      throw err;
    }
    e.lastUsed = ++this.uses;
    let released = false;
    return {
      name: e.spec.name,
      model: e.model!,
      release: () => {
        if (released) return;
        released = true;
        this.release(e);
      },
    };
  }

  /** Load `requested` now (llama-server's POST /models/load) without holding it. */
  async load(requested: string): Promise<void> {
    (await this.acquire(requested)).release();
  }

  /**
   * Unload `requested` (POST /models/unload, keep_alive 0 with no prompt): at once when no
   * request holds it, else when the last one ends. Returns whether it was loaded (or loading).
   */
  async unload(requested: string): Promise<boolean> {
    const e = this.entry(requested);
    if (e.state !== "loaded" && e.state !== "loading") return false;
    if (e.inFlight > 0) {
      e.unloadWhenIdle = true;
      return true;
    }
    await this.unloadEntry(e, "unloaded on request");
    return true;
  }

  /** Loads the pinned models (at start), each tried; the first failure is thrown once all were. */
  async loadPinned(): Promise<void> {
    let failure: unknown = null;
    for (const e of this.entries) {
      if (e.spec.pinned === true) await this.load(e.spec.name).catch((err: unknown) => (failure ??= err));
    }
    if (failure !== null) throw failure;
  }

  /** Every model, in the order registered. */
  list(): ModelStatus<T>[] {
    return this.entries.map((e) => this.status(e));
  }

  /** The status of `requested` (404 when it is none of the models). */
  statusOf(requested: string): ModelStatus<T> {
    return this.status(this.entry(requested));
  }

  private status(e: Entry<T>): ModelStatus<T> {
    return {
      name: e.spec.name, file: e.spec.file, aliases: e.spec.aliases ?? [], state: e.state, pinned: e.spec.pinned === true,
      bytes: e.state === "loaded" ? e.heldBytes : e.estimate, inFlight: e.inFlight, expiresAt: e.state === "loaded" ? e.expiresAt : null,
      loadedAt: e.loadedAt, loads: e.loads, error: e.error, model: e.model,
    };
  }

  /** The keep_alive in force for `e`, ms (negative: never). */
  keepAliveOf(requested: string): number {
    return this.keepAlive(this.entry(requested));
  }

  private keepAlive(e: Entry<T>): number {
    return e.requestedKeepAliveMs ?? e.spec.keepAliveMs ?? this.opts.defaultKeepAliveMs;
  }

  /** Unloads every model (the server is stopping); requests still holding one keep it until they end. */
  async closeAll(): Promise<void> {
    await Promise.allSettled(this.entries.map(async (e) => {
      if (e.loading !== null) await e.loading.catch(() => {});
      if (e.state === "loaded") await this.unloadEntry(e, "unloaded: the server is stopping");
    }));
  }

  private async ensureLoaded(e: Entry<T>): Promise<void> {
    for (;;) {
      if (e.unloading !== null) {
        await e.unloading;
        continue;
      }
      if (e.state === "loaded") return;
      if (e.loading === null) e.loading = this.startLoad(e);
      if (this.waiting >= this.opts.maxWaiting) {
        throw new ApiError(429, `${this.waiting} requests are waiting for models to load (--max-queue ${this.opts.maxWaiting}); retry later`, "rate_limit_error", null, "too_many_waiting", { "Retry-After": "1" });
      }
      this.waiting++;
      try {
        await e.loading;
      } finally {
        this.waiting--;
      }
    }
  }

  private async startLoad(e: Entry<T>): Promise<void> {
    e.state = "loading";
    e.error = null;
    try {
      const need = (e.estimate ??= e.spec.source.estimateBytes());
      const pinned = this.entries.filter((o) => o !== e && o.spec.pinned === true).reduce((sum, o) => sum + Math.max(o.heldBytes, o.state === "loaded" ? 0 : o.estimate ?? 0), 0);
      if (need + pinned > this.opts.budgetBytes) throw tooLarge(e.spec.name, need, this.opts.budgetBytes, pinned);
      await this.makeRoom(e, need);
      const model = await e.spec.source.load();
      e.model = model;
      e.heldBytes = e.spec.source.bytesOf(model);
      e.state = "loaded";
      e.loadedAt = this.opts.clock.now();
      e.loads++;
      this.opts.onEvent?.(`loaded ${e.spec.name} (${mib(e.heldBytes)}; ${mib(this.usedBytes)} of ${mib(this.opts.budgetBytes)} in use)`);
      // Measured larger than estimated: idle models make room for the difference.
      if (this.usedBytes > this.opts.budgetBytes) await this.evictIdle(e, 0);
    } catch (err) {
      if (err instanceof ApiError && err.code === TOO_LARGE) {
        // Refused before loading: the file is not at fault.
        e.state = "unloaded";
        e.heldBytes = 0;
        throw err;
      }
      e.state = "failed";
      e.heldBytes = 0;
      e.model = null;
      e.error = err instanceof Error ? err : new Error(String(err));
      this.opts.onEvent?.(`${e.spec.name} failed to load: ${e.error.message.split("\n")[0]}`);
      this.wakeMemoryWaiters();
      throw err instanceof ApiError ? err : loadFailed(e.spec.name, e.error);
    } finally {
      e.loading = null;
    }
  }

  /**
   * Unloads idle models, least recently used first, until `need` more bytes fit, then holds them
   * for `e` (in the same turn as the check, so two loads never count the same free bytes); waits
   * for leases to end when no model is idle.
   */
  private async makeRoom(e: Entry<T>, need: number): Promise<void> {
    while (this.usedBytes + need > this.opts.budgetBytes) {
      if (await this.evictIdle(e, need)) continue;
      await new Promise<void>((resolve) => this.memoryWaiters.push(resolve));
    }
    e.heldBytes = need;
  }

  /** Unloads the least recently used idle model other than `keep` when `need` bytes do not fit; whether one was. */
  private async evictIdle(keep: Entry<T>, need: number): Promise<boolean> {
    if (this.usedBytes + need <= this.opts.budgetBytes) return false;
    const idle = this.entries
      .filter((o) => o !== keep && o.state === "loaded" && o.unloading === null && o.inFlight === 0 && o.spec.pinned !== true)
      .sort((a, b) => a.lastUsed - b.lastUsed);
    const victim = idle[0];
    if (victim === undefined) return false;
    await this.unloadEntry(victim, `evicted to make room for ${keep.spec.name}`);
    return true;
  }

  private release(e: Entry<T>): void {
    e.inFlight--;
    e.lastUsed = ++this.uses;
    if (e.inFlight === 0 && e.state === "loaded") this.afterLastLease(e);
    this.wakeMemoryWaiters();
  }

  /** A model's last lease ended: unload it now (keep_alive 0, or asked to), or when its keep_alive runs out. */
  private afterLastLease(e: Entry<T>): void {
    const pinned = e.spec.pinned === true;
    const keepAlive = this.keepAlive(e);
    if (e.unloadWhenIdle || (!pinned && keepAlive === 0)) {
      void this.unloadEntry(e, e.unloadWhenIdle ? "unloaded on request" : "unloaded: keep_alive 0");
      return;
    }
    if (pinned || keepAlive < 0) return;
    e.expiresAt = this.opts.clock.now() + keepAlive;
    e.cancelExpiry = this.opts.clock.schedule(keepAlive, () => {
      e.cancelExpiry = null;
      if (e.inFlight === 0 && e.state === "loaded") void this.unloadEntry(e, "unloaded: keep_alive expired");
    });
  }

  private clearExpiry(e: Entry<T>): void {
    e.cancelExpiry?.();
    e.cancelExpiry = null;
    e.expiresAt = null;
  }

  private unloadEntry(e: Entry<T>, why: string): Promise<void> {
    if (e.unloading !== null) return e.unloading;
    const model = e.model;
    if (model === null) return Promise.resolve();
    this.clearExpiry(e);
    e.unloadWhenIdle = false;
    e.unloading = (async () => {
      try {
        await e.spec.source.unload(model);
      } catch (err) {
        this.opts.onEvent?.(`${e.spec.name}: unloading failed: ${(err as Error).message}`);
      } finally {
        e.model = null;
        e.state = "unloaded";
        e.heldBytes = 0;
        e.unloading = null;
        this.opts.onEvent?.(`${why}: ${e.spec.name}`);
        this.wakeMemoryWaiters();
      }
    })();
    return e.unloading;
  }

  private wakeMemoryWaiters(): void {
    const waiters = this.memoryWaiters;
    this.memoryWaiters = [];
    for (const wake of waiters) wake();
  }
}

const TOO_LARGE = "model_exceeds_memory_budget";

/** The 400 of a model that cannot fit even alone (beside the pinned models). */
function tooLarge(name: string, need: number, budget: number, pinned: number): ApiError {
  const beside = pinned > 0 ? ` (${mib(pinned)} of it held by pinned models)` : "";
  return new ApiError(
    400, `model '${name}' needs ${mib(need)}, more than the memory budget of ${mib(budget)}${beside} (--memory-budget; a smaller --ctx-size or --kv-cache-mb in its preset lowers the need)`,
    "invalid_request_error", "model", TOO_LARGE,
  );
}

function loadFailed(name: string, err: Error): ApiError {
  return new ApiError(500, `model '${name}' failed to load: ${err.message.split("\n")[0]}`, "server_error", null, "model_load_failed");
}

export function mib(bytes: number): string {
  return `${(bytes / 2 ** 20).toFixed(1)} MiB`;
}

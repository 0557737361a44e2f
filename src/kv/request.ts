/**
 * One generation request as the scheduler and the KV cache manager see it: its tokens so far and
 * what isolates its cached KV from other requests' (LoRA adapter, multimodal items, cache salt).
 */
import { InputError } from "../errors.ts";

/** A multimodal item (image, audio…) whose placeholder tokens cover prompt positions [offset, offset + length). */
export interface MultimodalItem {
  /** Content identity of the item (e.g. a hash of the image bytes): equal ids mean equal embeddings. */
  readonly id: string;
  readonly offset: number;
  readonly length: number;
  /**
   * The rows that stand in for its placeholder tokens at the model's input (an image's encoder
   * output, length x the model's width), carried for the engine; the hash reads only id, offset, length.
   */
  readonly rows?: Float32Array;
  /** Its tokens attend to each other in both directions (Gemma 3's images): a step computes them together. */
  readonly bidirectional?: boolean;
}

export interface RequestOptions {
  id: string;
  promptTokenIds: readonly number[];
  /** Only requests with the same salt share cached KV blocks (multi-tenant isolation). Empty string = none. */
  cacheSalt?: string;
  /** LoRA adapter the request runs with; its KV is only shared with requests of the same adapter. Empty string = none. */
  loraName?: string;
  mmItems?: readonly MultimodalItem[];
}

export class Request {
  readonly id: string;
  readonly promptTokenIds: readonly number[];
  readonly cacheSalt: string | null;
  readonly loraName: string | null;
  /** Sorted by offset. */
  readonly mmItems: readonly MultimodalItem[];
  /** Tokens whose KV is in the cache (cache hits included); the scheduler advances it after each step. */
  numComputedTokens = 0;
  /**
   * Prompt tokens found in the prefix cache when the request was first admitted (the `cached_tokens`
   * usage field); set by KVCacheManager.allocateSlots, null until then. Re-admission after a
   * preemption does not change it.
   */
  numCachedTokens: number | null = null;
  /**
   * Speculative decoding: tokens proposed to follow the known ones, not yet verified. The scheduler
   * may run some of them after the request's last token; they are never among allTokenIds, so no
   * block is ever full, or hashed, with them.
   */
  draftTokenIds: readonly number[] = [];
  /** Of numCachedTokens, the tokens a second tier (the disk) supplied; set with it. */
  numTierCachedTokens: number | null = null;

  private readonly outputs: number[] = [];
  private readonly tokens: number[];

  constructor(opts: RequestOptions) {
    if (typeof opts.id !== "string" || opts.id.length === 0) throw new InputError("request id must be a non-empty string");
    if (opts.promptTokenIds.length === 0) throw new InputError(`request ${opts.id}: empty prompt`);
    checkTokenIds(opts.id, opts.promptTokenIds);
    this.id = opts.id;
    this.promptTokenIds = opts.promptTokenIds.slice();
    this.tokens = opts.promptTokenIds.slice();
    this.cacheSalt = opts.cacheSalt ? opts.cacheSalt : null;
    this.loraName = opts.loraName ? opts.loraName : null;
    const items = (opts.mmItems ?? []).map((item): MultimodalItem => ({ ...item }));
    for (const item of items) {
      const fits = Number.isInteger(item.offset) && Number.isInteger(item.length) && item.offset >= 0 && item.length > 0;
      if (!fits || item.offset + item.length > this.tokens.length) {
        throw new InputError(
          `request ${opts.id}: multimodal item ${item.id} at [${item.offset}, ${item.offset + item.length}) is not inside the ${this.tokens.length}-token prompt`,
        );
      }
    }
    items.sort((a, b) => a.offset - b.offset);
    this.mmItems = items;
  }

  /** Prompt plus output tokens. */
  get numTokens(): number {
    return this.tokens.length;
  }

  get numPromptTokens(): number {
    return this.promptTokenIds.length;
  }

  /** Generated tokens, in order. */
  get outputTokenIds(): readonly number[] {
    return this.outputs;
  }

  /** Prompt then output tokens; a live view (no copy), indexed by token position. */
  get allTokenIds(): readonly number[] {
    return this.tokens;
  }

  appendOutputTokenIds(ids: readonly number[]): void {
    checkTokenIds(this.id, ids);
    for (const id of ids) {
      this.outputs.push(id);
      this.tokens.push(id);
    }
  }
}

function checkTokenIds(requestId: string, ids: readonly number[]): void {
  for (let i = 0; i < ids.length; i++) {
    const id = ids[i] as number;
    if (id >>> 0 !== id) throw new InputError(`request ${requestId}: token id ${id} at index ${i} is not a u32 integer`);
  }
}

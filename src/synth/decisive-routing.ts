/**
 * Decisive routing for random mixture-of-experts models (gguf-model-writer.ts, `decisiveRouting`):
 * weights made so that no rounding difference between two engines can change an expert choice, as
 * the shared reference files do it (shared/tools/llama-ref/make_refmodels.ts, routedEmbd).
 *
 * With random routers, some token's used-th and next router logits are a few thousandths apart in
 * almost every short run, and two correct engines that round differently (int8 activation blocks
 * on the CPU, f32 or f16 products on a GPU) then pick different experts: their logits differ by a
 * tenth of their range although neither is wrong. Here instead:
 *
 * - the last nLayers x count dimensions of the residual stream carry the token embedding unchanged
 *   through every layer: the rows of attn_output and ffn_down_exps that would write to them are
 *   zero (zero rows stay exactly zero in every quantized type);
 * - layer l's router reads only its own `count` of them, one per expert: its weight for expert e
 *   is ROUTER_SCALE / (std * ffn_norm[d]) at d = routeDim(l, e) and zero elsewhere (std: the
 *   embedding's), so that logit e is ROUTER_SCALE * (embedding[d] / std) / rms(residual): the
 *   token's largest entries in that block pick, and as each branch adds about 1 to the residual's
 *   rms, the logits spread over several units;
 * - each token's embedding keeps a gap of GAP embedding stds between its used-th and next entries
 *   in every block, so the choice holds by a wide margin whatever the residual's scale.
 */
import type { ModelConfig } from "../model/config.ts";

/** The router's logits are about this times the routing entry in embedding stds, over the residual's rms. */
const ROUTER_SCALE = 2;
/** The least gap, in embedding stds, between a token's used-th and next entries of each block. */
const GAP = 0.5;

type Experts = NonNullable<ModelConfig["experts"]>;

/** The residual dimension that carries layer l's routing entry for expert e. */
export function routeDim(c: ModelConfig, e: Experts, l: number, expert: number): number {
  return c.dim - c.nLayers * e.count + l * e.count + expert;
}

/** Why decisive routing cannot be made for this shape; null when it can. */
export function decisiveRoutingProblem(c: ModelConfig): string | null {
  const e = c.experts;
  if (e === undefined) return "decisive routing needs experts";
  if (e.used >= e.count) return `decisive routing needs fewer experts used (${e.used}) than there are (${e.count})`;
  if (c.nLayers * e.count >= c.dim) return `decisive routing needs ${c.nLayers} x ${e.count} routing dimensions, fewer than dim ${c.dim}`;
  return null;
}

/**
 * Widen each token's gap in `rows` (whole embedding rows of an embedding of std `std`), in place:
 * where a block's used-th and next largest entries are less than GAP * std apart, the used largest
 * are raised by the shortfall.
 */
export function spreadRoutingEntries(c: ModelConfig, e: Experts, rows: Float32Array, std: number): void {
  for (let at = 0; at < rows.length; at += c.dim) {
    for (let l = 0; l < c.nLayers; l++) {
      const dims = Array.from({ length: e.count }, (_, j) => at + routeDim(c, e, l, j)).sort((a, b) => rows[b]! - rows[a]! || a - b);
      const short = GAP * std - (rows[dims[e.used - 1]!]! - rows[dims[e.used]!]!);
      if (short > 0) for (let k = 0; k < e.used; k++) rows[dims[k]!] = rows[dims[k]!]! + short;
    }
  }
}

/** Zero the rows of `values` (rows of `cols`, the first `firstRow`) whose output index modulo dim is a routing dimension. */
export function zeroRoutingRows(c: ModelConfig, e: Experts, values: Float32Array, firstRow: number, cols: number): void {
  const first = c.dim - c.nLayers * e.count;
  for (let r = 0; r < values.length / cols; r++) {
    if ((firstRow + r) % c.dim >= first) values.fill(0, r * cols, (r + 1) * cols);
  }
}

/** Layer l's router [count][dim]: ROUTER_SCALE / (std * ffnNorm[d]) at its routing dimensions, zero elsewhere. */
export function routerWeights(c: ModelConfig, e: Experts, l: number, ffnNorm: Float32Array, std: number): Float32Array {
  const router = new Float32Array(e.count * c.dim);
  for (let j = 0; j < e.count; j++) {
    const d = routeDim(c, e, l, j);
    router[j * c.dim + d] = ROUTER_SCALE / (std * ffnNorm[d]!);
  }
  return router;
}

/**
 * Reproducible random weights for llama2.c-shaped models, for benchmarks and tests.
 *
 * The same (config, seed, options) always gives the same weights on every machine: the generator is
 * xoshiro128** (src/util/random.ts), and tensors are filled in a fixed order (the field order of
 * Llama2cWeights). Values are approximately normal (a sum of four uniforms), with fan-in scaling so a
 * deep model stays numerically healthy: every matrix has std = scale / sqrt(its input width), the
 * embedding and classifier std = scale / sqrt(dim), RMSNorm gains are 1 + small noise.
 */
import { InputError } from "../errors.ts";
import type { ModelConfig } from "../model/config.ts";
import { checkLlama2cConfig, llama2cTensorSizes, type Llama2cWeights } from "./llama2c-writer.ts";
import { Xoshiro128 } from "../util/random.ts";

// ----------------------------------------------------------------------------
// Random weights

export interface RandomWeightsOptions {
  /** Tie the classifier to the token embedding (wcls = null). Default: config.sharedClassifier. */
  sharedClassifier?: boolean;
  /** Multiplies every matrix's standard deviation (default 1). */
  scale?: number;
  /** Standard deviation of the noise around 1 in the RMSNorm gains (default 0.05). */
  normNoise?: number;
}

/** Random weights for `config`; see the file comment for the distribution and reproducibility. */
export function randomWeights(config: ModelConfig, seed: number, opts: RandomWeightsOptions = {}): Llama2cWeights {
  checkLlama2cConfig(config);
  const shared = opts.sharedClassifier ?? config.sharedClassifier;
  const scale = opts.scale ?? 1;
  const normNoise = opts.normNoise ?? 0.05;
  if (!(scale > 0) || !(normNoise >= 0)) throw new InputError(`randomWeights: bad scale ${scale} or normNoise ${normNoise}`);
  const sizes = llama2cTensorSizes(config);
  const L = config.nLayers;
  const rng = new Xoshiro128(seed);
  const matrix = (length: number, fanIn: number): Float32Array => {
    const a = new Float32Array(length);
    rng.fillNormalish(a, 0, scale / Math.sqrt(fanIn));
    return a;
  };
  const gains = (length: number): Float32Array => {
    const a = new Float32Array(length);
    rng.fillNormalish(a, 1, normNoise);
    return a;
  };
  // Object literal order is evaluation order, which fixes the order tensors consume the stream.
  return {
    tokenEmbedding: matrix(sizes.tokenEmbedding, config.dim),
    rmsAtt: gains(L * sizes.norm),
    wq: matrix(L * sizes.wq, config.dim),
    wk: matrix(L * sizes.wk, config.dim),
    wv: matrix(L * sizes.wv, config.dim),
    wo: matrix(L * sizes.wo, config.dim),
    rmsFfn: gains(L * sizes.norm),
    w1: matrix(L * sizes.w1, config.dim),
    w2: matrix(L * sizes.w2, config.hiddenDim),
    w3: matrix(L * sizes.w3, config.dim),
    rmsFinal: gains(sizes.rmsFinal),
    wcls: shared ? null : matrix(sizes.wcls, config.dim),
  };
}

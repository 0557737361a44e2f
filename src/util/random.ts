/**
 * A small, fast, seedable random generator: the same seed gives the same stream on every machine.
 * Used for reproducible random weights and for each request's sampling stream.
 */

/** splitmix32: turns one 32-bit seed into well-mixed words for seeding xoshiro. */
function splitmix32(state: number): { next: () => number } {
  let s = state >>> 0;
  return {
    next(): number {
      s = (s + 0x9e3779b9) >>> 0;
      let z = s;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
      return (z ^ (z >>> 16)) >>> 0;
    },
  };
}

/** Mean and standard deviation of a sum of four independent uniforms on 0..65535. */
const SUM4_STD = Math.sqrt((4 * (65536 * 65536 - 1)) / 12);
const SUM4_MEAN = 4 * 32767.5;

/** xoshiro128** (Blackman & Vigna): fast, 128-bit state, good enough statistics for weights. */
export class Xoshiro128 {
  private s0: number;
  private s1: number;
  private s2: number;
  private s3: number;

  constructor(seed: number) {
    const mix = splitmix32(seed);
    this.s0 = mix.next();
    this.s1 = mix.next();
    this.s2 = mix.next();
    this.s3 = mix.next();
    if ((this.s0 | this.s1 | this.s2 | this.s3) === 0) this.s0 = 1; // the all-zero state is a fixed point
  }

  /** Next uniform 32-bit unsigned integer. */
  nextUint32(): number {
    const result = Math.imul(rotl(Math.imul(this.s1, 5), 7), 9) >>> 0;
    const t = this.s1 << 9;
    this.s2 ^= this.s0;
    this.s3 ^= this.s1;
    this.s1 ^= this.s2;
    this.s0 ^= this.s3;
    this.s2 ^= t;
    this.s3 = rotl(this.s3, 11);
    return result;
  }

  /** Uniform in [0, 1). */
  nextFloat(): number {
    return this.nextUint32() / 4294967296;
  }

  /**
   * Fills `out` with mean + std * z, z approximately standard normal: the standardized sum of four 16-bit
   * uniforms (Irwin-Hall, bounded at ±3.46). The generator is inlined here because this loop produces
   * every weight of a 100M-parameter model.
   */
  fillNormalish(out: Float32Array, mean: number, std: number): void {
    let s0 = this.s0, s1 = this.s1, s2 = this.s2, s3 = this.s3;
    const factor = std / SUM4_STD;
    const offset = mean - SUM4_MEAN * factor;
    for (let i = 0; i < out.length; i++) {
      let sum = 0;
      for (let k = 0; k < 2; k++) {
        const r = Math.imul(rotl(Math.imul(s1, 5), 7), 9);
        const t = s1 << 9;
        s2 ^= s0;
        s3 ^= s1;
        s1 ^= s2;
        s0 ^= s3;
        s2 ^= t;
        s3 = (s3 << 11) | (s3 >>> 21);
        sum += (r & 0xffff) + (r >>> 16);
      }
      out[i] = offset + sum * factor;
    }
    this.s0 = s0;
    this.s1 = s1;
    this.s2 = s2;
    this.s3 = s3;
  }
}

function rotl(x: number, k: number): number {
  return (x << k) | (x >>> (32 - k));
}

/**
 * Non-finite logits: found before they are sampled (NaN weights give NaN logits, which argmax and
 * the sampler would turn into some token, silently), and explained once: the first weight tensor
 * of the file holding such a value (weight-scan.ts reads the file for it), or, when every weight
 * is finite, activations that overflowed.
 */
import type { Checkpoint } from "../model/checkpoint.ts";
import { firstNonFiniteTensor } from "../model/weight-scan.ts";
import { quoteFileText } from "../util/file-text.ts";

/** Whether a logit row is free of NaN and +infinity: one pass, as cheap as the argmax sampling does anyway. */
export function finiteLogits(row: Float32Array): boolean {
  for (let i = 0; i < row.length; i++) if (!(row[i]! < Infinity)) return false;
  return true;
}

export class NonFiniteDiagnosis {
  private problem: string | null = null;

  constructor(private readonly checkpoint: Checkpoint) {}

  /** Why the model computed NaN or infinite logits (the file is scanned on the first call only). */
  explain(): string {
    if (this.problem === null) {
      const tensor = firstNonFiniteTensor(this.checkpoint);
      this.problem = `${this.checkpoint.file}: the model computed NaN or infinite logits: ` +
        (tensor === null ? "every weight is finite, so its activations overflowed (a broken model?)" : `tensor ${quoteFileText(tensor)} holds NaN or infinite values`);
    }
    return this.problem;
  }
}

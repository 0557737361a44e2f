/**
 * Stop strings over streamed text. Text is released only once it can no longer turn out to be the
 * start of a stop string, so a stream never shows a stop string (or half of one) that the final
 * text will not contain.
 */
export class StopStringMatcher {
  private text = "";
  private released = 0;
  /** Set once a stop string appears; the text is cut before it. */
  stopped = false;

  constructor(private readonly stops: readonly string[]) {}

  /** Add decoded text; returns the text that can be shown now. */
  push(piece: string): string {
    if (this.stopped || piece.length === 0) return "";
    const from = Math.max(0, this.text.length - this.longestStop() + 1);
    this.text += piece;
    // Each match cuts the text, so a later stop string can only match earlier: the first one wins.
    for (const stop of this.stops) {
      const at = stop.length === 0 ? -1 : this.text.indexOf(stop, from);
      if (at >= 0) {
        this.text = this.text.slice(0, at);
        this.stopped = true;
      }
    }
    const safe = this.stopped ? this.text.length : this.text.length - this.heldSuffix();
    return this.release(safe);
  }

  /** Release everything held back (the generation ended for another reason). */
  flush(): string {
    return this.release(this.text.length);
  }

  /** All text so far, stop string excluded. */
  get fullText(): string {
    return this.text;
  }

  private release(upTo: number): string {
    if (upTo <= this.released) return "";
    const out = this.text.slice(this.released, upTo);
    this.released = upTo;
    return out;
  }

  private longestStop(): number {
    return this.stops.reduce((m, s) => Math.max(m, s.length), 0);
  }

  /** Length of the longest suffix of the text that is a proper prefix of some stop string. */
  private heldSuffix(): number {
    let held = 0;
    for (const stop of this.stops) {
      for (let n = Math.min(stop.length - 1, this.text.length); n > held; n--) {
        if (this.text.endsWith(stop.slice(0, n))) {
          held = n;
          break;
        }
      }
    }
    return held;
  }
}

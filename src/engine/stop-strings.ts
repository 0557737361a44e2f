/**
 * Stop strings over streamed text. Text is released only once it can no longer turn out to be the
 * start of a stop string, so a stream never shows a stop string (or half of one) that the final
 * text will not contain. A stop string matches only where `mayEndAt` lets the text end before it
 * (constrained output: where the constraint may end, docs/structured-output.md); elsewhere it is
 * text like any other.
 */
export class StopStringMatcher {
  private text = "";
  private released = 0;
  /** Set once a stop string appears; the text is cut before it. */
  stopped = false;

  constructor(
    private readonly stops: readonly string[],
    /** Whether the text may end at this index (asked once for each occurrence of a stop string). */
    private readonly mayEndAt: (at: number) => boolean = () => true,
  ) {}

  /** Add decoded text; returns the text that can be shown now. */
  push(piece: string): string {
    if (this.stopped || piece.length === 0) return "";
    const before = this.text.length;
    this.text += piece;
    const cut = this.firstStop(before);
    if (cut >= 0) {
      this.text = this.text.slice(0, cut);
      this.stopped = true;
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

  /** Where the earliest stop string that ends after `before` (in the new text) and may end the text starts; -1 if none. */
  private firstStop(before: number): number {
    let cut = -1;
    for (const stop of this.stops) {
      if (stop.length === 0) continue;
      for (let at = this.text.indexOf(stop, Math.max(0, before - stop.length + 1)); at >= 0 && (cut < 0 || at < cut); at = this.text.indexOf(stop, at + 1)) {
        if (this.mayEndAt(at)) {
          cut = at;
          break;
        }
      }
    }
    return cut;
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

/**
 * The text of a child's output stream as it arrives, for tests that act on what a process says
 * (its startup line, a prompt, a line acknowledging a signal) instead of sleeping and hoping.
 */

/**
 * The longest a test waits for a process to say something. It only stops a hung test: a model load
 * and a short reply take a few seconds even on a busy machine.
 */
export const SAY_WAIT_MS = 60_000;

export class StreamText {
  /** Everything read so far. */
  text = "";
  /** Why the stream broke off (a connection reset by a process that was killed); null while it reads or after a clean end. */
  error: Error | null = null;
  private ended = false;
  private readonly waiters = new Set<() => void>();
  /** The whole text, once the stream has ended (closed, or broken off: see `error`); never rejects. */
  readonly done: Promise<string>;

  constructor(stream: ReadableStream<Uint8Array>) {
    this.done = (async () => {
      const decoder = new TextDecoder();
      try {
        for await (const chunk of stream) {
          this.text += decoder.decode(chunk, { stream: true });
          for (const wake of this.waiters) wake();
        }
        this.text += decoder.decode();
      } catch (e) {
        this.error = e as Error;
      }
      this.ended = true;
      for (const wake of this.waiters) wake();
      return this.text;
    })();
  }

  /** Resolves as soon as `ready()` holds; fails, quoting the text so far, if the stream ends first or after SAY_WAIT_MS. */
  waitFor(ready: () => boolean, what: string): Promise<void> {
    return new Promise((resolve, reject) => {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const settle = (error: Error | null) => {
        this.waiters.delete(check);
        clearTimeout(timer);
        if (error === null) resolve();
        else reject(error);
      };
      const check = () => {
        if (ready()) settle(null);
        else if (this.ended) settle(new Error(`the output ended${this.error === null ? "" : ` (${this.error.message})`} before ${what}:\n${this.text}`));
      };
      timer = setTimeout(() => settle(new Error(`no ${what} after ${SAY_WAIT_MS / 1000} s:\n${this.text}`)), SAY_WAIT_MS);
      this.waiters.add(check);
      check();
    });
  }

  /** Resolves once `pattern` matches the text; its match. */
  async waitForMatch(pattern: RegExp): Promise<RegExpExecArray> {
    await this.waitFor(() => pattern.test(this.text), String(pattern));
    return pattern.exec(this.text)!;
  }

  /** Resolves once `pattern` (a /g regex) occurs at least `count` times. */
  waitForCount(pattern: RegExp, count: number): Promise<void> {
    return this.waitFor(() => (this.text.match(pattern) ?? []).length >= count, `${count} × ${pattern}`);
  }
}

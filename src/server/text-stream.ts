/**
 * A response body written piece by piece (the server-sent events of the OpenAI routes, the NDJSON
 * lines of ollama's): cancelled when the client goes away, `onCancel` is told so its request can
 * be aborted, and writes after that, or after close, are dropped.
 */
export class TextStream {
  readonly body: ReadableStream<Uint8Array>;
  private controller: ReadableStreamDefaultController<Uint8Array> | null = null;
  private closed = false;
  private readonly encoder = new TextEncoder();

  constructor(onCancel: () => void) {
    this.body = new ReadableStream<Uint8Array>({
      start: (controller) => {
        this.controller = controller;
      },
      cancel: () => {
        this.closed = true;
        onCancel();
      },
    });
  }

  get isClosed(): boolean {
    return this.closed;
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.controller?.close();
  }

  protected write(text: string): void {
    if (this.closed) return;
    this.controller?.enqueue(this.encoder.encode(text));
  }
}

/**
 * A server-sent-events response body: `data: {json}` events, `data: [DONE]` at the end. The
 * stream is cancelled when the client goes away; `onCancel` is told so its request can be
 * aborted, and writes after that are dropped.
 */
import { TextStream } from "./text-stream.ts";

export class SseStream extends TextStream {
  /** One `data:` event holding `value` as JSON. */
  send(value: unknown): void {
    this.write(`data: ${JSON.stringify(value)}\n\n`);
  }

  /** One named event (`event: NAME`, then its data as JSON), as Anthropic's and the Responses API's streams send them. */
  event(name: string, value: unknown): void {
    this.write(`event: ${name}\ndata: ${JSON.stringify(value)}\n\n`);
  }

  /** `data: [DONE]`, then the end of the body. */
  finish(): void {
    this.write("data: [DONE]\n\n");
    this.close();
  }

  /** The HTTP response carrying the stream. */
  response(): Response {
    return new Response(this.body, {
      headers: { "Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache", Connection: "keep-alive" },
    });
  }
}

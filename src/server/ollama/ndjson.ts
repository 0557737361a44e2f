/** A newline-delimited JSON response body (`application/x-ndjson`), ollama's streams: one JSON object a line. */
import { TextStream } from "../text-stream.ts";

export const NDJSON_TYPE = "application/x-ndjson";

export class NdjsonStream extends TextStream {
  /** One line holding `value` as JSON. */
  send(value: unknown): void {
    this.write(`${JSON.stringify(value)}\n`);
  }

  response(): Response {
    return new Response(this.body, { headers: { "Content-Type": NDJSON_TYPE, "Cache-Control": "no-cache" } });
  }
}

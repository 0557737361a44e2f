/**
 * Server-sent events, parsed incrementally (the WHATWG event-stream rules the OpenAI streaming API
 * uses): text arrives in chunks cut anywhere, even inside a line or between the CR and LF of one
 * line ending; a blank line ends an event; its `data:` lines are joined with "\n"; comment lines
 * (":") and other fields are skipped. Only `data` matters to an OpenAI client.
 */

export class SseParser {
  /** Text after the last complete line. */
  private pending = "";
  /** The current event's data lines. */
  private data: string[] = [];
  /** The last chunk ended with CR: a LF at the start of the next belongs to that line ending. */
  private afterCr = false;

  /** Feed a chunk of decoded text; the data of each event it completes, in order. */
  push(chunk: string): string[] {
    let text = chunk;
    if (this.afterCr && text.startsWith("\n")) text = text.slice(1);
    this.afterCr = text.endsWith("\r");
    const lines = (this.pending + text).split(/\r\n|\r|\n/);
    // The last piece is an unfinished line (empty when the text ended with a line ending).
    this.pending = lines.pop()!;
    const events: string[] = [];
    for (const line of lines) {
      const event = this.line(line);
      if (event !== null) events.push(event);
    }
    return events;
  }

  /** The stream ended: an event left without its blank line still counts (servers often omit the last one). */
  end(): string[] {
    const events: string[] = [];
    if (this.pending !== "") {
      const event = this.line(this.pending);
      if (event !== null) events.push(event);
      this.pending = "";
    }
    const last = this.line("");
    if (last !== null) events.push(last);
    return events;
  }

  /** One complete line; the event's data when the line is blank and the event has data lines. */
  private line(line: string): string | null {
    if (line === "") {
      if (this.data.length === 0) return null;
      const event = this.data.join("\n");
      this.data = [];
      return event;
    }
    if (line.startsWith(":")) return null;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    if (field !== "data") return null;
    const value = colon < 0 ? "" : line.slice(colon + 1);
    this.data.push(value.startsWith(" ") ? value.slice(1) : value);
    return null;
  }
}

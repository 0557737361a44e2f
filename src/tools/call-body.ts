/**
 * One call object being read inside a reply (call-object syntax of json-stream.ts), wired to the
 * sink: the call starts when its name is accepted, its arguments go out as they arrive. The raw
 * text it has taken is kept until the call starts, so that a parser can give it back as plain
 * text when it turns out to be no call.
 */
import { CallObjectReader } from "./json-stream.ts";
import type { ReplySink } from "./reply-sink.ts";

export class CallBody {
  private readonly reader: CallObjectReader;
  /** The text taken before the call started (given back as content if it never does). */
  raw = "";

  constructor(
    private readonly sink: ReplySink,
    /** Whether a function of this name may be called (an unknown name: no call). */
    accept: (name: string) => boolean,
  ) {
    this.reader = new CallObjectReader({
      name: (name) => {
        if (!accept(name)) return false;
        this.sink.callStart(name);
        this.raw = "";
        return true;
      },
      arguments: (text) => this.sink.callArguments(text),
    });
  }

  get started(): boolean {
    return this.reader.started;
  }

  get done(): boolean {
    return this.reader.done;
  }

  get invalid(): boolean {
    return this.reader.invalid;
  }

  /** Feeds one character; false when it was not taken (the object ended before it, or is no call). */
  feed(ch: string): boolean {
    const taken = this.reader.feed(ch);
    if (taken && !this.reader.started) this.raw += ch;
    return taken;
  }
}

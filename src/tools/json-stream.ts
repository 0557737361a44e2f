/**
 * JSON read as it streams, a character at a time: where a value ends (JsonValueScanner), and a
 * call object `{"name": "f", "arguments": {...}}` read into a call while it arrives
 * (CallObjectReader), so that a call's name is known as soon as it is written and its arguments
 * go out in pieces. The scanner checks structure only (brackets, strings, escapes); what it
 * accepts, JSON.parse decides where a value must be exact.
 */

/** What a character did to a value being scanned. */
export type ScanStep =
  /** Taken; the value goes on. */
  | "more"
  /** Taken, and it closed the value. */
  | "done"
  /** Not taken: the value had already ended before it (a number or literal, ended by a delimiter). */
  | "ended"
  /** Not taken: no JSON value goes on this way. */
  | "invalid";

const WHITESPACE = new Set([" ", "\t", "\n", "\r"]);
const SCALAR_CHAR = /[0-9A-Za-z+\-.]/;

export function isJsonWhitespace(ch: string): boolean {
  return WHITESPACE.has(ch);
}

/** The end of one JSON value, found character by character (leading whitespace is the caller's). */
export class JsonValueScanner {
  /** Open brackets, innermost last. */
  private readonly stack: string[] = [];
  private inString = false;
  private escaped = false;
  /** A number or literal (true, false, null) is being read at the top. */
  private scalar = false;
  private started = false;
  private finished = false;

  /** The first character of the value: `"`, `{`, `[`, a digit, `-`, or a literal's letter. */
  get kind(): "string" | "object" | "array" | "scalar" | null {
    return this.first;
  }

  private first: "string" | "object" | "array" | "scalar" | null = null;

  feed(ch: string): ScanStep {
    if (this.finished) return "ended";
    if (!this.started) return this.begin(ch);
    if (this.scalar) {
      if (SCALAR_CHAR.test(ch)) return "more";
      this.finished = true;
      return "ended";
    }
    if (this.inString) {
      if (this.escaped) this.escaped = false;
      else if (ch === "\\") this.escaped = true;
      else if (ch === '"') {
        this.inString = false;
        if (this.stack.length === 0) return this.close();
      }
      return "more";
    }
    if (ch === '"') this.inString = true;
    else if (ch === "{" || ch === "[") this.stack.push(ch);
    else if (ch === "}" || ch === "]") {
      if (this.stack.pop() !== (ch === "}" ? "{" : "[")) return "invalid";
      if (this.stack.length === 0) return this.close();
    }
    return "more";
  }

  /** The value ended at the end of the text (a number or literal needs no delimiter there). */
  get complete(): boolean {
    return this.finished || (this.scalar && this.started);
  }

  private begin(ch: string): ScanStep {
    this.started = true;
    if (ch === '"') {
      this.first = "string";
      this.inString = true;
    } else if (ch === "{" || ch === "[") {
      this.first = ch === "{" ? "object" : "array";
      this.stack.push(ch);
    } else if (/[-0-9tfn]/.test(ch)) {
      this.first = "scalar";
      this.scalar = true;
    } else {
      return "invalid";
    }
    return "more";
  }

  private close(): ScanStep {
    this.finished = true;
    return "done";
  }
}

/** What a call object reader tells its owner. */
export interface CallObjectEvents {
  /** The function's name, as soon as its string closes; false rejects the object (it is not a call). */
  name(name: string): boolean;
  /** The next piece of the arguments' JSON text (only after `name`). */
  arguments(text: string): void;
}

/** Keys a call object may have: the name, the arguments (Llama 3 says "parameters"), and ones read and ignored. */
const ARGUMENT_KEYS = new Set(["arguments", "parameters"]);
const IGNORED_KEYS = new Set(["type", "id"]);

type CallState = "open" | "key-or-end" | "key" | "colon" | "value" | "after-value" | "done" | "invalid";

/**
 * A call object, `{"name": "f", "arguments": {...}}` (keys in any order; `parameters` for
 * `arguments`; `type` and `id` skipped), read a character at a time. The arguments' text is passed
 * on as it arrives once the name is known (held until then); arguments written as a JSON string
 * holding an object are passed on decoded, once whole. A call without arguments gets `{}`.
 */
export class CallObjectReader {
  private state: CallState = "open";
  private key = "";
  private keyEscaped = false;
  private value: JsonValueScanner | null = null;
  private valueText = "";
  /** The name, once known and accepted. */
  private named: string | null = null;
  private argsSeen = false;
  /** Arguments text that came before the name. */
  private heldArgs = "";

  constructor(private readonly events: CallObjectEvents) {}

  /** Whether the object has closed (`}`), a call with its name and arguments. */
  get done(): boolean {
    return this.state === "done";
  }

  /** Whether the text is no call object (or the name was rejected). */
  get invalid(): boolean {
    return this.state === "invalid";
  }

  /** Whether the name has been accepted (the call has started). */
  get started(): boolean {
    return this.named !== null;
  }

  /** Feeds one character; false when it was not taken (the object had ended, or it is invalid). */
  feed(ch: string): boolean {
    switch (this.state) {
      case "open":
        if (isJsonWhitespace(ch)) return true;
        return this.to(ch === "{" ? "key-or-end" : "invalid");
      case "key-or-end":
        if (isJsonWhitespace(ch)) return true;
        if (ch === '"') {
          this.key = "";
          return this.to("key");
        }
        if (ch === "}") return this.finish();
        return this.to("invalid");
      case "key":
        return this.readKey(ch);
      case "colon":
        if (isJsonWhitespace(ch)) return true;
        return this.to(ch === ":" ? "value" : "invalid");
      case "value":
        return this.readValue(ch);
      case "after-value":
        if (isJsonWhitespace(ch)) return true;
        if (ch === ",") return this.to("key-or-end");
        if (ch === "}") return this.finish();
        return this.to("invalid");
      case "done":
      case "invalid":
        return false;
    }
  }

  private to(state: CallState): boolean {
    this.state = state;
    return state !== "invalid";
  }

  private readKey(ch: string): boolean {
    if (this.keyEscaped) {
      this.keyEscaped = false;
      this.key += ch;
      return true;
    }
    if (ch === "\\") {
      this.keyEscaped = true;
      return true;
    }
    if (ch !== '"') {
      this.key += ch;
      return true;
    }
    if (this.key !== "name" && !ARGUMENT_KEYS.has(this.key) && !IGNORED_KEYS.has(this.key)) return this.to("invalid");
    this.value = null;
    this.valueText = "";
    return this.to("colon");
  }

  private readValue(ch: string): boolean {
    if (this.value === null) {
      if (isJsonWhitespace(ch)) return true;
      this.value = new JsonValueScanner();
      if (this.key === "name" && ch !== '"') return this.to("invalid");
    }
    const step = this.value.feed(ch);
    if (step === "invalid") return this.to("invalid");
    if (step === "ended") {
      if (!this.valueEnded()) return false;
      this.state = "after-value";
      return this.feed(ch);
    }
    this.valueText += ch;
    if (ARGUMENT_KEYS.has(this.key) && this.value.kind !== "string") this.passArguments(ch);
    if (step === "done") return this.valueEnded() && this.to("after-value");
    return true;
  }

  /** A value closed: a name is accepted or not, arguments written as a string are decoded. */
  private valueEnded(): boolean {
    const text = this.valueText;
    if (this.key === "name") {
      if (this.named !== null) return this.to("invalid");
      let name: unknown;
      try {
        name = JSON.parse(text);
      } catch {
        return this.to("invalid");
      }
      if (typeof name !== "string" || !this.events.name(name)) return this.to("invalid");
      this.named = name;
      if (this.heldArgs !== "") this.events.arguments(this.heldArgs);
      this.heldArgs = "";
      return true;
    }
    if (ARGUMENT_KEYS.has(this.key)) {
      if (this.argsSeen && this.value?.kind === "string") return this.to("invalid");
      this.argsSeen = true;
      if (this.value?.kind === "string") {
        let decoded: unknown;
        try {
          decoded = JSON.parse(text);
        } catch {
          return this.to("invalid");
        }
        this.passArguments(decoded as string);
      }
    }
    return true;
  }

  private passArguments(text: string): void {
    this.argsSeen = true;
    if (this.named === null) this.heldArgs += text;
    else this.events.arguments(text);
  }

  private finish(): boolean {
    if (this.named === null) return this.to("invalid");
    if (!this.argsSeen) this.events.arguments("{}");
    return this.to("done");
  }
}

/**
 * A reply's text read through a ReplyReader (src/tools/reply-reader.ts) as a front end reads it:
 * in pieces, its deltas kept, and the deltas joined the way a client joins them.
 */
import { expect } from "bun:test";
import { ReplyReader, type ReplyDelta, type ReplyMessage, type ReplySetup } from "../../src/tools/reply-reader.ts";

export type ReadMessage = Omit<ReplyMessage, "toolCalls"> & { toolCalls: { name: string; arguments: string }[] };

/** The reply read in the given pieces: the message (ids dropped) and every delta. */
export function read(setup: ReplySetup, pieces: readonly string[]): { message: ReadMessage; deltas: ReplyDelta[]; ids: string[] } {
  const reader = new ReplyReader(setup);
  const deltas = pieces.map((p) => reader.push(p));
  deltas.push(reader.end());
  const m = reader.message;
  return { message: { content: m.content, reasoning: m.reasoning, toolCalls: m.toolCalls.map((c) => ({ name: c.function.name, arguments: c.function.arguments })) }, deltas, ids: m.toolCalls.map((c) => c.id) };
}

/** Joins deltas into a message the way a client does (content, reasoning, calls by index). */
export function joined(deltas: readonly ReplyDelta[]): ReadMessage {
  const calls: { name: string; arguments: string }[] = [];
  let content = "";
  let reasoning = "";
  for (const d of deltas) {
    content += d.content;
    reasoning += d.reasoning;
    for (const c of d.toolCalls) {
      if (c.name !== undefined) {
        expect(c.index).toBe(calls.length);
        calls.push({ name: c.name, arguments: "" });
      }
      calls[c.index]!.arguments += c.arguments;
    }
  }
  return { content, reasoning, toolCalls: calls };
}

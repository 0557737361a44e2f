/**
 * Token ids of a rendered chat template, with control tokens taken from the template's own text
 * only: a user who types `<|im_start|>` gets those characters, never the control token.
 *
 * Method:
 * 1. Where each message's content lies in the rendering: the template is rendered a second time
 *    with every content replaced by a marker (private-use characters no template writes). The
 *    marker rendering gives the template's own text around each content (the literals); the
 *    real rendering must be those literals with one form of the content between them (the
 *    content as is, trimmed, or — Qwen3 — its part after `</think>`). Matching literal by literal
 *    from the start can never mistake template text for content, as a search for the content's
 *    text can (the content `<|im_start|>` would find the template's own header first).
 * 2. The control tokens of the template's text: each template stretch is tokenized with specials
 *    parsed; the control ids in it are found at their texts' positions.
 * 3. The text is cut at those control tokens only, and every piece between two of them is
 *    tokenized as a whole without specials, contents and template text together: this gives
 *    the ids the whole rendering gets with specials parsed (llama.cpp, transformers), except that
 *    control-token text inside a content stays text. Cutting at content boundaries instead would
 *    tokenize "[INST] Hello" as "[INST] " + "Hello", which no model was trained on.
 *
 * A template whose marker rendering does not line up with the real one (it branches on what a
 * content says) gets no content spans: that is safe only when no content holds control-token
 * text, and an error otherwise.
 */
import type { Tokenizer } from "../tokenizer/tokenizer.ts";
import { ChatTemplateError, type ChatMessage, type ChatTemplate } from "./jinja-template.ts";
import { appendAll } from "../util/append-all.ts";
import { tokenLimitOf, tooLong } from "../tokenizer/token-limit.ts";

/** A stretch [start, end) of rendered text that holds a message's content. */
export interface ContentSpan {
  start: number;
  end: number;
}

const MARK_OPEN = "\uE000";
const MARK_CLOSE = "\uE001";
const MARKER = /\uE000(\d+)\uE001/;

/** The forms a template may render a content in, most literal first. */
function renderedForms(content: string): string[] {
  const forms = [content, content.trim(), content.trimStart(), content.trimEnd()];
  const think = content.lastIndexOf("</think>");
  if (think >= 0) {
    const answer = content.slice(think + "</think>".length);
    forms.push(answer.replace(/^\n+/, ""), answer.trim());
  }
  return [...new Set(forms)];
}

/** Where one message's content lies in a rendering (an empty stretch where the form rendered is empty). */
interface LocatedContent {
  message: number;
  start: number;
  end: number;
}

/**
 * The content spans of `text` (the rendering of `messages`), or null when the marker rendering
 * `marked` does not line up with it.
 */
export function locateContents(text: string, marked: string, messages: readonly ChatMessage[]): ContentSpan[] | null {
  return locate(text, marked, messages)?.filter((c) => c.end > c.start).map(({ start, end }) => ({ start, end })) ?? null;
}

function locate(text: string, marked: string, messages: readonly ChatMessage[]): LocatedContent[] | null {
  const parts = marked.split(MARKER); // literal, index, literal, index, ..., literal
  if (!text.startsWith(parts[0]!)) return null;
  let at = parts[0]!.length;
  const located: LocatedContent[] = [];
  for (let p = 1; p < parts.length; p += 2) {
    const message = Number(parts[p]);
    const content = messages[message]?.content;
    if (content === undefined) return null;
    const after = parts[p + 1]!;
    const last = p + 2 >= parts.length;
    const form = renderedForms(content).find((f) =>
      last ? text.length === at + f.length + after.length && text.endsWith(after) && text.startsWith(f, at) : text.startsWith(f + after, at));
    if (form === undefined) return null;
    located.push({ message, start: at, end: at + form.length });
    at += form.length + after.length;
  }
  return at === text.length ? located : null;
}

/** Messages whose contents are markers, for the structure rendering. */
export function markedMessages(messages: readonly ChatMessage[]): ChatMessage[] {
  return messages.map((m, i) => ({ ...m, content: `${MARK_OPEN}${i}${MARK_CLOSE}` }));
}

/** The rendering with markers for contents; "" (lines up with nothing) when the template rejects markers. */
function markedRendering(template: ChatTemplate, messages: readonly ChatMessage[], addGenerationPrompt: boolean, extra: Record<string, unknown>): string {
  try {
    return template.render(markedMessages(messages), addGenerationPrompt, extra);
  } catch (e) {
    if (e instanceof ChatTemplateError) return "";
    throw e;
  }
}

/** Whether `text` holds the text of a control token (it tokenizes differently with specials parsed). */
function holdsControlText(tok: Tokenizer, text: string): boolean {
  const parsed = tok.encode(text, { parseSpecial: true, continuation: true });
  const plain = tok.encode(text, { continuation: true });
  return parsed.length !== plain.length || parsed.some((id, i) => id !== plain[i]);
}

/**
 * The content spans of a rendering: located through the marker rendering, or none when it does
 * not line up and no content holds control-token text (then every control token in the text is
 * the template's). Throws ChatTemplateError when it cannot keep control text in contents plain.
 * `extra`: the variables `text` was rendered with beyond the template's own.
 */
export function contentSpans(
  template: ChatTemplate, tok: Tokenizer, text: string, messages: readonly ChatMessage[], addGenerationPrompt: boolean, extra: Record<string, unknown> = {},
): ContentSpan[] {
  const unsafe = messages.some((m) => m.content.includes(MARK_OPEN) || m.content.includes(MARK_CLOSE));
  if (!unsafe) {
    const spans = locateContents(text, markedRendering(template, messages, addGenerationPrompt, extra), messages);
    if (spans !== null) return spans;
  }
  const risky = messages.findIndex((m) => holdsControlText(tok, m.content));
  if (risky >= 0) {
    throw new ChatTemplateError(template.source, `cannot tell message ${risky + 1}'s text from the template's own, and it holds control-token text`);
  }
  return [];
}

/**
 * The rendering of `messages` whose last message, an assistant's reply the client began, is to be
 * continued (prefill; transformers' continue_final_message): the whole conversation rendered
 * without a generation prompt and cut right after that message's content, so the prompt ends
 * inside the reply (no end-of-turn). Returns the text kept and its content spans. Throws
 * ChatTemplateError when the template does not render the message's content where it can be
 * found (it branches on what the content says, or drops it).
 */
export function continuedRendering(
  template: ChatTemplate, messages: readonly ChatMessage[], extra: Record<string, unknown> = {},
): { text: string; spans: ContentSpan[] } {
  const text = template.render(messages, false, extra);
  const unsafe = messages.some((m) => m.content.includes(MARK_OPEN) || m.content.includes(MARK_CLOSE));
  const located = unsafe ? null : locate(text, markedRendering(template, messages, false, extra), messages);
  const final = located?.findLast((c) => c.message === messages.length - 1);
  if (located === null || located === undefined || final === undefined) {
    throw new ChatTemplateError(template.source, "the last message's content cannot be found in the rendering, so the reply cannot continue it");
  }
  const spans = located.filter((c) => c.end > c.start && c.end <= final.end).map(({ start, end }) => ({ start, end }));
  return { text: text.slice(0, final.end), spans };
}

/** A control token the template wrote: its id and where its text lies. */
interface ControlAt {
  id: number;
  start: number;
  end: number;
}

/** The control tokens in text[start, end), template text only. */
function controlTokens(tok: Tokenizer, text: string, start: number, end: number, isControl: (id: number) => boolean): ControlAt[] {
  const stretch = text.slice(start, end);
  const found: ControlAt[] = [];
  let cursor = 0;
  // Ids that plain tokenization also gives are no control tokens: only the others need a check.
  const plain = new Set(tok.encode(stretch, { continuation: true }));
  for (const id of tok.encode(stretch, { parseSpecial: true, continuation: true })) {
    if (plain.has(id) || !isControl(id)) continue;
    const written = tok.tokenText(id);
    const at = stretch.indexOf(written, cursor);
    if (at < 0) continue;
    found.push({ id, start: start + at, end: start + at + written.length });
    cursor = at + written.length;
  }
  return found;
}

/**
 * Ids of text[from, end): control tokens where the template wrote them (outside `spans`), every
 * piece between them tokenized whole without specials. `from` > 0 continues text tokenized
 * before (no SentencePiece dummy prefix at its start).
 */
export function encodeRendered(tok: Tokenizer, text: string, spans: readonly ContentSpan[], from = 0): number[] {
  const controlCache = new Map<number, boolean>();
  const isControl = (id: number): boolean => {
    let known = controlCache.get(id);
    if (known === undefined) {
      const written = tok.tokenText(id);
      const parsed = written === "" ? [] : tok.encode(written, { parseSpecial: true, continuation: true });
      known = parsed.length === 1 && parsed[0] === id && holdsControlText(tok, written);
      controlCache.set(id, known);
    }
    return known;
  };
  const controls: ControlAt[] = [];
  let cursor = from;
  for (const span of spans) {
    if (span.end <= cursor) continue;
    if (span.start > cursor) appendAll(controls, controlTokens(tok, text, cursor, span.start, isControl));
    cursor = Math.max(cursor, span.end);
  }
  if (cursor < text.length) appendAll(controls, controlTokens(tok, text, cursor, text.length, isControl));

  const ids: number[] = [];
  let at = from;
  let afterControl = from === 0; // the start of the text, or right after a control token: SentencePiece's dummy prefix
  // A limited tokenizer's prompt is tokenized only until it is known to be over its limit.
  const limit = tokenLimitOf(tok, text);
  const checkLimit = (): void => {
    if (limit !== undefined && ids.length > limit) throw tooLong(`more than ${limit}`, limit);
  };
  const piece = (end: number): void => {
    if (end > at) appendAll(ids, tok.encode(text.slice(at, end), { continuation: !afterControl, stopAfter: limit === undefined ? undefined : Math.max(0, limit - ids.length) }));
    checkLimit();
  };
  for (const c of controls) {
    piece(c.start);
    ids.push(c.id);
    checkLimit();
    at = c.end;
    afterControl = true;
  }
  piece(text.length);
  return ids;
}

/**
 * A conversation in a model's Jinja chat template. The whole conversation is rendered for every
 * prompt (templates decide everything: system prompts, separators, generation prompts), and
 * tokenized so that it stays an exact token prefix of the next turn's:
 *
 * - The ids of the text rendered so far (the last prompt and the reply as generated) are kept;
 *   when the next rendering starts with that text, only the new part is tokenized after them.
 *   The reply's own ids are reused, never re-tokenized from its text.
 * - Control tokens come from the template's own text only (render-tokens.ts says how), so a
 *   user who types `<|im_start|>` gets those characters.
 * - A template that rewrites earlier turns (Qwen3 drops the reasoning of earlier replies, Llama 3
 *   trims them) breaks the prefix: the whole rendering is tokenized again, the prefix cache still
 *   serves the longest common block-aligned prefix, and this is said once on stderr.
 */
import type { Tokenizer } from "../tokenizer/tokenizer.ts";
import type { ChatTurn, Conversation } from "./conversation.ts";
import type { ChatMessage, ChatTemplate } from "./jinja-template.ts";
import { contentSpans, continuedRendering, encodeRendered, type ContentSpan } from "./render-tokens.ts";

export interface JinjaConversationOptions {
  addBos: boolean;
  system?: string | null;
  /** Told once when the template rewrites earlier turns. */
  onNote?: (line: string) => void;
}

export class JinjaConversation implements Conversation {
  readonly hasSystem = true;
  readonly continuesText = false;
  private messages: ChatMessage[] = [];
  private list: ChatTurn[] = [];
  private idList: number[] = [];
  /** The text idList stands for. */
  private rendered = "";
  private systemPrompt: string | null;
  /** The last prompt's text and ids (what commit extends with the reply). */
  private pending: { text: string; ids: number[] } | null = null;
  private warned = false;

  constructor(
    private readonly template: ChatTemplate,
    private readonly tok: Tokenizer,
    private readonly opts: JinjaConversationOptions,
  ) {
    this.systemPrompt = opts.system || null;
  }

  get name(): string {
    return `${this.template.source.split("/").pop()}'s chat template`;
  }

  get turns(): readonly ChatTurn[] {
    return this.list;
  }

  get ids(): readonly number[] {
    return this.idList;
  }

  get system(): string | null {
    return this.systemPrompt;
  }

  set system(text: string | null) {
    this.systemPrompt = text || null;
    this.rerender();
  }

  /** Messages with the system prompt first. */
  private withSystem(messages: readonly ChatMessage[]): ChatMessage[] {
    return this.systemPrompt === null ? [...messages] : [{ role: "system", content: this.systemPrompt }, ...messages];
  }

  /** Ids of a whole rendering, BOS first when the model wants it and the template did not write it. */
  private encodeAll(text: string, messages: readonly ChatMessage[], addGenerationPrompt: boolean): number[] {
    return this.encodeWithBos(text, contentSpans(this.template, this.tok, text, messages, addGenerationPrompt));
  }

  private encodeWithBos(text: string, spans: readonly ContentSpan[]): number[] {
    const ids = encodeRendered(this.tok, text, spans);
    const bos = this.tok.bosId;
    if (this.opts.addBos && bos !== null && ids[0] !== bos) ids.unshift(bos);
    return ids;
  }

  promptIds(user: string): number[] {
    const messages = this.withSystem([...this.messages, { role: "user", content: user }]);
    const text = this.template.render(messages, true);
    let ids: number[];
    if (this.idList.length > 0 && text.startsWith(this.rendered)) {
      const spans = contentSpans(this.template, this.tok, text, messages, true);
      ids = [...this.idList, ...encodeRendered(this.tok, text, spans, this.rendered.length)];
    } else {
      ids = this.encodeAll(text, messages, true);
      if (this.idList.length > 0 && !this.warned) {
        this.warned = true;
        let same = 0;
        while (same < ids.length && ids[same] === this.idList[same]) same++;
        this.opts.onNote?.(`the chat template rewrites earlier turns: ${same} of the conversation's ${this.idList.length} tokens are reused`);
      }
    }
    this.pending = { text, ids };
    return ids;
  }

  /**
   * The rendering of the conversation with `user` and the assistant's begun reply `partial`, cut
   * after `partial` (render-tokens.ts: continuedRendering). When it extends the prompt of `user`
   * (the template opens the reply as its generation prompt does), that prompt's ids are kept and
   * only the rest is tokenized, so the prefix cache serves the conversation so far.
   */
  prefillIds(user: string, partial: string): number[] {
    const prompt = this.promptIds(user);
    const messages = this.withSystem([...this.messages, { role: "user", content: user }, { role: "assistant", content: partial }]);
    const { text, spans } = continuedRendering(this.template, messages);
    const promptText = this.pending!.text;
    if (text.startsWith(promptText)) return [...prompt, ...encodeRendered(this.tok, text, spans, promptText.length)];
    return this.encodeWithBos(text, spans);
  }

  aloneIds(user: string): number[] {
    const messages = this.withSystem([{ role: "user", content: user }]);
    return this.encodeAll(this.template.render(messages, true), messages, true);
  }

  commit(user: string, replyIds: readonly number[], replyText: string): void {
    const prompt = this.pending ?? { text: "", ids: this.promptIds(user) };
    this.messages.push({ role: "user", content: user }, { role: "assistant", content: replyText });
    this.list.push({ user, reply: [...replyIds], replyText });
    this.idList = [...prompt.ids, ...replyIds];
    this.rendered = prompt.text + replyText;
    this.pending = null;
  }

  dropOldest(): ChatTurn | undefined {
    const turn = this.list.shift();
    if (turn === undefined) return undefined;
    this.messages.splice(0, 2);
    this.rerender();
    return turn;
  }

  reset(): void {
    this.messages = [];
    this.list = [];
    this.idList = [];
    this.rendered = "";
    this.pending = null;
  }

  /** Tokenize the conversation afresh (after its start changed). */
  private rerender(): void {
    if (this.messages.length === 0) {
      this.idList = [];
      this.rendered = "";
      return;
    }
    const messages = this.withSystem(this.messages);
    this.rendered = this.template.render(messages, false);
    this.idList = this.encodeAll(this.rendered, messages, false);
  }
}

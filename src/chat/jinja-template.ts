/**
 * A model's own chat template (`tokenizer.chat_template`, the Jinja text of its
 * tokenizer_config.json), rendered with @huggingface/jinja the way transformers'
 * apply_chat_template renders it: `messages`, `add_generation_prompt`, `bos_token`,
 * `eos_token`; `raise_exception` and `strftime_now` are the library's; no tools or documents.
 */
import { Template } from "@huggingface/jinja";
import { PagellmError } from "../errors.ts";

/** One message of a conversation. */
export interface ChatMessage {
  role: "system" | "user" | "assistant" | string;
  content: string;
}

/** A template that does not parse or does not render: names the model and carries the template's own message. */
export class ChatTemplateError extends PagellmError {
  override readonly exitCode = 2;
  constructor(source: string, problem: string) {
    super(`${source}: chat template: ${problem}`);
  }
}

export class ChatTemplate {
  private readonly template: Template;

  /** `source` names where the template came from (the model file, a .jinja file) in errors. */
  constructor(
    readonly text: string,
    readonly source: string,
    private readonly specials: { bosToken: string; eosToken: string },
    /** More variables for every rendering (--chat-template-kwargs: `enable_thinking` for Qwen3, ...). */
    private readonly variables: Readonly<Record<string, unknown>> = {},
  ) {
    try {
      this.template = new Template(text);
    } catch (e) {
      throw new ChatTemplateError(source, firstLine(e));
    }
  }

  /** The prompt text of `messages`; with `addGenerationPrompt`, ending where the assistant's reply starts. */
  render(messages: readonly ChatMessage[], addGenerationPrompt: boolean, extra: Record<string, unknown> = {}): string {
    try {
      return this.template.render({
        messages: messages.map((m) => ({ role: m.role, content: m.content })),
        add_generation_prompt: addGenerationPrompt,
        bos_token: this.specials.bosToken,
        eos_token: this.specials.eosToken,
        // raise_exception and strftime_now come with @huggingface/jinja's environment.
        ...this.variables,
        ...extra,
      });
    } catch (e) {
      throw new ChatTemplateError(this.source, firstLine(e));
    }
  }
}

function firstLine(e: unknown): string {
  return (e instanceof Error ? e.message : String(e)).split("\n")[0]!;
}

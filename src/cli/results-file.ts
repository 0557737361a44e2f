/**
 * The --output JSONL file: one result per line, each written with a single write as soon as its
 * request finishes, so a run killed at any moment leaves only whole lines of finished requests
 * (at worst a torn last line, which --resume drops). --resume keeps the finished lines and skips
 * their ids.
 */
import { closeSync, existsSync, ftruncateSync, openSync, readFileSync, writeSync } from "node:fs";
import { InputError } from "../errors.ts";

export class ResultsFile {
  private constructor(
    readonly path: string,
    private readonly fd: number,
    /** Ids whose results the file already holds. */
    readonly doneIds: ReadonlySet<string>,
  ) {}

  static open(path: string, resume: boolean): ResultsFile {
    const done = new Set<string>();
    let keepBytes = 0;
    if (resume && existsSync(path)) {
      const bytes = readFileSync(path);
      // Only lines that end in a newline were written whole.
      const lastNewline = bytes.lastIndexOf(0x0a);
      keepBytes = lastNewline + 1;
      for (const line of bytes.subarray(0, keepBytes).toString("utf8").split("\n")) {
        if (line.trim() === "") continue;
        try {
          const parsed: unknown = JSON.parse(line);
          if (typeof parsed === "object" && parsed !== null && "id" in parsed) done.add(String(parsed.id));
        } catch {
          throw new InputError(`${path}: cannot resume, a line is not JSON: ${line.slice(0, 60)}`);
        }
      }
    }
    let fd: number;
    try {
      fd = openSync(path, resume ? "a+" : "w");
    } catch (e) {
      throw new InputError(`${path}: cannot write results: ${(e as Error).message}`);
    }
    if (resume) ftruncateSync(fd, keepBytes);
    return new ResultsFile(path, fd, done);
  }

  /** One result (a completion, an embedding, a refusal: anything with its request's id) as one line. */
  write(result: { readonly id: string }): void {
    writeSync(this.fd, JSON.stringify(result) + "\n");
  }

  close(): void {
    closeSync(this.fd);
  }
}

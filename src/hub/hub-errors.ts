/**
 * Typed errors of model fetching. Each names the repository/file or URL and suggests the fix, so the
 * CLI can print it as one line.
 */
import { PagellmError } from "../errors.ts";

/** A download that failed: HTTP status, refused credentials, network, or bytes that do not verify. */
export class DownloadError extends PagellmError {
  override readonly exitCode = 5;
  constructor(
    /** What was being fetched: "owner/repo/file" or a URL. */
    readonly target: string,
    problem: string,
  ) {
    super(`${target}: ${problem}`);
  }
}

/** A download whose size or SHA-256 differs from what the server announced; the bytes were discarded. */
export class ChecksumError extends DownloadError {}

/** A model spec (hf:..., URL, path) that is malformed or names nothing that exists. */
export class ModelSpecError extends PagellmError {
  override readonly exitCode = 2;
}

import { expect } from "bun:test";
import { ModelFormatError } from "../../src/errors.ts";

/** `run` throws a ModelFormatError for `file` whose message starts with the file and matches `problem`. */
export function expectModelFormatError(run: () => unknown, file: string, problem: RegExp): void {
  let caught: unknown;
  try {
    run();
  } catch (error) {
    caught = error;
  }
  expect(caught).toBeInstanceOf(ModelFormatError);
  const error = caught as ModelFormatError;
  expect(error.file).toBe(file);
  expect(error.message).toStartWith(`${file}: `);
  expect(error.message).toMatch(problem);
}

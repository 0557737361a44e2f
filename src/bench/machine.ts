/**
 * Where a result was measured: the only context that makes two runs' figures comparable. Every
 * report, table or JSON document or chart, names the machine and the pagellm commit it ran.
 */
import { availableParallelism, cpus, release, totalmem, type as osType } from "node:os";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { REPO_ROOT } from "./bench-models.ts";

export interface MachineInfo {
  /** CPU model as the OS names it ("unknown" when it does not). */
  cpu: string;
  /** Cores this process may use. */
  cores: number;
  /** Physical memory, bytes. */
  memoryBytes: number;
  bun: string;
  /** OS kernel name and release, e.g. "Linux 6.1.0-18-amd64". */
  os: string;
  /** process.platform-process.arch, e.g. "linux-x64". */
  platform: string;
  /** `git rev-parse HEAD` of the pagellm checkout, "+dirty" when tracked files differ from it; "unknown" outside a checkout. */
  commit: string;
}

export function machineInfo(): MachineInfo {
  return {
    cpu: cpus()[0]?.model.trim() || "unknown",
    cores: availableParallelism(),
    memoryBytes: totalmem(),
    bun: Bun.version,
    os: `${osType()} ${release()}`,
    platform: `${process.platform}-${process.arch}`,
    commit: pagellmCommit(),
  };
}

/** The commit of the checkout this code runs from, or "unknown" (an installed package, no git). */
export function pagellmCommit(root = REPO_ROOT): string {
  if (!existsSync(join(root, ".git"))) return "unknown";
  const git = (args: string[]) => {
    try {
      const p = Bun.spawnSync(["git", "-C", root, ...args], { stdout: "pipe", stderr: "ignore" });
      return p.exitCode === 0 ? p.stdout.toString().trim() : null;
    } catch {
      return null; // git itself is not installed
    }
  };
  const head = git(["rev-parse", "HEAD"]);
  if (head === null || head === "") return "unknown";
  const changes = git(["status", "--porcelain", "--untracked-files=no"]);
  return changes !== null && changes !== "" ? `${head}+dirty` : head;
}

/** One line naming the machine, the commit and the date, for the head of tables and charts. */
export function machineLine(m: MachineInfo, date: string): string {
  const gib = (m.memoryBytes / 2 ** 30).toFixed(m.memoryBytes < 10 * 2 ** 30 ? 1 : 0);
  const commit = m.commit === "unknown" ? "commit unknown" : `commit ${m.commit.slice(0, 12)}${m.commit.endsWith("+dirty") ? "+dirty" : ""}`;
  return `${m.cpu}, ${m.cores} cores, ${gib} GiB, ${m.os} ${m.platform}, Bun ${m.bun}, pagellm ${commit}, ${date}`;
}

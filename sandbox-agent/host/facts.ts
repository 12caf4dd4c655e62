/**
 * Measures what the sandbox is, from inside, for the EnvironmentManifest: OS release, arch,
 * kernel, toolchain versions (as each tool prints its own), and the tool user.
 */
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { machine, release } from 'node:os';
import { promisify } from 'node:util';
import type { SandboxFacts } from '../../contract/objects.js';
import type { AgentConfig } from '../../contract/queue.js';

const run = promisify(execFile);

/** Version of the agent; bumped when its behaviour on the wire changes. */
export const AGENT_VERSION = '0.1.0';

export async function measureFacts(config: AgentConfig): Promise<SandboxFacts> {
  const [osRelease, git, python] = await Promise.all([
    readFile('/etc/os-release', 'utf8').catch(() => ''),
    versionOf('git', ['--version']),
    versionOf('python3', ['--version']),
  ]);
  const fields = parseOsRelease(osRelease);
  return {
    os: { id: fields.ID ?? 'unknown', name: fields.PRETTY_NAME ?? fields.NAME ?? 'unknown', version: fields.VERSION_ID ?? null },
    arch: machine(),
    kernel: release(),
    toolchain: { node: process.version, git, python },
    user: config.toolUser,
    workdir: config.workdir,
    agentVersion: AGENT_VERSION,
  };
}

async function versionOf(file: string, args: string[]): Promise<string | null> {
  try {
    const { stdout, stderr } = await run(file, args, { timeout: 5000 });
    return (stdout || stderr).trim() || null;
  } catch {
    return null;
  }
}

/** os-release(5): KEY=value lines, values optionally quoted. */
export function parseOsRelease(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of text.split('\n')) {
    const m = /^([A-Z0-9_]+)=(.*)$/.exec(line.trim());
    if (m) out[m[1]!] = m[2]!.replace(/^(["'])(.*)\1$/, '$2');
  }
  return out;
}

/**
 * The agent runtime's build writes the agent's V8 code cache with the agent's own node flags
 * (V8 rejects a cache made under other flags, and the agent then compiles its whole bundle at
 * every start): build-runtime.sh's `agent_flags` are AGENT_NODE_FLAGS.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { AGENT_NODE_FLAGS } from './agent-runtime.js';

const BUILD_SCRIPT = join(import.meta.dirname, '..', 'images', 'runtime', 'build-runtime.sh');

describe('agent node flags', () => {
  it('build-runtime.sh writes the code cache with exactly AGENT_NODE_FLAGS', () => {
    const script = readFileSync(BUILD_SCRIPT, 'utf8');
    const declared = /^\s*agent_flags=\(([^)]*)\)\s*$/m.exec(script);
    expect(declared, 'build-runtime.sh declares agent_flags=(...)').not.toBeNull();
    expect(declared![1]!.trim().split(/\s+/).filter(Boolean)).toEqual([...AGENT_NODE_FLAGS]);
    expect(script).toMatch(/"\$\{agent_flags\[@\]\}" "\$stage\/agent\/sbx-agent\.cjs" --write-code-cache/);
  });
});

/**
 * The runtime's agent entry (`/opt/sbx/agent/sbx-agent.cjs`, bundled by `images/agent-bundle.mjs`):
 * loads the agent bundle beside it (`sbx-agent-main.cjs`, entry `main.ts`) through V8's code cache
 * (`sbx-agent-main.v8cache`), so that an agent does not parse and compile megabytes of JavaScript at
 * each start (about two thirds of its start before; issue 14). The cache is written once, when the
 * runtime is built (`images/runtime/build-runtime.sh` runs this file with `--write-code-cache`), by
 * the runtime's own node with the agent's flags; both files sit in the runtime's content-hashed,
 * read-only directory, so they always belong together. A cache V8 rejects (another node or other
 * flags) or a missing one costs only the compile it would have saved: the agent starts the same.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import Module, { createRequire } from 'node:module';
import { join } from 'node:path';
import { Script, constants } from 'node:vm';

/** What the agent bundle exports (main.ts). */
interface AgentBundle {
  startAgent(argv: string[], codeCache: CodeCacheUse): void;
}

/** How the code cache served this start: used, rejected by V8, or absent. Logged with `agent ready`. */
export type CodeCacheUse = 'accepted' | 'rejected' | 'absent';

const bundlePath = join(__dirname, 'sbx-agent-main.cjs');
const cachePath = join(__dirname, 'sbx-agent-main.v8cache');

/** Compiles and runs the bundle's module code (not the agent: `startAgent` starts it) with `cachedData`. */
function load(cachedData: Buffer | undefined): { bundle: AgentBundle; script: Script } {
  const script = new Script(Module.wrap(readFileSync(bundlePath, 'utf8')), {
    filename: bundlePath,
    cachedData,
    // Dynamic import() inside the bundle resolves as it would in a file node loaded itself.
    importModuleDynamically: constants.USE_MAIN_CONTEXT_DEFAULT_LOADER,
  });
  const mod = { exports: {} as AgentBundle };
  const moduleFunction = script.runInThisContext() as (...args: unknown[]) => void;
  moduleFunction.call(mod.exports, mod.exports, createRequire(bundlePath), mod, bundlePath, __dirname);
  return { bundle: mod.exports, script };
}

function readCache(): Buffer | undefined {
  try {
    return readFileSync(cachePath);
  } catch {
    return undefined;
  }
}

if (process.argv[2] === '--write-code-cache') {
  // After the module code ran: the cache then holds every function compiled so far, not only the top level.
  const { script } = load(undefined);
  writeFileSync(process.argv[3] ?? cachePath, script.createCachedData());
} else {
  const cachedData = readCache();
  const { bundle, script } = load(cachedData);
  bundle.startAgent(process.argv, cachedData === undefined ? 'absent' : script.cachedDataRejected === true ? 'rejected' : 'accepted');
}

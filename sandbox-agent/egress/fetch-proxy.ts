/**
 * Node's own `fetch` through the egress proxy. Node 20 ignores `HTTP_PROXY`/`HTTPS_PROXY` (curl,
 * git, pip and npm honour them), so in network mode `allowlist` a tool's `fetch` could reach
 * nothing. Loaded into tool processes' Node by `--require` (fetch-proxy-loader.ts), this makes
 * undici's `EnvHttpProxyAgent`, which reads those variables and `NO_PROXY`, the global dispatcher
 * that Node's `fetch` shares with the undici package (its documented global-dispatcher symbol).
 * Node's `http` and `https` modules are left as they are.
 */
import { EnvHttpProxyAgent, setGlobalDispatcher } from 'undici';

// undici 6 warns once that the agent is experimental (code UNDICI-EHPA): a line on the stderr of
// every Node program in the sandbox that no program asked for. That one warning alone is held back.
const emitWarning = process.emitWarning;
process.emitWarning = ((warning: string | Error, ...rest: unknown[]) => {
  const options = rest[0];
  if (typeof options === 'object' && options !== null && (options as { code?: string }).code === 'UNDICI-EHPA') return;
  (emitWarning as (...args: unknown[]) => void).call(process, warning, ...rest);
}) as typeof process.emitWarning;
try {
  setGlobalDispatcher(new EnvHttpProxyAgent());
} finally {
  process.emitWarning = emitWarning;
}

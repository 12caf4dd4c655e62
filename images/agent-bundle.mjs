// Bundles the sandbox agent and its dependencies into one CommonJS file that the sandbox image
// carries at /opt/sbx/sbx-agent.cjs (images/build.sh copies it in at build time).
import { build } from 'esbuild';

await build({
  entryPoints: ['sandbox-agent/main.ts'],
  outfile: 'dist/agent/sbx-agent.cjs',
  bundle: true,
  platform: 'node',
  target: 'node20',
  format: 'cjs',
  sourcemap: false,
  legalComments: 'none',
  // contract/ uses import.meta.url (for createRequire); CommonJS has no import.meta.
  define: { 'import.meta.url': '__sbxImportMetaUrl' },
  banner: { js: "const __sbxImportMetaUrl = require('node:url').pathToFileURL(__filename).href;" },
  // node-pty is a native addon: the runtime carries it beside the bundle (agent/node_modules/node-pty,
  // images/runtime/build-runtime.sh), loaded from there by require.
  external: ['node-pty'],
  logLevel: 'warning',
});

// Bundles the sandbox agent into the runtime's agent directory (images/runtime/build-runtime.sh
// copies both into /opt/sbx/agent/): `sbx-agent-main.cjs`, the agent and its dependencies in one
// CommonJS file, and `sbx-agent.cjs`, the small entry that loads it through V8's code cache
// (sandbox-agent/boot.ts).
import { build } from 'esbuild';

const common = {
  bundle: true,
  platform: 'node',
  target: 'node20',
  format: 'cjs',
  sourcemap: false,
  legalComments: 'none',
  logLevel: 'warning',
};

await build({
  ...common,
  entryPoints: ['sandbox-agent/main.ts'],
  outfile: 'dist/agent/sbx-agent-main.cjs',
  // Whitespace and syntax only (names stay, for stack traces): a third less source to read and
  // hash at every agent start, about 8 of its 185 ms to `loaded` (issue 14).
  minifyWhitespace: true,
  minifySyntax: true,
  // contract/ and tools/terminal.ts use import.meta.url (for createRequire); CommonJS has no import.meta.
  // msgpackr (in bullmq) would search the disk for its optional native extractor at every start;
  // the runtime carries none.
  define: { 'import.meta.url': '__sbxImportMetaUrl', 'process.env.MSGPACKR_NATIVE_ACCELERATION_DISABLED': '"true"' },
  banner: { js: "const __sbxImportMetaUrl = require('node:url').pathToFileURL(__filename).href;" },
  // node-pty is a native addon: the runtime carries it beside the bundle (agent/node_modules/node-pty,
  // images/runtime/build-runtime.sh), loaded from there by require.
  external: ['node-pty'],
});

await build({ ...common, entryPoints: ['sandbox-agent/boot.ts'], outfile: 'dist/agent/sbx-agent.cjs' });

// Node's fetch through the egress proxy, for tool processes (sandbox-agent/egress/): the loader in
// the oldest syntax any image's Node parses, and undici beside it.
await build({ ...common, entryPoints: ['sandbox-agent/egress/fetch-proxy.ts'], outfile: 'dist/agent/sbx-fetch-proxy.cjs' });
await build({
  ...common,
  target: 'es2015',
  entryPoints: ['sandbox-agent/egress/fetch-proxy-loader.ts'],
  outfile: 'dist/agent/sbx-fetch-proxy-loader.cjs',
});

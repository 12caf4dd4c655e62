// Builds the admin console into one directory the control plane serves at /console:
// index.html and console.css as they are, and console.js, the app and everything it imports
// (zod, yaml) bundled by esbuild — the page loads nothing from anywhere else.
// Usage: node console/build.mjs [OUT_DIR]   (default dist/console)
import { copyFile, mkdir } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const here = dirname(fileURLToPath(import.meta.url));
const outDir = resolve(process.argv[2] ?? join(here, '..', 'dist', 'console'));

await mkdir(outDir, { recursive: true });
await build({
  entryPoints: [join(here, 'src', 'main.ts')],
  outfile: join(outDir, 'console.js'),
  bundle: true,
  platform: 'browser',
  target: 'es2022',
  format: 'esm',
  minify: true,
  sourcemap: false,
  legalComments: 'none',
  logLevel: 'warning',
});
for (const file of ['index.html', 'console.css']) await copyFile(join(here, 'static', file), join(outDir, file));

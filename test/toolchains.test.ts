/**
 * The default image really has every toolchain its manifest lists. The list is read from the
 * lease's manifest at run time; for each entry the version the manifest reports must be what the
 * binary prints to the tool user, and a smoke command must exercise the toolchain for real under
 * the default policy (no network, read-only root, uid 1000, writable /workspace, /tmp and home).
 * A toolchain the manifest lists without a smoke command here fails the test.
 */
import { expect, it } from 'vitest';
import type { EnvironmentManifest, ToolResult } from '../contract/objects.js';
import { useLeasedSandbox, type Harness } from './fixtures/index.js';

interface Smoke {
  /** Prints the version exactly as the manifest should report it. */
  version: string;
  /** A bash script that exits 0 only when the toolchain works; its last line must be `ok`. */
  script: string;
}

/** A local Python project with a pyproject.toml, so pip has something to build without an index. */
const PY_PROJECT = `
mkdir -p sbxsmoke
printf '%s\\n' '[build-system]' 'requires = ["setuptools>=61"]' 'build-backend = "setuptools.build_meta"' \\
  '[project]' 'name = "sbxsmoke"' 'version = "0.1.0"' > pyproject.toml
echo 'VALUE = 42' > sbxsmoke/__init__.py
`;

const SMOKES: Record<string, Smoke> = {
  node: {
    version: 'node --version',
    script: `node -e '
      const { createHash } = require("node:crypto");
      const { createServer, get } = require("node:http");
      const server = createServer((_, res) => res.end(createHash("sha256").update("sbx").digest("hex"))).listen(0, "127.0.0.1", () => {
        get({ host: "127.0.0.1", port: server.address().port }, (res) => {
          let body = ""; res.on("data", (d) => (body += d)); res.on("end", () => { server.close(); if (body.length !== 64) process.exit(1); console.log("ok"); });
        });
      });'`,
  },
  npm: {
    version: 'npm --version',
    // A local dependency and a package script: what a project does without a registry.
    script: `set -e
      rm -rf /tmp/npm-smoke && mkdir -p /tmp/npm-smoke/dep /tmp/npm-smoke/app && cd /tmp/npm-smoke
      echo '{"name":"dep","version":"1.0.0","main":"index.js"}' > dep/package.json
      echo 'module.exports = 41;' > dep/index.js
      cd app && npm init -y >/dev/null
      npm install --offline --no-audit --no-fund ../dep >/dev/null
      npm pkg set scripts.answer='node -e "console.log(require(\\"dep\\") + 1)"'
      [ "$(npm run --silent answer)" = 42 ]
      echo ok`,
  },
  git: {
    version: 'git --version',
    script: `set -e
      rm -rf /tmp/git-smoke && git init -q -b main /tmp/git-smoke && cd /tmp/git-smoke
      echo hello > a.txt && git add a.txt
      git -c user.name=smoke -c user.email=smoke@sbx.invalid commit -q -m first
      [ "$(git log --format=%s)" = first ] && [ "$(git show HEAD:a.txt)" = hello ]
      echo ok`,
  },
  python: {
    version: 'python3 --version',
    // The full standard library (python3-minimal has none of these) and a server on loopback.
    // Python bodies start at column 0: they are Python source.
    script: `set -e
python3 -c '
import json, sqlite3, ssl, venv, urllib.request, http.server, zlib, hashlib, ctypes, decimal
db = sqlite3.connect(":memory:")
assert db.execute("select 6 * 7").fetchone() == (42,)
assert json.loads(json.dumps({"a": [1]})) == {"a": [1]}
ssl.create_default_context()'
mkdir -p /tmp/www && echo served > /tmp/www/index.txt
python3 -m http.server 8765 --bind 127.0.0.1 --directory /tmp/www >/dev/null 2>&1 &
server=$!
trap 'kill $server' EXIT
python3 - <<'EOF'
import time, urllib.request
deadline = time.monotonic() + 20
while True:
    try:
        body = urllib.request.urlopen("http://127.0.0.1:8765/index.txt", timeout=2).read()
        break
    except OSError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.05)
assert body == b"served\\n", body
EOF
echo ok`,
  },
  pip: {
    version: 'pip3 --version',
    // venv + pip offline: an editable install of a local project in /workspace, building in an
    // isolated environment from the wheels Debian ships, and one without build isolation.
    script: `set -e
      python3 -m venv /tmp/v && /tmp/v/bin/pip --version >/dev/null
      rm -rf /workspace/pip-smoke && mkdir /workspace/pip-smoke && cd /workspace/pip-smoke
      ${PY_PROJECT}
      python3 -m venv .venv
      .venv/bin/pip install -q --no-index --find-links /usr/share/python-wheels -e .
      python3 -m venv --system-site-packages /tmp/v2
      /tmp/v2/bin/pip install -q --no-index --no-build-isolation .
      cd /
      [ "$(/workspace/pip-smoke/.venv/bin/python -c 'import sbxsmoke; print(sbxsmoke.__file__)')" = /workspace/pip-smoke/sbxsmoke/__init__.py ]
      [ "$(/tmp/v2/bin/python -c 'import sbxsmoke; print(sbxsmoke.VALUE)')" = 42 ]
      echo ok`,
  },
};

let h: Harness;
let leaseId: string;
useLeasedSandbox((harness, id) => {
  h = harness;
  leaseId = id;
});

async function bash(cmd: string): Promise<ToolResult> {
  return (await h.client.submitCall(leaseId, 'exec', { cmd, timeoutMs: 120_000 }, { waitSeconds: 150 })) as ToolResult;
}

async function toolchainOf(): Promise<EnvironmentManifest['toolchain']> {
  return (await h.client.getSandbox(leaseId)).manifest!.toolchain;
}

it('every toolchain the manifest lists has a smoke command, and the default image has each one', async () => {
  const toolchain = await toolchainOf();
  expect(Object.keys(toolchain).length).toBeGreaterThan(0);
  expect(Object.keys(toolchain).filter((name) => !(name in SMOKES))).toEqual([]);
  expect(Object.entries(toolchain).filter(([, version]) => version === null)).toEqual([]);
});

it('each listed toolchain reports the version its binary prints and passes its smoke command', { timeout: 600_000 }, async () => {
  const failures: Array<Record<string, unknown>> = [];
  for (const [name, reported] of Object.entries(await toolchainOf())) {
    const smoke = SMOKES[name];
    if (!smoke) continue; // the test above names it
    const version = await bash(smoke.version);
    const printed = (version.stdout || version.stderr).trim();
    if (version.exitCode !== 0 || printed !== reported) failures.push({ name, reported, printed, exitCode: version.exitCode });
    const r = await bash(smoke.script);
    if (r.exitCode !== 0 || !r.stdout.trimEnd().endsWith('ok')) {
      failures.push({ name, exitCode: r.exitCode, stdout: r.stdout.slice(-2000), stderr: r.stderr.slice(-2000) });
    }
  }
  expect(failures).toEqual([]);
});

/**
 * The README's SDK example, runnable: `node dist/examples/quickstart.js` with `SBX_URL` and
 * `SBX_API_KEY` set (or the key in `$SBX_DATA_DIR/api-key`). It leases a sandbox, writes a
 * script, runs it with streamed output, reads and edits a file, shows a platform error code,
 * and releases the sandbox when the block ends (`await using`), also when something throws.
 */
import { Sandbox, SbxError } from '../sdk/index.js';

{
  await using sbx = await Sandbox.create({
    policy: 'default',
    ttlSeconds: 600,
    env: { GREETING: 'hello' },
    labels: { example: 'quickstart' },
  });
  console.log(`sandbox ${sbx.id}, expires ${sbx.lease.expiresAt}`);

  await sbx.files.write('/workspace/greet.sh', 'echo "$GREETING, $1"\necho "to stderr" >&2\n');
  const run = await sbx.exec('bash greet.sh sbx', {
    timeoutMs: 30_000,
    onStdout: (text) => process.stdout.write(`[stdout] ${text}`),
    onStderr: (text) => process.stdout.write(`[stderr] ${text}`),
  });
  // A result is not a receipt: the receipt says what is known about the effect.
  console.log(`exit ${run.exitCode}, status ${run.status}, receipt ${run.receipt?.receiptId} (${run.receipt?.commitState})`);

  const file = await sbx.files.read('/workspace/greet.sh');
  await sbx.files.edit('/workspace/greet.sh', '$GREETING', 'hi', { expectedSha256: file.sha256 });
  console.log((await sbx.files.read('/workspace/greet.sh')).content.split('\n')[0]);

  try {
    await sbx.files.read('/workspace/missing.txt');
  } catch (err) {
    // Branch on the stable code, never on the message.
    if (err instanceof SbxError && err.code === 'files.not_found') console.log(`error code ${err.code} (retryability ${err.retryability})`);
    else throw err;
  }
}
console.log('released');

/**
 * What `NODE_OPTIONS=--require` names in tool processes (call-runner.ts `proxyEnv`): loads
 * fetch-proxy.ts only into a Node that can run it (18 or later, as undici 6 needs), and never
 * stops a program over it: a failure leaves `fetch` as Node made it. Kept to the plainest
 * JavaScript, since the image's own Node, of any age, parses it.
 */
try {
  if (Number(process.versions.node.split('.')[0]) >= 18) require('./sbx-fetch-proxy.cjs');
} catch (err) {
  // Not fatal: the program runs on, its fetch without the proxy.
}

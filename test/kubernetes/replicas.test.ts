/**
 * Control-plane replicas on the lab: two `main.js` processes, each in a network namespace of its
 * own (the lab's `…cp1`, `…cp2`), sharing Redis (over TCP, through the hub), the keys and the
 * artifact directory, behind one address (the lab's haproxy: the API on `SBX_LAB_API`, the
 * agents' link, where the node relays pipe, in front of both). Any replica answers any call on
 * any lease; an agent connection that reaches the replica not serving it is passed on.
 */
import { createHash, randomBytes } from 'node:crypto';
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { EventSourceParserStream } from 'eventsource-parser/stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../control-plane/config.js';
import type { ToolResult } from '../../contract/objects.js';
import { SbxClient } from '../../sdk/index.js';
import {
  apiAs,
  eventually,
  execIn,
  planeIdentity,
  putPolicyVariant,
  REPO_ROOT,
  startChildPlane,
  useScratchDirs,
  type ChildPlane,
} from '../fixtures/index.js';
import { useKubernetesLab } from '../fixtures/kubernetes.js';

const lab = useKubernetesLab('replicas');
const scratch = useScratchDirs();
const identity = planeIdentity('replicas');
const previewKey = randomBytes(32).toString('base64');
/** `netns=address` of each replica namespace the lab made. */
const places = (process.env.SBX_LAB_REPLICAS ?? '')
  .trim()
  .split(/\s+/)
  .filter(Boolean)
  .map((pair) => ({ netns: pair.split('=')[0]!, host: pair.split('=')[1]!, port: 8080 }));
let artifactDir = '';
const planes: ChildPlane[] = [];

/** Replica `i` (0-based), started with the settings every replica shares and an own data dir. */
async function startReplica(i: number): Promise<ChildPlane> {
  const place = places[i]!;
  const { redis } = loadConfig(process.env, REPO_ROOT);
  return startChildPlane(
    identity,
    {
      ...lab.settings(),
      SBX_DATA_DIR: await scratch(`replica-${i}-`),
      SBX_ARTIFACT_DIR: artifactDir,
      SBX_REDIS_URL: process.env.SBX_LAB_REDIS_URL!,
      SBX_REDIS_PASSWORD: redis.password ?? '',
      // The agents' Redis is the node relay's socket; this names the socket of a Docker-driver sandbox, never used here.
      SBX_AGENT_REDIS_SOCKET: '/nonexistent/redis.sock',
      SBX_PREVIEW_KEY: previewKey,
      SBX_LINK_LISTEN: `0.0.0.0:7071`,
      SBX_LINK_ADVERTISE: `${place.host}:7071`,
    },
    place,
  );
}

beforeAll(async () => {
  if (places.length < 2) throw new Error('the lab has no replica namespaces (SBX_LAB_REPLICAS): run through test/lab/kubernetes-suite.sh');
  artifactDir = await scratch('replica-artifacts-');
  planes.push(await startReplica(0), await startReplica(1));
}, 120_000);

afterAll(async () => {
  // Releases through whichever replica is left; the namespace's deletion (the lab fixture) removes any Pod left after.
  const alive = planes.find((p) => p.child.exitCode === null && p.child.signalCode === null);
  if (alive)
    for (const lease of await alive.client.listSandboxes().catch(() => []))
      await alive.client.releaseSandbox(lease.id).catch(() => undefined);
  for (const plane of planes) await plane.kill9();
});

/** The one address in front of both replicas. */
const front = (): SbxClient => new SbxClient(`http://${process.env.SBX_LAB_API}`, identity.apiKey);

/** A call's event stream from `url` after `lastEventId`: the events read until `stopAfter` of them (or the end). */
async function readEvents(
  url: string,
  lastEventId: number,
  stopAfter = Infinity,
): Promise<Array<{ seq: number; type: string; data: any }>> {
  const controller = new AbortController();
  const response = await fetch(url, {
    headers: { authorization: `Bearer ${identity.apiKey}`, accept: 'text/event-stream', 'last-event-id': String(lastEventId) },
    signal: controller.signal,
  });
  expect(response.status).toBe(200);
  const events: Array<{ seq: number; type: string; data: any }> = [];
  const stream = response.body!.pipeThrough(new TextDecoderStream()).pipeThrough(new EventSourceParserStream());
  try {
    for await (const message of stream) {
      const data = JSON.parse(message.data) as { seq: number; type: string };
      events.push({ seq: Number(message.id), type: data.type, data });
      if (events.length >= stopAfter) break;
    }
  } finally {
    controller.abort();
  }
  return events;
}

describe('control-plane replicas', () => {
  it('any replica answers any call on a lease: exec, uploads and downloads, artifacts, SSE resumed with Last-Event-ID, egress', async () => {
    const [a, b] = planes as [ChildPlane, ChildPlane];
    const lease = await a.client.createSandbox();
    const execOn = (plane: ChildPlane) => execIn(() => plane.client);
    expect((await execOn(b)(lease.id, 'echo from-b')).stdout).toBe('from-b\n');

    // Byte tunnels, asked for by either replica: the agent's connection reaches whichever replica
    // the front picks (round robin), so about half of them must be passed on.
    const local = await scratch('replica-files-');
    for (let i = 0; i < 6; i += 1) {
      const [up, down] = i % 2 === 0 ? [a, b] : [b, a];
      const content = randomBytes(64 * 1024 + i);
      await writeFile(join(local, `f${i}`), content);
      await up.client.upload(lease.id, join(local, `f${i}`), '/workspace');
      const back = join(local, `back${i}`);
      await mkdir(back);
      await down.client.download(lease.id, `/workspace/f${i}`, back);
      expect((await readFile(join(back, `f${i}`))).equals(content)).toBe(true);
    }

    // An artifact (output past the result's limit) comes over a tunnel to one replica and is read from the other.
    const cmd = 'head -c 6000000 /dev/urandom >/tmp/big && sha256sum </tmp/big >&2 && cat /tmp/big';
    const big = (await b.client.submitCall(lease.id, 'exec', { cmd }, { waitSeconds: 120 })) as ToolResult;
    const artifactId = big.truncation!.stdout!.fullArtifact!;
    for (const plane of [a, b]) {
      const response = await plane.client.raw('GET', `/v1/sandboxes/${lease.id}/artifacts/${artifactId}`);
      expect(response.status).toBe(200);
      const bytes = Buffer.from(await response.arrayBuffer());
      expect(`${createHash('sha256').update(bytes).digest('hex')}  -\n`).toBe(big.stderr);
    }

    // A call's events: read a few on one replica, then resumed on the other with Last-Event-ID.
    const slow = await a.client.submitCall(
      lease.id,
      'exec',
      { cmd: 'for i in 1 2 3 4 5 6; do echo line-$i; sleep 0.3; done' },
      { waitSeconds: 0 },
    );
    const path = `/v1/sandboxes/${lease.id}/calls/${slow.callId}/events`;
    const first = await readEvents(`${a.url}${path}`, 0, 2);
    const rest = await readEvents(`${b.url}${path}`, first.at(-1)!.seq);
    const seqs = [...first, ...rest].map((e) => e.seq);
    expect(seqs).toEqual(seqs.map((_, i) => seqs[0]! + i));
    expect(rest.at(-1)!.type).toBe('call.finished');
    const stdout = [...first, ...rest]
      .filter((e) => e.type === 'output' && e.data.stream === 'stdout')
      .map((e) => Buffer.from(e.data.dataBase64 as string, 'base64').toString())
      .join('');
    expect(stdout).toBe([1, 2, 3, 4, 5, 6].map((i) => `line-${i}\n`).join(''));
    await b.client.releaseSandbox(lease.id);
    expect((await a.client.getSandbox(lease.id)).status).toBe('released');

    // Egress: the proxy of an allowlist lease is served by the replica consuming its returns (the
    // creator, here b); the agent's connections reach either replica, and a passes its share on.
    const hub = lab.registry.split(':')[0]!;
    const hits: string[] = [];
    const server = http.createServer((req, res) => {
      hits.push(req.url ?? '');
      res.end('egress-ok');
    });
    server.listen(0, hub);
    await once(server, 'listening');
    const port = (server.address() as AddressInfo).port;
    try {
      await putPolicyVariant({ url: b.url, apiKey: identity.apiKey }, 'replica-egress', (p) => {
        p.network = { mode: 'allowlist', allow: [{ cidr: `${hub}/32`, ports: [port] }] };
      });
      const egressLease = await b.client.createSandbox({ policy: 'replica-egress' });
      const get =
        `/opt/sbx/bin/node -e 'const u=new URL(process.env.HTTP_PROXY);require("http").get({host:u.hostname,port:u.port,path:process.argv[1]},` +
        `r=>{let b="";r.on("data",d=>b+=d);r.on("end",()=>console.log(r.statusCode,b))}).on("error",e=>console.log("error",e.code))'`;
      for (let i = 0; i < 4; i += 1) {
        expect((await execOn(a)(egressLease.id, `${get} http://${hub}:${port}/get-${i}`)).stdout).toBe('200 egress-ok\n');
      }
      expect(hits).toEqual([0, 1, 2, 3].map((i) => `/get-${i}`));
      expect((await a.client.egress(egressLease.id)).filter((e) => e.decision === 'allowed')).toHaveLength(4);
      await a.client.releaseSandbox(egressLease.id);
    } finally {
      server.close();
      await apiAs(() => b.url)(identity.apiKey, 'DELETE', '/v1/policies/replica-egress');
    }
  });

  it('kill -9 of the replica consuming a lease loses no receipt: every call ends once, through the other replica', async () => {
    const [a, b] = planes as [ChildPlane, ChildPlane];
    const lease = await a.client.createSandbox();
    const calls = [];
    for (let i = 0; i < 12; i += 1) {
      const via = i % 2 === 0 ? a : front();
      const client = via instanceof SbxClient ? via : via.client;
      calls.push(await client.submitCall(lease.id, 'exec', { cmd: `sleep 1; echo call-${i}` }, { waitSeconds: 0 }));
    }
    const killedAt = Date.now();
    await a.kill9();
    const finished = await Promise.all(
      calls.map((c) =>
        eventually(
          () => b.client.getCall(lease.id, c.callId),
          (view) => view.status === 'finished',
          120_000,
          250,
        ),
      ),
    );
    console.log(
      `[replicas] 12 calls finished through the surviving replica ${((Date.now() - killedAt) / 1000).toFixed(1)} s after kill -9 of the other`,
    );
    finished.forEach((view, i) => {
      expect(view.result!.status).toBe('succeeded');
      expect(view.result!.stdout).toBe(`call-${i}\n`);
      expect(view.result!.receipt).toMatchObject({ exit: { code: 0 } });
    });
    // The lease goes on through the survivor and the front, tunnels included.
    expect((await execIn(front)(lease.id, 'echo after')).stdout).toBe('after\n');
    const local = await scratch('replica-after-');
    await writeFile(join(local, 'after'), 'survived');
    await front().upload(lease.id, join(local, 'after'), '/workspace');
    expect((await execIn(front)(lease.id, 'cat /workspace/after')).stdout).toBe('survived');
    await b.client.releaseSandbox(lease.id);
  });
});

/**
 * `sbx image`: build, list and remove the tenant's images.
 *
 *   sbx image build DIR [--dockerfile F] [--build-arg K=V]... [--name N]   build (log streamed to stderr), print the id
 *   sbx image ls                                                           list the tenant's images
 *   sbx image rm ID|NAME                                                   delete an image (refused while a sandbox uses it)
 *   sbx image egress ID|NAME [--denied]                                    the build's egress log (build policy network {allow})
 *
 * A failed build exits 1 with the builder's message; API errors exit 125 like every command.
 */
import type { Command } from 'commander';
import { ImageId } from '../contract/images.js';
import { Image, type ConnectionOptions } from '../sdk/index.js';

type Global = { url?: string; apiKey?: string; json?: boolean };

/** Adds `sbx image …` to `program`; `connection` reads the global options. */
export function addImageCommands(program: Command, connection: (opts: Global) => ConnectionOptions): void {
  const image = program.command('image').description("build, list and remove the tenant's images");
  image
    .command('build')
    .description('build an image from a directory (the build context); the same files and args give the same image without a rebuild')
    .argument('<dir>')
    .option('--dockerfile <path>', 'Dockerfile path inside the context', 'Dockerfile')
    .option('--build-arg <KEY=VALUE>', 'a build arg (repeatable)', (v: string, prev: string[] = []) => [...prev, v])
    .option('--name <name>', 'a name of your own for the image (a lease may use it)')
    .action(async (dir: string, opts: { dockerfile: string; buildArg?: string[]; name?: string }) => {
      const global = program.opts<Global>();
      const buildArgs: Record<string, string> = {};
      for (const pair of opts.buildArg ?? []) {
        const i = pair.indexOf('=');
        if (i <= 0) throw new Error(`--build-arg must be KEY=VALUE, got ${JSON.stringify(pair)}`);
        buildArgs[pair.slice(0, i)] = pair.slice(i + 1);
      }
      try {
        const built = await Image.build(dir, {
          ...connection(global),
          dockerfile: opts.dockerfile,
          buildArgs,
          ...(opts.name ? { name: opts.name } : {}),
          onLog: (text) => process.stderr.write(text),
        });
        process.stdout.write(global.json ? `${JSON.stringify(built, null, 2)}\n` : `${built.id}\n`);
      } catch (err) {
        if ((err as { code?: string }).code !== 'image.build_failed') throw err;
        process.stderr.write(`sbx: build failed: ${(err as Error).message}\n`);
        process.exitCode = 1;
      }
    });
  image
    .command('ls')
    .description("list the tenant's images")
    .action(async () => {
      const global = program.opts<Global>();
      const images = await Image.list(connection(global));
      if (global.json) process.stdout.write(`${JSON.stringify(images, null, 2)}\n`);
      else for (const i of images) process.stdout.write(`${i.id}  ${i.status.padEnd(8)} ${i.name ?? '-'}  ${i.createdAt}\n`);
    });
  image
    .command('egress')
    .description("the build's egress log, oldest first: each connection its RUN steps asked the egress proxy for")
    .argument('<image>', 'the image id (img_…) or its name')
    .option('--denied', 'only the denied connections')
    .action(async (ref: string, opts: { denied?: boolean }) => {
      const global = program.opts<Global>();
      const conn = connection(global);
      const events = await Image.egress(await imageIdOf(ref, conn), { ...conn, ...(opts.denied ? { decision: 'denied' as const } : {}) });
      if (global.json) process.stdout.write(`${JSON.stringify(events, null, 2)}\n`);
      else
        for (const e of events)
          process.stdout.write(
            `${e.at}  ${e.decision.padEnd(7)} ${e.method} ${e.host}:${e.port}  ${e.rule}${e.error ? `  (${e.error})` : ''}\n`,
          );
    });
  image
    .command('rm')
    .description('delete an image (refused with image.in_use while a sandbox runs from it)')
    .argument('<image>', 'the image id (img_…) or its name')
    .action(async (ref: string) => {
      const conn = connection(program.opts<Global>());
      await Image.remove(await imageIdOf(ref, conn), conn);
    });
}

/**
 * The id of the tenant's image `ref`: `ref` itself when it is an image id, else the one image
 * named `ref`. Throws when no image or more than one has that name (ids tell them apart).
 */
async function imageIdOf(ref: string, conn: ConnectionOptions): Promise<string> {
  if (ImageId.safeParse(ref).success) return ref;
  const named = (await Image.list(conn)).filter((i) => i.name === ref);
  if (named.length === 1) return named[0]!.id;
  if (named.length === 0) throw new Error(`no image named ${ref} (sbx image ls lists them)`);
  throw new Error(`${named.length} images are named ${ref}: give the id (${named.map((i) => i.id).join(', ')})`);
}

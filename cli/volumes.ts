/**
 * `sbx volume create NAME --size 1G | ls | rm NAME`, and the `--volume NAME:PATH[:ro]` option of
 * `sbx run` and `sbx lease`: the parsing (pure, `volumes.test.ts`) and the subcommands.
 */
import { type Command, InvalidArgumentError } from 'commander';
import { connect, type ConnectionOptions } from '../sdk/index.js';

const UNITS: Record<string, number> = { '': 1, K: 1024, M: 1024 ** 2, G: 1024 ** 3, T: 1024 ** 4 };

/**
 * A size as `--size` takes it: bytes, or a number with `K`, `M`, `G` or `T` (powers of 1024;
 * `KiB`, `MiB`, `GiB`, `TiB` and a trailing `B` are the same), e.g. `512M`, `1G`, `1.5GiB`.
 * Throws InvalidArgumentError for anything else or a size that is not a whole positive number of bytes.
 */
export function parseSize(value: string): number {
  const m = /^(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?$/i.exec(value.trim());
  if (!m) throw new InvalidArgumentError('a size: bytes, or a number with K, M, G or T (powers of 1024), e.g. 1G');
  const bytes = Number(m[1]) * UNITS[m[2]!.toUpperCase()]!;
  if (!Number.isSafeInteger(bytes) || bytes <= 0) throw new InvalidArgumentError('must come to a whole positive number of bytes');
  return bytes;
}

/** `NAME:PATH[:ro|:rw]` → a lease's volume mount. Throws InvalidArgumentError. */
export function parseVolumeSpec(spec: string): { name: string; path: string; readOnly?: boolean } {
  const parts = spec.split(':');
  const mode = parts.length === 3 ? parts[2] : undefined;
  if (parts.length < 2 || parts.length > 3 || !parts[0] || !parts[1] || (mode !== undefined && mode !== 'ro' && mode !== 'rw'))
    throw new InvalidArgumentError(`--volume must be NAME:PATH or NAME:PATH:ro, got ${JSON.stringify(spec)}`);
  return { name: parts[0], path: parts[1], ...(mode === 'ro' ? { readOnly: true } : {}) };
}

/** The `volumes` of a create from repeated `--volume` options (undefined when none). */
export function volumeMounts(specs: string[] | undefined): Array<{ name: string; path: string; readOnly?: boolean }> | undefined {
  return specs && specs.length > 0 ? specs.map(parseVolumeSpec) : undefined;
}

/** Adds `sbx volume create | ls | rm` to `program`; `connection()` reads the global options when a command runs. */
export function addVolumeCommands(program: Command, connection: () => ConnectionOptions & { json?: boolean }): void {
  const volume = program.command('volume').description("persistent volumes of the key's tenant: create, list, delete");
  volume
    .command('create')
    .description('create a volume of --size (ext4, enforced by the kernel); it outlives the sandboxes that mount it')
    .argument('<name>')
    .requiredOption('--size <size>', 'capacity: bytes, or K, M, G, T (powers of 1024), e.g. 1G', parseSize)
    .option('--shared', 'let several sandboxes mount it read-write at once')
    .action(async (name: string, opts: { size: number; shared?: boolean }) => {
      const { json, ...conn } = connection();
      const created = await connect(conn).volumes.create({ name, sizeBytes: opts.size, ...(opts.shared ? { shared: true } : {}) });
      process.stdout.write(json ? `${JSON.stringify(created, null, 2)}\n` : `${created.name}\n`);
    });
  volume
    .command('ls')
    .description("list the tenant's volumes")
    .action(async () => {
      const { json, ...conn } = connection();
      const list = await connect(conn).volumes.list();
      if (json) process.stdout.write(`${JSON.stringify(list, null, 2)}\n`);
      else
        for (const v of list.volumes)
          process.stdout.write(
            `${v.name}  ${v.sizeBytes} bytes  ${v.shared ? 'shared' : 'one writer'}  ${v.state}  created ${v.createdAt}\n`,
          );
    });
  volume
    .command('rm')
    .description('delete a volume and its content (refused while a live sandbox has it mounted)')
    .argument('<name>')
    .action(async (name: string) => {
      const { json: _json, ...conn } = connection();
      await connect(conn).volumes.delete(name);
    });
}

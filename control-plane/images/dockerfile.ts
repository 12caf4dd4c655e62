/**
 * The images a Dockerfile builds on (`FROM`, `COPY --from=<image>`), so each can be checked
 * before the build as a lease's image is: a reference of an allowlisted registry (pulled by sbx
 * first, so the engine's builder never pulls on its own) or an image on the engine that is not
 * another tenant's build. Build args and the `ARG` defaults declared before the first `FROM`
 * are substituted as the builder does. Pure; unit-tested in `dockerfile.test.ts`.
 */
import { AppError } from '../../contract/errors.js';

/** One base image and the Dockerfile line it is on (1-based). */
export interface BaseImage {
  ref: string;
  line: number;
}

/**
 * The image references `text` builds on, in order, without `scratch` and the names of its own
 * stages. Throws `image.invalid_reference` (`details.field: 'dockerfile'`, `details.line`) for a
 * `FROM` without an image or whose variables do not resolve.
 */
export function baseImages(text: string, buildArgs: Readonly<Record<string, string>>): BaseImage[] {
  const globals = new Map<string, string>();
  const stages = new Set<string>();
  const bases: BaseImage[] = [];
  let seenFrom = false;
  for (const { line, words } of instructions(text)) {
    const [instruction = '', ...rest] = words;
    const op = instruction.toUpperCase();
    if (op === 'ARG' && !seenFrom) {
      for (const decl of rest) {
        const eq = decl.indexOf('=');
        const name = eq < 0 ? decl : decl.slice(0, eq);
        const value = buildArgs[name] ?? (eq < 0 ? undefined : unquote(decl.slice(eq + 1)));
        if (value !== undefined) globals.set(name, value);
      }
    } else if (op === 'FROM') {
      seenFrom = true;
      const args = rest.filter((w) => !w.startsWith('--'));
      const raw = args[0];
      if (raw === undefined) throw invalid(line, 'FROM names no image');
      const ref = substitute(raw, globals, line);
      if (ref.toLowerCase() !== 'scratch' && !stages.has(ref.toLowerCase())) bases.push({ ref, line });
      if (args[1]?.toUpperCase() === 'AS' && args[2]) stages.add(args[2].toLowerCase());
    } else if (op === 'COPY' || op === 'ADD') {
      for (const w of rest) {
        if (!w.toLowerCase().startsWith('--from=')) continue;
        const from = substitute(w.slice('--from='.length), globals, line);
        if (!/^\d+$/.test(from) && !stages.has(from.toLowerCase())) bases.push({ ref: from, line });
      }
    }
  }
  return bases;
}

/** The Dockerfile's instructions: continuation lines joined, comments and blank lines left out, split on whitespace. */
function* instructions(text: string): Generator<{ line: number; words: string[] }> {
  const lines = text.split(/\r?\n/);
  for (let i = 0; i < lines.length; i += 1) {
    const start = i;
    let current = lines[i] ?? '';
    if (/^\s*#/.test(current) || current.trim() === '') continue;
    while (/\\\s*$/.test(current) && i + 1 < lines.length) {
      i += 1;
      const next = lines[i] ?? '';
      if (/^\s*#/.test(next)) continue;
      current = current.replace(/\\\s*$/, ' ') + next;
    }
    yield { line: start + 1, words: current.trim().split(/\s+/) };
  }
}

/** `$NAME`, `${NAME}`, `${NAME:-default}` replaced from `vars`; an unset one without a default is refused. */
function substitute(word: string, vars: ReadonlyMap<string, string>, line: number): string {
  return word.replace(/\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))/g, (_m, braced, fallback, bare) => {
    const name = (braced ?? bare) as string;
    const value = vars.get(name) ?? (fallback as string | undefined);
    if (value === undefined) throw invalid(line, `the image names \$${name}, which no build arg or ARG default sets`);
    return value;
  });
}

function unquote(value: string): string {
  return /^(["']).*\1$/.test(value) ? value.slice(1, -1) : value;
}

function invalid(line: number, why: string): AppError {
  return new AppError('image.invalid_reference', `Dockerfile line ${line}: ${why}`, { details: { field: 'dockerfile', line } });
}

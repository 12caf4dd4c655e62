/**
 * The one rule of which preview paths are refused, shared by the control plane (which refuses
 * them, control-plane/previews/paths.ts) and the SDK (which refuses them before sending: a
 * WHATWG URL would otherwise resolve `..` itself and send the API key to another API route).
 * Pure; `preview-paths.test.ts`.
 *
 * A path is refused when a segment, percent-decoded, is `.` or `..` — also when an encoded slash
 * (`%2F`) or a backslash (`\`, `%5C`) makes one — or holds a NUL, or is not valid
 * percent-encoding. Everything else is forwarded byte for byte.
 */

/** What is wrong with the path segments `segments` (not percent-decoded), or null when nothing is. */
export function previewPathProblem(segments: readonly string[]): string | null {
  for (const segment of segments) {
    let decoded: string;
    try {
      decoded = decodeURIComponent(segment);
    } catch {
      return 'a malformed percent-encoding';
    }
    if (decoded.includes('\0')) return 'a NUL byte';
    if (decoded.split(/[/\\]/).some((s) => s === '.' || s === '..')) return 'a "." or ".." segment';
  }
  return null;
}

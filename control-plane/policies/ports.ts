/** Port rules of a policy's `ports.allowed` (port previews). */
import { z } from 'zod';

/**
 * A port, or a range of ports `{from, to}` (both included), a sandbox may expose as a preview
 * (`ports.allowed`).
 */
export const PortRule = z.union([
  z.number().int().min(1).max(65535),
  z
    .object({ from: z.number().int().min(1).max(65535), to: z.number().int().min(1).max(65535) })
    .strict()
    .refine((r) => r.from <= r.to, 'from must be ≤ to'),
]);
export type PortRule = z.infer<typeof PortRule>;

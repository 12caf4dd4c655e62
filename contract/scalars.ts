/** The scalar formats every contract object uses. */
import { z } from 'zod';

/** ISO-8601 UTC timestamp with milliseconds, e.g. `2026-11-30T10:00:00.000Z`. */
export const Timestamp = z.string().datetime({ offset: false });
/** `sha256:<64 hex>` content digest (see contract/digest.ts). */
export const Digest = z.string().regex(/^sha256:[0-9a-f]{64}$/);

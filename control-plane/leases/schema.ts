/** HTTP schemas of the leases domain. */
import { z } from 'zod';
import { EnvMap } from '../../contract/tools.js';

const LabelKey = z.string().regex(/^[a-zA-Z0-9][a-zA-Z0-9_.\/-]{0,62}$/, 'label keys: letters, digits, _ . / -');

export const CreateSandboxBody = z
  .object({
    /** Image reference; default the sandbox image built from images/. */
    image: z.string().min(1).max(256).optional(),
    /** Policy name (latest version) or `{name, version}`. Default `default`. */
    policy: z.union([z.string().min(1), z.object({ name: z.string().min(1), version: z.number().int().positive().optional() }).strict()]).optional(),
    /** Lease lifetime, seconds; default and maximum come from the policy. */
    ttlSeconds: z.number().int().positive().optional(),
    /** Environment every call in the sandbox gets. */
    env: EnvMap.optional(),
    /** Free-form labels, returned as given; `sbx.*` keys are reserved. */
    labels: z
      .record(LabelKey, z.string().max(256))
      .refine((l) => Object.keys(l).every((k) => !k.startsWith('sbx.')), 'label keys starting with "sbx." are reserved')
      .optional(),
  })
  .strict();
export type CreateSandboxBody = z.infer<typeof CreateSandboxBody>;

export const IdempotencyKey = z.string().min(1).max(255).regex(/^[\x21-\x7e]+$/, 'printable ASCII without spaces');

/** Any id is looked up (an unknown one is `404 lease.not_found`); only characters no id has are refused. */
export const LeaseParams = z.object({ id: z.string().regex(/^[A-Za-z0-9_-]{1,128}$/, 'letters, digits, _ and -; at most 128') });

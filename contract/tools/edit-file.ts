/** `edit_file`: exact-string replacement in a text file, keeping its line endings and BOM. */
import { z } from 'zod';
import { SandboxPath, Sha256Hex } from './common.js';
import { fileToolSpec } from './spec.js';

export const EditFileArgs = z
  .object({
    path: SandboxPath,
    oldString: z.string().min(1),
    newString: z.string(),
    /** Replace every match; without it `oldString` must match exactly once. */
    replaceAll: z.boolean().default(false),
    expectedSha256: Sha256Hex.optional(),
  })
  .strict()
  .refine((a) => a.oldString !== a.newString, { message: 'newString must differ from oldString', path: ['newString'] });
export type EditFileArgs = z.infer<typeof EditFileArgs>;

export const editFileSpec = fileToolSpec({
  name: 'edit_file',
  description: 'Replaces an exact string in a text file (once, or everywhere with replaceAll), keeping line endings and BOM.',
  args: EditFileArgs,
  effectClasses: ['fs.read', 'fs.write'],
});

/**
 * Secrets on the wire (docs/DESIGN.md §6 `secrets`): names, where file secrets live, and the
 * one AES-256-GCM sealing both sides use — the control plane's store seals values under the
 * installation key, and a lease's values travel to its agent sealed under a key of that lease
 * only. Values never appear in clear in Redis, on disk, in the manifest or receipts.
 */
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { z } from 'zod';

/** Secret names: letters, digits, `_`, `.`, `-`; 1–128 characters (safe in keys, URLs and markers). */
export const SecretName = z.string().regex(/^[A-Za-z0-9_.-]{1,128}$/, 'secret names: 1-128 of letters, digits, _ . -');
export type SecretName = z.infer<typeof SecretName>;

/** What the API shows of a stored secret: never its value, nor anything derived from it but its size. */
export const SecretMetadata = z
  .object({
    name: SecretName,
    /** 1 on the first PUT, +1 on each later one. */
    version: z.number().int().positive(),
    createdAt: z.string(),
    updatedAt: z.string(),
    /** Key id (`principal.keyId`) of the API key that stored this version. */
    updatedBy: z.string(),
    /** Size of the value, bytes (UTF-8). */
    sizeBytes: z.number().int().nonnegative(),
  })
  .strict();
export type SecretMetadata = z.infer<typeof SecretMetadata>;

/** Largest secret value, bytes (UTF-8). */
export const SECRET_MAX_BYTES = 64 * 1024;

/**
 * The tmpfs in every sandbox whose policy allows secrets; file secrets are written here for the
 * duration of the calls that ask for them. Root-owned, group = the tool user's group, mode 2750.
 */
export const SECRET_FILES_DIR = '/run/secrets';

/** A file secret's path: one file name directly in SECRET_FILES_DIR (no `.`/`..`, no subdirectory). */
export const SecretFilePath = z
  .string()
  .regex(
    /^\/run\/secrets\/[A-Za-z0-9_.-]{1,128}$/,
    `must be a file directly in ${SECRET_FILES_DIR} (the secrets tmpfs), e.g. ${SECRET_FILES_DIR}/NPM_TOKEN`,
  )
  .refine((p) => !/\/\.{1,2}$/.test(p), 'must name a file, not . or ..');

/** AES-256-GCM output, each part base64: 12-byte IV, 16-byte tag, ciphertext. */
export const Sealed = z.object({ iv: z.string(), tag: z.string(), ciphertext: z.string() }).strict();
export type Sealed = z.infer<typeof Sealed>;

/** Key length of AES-256, bytes. */
export const SEAL_KEY_BYTES = 32;

/**
 * Encrypts `plaintext` with AES-256-GCM under `key` (32 bytes), a fresh random 96-bit IV, and
 * `aad` as additional authenticated data: the ciphertext opens only with the same `aad`, so a
 * value sealed for one name cannot be moved to another. Throws RangeError for a wrong key length.
 */
export function seal(key: Buffer, aad: string, plaintext: Buffer): Sealed {
  if (key.length !== SEAL_KEY_BYTES) throw new RangeError(`key must be ${SEAL_KEY_BYTES} bytes`);
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', key, iv);
  cipher.setAAD(Buffer.from(aad, 'utf8'));
  const ciphertext = Buffer.concat([cipher.update(plaintext), cipher.final()]);
  return { iv: iv.toString('base64'), tag: cipher.getAuthTag().toString('base64'), ciphertext: ciphertext.toString('base64') };
}

/**
 * Decrypts what `seal` made. Throws Error when the key, the `aad` or any byte differs
 * (GCM authentication fails), RangeError for a wrong key length.
 */
export function open(key: Buffer, aad: string, sealed: Sealed): Buffer {
  if (key.length !== SEAL_KEY_BYTES) throw new RangeError(`key must be ${SEAL_KEY_BYTES} bytes`);
  const tag = Buffer.from(sealed.tag, 'base64');
  if (tag.length !== 16) throw new Error('sealed value has no valid tag');
  const decipher = createDecipheriv('aes-256-gcm', key, Buffer.from(sealed.iv, 'base64'), { authTagLength: 16 });
  decipher.setAAD(Buffer.from(aad, 'utf8'));
  decipher.setAuthTag(tag);
  return Buffer.concat([decipher.update(Buffer.from(sealed.ciphertext, 'base64')), decipher.final()]);
}

/** Additional data of a lease's delivery of secret `name`: binds the value to the lease and the name. */
export function deliveryAad(leaseId: string, name: string): string {
  return `sbx-delivery:${leaseId}:${name}`;
}

/**
 * What the control plane leaves in the lease's namespace (`LeaseKeys.secrets`) for its agent:
 * each granted value sealed under the lease's delivery key (in the agent's config file) with
 * `deliveryAad`. The agent takes it once (GETDEL); it also expires on its own.
 */
export const SecretDelivery = z.object({ items: z.array(z.object({ name: SecretName, sealed: Sealed }).strict()) }).strict();
export type SecretDelivery = z.infer<typeof SecretDelivery>;

/**
 * Credential injection (policy `secrets.inject`): the lease CA's files in the sandbox. The
 * directory holds the CA alone and a bundle of the public roots plus the CA; the bundle is also
 * mounted over the system bundle (Debian's path, the default of OpenSSL, curl, git and Python).
 */
export const CREDENTIAL_TRUST = {
  dir: '/etc/sbx/trust',
  files: { ca: 'egress-ca.pem', bundle: 'ca-bundle.pem' },
  systemBundle: '/etc/ssl/certs/ca-certificates.crt',
} as const;

/**
 * The variables that point the usual clients at the lease CA's files: OpenSSL-based tools and
 * Python (`SSL_CERT_FILE`), curl, requests, git, pip and npm (their own variables, which replace
 * the roots, hence the bundle) and Node (`NODE_EXTRA_CA_CERTS`, which adds to its roots).
 */
export function credentialTrustEnv(): Record<string, string> {
  const bundle = `${CREDENTIAL_TRUST.dir}/${CREDENTIAL_TRUST.files.bundle}`;
  return {
    SSL_CERT_FILE: bundle,
    CURL_CA_BUNDLE: bundle,
    REQUESTS_CA_BUNDLE: bundle,
    GIT_SSL_CAINFO: bundle,
    PIP_CERT: bundle,
    NPM_CONFIG_CAFILE: bundle,
    NODE_EXTRA_CA_CERTS: `${CREDENTIAL_TRUST.dir}/${CREDENTIAL_TRUST.files.ca}`,
  };
}

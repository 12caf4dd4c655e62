/**
 * The per-lease certificate authority of credential injection (issue 16 part 1): the egress
 * proxy ends TLS for the hosts of a lease's `secrets.inject` rules with a certificate this CA
 * issues, and the sandbox trusts this CA (and no other lease's). Built with node-forge; keys
 * are RSA 2048 made by Node's crypto (off the event loop), and every signature is Node's too
 * (forge only assembles the certificate).
 *
 * Files: the CA's key and the leaf key stay in the control plane's own directory
 * (`<data dir>/egress-ca/<lease>/`, mode 0700); the sandbox gets the CA certificate alone,
 * in `<data dir>/trust/<lease>/` (trustFiles), mounted read-only.
 */
import { generateKeyPair, randomBytes, sign } from 'node:crypto';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import tls from 'node:tls';
import { promisify } from 'node:util';
import forge from 'node-forge';
import { CREDENTIAL_TRUST } from '../../contract/secrets.js';

const generateRsa = promisify(generateKeyPair);

/** How long a lease CA and its leaf certificates are valid: longer than any lease may live. */
const VALIDITY_MS = 400 * 24 * 3600 * 1000;
/** Certificates (TLS contexts) a lease CA keeps, and how many new names it issues for within a window. */
const CONTEXTS_KEPT = 256;
const ISSUE_MAX = 64;
const ISSUE_WINDOW_MS = 10_000;
/** Backdating of notBefore, so a sandbox clock a little behind still accepts a new certificate. */
const BACKDATE_MS = 3600 * 1000;

/** A lease's CA in memory: its certificate, and the TLS context of each host it issued for. */
export class LeaseCa {
  /** Issued contexts by host, oldest used first. */
  private readonly contexts = new Map<string, tls.SecureContext>();
  private issuedAtMs: number[] = [];

  private constructor(
    readonly certPem: string,
    private readonly keyPem: string,
    private readonly leafKeyPem: string,
    private readonly leafPublicPem: string,
  ) {}

  /**
   * The lease's CA from `dir`, made there first when it is not (mode 0700 directory, 0600
   * files). The same CA after a control-plane restart: sandboxes keep trusting it.
   */
  static async open(dir: string, leaseId: string): Promise<LeaseCa> {
    const files = {
      cert: join(dir, 'ca.pem'),
      key: join(dir, 'ca-key.pem'),
      leaf: join(dir, 'leaf-key.pem'),
      leafPublic: join(dir, 'leaf.pub.pem'),
    };
    try {
      const [cert, key, leaf, leafPublic] = await Promise.all(Object.values(files).map((f) => readFile(f, 'utf8')));
      return new LeaseCa(cert!, key!, leaf!, leafPublic!);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
    const [ca, leaf] = await Promise.all([rsaPair(), rsaPair()]);
    const cert = forge.pki.createCertificate();
    cert.publicKey = forge.pki.publicKeyFromPem(ca.publicKey);
    fill(cert, [
      { name: 'commonName', value: `sbx egress CA of ${leaseId}` },
      { name: 'organizationName', value: 'sbx' },
    ]);
    cert.setIssuer(cert.subject.attributes);
    cert.setExtensions([
      { name: 'basicConstraints', cA: true, pathLenConstraint: 0, critical: true },
      { name: 'keyUsage', keyCertSign: true, cRLSign: true, critical: true },
      { name: 'subjectKeyIdentifier' },
    ]);
    signWith(cert, ca.privateKey);
    const certPem = forge.pki.certificateToPem(cert);
    await rm(dir, { recursive: true, force: true });
    await mkdir(dir, { recursive: true, mode: 0o700 });
    await Promise.all([
      writeFile(files.key, ca.privateKey, { mode: 0o600 }),
      writeFile(files.leaf, leaf.privateKey, { mode: 0o600 }),
      writeFile(files.leafPublic, leaf.publicKey, { mode: 0o600 }),
    ]);
    // The certificate last: its presence says the directory is whole.
    await writeFile(files.cert, certPem, { mode: 0o600 });
    return new LeaseCa(certPem, ca.privateKey, leaf.privateKey, leaf.publicKey);
  }

  /**
   * The TLS context that presents a certificate for `host` (a DNS name, lower case), issued once
   * per host and kept (the newest CONTEXTS_KEPT). Throws Error when more than ISSUE_MAX names
   * were issued for within ISSUE_WINDOW_MS: a wildcard rule would let a sandbox make the control
   * plane sign one certificate per name it makes up.
   */
  contextFor(host: string): tls.SecureContext {
    let context = this.contexts.get(host);
    if (context !== undefined) {
      // Kept as the newest.
      this.contexts.delete(host);
      this.contexts.set(host, context);
    } else {
      const now = Date.now();
      this.issuedAtMs = this.issuedAtMs.filter((t) => t > now - ISSUE_WINDOW_MS);
      if (this.issuedAtMs.length >= ISSUE_MAX) throw new Error(`more than ${ISSUE_MAX} new host names within ${ISSUE_WINDOW_MS / 1000} s`);
      this.issuedAtMs.push(now);
      const cert = forge.pki.createCertificate();
      cert.publicKey = forge.pki.publicKeyFromPem(this.leafPublicPem);
      fill(cert, [{ name: 'commonName', value: host.slice(0, 64) }]);
      cert.setIssuer(forge.pki.certificateFromPem(this.certPem).subject.attributes);
      cert.setExtensions([
        { name: 'basicConstraints', cA: false },
        { name: 'keyUsage', digitalSignature: true, keyEncipherment: true, critical: true },
        { name: 'extKeyUsage', serverAuth: true },
        { name: 'subjectAltName', altNames: [{ type: 2, value: host }] },
      ]);
      signWith(cert, this.keyPem);
      context = tls.createSecureContext({ key: this.leafKeyPem, cert: forge.pki.certificateToPem(cert), minVersion: 'TLSv1.2' });
      this.contexts.set(host, context);
      if (this.contexts.size > CONTEXTS_KEPT) this.contexts.delete(this.contexts.keys().next().value!);
    }
    return context;
  }
}

/**
 * Writes the sandbox's trust files into `dir` (made with mode 0755: the sandbox reads them):
 * the lease CA alone (`NODE_EXTRA_CA_CERTS` adds it to Node's roots) and a bundle of the public
 * roots Node carries (Mozilla's) plus the lease CA, which replaces the image's system bundle.
 */
export async function writeTrustFiles(dir: string, ca: LeaseCa): Promise<void> {
  await mkdir(dir, { recursive: true, mode: 0o755 });
  await writeFile(join(dir, CREDENTIAL_TRUST.files.ca), ca.certPem, { mode: 0o644 });
  await writeFile(join(dir, CREDENTIAL_TRUST.files.bundle), `${[...tls.rootCertificates, ca.certPem.trim()].join('\n')}\n`, {
    mode: 0o644,
  });
}

/** The roots the proxy verifies intercepted hosts' servers against: Node's public roots, and the certificates in `file` (`SBX_EGRESS_UPSTREAM_CA`). */
export async function upstreamRoots(file: string | null): Promise<string[]> {
  return file === null ? [...tls.rootCertificates] : [...tls.rootCertificates, await readFile(file, 'utf8')];
}

async function rsaPair(): Promise<{ publicKey: string; privateKey: string }> {
  return generateRsa('rsa', {
    modulusLength: 2048,
    publicKeyEncoding: { type: 'spki', format: 'pem' },
    privateKeyEncoding: { type: 'pkcs8', format: 'pem' },
  });
}

/** Serial, validity and subject of a new certificate. */
function fill(cert: forge.pki.Certificate, subject: forge.pki.CertificateField[]): void {
  // A positive serial of 16 random bytes (RFC 5280 §4.1.2.2): the top bit cleared.
  const serial = randomBytes(16);
  serial[0] = serial[0]! & 0x7f;
  cert.serialNumber = serial.toString('hex');
  const now = Date.now();
  cert.validity.notBefore = new Date(now - BACKDATE_MS);
  cert.validity.notAfter = new Date(now + VALIDITY_MS);
  cert.setSubject(subject);
}

/**
 * Signs `cert` (sha256WithRSAEncryption) with Node's crypto: forge hands its digest object the
 * to-be-signed bytes and asks its key for the signature, so both are stand-ins that collect the
 * bytes and sign them natively (forge's own RSA takes tens of milliseconds on the event loop).
 */
function signWith(cert: forge.pki.Certificate, keyPem: string): void {
  let tbs = '';
  const md = {
    algorithm: 'sha256',
    update(bytes: string) {
      tbs += bytes;
      return md;
    },
  };
  const key = { sign: () => sign('sha256', Buffer.from(tbs, 'binary'), keyPem).toString('binary') };
  cert.sign(key as unknown as forge.pki.rsa.PrivateKey, md as unknown as forge.md.MessageDigest);
}

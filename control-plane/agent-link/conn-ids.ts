import { randomBytes } from 'node:crypto';

/**
 * Connection ids (contract `PreviewConnId`: 128 random bits, base64url), drawn from random bytes
 * fetched ConnIds.BATCH ids at a time: one call into the CSPRNG per batch instead of per request.
 */
export class ConnIds {
  private static readonly BATCH = 256;
  private pool = Buffer.alloc(0);
  private at = 0;

  next(): string {
    if (this.at >= this.pool.length) {
      this.pool = randomBytes(16 * ConnIds.BATCH);
      this.at = 0;
    }
    const id = this.pool.toString('base64url', this.at, this.at + 16);
    this.at += 16;
    return id;
  }
}

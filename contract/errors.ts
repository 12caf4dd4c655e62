/**
 * The error catalogue: every error sbx reports, on the HTTP API and on the queue, carries one of
 * these stable `domain.reason` codes. Clients branch on `code`, never on `message`.
 *
 * Each code declares the HTTP status used at the API edge and a retryability:
 * - `no`: retrying the same request cannot succeed.
 * - `after_fix`: retry after changing the input, the policy or the environment.
 * - `safe`: retry as is; nothing took effect.
 * - `reconcile_first`: something may have taken effect; read the receipt/state before retrying.
 *
 * `docs/errors.md` lists every code; `contract/errors.test.ts` keeps the two in step.
 */
import { z } from 'zod';

export const Retryability = z.enum(['no', 'after_fix', 'safe', 'reconcile_first']);
export type Retryability = z.infer<typeof Retryability>;

interface CodeSpec {
  /** HTTP status at the API edge. */
  readonly status: number;
  readonly retryability: Retryability;
  /** One line for docs/errors.md. */
  readonly summary: string;
}

export const ERROR_CODES = {
  'input.invalid': {
    status: 400,
    retryability: 'after_fix',
    summary: 'A field of the request is missing or malformed; `details.issues` names each field.',
  },
  'input.invalid_json': { status: 400, retryability: 'after_fix', summary: 'The request body is not valid JSON.' },
  'input.body_too_large': {
    status: 413,
    retryability: 'after_fix',
    summary: 'The request body exceeds the size limit for this route (`details.maxBytes`).',
  },
  'input.unsupported_media_type': { status: 415, retryability: 'after_fix', summary: 'The Content-Type is not accepted by this route.' },
  'input.body_aborted': {
    status: 400,
    retryability: 'safe',
    summary:
      'The request body ended before its declared length (the client closed its side of the connection, or the connection broke, mid-body); nothing was done.',
  },
  'input.malformed_request': {
    status: 400,
    retryability: 'after_fix',
    summary:
      'The HTTP request could not be parsed (request line, URL encoding, header syntax, Content-Length, chunked encoding); `details.reason` names what the parser found.',
  },
  'input.headers_too_large': {
    status: 431,
    retryability: 'after_fix',
    summary: "The request line and headers exceed the server's size limit (16 KiB, Node's default).",
  },
  'input.url_too_long': {
    status: 414,
    retryability: 'after_fix',
    summary: 'A path segment (e.g. a sandbox or call id) is longer than 100 characters.',
  },
  'input.request_timeout': {
    status: 408,
    retryability: 'safe',
    summary:
      "The request's headers or body did not arrive in time (headers within Node's `headersTimeout`, 60 s; the whole request within `SBX_REQUEST_TIMEOUT_MS`, 300 s); nothing was done.",
  },
  'input.unknown_tool': {
    status: 400,
    retryability: 'after_fix',
    summary: 'The named tool does not exist; `GET /v1/tools` lists the tools.',
  },
  'input.path_outside_workspace': {
    status: 400,
    retryability: 'after_fix',
    summary: 'A path resolves outside the roots the policy allows.',
  },
  'input.cwd_not_found': {
    status: 400,
    retryability: 'after_fix',
    summary: 'The working directory of an exec call does not exist in the sandbox.',
  },
  'api.route_not_found': { status: 404, retryability: 'no', summary: 'No route matches the method and path.' },
  'api.method_not_allowed': {
    status: 405,
    retryability: 'after_fix',
    summary: 'The path exists, but not for this method; the `Allow` header and `details.allow` list the methods it takes.',
  },
  'api.unreachable': {
    status: 503,
    retryability: 'reconcile_first',
    summary:
      'Reported by the SDK, CLI and MCP server, never by the API: the control plane could not be reached; a request may or may not have arrived.',
  },
  'auth.missing_api_key': {
    status: 401,
    retryability: 'after_fix',
    summary: 'No `Authorization` header was sent, or `Bearer` with no key after it (a key variable left unset).',
  },
  'auth.invalid_api_key': {
    status: 401,
    retryability: 'after_fix',
    summary:
      'The API key is not valid: unknown, revoked (a revoked key fails from the next request on), or not sent as `Bearer <key>` (another scheme, such as `Basic`).',
  },
  'auth.admin_required': {
    status: 403,
    retryability: 'after_fix',
    summary: 'The route is for admin API keys; this key has the `user` (or `approver`) role.',
  },
  'auth.approver_required': {
    status: 403,
    retryability: 'after_fix',
    summary: 'Approving or denying a call waiting for approval needs an `approver` or `admin` API key; this key has the `user` role.',
  },
  'key.not_found': { status: 404, retryability: 'no', summary: 'No API key with this id exists (`DELETE /v1/api-keys/:id`).' },
  'lease.not_found': {
    status: 404,
    retryability: 'no',
    summary: 'No sandbox with this id exists, or it belongs to another tenant (a user key is not told which).',
  },
  'lease.expired': {
    status: 410,
    retryability: 'no',
    summary: 'The sandbox reached its `expiresAt` and was released (its calls were cancelled).',
  },
  'lease.released': {
    status: 410,
    retryability: 'no',
    summary: 'The sandbox ended: released, or `failed` / `lost` (`details.status`); its calls and receipts stay readable.',
  },
  'lease.not_ready': {
    status: 409,
    retryability: 'safe',
    summary: 'The sandbox is still being created (`pending`, `starting`) or is being released (`releasing`).',
  },
  'lease.paused': {
    status: 409,
    retryability: 'after_fix',
    summary:
      'The sandbox is paused (every process frozen): calls and file transfers wait for `POST /v1/sandboxes/:id/resume`; `details.expiresAt` is when the pause runs out and the lease expires.',
  },
  'lease.ttl_exceeds_policy': {
    status: 400,
    retryability: 'after_fix',
    summary:
      "`ttlSeconds` is above the policy's `maxTtlSeconds`, or a renewal would take the lease's whole life (from `createdAt`) past it (`details.maxExpiresAt`).",
  },
  'lease.phase_unknown': {
    status: 400,
    retryability: 'after_fix',
    summary: "The sandbox's policy has no phase of this name (`details.phases` lists them; none: the policy is not phased).",
  },
  'lease.phase_behind': {
    status: 409,
    retryability: 'no',
    summary: 'The sandbox is in this phase or past it (`details.current`): phases move forward only.',
  },
  'lease.idempotency_conflict': {
    status: 409,
    retryability: 'after_fix',
    summary: 'The Idempotency-Key was used before with a different request body.',
  },
  'lease.create_failed': { status: 503, retryability: 'safe', summary: 'The sandbox could not be started; nothing was left behind.' },
  'lease.writable_root_invalid': {
    status: 400,
    retryability: 'after_fix',
    summary:
      'A writable root the lease asks for (`writableRoots[].path`) is not an absolute path in normal form, is `/` or lies under /proc, /sys, /dev, /run or /opt/sbx (the agent runtime), is asked twice, or overlaps a writable root of the policy, another asked root or a read-only mount (`details.reason`: `not_absolute`, `not_normal`, `reserved`, `duplicate`, `overlap`; `details.field`); nothing was created.',
  },
  'lease.writable_root_too_large': {
    status: 400,
    retryability: 'after_fix',
    summary:
      "A lease writable root's `sizeBytes` is above its policy rule's `maxSizeBytes`, or all writable roots together would exceed the policy's `resources.memoryBytes` (they are memory-backed); `details.maxSizeBytes` is what fits; nothing was created.",
  },
  'lease.writable_root_full': {
    status: 422,
    retryability: 'after_fix',
    summary:
      "The image's content at a writable root (`details.path`) does not fit the root's `sizeBytes`; ask for a larger root (lease roots) or a policy with one; nothing was left behind.",
  },
  'quota.exceeded': {
    status: 429,
    retryability: 'after_fix',
    summary:
      'The lease would take its tenant over a quota (`details`: `tenant`, `resource` = `sandboxes`, `cpus`, `memoryBytes`, `volumeBytes` or `snapshotBytes`, `limit`, `used`, `requested`); nothing was created. Release sandboxes, or ask an admin to raise the quota (`PUT /v1/tenants/:tenant/quota`).',
  },
  'volume.not_found': {
    status: 404,
    retryability: 'no',
    summary:
      'No volume with this name in the tenant, or it belongs to another tenant (a user key is not told which), or it is being deleted (`details.name`).',
  },
  'volume.exists': {
    status: 409,
    retryability: 'after_fix',
    summary: 'The tenant already has a volume with this name (`details.name`); names are per tenant.',
  },
  'volume.size_out_of_range': {
    status: 400,
    retryability: 'after_fix',
    summary:
      '`sizeBytes` is 0, negative, below the smallest volume (16 MiB) or above the largest this installation makes (`SBX_VOLUME_MAX_BYTES`, default 64 GiB); `details.min`, `details.max`.',
  },
  'volume.in_use': {
    status: 409,
    retryability: 'after_fix',
    summary: 'The volume is mounted by a sandbox that has not ended (`details.leases`); release them, then delete. Nothing was deleted.',
  },
  'volume.writer_conflict': {
    status: 409,
    retryability: 'after_fix',
    summary:
      'The volume is not `shared` and another live sandbox has it mounted read-write (`details.leaseId`); mount it `readOnly`, wait for that sandbox to end, or create the volume `shared`. Nothing was created.',
  },
  'volume.mounted_twice': {
    status: 400,
    retryability: 'after_fix',
    summary: 'One lease names the same volume twice in `volumes` (`details.name`, `details.field`); nothing was created.',
  },
  'volume.mount_path_reserved': {
    status: 400,
    retryability: 'after_fix',
    summary:
      'A volume mount path is `/`, or is, contains or lies under `/proc`, `/sys`, `/dev`, `/run/sbx`, `/run/secrets` or `/opt/sbx`, which sbx and the kernel own (`details.path`, `details.field`); nothing was created.',
  },
  'volume.mount_path_conflict': {
    status: 400,
    retryability: 'after_fix',
    summary:
      'A volume mount path is, contains or lies inside a writable root of the policy (`/workspace`, `/tmp`, ...) or another volume mount of the lease (`details.path`, `details.conflictsWith`, `details.field`); nothing was created.',
  },
  'volume.create_failed': {
    status: 503,
    retryability: 'safe',
    summary:
      "The volume's disk could not be made on the host (no space for its image file, mkfs or mount failed; `details.reason`); nothing was left behind.",
  },
  'snapshot.not_found': {
    status: 404,
    retryability: 'no',
    summary: 'No snapshot with this id exists, it expired or was deleted, or it belongs to another tenant (a user key is not told which).',
  },
  'snapshot.in_use': {
    status: 409,
    retryability: 'after_fix',
    summary: 'The snapshot cannot be deleted while a sandbox started from it is running (`details.leases`); release them first.',
  },
  'snapshot.capture_failed': {
    status: 422,
    retryability: 'after_fix',
    summary:
      'The sandbox could not be captured (a file in a writable root the tool user cannot read, or the engine refused; `details.path`, `details.stderr`); nothing was kept, the sandbox runs on.',
  },
  'preview.port_denied': {
    status: 403,
    retryability: 'after_fix',
    summary:
      "The sandbox's policy does not allow exposing this port (`ports.allowed`), or the port is one the sandbox agent serves itself; `details.allowed` lists what the policy allows.",
  },
  'preview.invalid_path': {
    status: 400,
    retryability: 'after_fix',
    summary:
      'The preview path has a `.` or `..` segment (also percent-encoded, or made one by an encoded slash or a backslash), a NUL or a malformed percent-encoding; nothing was sent to the sandbox.',
  },
  'preview.url_invalid': {
    status: 401,
    retryability: 'no',
    summary: "The preview URL's token is malformed or not signed by this installation (tampered, or minted under another preview key).",
  },
  'preview.url_expired': {
    status: 401,
    retryability: 'after_fix',
    summary: 'The preview URL has expired (`details.expiresAt`); mint a new one with `POST /v1/sandboxes/:id/ports/:port/url`.',
  },
  'preview.port_closed': {
    status: 502,
    retryability: 'safe',
    summary: 'Nothing listens on this port inside the sandbox (connection refused); start the server, then retry.',
  },
  'preview.upstream_failed': {
    status: 502,
    retryability: 'reconcile_first',
    summary:
      'The server in the sandbox could not be reached for another reason than a refusal, or closed the connection before a complete response head; the request may have reached it.',
  },
  'preview.agent_unreachable': {
    status: 504,
    retryability: 'safe',
    summary:
      "The sandbox's agent did not open the preview connection in time (10 s): the sandbox is paused, its agent is gone, or it predates previews.",
  },
  'call.not_found': { status: 404, retryability: 'no', summary: 'No call with this id exists in this sandbox.' },
  'approval.expired': {
    status: 409,
    retryability: 'no',
    summary:
      'The call waited for approval past its `expiresAt` (policy `tools.approvals.timeoutSeconds`): it ended `denied` with this code, nothing ran.',
  },
  'approval.not_pending': {
    status: 409,
    retryability: 'no',
    summary: 'The call does not wait for approval (`details.status`): it never did, or it was approved, denied or cancelled before.',
  },
  'approval.denied': {
    status: 403,
    retryability: 'no',
    summary: 'An approver denied the call (the result of a call that waited for approval; `details.by`); nothing ran.',
  },
  'call.finished': { status: 409, retryability: 'no', summary: 'The call has finished: it takes no more stdin.' },
  'call.stdin_not_piped': {
    status: 409,
    retryability: 'after_fix',
    summary: 'The call was not started with `stdin: "pipe"`, or its stdin was closed (`eof`) already.',
  },
  'call.stdin_full': {
    status: 429,
    retryability: 'safe',
    summary:
      'The call has as much stdin waiting for its process as it may hold (8 MiB not yet read; `details.pendingBytes`, `details.limitBytes`); nothing of this write was queued. Retry once the process has read some.',
  },
  'terminal.not_found': { status: 404, retryability: 'no', summary: 'No terminal with this id exists in this sandbox.' },
  'terminal.url_invalid': {
    status: 401,
    retryability: 'no',
    summary:
      "The terminal attach URL's token is malformed or not signed by this installation for this sandbox and terminal (tampered, or minted for another terminal).",
  },
  'terminal.url_expired': {
    status: 401,
    retryability: 'after_fix',
    summary:
      'The terminal attach URL has expired (`details.expiresAt`); mint a new one with `POST /v1/sandboxes/:id/terminals/:terminalId/url`.',
  },
  'terminal.closed': {
    status: 409,
    retryability: 'no',
    summary: 'The terminal has ended (its program exited, it was deleted or timed out): it takes no input.',
  },
  'terminal.limit_reached': {
    status: 429,
    retryability: 'after_fix',
    summary: "The sandbox has the policy's `terminals.max` terminals open; close one (DELETE) first.",
  },
  'call.id_conflict': { status: 409, retryability: 'after_fix', summary: 'The callId was used before with different tool or arguments.' },
  'receipt.not_found': { status: 404, retryability: 'no', summary: 'No receipt with this id exists.' },
  'session.not_found': { status: 404, retryability: 'no', summary: 'No shell session with this id exists in this sandbox.' },
  'session.ended': {
    status: 409,
    retryability: 'no',
    summary:
      'The shell session has ended (deleted, idle timeout, its shell exited, or a command could not be interrupted); start a new session.',
  },
  'session.limit_reached': {
    status: 429,
    retryability: 'after_fix',
    summary: 'The sandbox has as many running shell sessions as its policy allows (`sessions.max`, `details.max`); delete one first.',
  },
  'mcp.session_not_found': {
    status: 404,
    retryability: 'after_fix',
    summary:
      'No MCP session with this `Mcp-Session-Id` is open on this control plane for this API key (it ended, idled out, or another key opened it); start a new one with `initialize`.',
  },
  'mcp.session_limit': {
    status: 429,
    retryability: 'after_fix',
    summary:
      'This API key has as many MCP sessions open as it may (16; `details.open`, `details.max`), or the control plane has 512: end one (`DELETE /mcp`) first.',
  },
  'mcp.session_required': {
    status: 400,
    retryability: 'after_fix',
    summary: 'An MCP request other than `initialize` needs the `Mcp-Session-Id` header of an open session.',
  },
  'envd.token_invalid': {
    status: 401,
    retryability: 'no',
    summary:
      'The E2B `X-Access-Token` of an in-sandbox request is missing, malformed or not signed by this installation for the sandbox in `E2b-Sandbox-Id` (use the `envdAccessToken` that create or connect answered).',
  },
  'envd.token_expired': {
    status: 401,
    retryability: 'after_fix',
    summary: 'The E2B `X-Access-Token` has expired (`details.expiresAt`); connect to the sandbox again for a new one.',
  },
  'policy.not_found': {
    status: 404,
    retryability: 'after_fix',
    summary: 'No policy with this name (and version) exists, or it was deleted.',
  },
  'policy.invalid': {
    status: 400,
    retryability: 'after_fix',
    summary:
      'A policy (file or `PUT /v1/policies/:name` body) does not validate; `details.issues` lists every problem with its `path` in the policy.',
  },
  'policy.version_conflict': {
    status: 409,
    retryability: 'reconcile_first',
    summary:
      'The `version` in a policy PUT is not the next version (`details.expected`): another change came first; read the policy and retry.',
  },
  'policy.unenforceable': {
    status: 422,
    retryability: 'after_fix',
    summary: 'The policy asks for isolation this runtime cannot enforce; the sandbox is not started with less.',
  },
  'policy.nothing_proposed': {
    status: 409,
    retryability: 'no',
    summary:
      "No denied egress of the policy's leases calls for a change (`POST /v1/policies/:name/proposals/accept`): nothing was written.",
  },
  'policy.not_live_changeable': {
    status: 409,
    retryability: 'no',
    summary:
      'The policy version differs from the one the sandbox runs in sections that cannot change while it runs (`details.sections`: e.g. `resources`, `filesystem`, `phases`, or interception the sandbox was made without); only `network` and `secrets` change live. Nothing changed.',
  },
  'policy.pause_denied': {
    status: 403,
    retryability: 'no',
    summary:
      "The lease's policy allows it no (more) time paused: `resources.pausedTtlSeconds` is 0 or its pauses have used it up (`details.pausedTtlSeconds`, `details.pausedTotalMs`).",
  },
  'policy.mount_not_allowed': {
    status: 422,
    retryability: 'after_fix',
    summary:
      'A read-only mount of the policy does not exist on the host or resolves outside the mount allowlist (`SBX_MOUNT_ALLOWLIST`); `details.field` names it.',
  },
  'policy.secret_denied': {
    status: 403,
    retryability: 'after_fix',
    summary:
      'The policy does not allow this secret for the lease, or the call asks for a secret its lease was not granted or that its current phase or policy version withdrew (`details.name`, `details.withdrawn`).',
  },
  'secret.not_found': {
    status: 404,
    retryability: 'after_fix',
    summary: 'No secret with this name is stored (`details.name`); an admin stores it with `PUT /v1/secrets/:name`.',
  },
  'secret.unreadable': {
    status: 500,
    retryability: 'after_fix',
    summary: 'A stored secret does not decrypt with the configured key (the key changed or the record was altered); store the value again.',
  },
  'policy.writable_root_denied': {
    status: 403,
    retryability: 'after_fix',
    summary:
      "No pattern of the policy's `filesystem.leaseWritableRoots` allows a lease writable root at this path (`details.path`, `details.allowed`); nothing was created.",
  },
  'policy.tool_denied': {
    status: 403,
    retryability: 'after_fix',
    summary: 'The policy of the sandbox does not allow this tool or these arguments.',
  },
  'files.unsafe_entry': {
    status: 400,
    retryability: 'after_fix',
    summary: 'An uploaded tar entry is absolute, contains `..`, or links outside the target; `details.entry` names it.',
  },
  'files.invalid_archive': {
    status: 400,
    retryability: 'after_fix',
    summary:
      'The uploaded body is not a readable tar archive (cut short, a bad header or checksum, an impossible size); `details.entry` names the entry (null when none can be named) and `details.offset` the byte offset in the body; nothing was written.',
  },
  'files.type_conflict': {
    status: 409,
    retryability: 'after_fix',
    summary:
      'An upload entry is a file where the sandbox has a directory, or a directory where it has a file (or the target path itself is not a directory); `details.entry` names it (null for the target); nothing was written.',
  },
  'files.permission_denied': {
    status: 403,
    retryability: 'after_fix',
    summary:
      "The sandbox's tool user may not write or read that path (the OS reason, e.g. EACCES or a read-only filesystem, and the path are in `details`).",
  },
  'files.no_space': {
    status: 507,
    retryability: 'after_fix',
    summary: 'The sandbox filesystem ran out of space (ENOSPC) during an upload.',
  },
  'files.transfer_failed': {
    status: 422,
    retryability: 'after_fix',
    summary: 'tar inside the sandbox failed for another reason, or could not start; `details.stderr` or `details.reason` has its message.',
  },
  'files.agent_unreachable': {
    status: 504,
    retryability: 'safe',
    summary:
      "The sandbox's agent did not start the transfer in time (`SBX_PREVIEW_DIAL_TIMEOUT_MS`, default 10 s): its agent is stopped, hung or gone, or it predates transfers through the agent.",
  },
  'files.transfer_broken': {
    status: 502,
    retryability: 'safe',
    summary:
      "The transfer's stream from the sandbox's agent broke before the agent said how it ended (the tunnel closed, or a frame was malformed); an upload kept nothing.",
  },
  'watch.limit_exceeded': {
    status: 429,
    retryability: 'safe',
    summary:
      'The sandbox already has as many open file watches as its policy allows (`watch.maxConcurrent`; `details.limit`); nothing was opened. Close one (disconnect), or poll `GET /v1/sandboxes/:id/files/changes?since=`.',
  },
  'watch.resync_required': {
    status: 410,
    retryability: 'after_fix',
    summary:
      "The cursor (`since`, `Last-Event-ID`) is older than the oldest change the sandbox's change log still keeps, or is not one of its cursors (`details.since`, `details.oldestSeq`, `details.cursor`): changes were lost for this reader. List the tree again, then continue from `details.cursor`.",
  },
  'files.binary': {
    status: 422,
    retryability: 'after_fix',
    summary: 'read_file with `encoding: text` met a binary file; ask for `encoding: base64`.',
  },
  'files.conflict': {
    status: 409,
    retryability: 'reconcile_first',
    summary: "The file's sha256 is not `expectedSha256` (details: expected, actual); nothing was written.",
  },
  'files.exists': {
    status: 409,
    retryability: 'after_fix',
    summary: '`createOnly` (write_file), or `move` without `overwrite`, and the target exists; nothing was written.',
  },
  'files.dangling_symlink': {
    status: 422,
    retryability: 'after_fix',
    summary:
      'The path, or a directory on it, is a symbolic link whose target does not exist; `details.link` names the link, `details.target` its text, `details.resolved` where it points.',
  },
  'files.not_a_file': {
    status: 422,
    retryability: 'after_fix',
    summary: 'The path is a directory, device or other non-regular file where a file was needed.',
  },
  'files.too_large': {
    status: 413,
    retryability: 'after_fix',
    summary: 'The file is larger than the policy lets a file tool read or write.',
  },
  'files.not_empty': {
    status: 409,
    retryability: 'after_fix',
    summary: '`remove` of a directory that has entries, without `recursive`; nothing was removed.',
  },
  'files.root_protected': {
    status: 403,
    retryability: 'no',
    summary: 'The path is one of the file roots itself (`remove` or `move` of a root); nothing was changed.',
  },
  'process.not_found': {
    status: 404,
    retryability: 'no',
    summary: 'No process with this pid runs in the sandbox (it may have ended).',
  },
  'process.not_killable': {
    status: 403,
    retryability: 'no',
    summary: "The process is not the tool user's (init, the agent, its tool-user worker, another user's); nothing was signalled.",
  },
  'edit.no_match': { status: 422, retryability: 'after_fix', summary: '`oldString` does not occur in the file (details.count = 0).' },
  'edit.ambiguous_match': {
    status: 422,
    retryability: 'after_fix',
    summary: '`oldString` occurs more than once and `replaceAll` is not set (details.count).',
  },
  'image.mount_path_symlink': {
    status: 422,
    retryability: 'after_fix',
    summary:
      'The image has a symbolic link at or above a path sbx mounts over (a writable root, a volume, /opt/sbx, /run/sbx; `details.path`, `details.linkTarget`, `details.mountPath`); mounts do not follow links out of their path; nothing was created.',
  },
  'image.user_not_found': {
    status: 422,
    retryability: 'after_fix',
    summary: "The image's `User` (or its group) is not defined in the image's /etc/passwd (/etc/group); nothing was created.",
  },
  'tool.unavailable': {
    status: 422,
    retryability: 'after_fix',
    summary: "The program a tool needs is not in the sandbox's image (`details.program`); use an image that has it.",
  },
  'git.not_a_repository': { status: 422, retryability: 'after_fix', summary: 'The path is not inside a git work tree.' },
  'git.failed': { status: 422, retryability: 'after_fix', summary: 'git exited non-zero; details.stderr has its message.' },
  'files.not_found': { status: 404, retryability: 'no', summary: 'The requested path does not exist in the sandbox.' },
  'artifact.not_found': { status: 404, retryability: 'no', summary: 'No artifact with this id in this sandbox (or its retention ended).' },
  'artifact.corrupt': {
    status: 422,
    retryability: 'safe',
    summary: 'An artifact chunk or the whole artifact did not match its sha256; it was discarded.',
  },
  'artifact.incomplete': { status: 409, retryability: 'safe', summary: 'An artifact was closed before all its chunks arrived.' },
  'runtime.unavailable': { status: 503, retryability: 'safe', summary: 'The container runtime (Docker engine) does not answer.' },
  'capacity.exhausted': {
    status: 503,
    retryability: 'safe',
    summary: "No node of the cluster can take the sandbox now (`details.reason`: the scheduler's message); nothing was left behind.",
  },
  'runtime.unsupported': {
    status: 501,
    retryability: 'no',
    summary:
      'The runtime driver this control plane runs (`SBX_RUNTIME`) cannot do this (`details.feature` names it, `details.runtime` the driver); nothing was changed.',
  },
  'image.not_found': {
    status: 404,
    retryability: 'after_fix',
    summary:
      "The image is neither on the engine nor pullable from an allowlisted registry (`SBX_IMAGE_REGISTRIES`), or is another tenant's build; nothing was created.",
  },
  'image.invalid_reference': {
    status: 400,
    retryability: 'after_fix',
    summary:
      'The image reference is empty, over 255 characters, or not `[registry/]repository[:tag][@sha256:…]`; `details.field` names the field.',
  },
  'image.registry_not_allowed': {
    status: 400,
    retryability: 'after_fix',
    summary: 'The image reference names a registry that is not on `SBX_IMAGE_REGISTRIES`; `details.registry` names it.',
  },
  'image.pull_failed': {
    status: 502,
    retryability: 'safe',
    summary: "The image's registry is allowlisted but the pull failed (the registry did not answer or refused); nothing was created.",
  },
  'image.in_use': {
    status: 409,
    retryability: 'after_fix',
    summary: 'The image cannot be deleted: a sandbox runs from it (`details.leases`) or it is still being built.',
  },
  'image.build_failed': {
    status: 422,
    retryability: 'after_fix',
    summary:
      "The build failed (a step exited non-zero, a COPY outside the context, the time limit); the message is the builder's. Reported in the build's terminal `failed` event.",
  },
  'image.dockerfile_not_found': {
    status: 400,
    retryability: 'after_fix',
    summary: 'The build context holds no file at the Dockerfile path (`details.dockerfile`).',
  },
  'queue.unavailable': { status: 503, retryability: 'safe', summary: 'Redis does not answer.' },
  'execution.nonzero_exit': {
    status: 200,
    retryability: 'after_fix',
    summary: 'The command ran and exited with a non-zero code (`exitCode`).',
  },
  'execution.signaled': {
    status: 200,
    retryability: 'reconcile_first',
    summary: 'The command was killed by a signal it did not get from sbx.',
  },
  'execution.timeout': {
    status: 200,
    retryability: 'reconcile_first',
    summary: 'The call hit `timeoutMs`; its process group was killed; effects may be partial.',
  },
  'execution.cancelled': {
    status: 200,
    retryability: 'reconcile_first',
    summary: 'The call was cancelled; if it had started, effects may be partial.',
  },
  'execution.oom_killed': {
    status: 200,
    retryability: 'after_fix',
    summary: "The kernel killed the command for memory (the sandbox's memory limit); the agent and other calls go on.",
  },
  'resource.pids_exhausted': {
    status: 200,
    retryability: 'after_fix',
    summary: "The command failed after the sandbox's process limit (policy `resources.pids`) refused a fork.",
  },
  'resource.disk_full': {
    status: 200,
    retryability: 'after_fix',
    summary: 'The command failed with a writable root full (ENOSPC, policy `filesystem.writableRoots[].sizeBytes`).',
  },
  'execution.spawn_failed': { status: 200, retryability: 'after_fix', summary: 'The process could not be started; nothing ran.' },
  'execution.effect_unknown': {
    status: 200,
    retryability: 'reconcile_first',
    summary: 'An earlier attempt of this call started and its outcome was lost; it was not re-run.',
  },
  'execution.sandbox_lost': {
    status: 200,
    retryability: 'reconcile_first',
    summary: 'The sandbox went away (released, expired or crashed) while the call was pending or running.',
  },
  'internal.unexpected': {
    status: 500,
    retryability: 'safe',
    summary: 'A fault inside sbx; the log has the details under the request id.',
  },
} as const satisfies Record<string, CodeSpec>;

export type ErrorCode = keyof typeof ERROR_CODES;
export const ErrorCodeSchema = z.enum(Object.keys(ERROR_CODES) as [ErrorCode, ...ErrorCode[]]);

/** The error object as it crosses the wire (HTTP body `{error}` and queue messages). */
export const ErrorInfo = z.object({
  code: ErrorCodeSchema,
  /** The part before the dot of `code`. */
  domain: z.string(),
  message: z.string(),
  retryability: Retryability,
  details: z.record(z.string(), z.unknown()).optional(),
});
export type ErrorInfo = z.infer<typeof ErrorInfo>;

/** HTTP error body: `{error: ErrorInfo}`. */
export const ErrorBody = z.object({ error: ErrorInfo });

/**
 * The one error class of sbx. Throw it with a catalogue code; the API edge maps it to
 * `code`'s HTTP status and body `{error: {code, domain, message, retryability, details}}`.
 */
export class AppError extends Error {
  readonly code: ErrorCode;
  readonly details: Record<string, unknown> | undefined;

  constructor(code: ErrorCode, message: string, options: { details?: Record<string, unknown>; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'AppError';
    this.code = code;
    this.details = options.details;
  }

  get status(): number {
    return ERROR_CODES[this.code].status;
  }

  get retryability(): Retryability {
    return ERROR_CODES[this.code].retryability;
  }

  toInfo(): ErrorInfo {
    return errorInfo(this.code, this.message, this.details);
  }
}

/** Builds the wire form of an error from a catalogue code. */
export function errorInfo(code: ErrorCode, message: string, details?: Record<string, unknown>): ErrorInfo {
  const info: ErrorInfo = { code, domain: code.split('.')[0]!, message, retryability: ERROR_CODES[code].retryability };
  if (details !== undefined) info.details = details;
  return info;
}

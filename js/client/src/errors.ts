// Errors of weir's client: one class per Weir-Error wire code.
//
// Every error reply of weir server is a status, one line of text and a
// stable code in the Weir-Error header (docs/protocol.md, the table at the
// top; api/errors.go holds it once). errorFromReply turns a reply into the
// class of its code, so callers catch what they can act on:
//
//   try { await w.write('late') } catch (e) {
//     if (e instanceof FencedError) console.log('a newer attempt runs:', e.currentAttempt)
//   }
//
// The status and the code are the contract; the wording may change. A reply
// without a code (a proxy's, or a browser that was not let read the header)
// maps by its status.

/** What an error knows of the request and reply it came from. */
export interface WeirErrorInit {
  /** The HTTP status; 0 when no reply came. */
  status?: number;
  /** The Weir-Error code; default the class's own. */
  code?: string;
  /** The reply's headers (names in any case). */
  headers?: Headers | Readonly<Record<string, string>>;
  method?: string;
  url?: string;
  /** Overrides the class's retryability (an unknown code's 5xx, say). */
  retryable?: boolean;
  cause?: unknown;
}

/**
 * WeirError is every failure this package reports, so one `instanceof`
 * tells weir's errors from the caller's own; its subclass says what
 * happened and whether sending the same request again may help.
 */
export class WeirError extends Error {
  /** The wire code the class stands for ("" for groups and local errors). */
  static readonly code: string = '';
  /** Whether the same request, sent again later, may succeed. */
  static readonly retryable: boolean = false;

  override name = 'WeirError';
  /** The HTTP status; 0 when no reply came (a network failure, a local check). */
  readonly status: number;
  /** The Weir-Error code of the reply (for a reply without one, the class's). */
  readonly code: string;
  /** Whether the same request, sent again later, may succeed. */
  readonly retryable: boolean;
  readonly method: string;
  readonly url: string;
  /** The reply's headers, names lower-cased (`weir-attempt`, `retry-after` …). */
  readonly headers: Readonly<Record<string, string>>;

  constructor(message: string, init: WeirErrorInit = {}) {
    super(message, init.cause === undefined ? undefined : { cause: init.cause });
    const cls = new.target as typeof WeirError;
    this.status = init.status ?? 0;
    this.code = init.code || cls.code;
    this.retryable = init.retryable ?? cls.retryable;
    this.method = init.method ?? '';
    this.url = init.url ?? '';
    this.headers = lowerHeaders(init.headers);
  }

  /** A reply header as an integer, or undefined. */
  protected intHeader(name: string): number | undefined {
    const v = this.headers[name]?.trim();
    return v !== undefined && /^\d+$/.test(v) ? Number(v) : undefined;
  }
}

function lowerHeaders(h: WeirErrorInit['headers']): Record<string, string> {
  const out: Record<string, string> = {};
  if (!h) return out;
  if (typeof (h as Headers).forEach === 'function' && typeof (h as Headers).get === 'function') {
    (h as Headers).forEach((v, k) => (out[k.toLowerCase()] = v));
  } else {
    for (const [k, v] of Object.entries(h)) out[k.toLowerCase()] = v;
  }
  return out;
}

// Local errors and groups.

/**
 * No reply: the server could not be reached, the connection dropped, or no
 * byte came within the timeout, and retrying (where the request allowed
 * it) did not help in time. `cause` holds the last network error.
 */
export class WeirConnectionError extends WeirError {
  static override readonly retryable: boolean = true;
  override name = 'WeirConnectionError';
}

/**
 * A reply that does not follow weir's protocol (HTML where ndjson was due, a
 * malformed record, an offset of another stream): a proxy or app route in
 * the way, or a bug. Sending it again will not help.
 */
export class ProtocolError extends WeirError {
  override name = 'ProtocolError';
}

/** 400 `bad_request`: a request that can never succeed as it is; the other 400 codes subclass it. */
export class BadRequestError extends WeirError {
  static override readonly code: string = 'bad_request';
  override name = 'BadRequestError';
}

/** 503: the server is stopping or a budget is spent; the 503 codes subclass it, so one catch waits them all out. */
export class UnavailableError extends WeirError {
  static override readonly retryable: boolean = true;
  override name = 'UnavailableError';
}

// One class per wire code, in the order of api/errors.go.

/** 403 `fenced`: a zombie attempt; a newer attempt of the writer began, so this one must stop writing. */
export class FencedError extends WeirError {
  static override readonly code: string = 'fenced';
  override name = 'FencedError';
  /** The writer's current attempt (Weir-Attempt): the one that may write now. */
  get currentAttempt(): number | undefined {
    return this.intHeader('weir-attempt');
  }
}

/** 403 `stale_epoch`: an idempotent producer's epoch is older than the current one. */
export class StaleEpochError extends WeirError {
  static override readonly code: string = 'stale_epoch';
  override name = 'StaleEpochError';
  /** The producer's current epoch (Producer-Epoch). */
  get currentEpoch(): number | undefined {
    return this.intHeader('producer-epoch');
  }
}

/** 409 `in_flight`: the same Idempotency-Key is still being served; sent again later it gets that reply. */
export class InFlightError extends WeirError {
  static override readonly code: string = 'in_flight';
  static override readonly retryable: boolean = true;
  override name = 'InFlightError';
}

/** 409 `conflict`: the stream at the path has another configuration or content type. */
export class ConflictError extends WeirError {
  static override readonly code: string = 'conflict';
  override name = 'ConflictError';
}

/** 410 `gone`: a hook that takes no more payloads, a run that ended, or a soft-deleted stream. */
export class GoneError extends WeirError {
  static override readonly code: string = 'gone';
  override name = 'GoneError';
}

/** 404 `unknown_workflow`: no engine of the server registered the workflow: a typo or a deploy missing it. */
export class UnknownWorkflowError extends WeirError {
  static override readonly code: string = 'unknown_workflow';
  override name = 'UnknownWorkflowError';
}

/** 409 `world_conflict`: a World event the run's state refuses (a replay's normal path). */
export class WorldConflictError extends WeirError {
  static override readonly code: string = 'world_conflict';
  override name = 'WorldConflictError';
}

/** 410 `run_expired`: a World event that needs a live run, on a run that ended. */
export class RunExpiredError extends WeirError {
  static override readonly code: string = 'run_expired';
  override name = 'RunExpiredError';
}

/** 425 `too_early`: a World step started before its retryAfter; wait retryAfter seconds. */
export class TooEarlyError extends WeirError {
  static override readonly code: string = 'too_early';
  static override readonly retryable: boolean = true;
  override name = 'TooEarlyError';
  /** Seconds to wait before sending it again (Retry-After). */
  get retryAfter(): number | undefined {
    return this.intHeader('retry-after');
  }
}

/** 404 `run_not_found`: an unknown World run. */
export class RunNotFoundError extends WeirError {
  static override readonly code: string = 'run_not_found';
  override name = 'RunNotFoundError';
}

/** 404 `hook_not_found`: an unknown or disposed World hook. */
export class HookNotFoundError extends WeirError {
  static override readonly code: string = 'hook_not_found';
  override name = 'HookNotFoundError';
}

/** 404 `step_not_found`: an unknown World step. */
export class StepNotFoundError extends WeirError {
  static override readonly code: string = 'step_not_found';
  override name = 'StepNotFoundError';
}

/** 404 `wait_not_found`: an unknown World wait. */
export class WaitNotFoundError extends WeirError {
  static override readonly code: string = 'wait_not_found';
  override name = 'WaitNotFoundError';
}

/** 422 `run_not_supported`: a World run of a newer spec than the server's. */
export class RunNotSupportedError extends WeirError {
  static override readonly code: string = 'run_not_supported';
  override name = 'RunNotSupportedError';
}

/** 400 `invalid_event`: a malformed World event. */
export class InvalidEventError extends BadRequestError {
  static override readonly code: string = 'invalid_event';
  override name = 'InvalidEventError';
}

/** 401 `unsigned`: a World delivery without a valid, fresh signature. */
export class UnsignedError extends WeirError {
  static override readonly code: string = 'unsigned';
  override name = 'UnsignedError';
}

/** 503 `no_delivery`: a World queue message to a server without a World secret: it could never be delivered, so it is not retried. */
export class NoDeliveryError extends UnavailableError {
  static override readonly code: string = 'no_delivery';
  static override readonly retryable: boolean = false;
  override name = 'NoDeliveryError';
}

/** 404 `unknown_writer`: a commit or abort of a writer that never wrote on the stream. */
export class UnknownWriterError extends WeirError {
  static override readonly code: string = 'unknown_writer';
  override name = 'UnknownWriterError';
}

/** 404 `not_found`: no such run or stream (or it expired), no hook holds the token (yet), or a run event never set. */
export class NotFoundError extends WeirError {
  static override readonly code: string = 'not_found';
  override name = 'NotFoundError';
}

/** 422 `chunk_conflict`: an acknowledged seq came back with other bytes: two writers share an id and attempt. */
export class ChunkConflictError extends WeirError {
  static override readonly code: string = 'chunk_conflict';
  override name = 'ChunkConflictError';
}

/** 422 `key_reused`: an Idempotency-Key sent again with another request: the key names two things. */
export class KeyReusedError extends WeirError {
  static override readonly code: string = 'key_reused';
  override name = 'KeyReusedError';
}

/** 409 `gap`: the request's first seq is past the writer's next one: chunks went missing. */
export class GapError extends WeirError {
  static override readonly code: string = 'gap';
  override name = 'GapError';
  /** The seq the server expects next (Weir-Expected-Seq). */
  get expected(): number | undefined {
    return this.intHeader('weir-expected-seq');
  }
}

/** 409 `closed`: the stream is closed and takes nothing new. */
export class ClosedError extends WeirError {
  static override readonly code: string = 'closed';
  override name = 'ClosedError';
  /** The closed stream's final offset (Stream-Next-Offset). */
  get nextOffset(): string | undefined {
    return this.headers['stream-next-offset'];
  }
}

/** 409 `writer_finished`: the writer committed or was aborted for good; it takes no new seq or attempt. */
export class WriterFinishedError extends WeirError {
  static override readonly code: string = 'writer_finished';
  override name = 'WriterFinishedError';
}

/** 409 `writer_mode`: a writer that wrote with attempt 0 used with attempts, or the reverse. */
export class WriterModeError extends WeirError {
  static override readonly code: string = 'writer_mode';
  override name = 'WriterModeError';
}

/** 409 `run_conflict`: the run id is taken by a run of another workflow. */
export class RunConflictError extends WeirError {
  static override readonly code: string = 'run_conflict';
  override name = 'RunConflictError';
}

/** 409 `not_resumable`: a resume of a run that did not fail and was not cancelled. */
export class NotResumableError extends WeirError {
  static override readonly code: string = 'not_resumable';
  override name = 'NotResumableError';
}

/** 409 `hook_in_use`: a live hook of another run holds the token. */
export class HookInUseError extends WeirError {
  static override readonly code: string = 'hook_in_use';
  override name = 'HookInUseError';
}

/** 409 `limiter_in_use`: a delete of a limiter a slot is held in, someone waits for, or a run is queued in. */
export class LimiterInUseError extends WeirError {
  static override readonly code: string = 'limiter_in_use';
  override name = 'LimiterInUseError';
}

/** 409 `lease_lost`: another worker holds the run. */
export class LeaseLostError extends WeirError {
  static override readonly code: string = 'lease_lost';
  override name = 'LeaseLostError';
}

/** 409 `producer_gap`: an idempotent producer skipped seqs. */
export class ProducerGapError extends WeirError {
  static override readonly code: string = 'producer_gap';
  override name = 'ProducerGapError';
  /** The producer seq the server expects (Producer-Expected-Seq). */
  get expected(): number | undefined {
    return this.intHeader('producer-expected-seq');
  }
  /** The producer seq the server got (Producer-Received-Seq). */
  get received(): number | undefined {
    return this.intHeader('producer-received-seq');
  }
}

/** 409 `stream_seq`: a Stream-Seq that does not sort after the last one. */
export class StreamSeqError extends WeirError {
  static override readonly code: string = 'stream_seq';
  override name = 'StreamSeqError';
}

/** 413 `too_large`: a chunk, body, append or payload over the server's limits: send less at once. */
export class TooLargeError extends WeirError {
  static override readonly code: string = 'too_large';
  override name = 'TooLargeError';
}

/** 413 `stream_full`: the stream is at its byte limit; a smaller request does not help. */
export class StreamFullError extends WeirError {
  static override readonly code: string = 'stream_full';
  override name = 'StreamFullError';
}

/** 507 `quota`: the server holds as many streams as it may; delete one first. */
export class QuotaError extends WeirError {
  static override readonly code: string = 'quota';
  override name = 'QuotaError';
}

/** 400 `producer_epoch_seq`: a new producer epoch that does not start at seq 0. */
export class ProducerEpochSeqError extends BadRequestError {
  static override readonly code: string = 'producer_epoch_seq';
  override name = 'ProducerEpochSeqError';
}

/** 400 `invalid`: parameters that can never succeed (an offset past the tail, a bad topic …). */
export class InvalidError extends BadRequestError {
  static override readonly code: string = 'invalid';
  override name = 'InvalidError';
}

/**
 * 400 `invalid_name`: a run id, stream name, topic, limiter, queue or schedule name its rule
 * refuses (control bytes, `/ ? # %`, too long, a prefix weir mints: `sched:`, `idem_`, `wrun_`).
 */
export class InvalidNameError extends InvalidError {
  static override readonly code: string = 'invalid_name';
  override name = 'InvalidNameError';
}

/** 401 `unauthorized`: no bearer token, or the wrong one. */
export class UnauthorizedError extends WeirError {
  static override readonly code: string = 'unauthorized';
  override name = 'UnauthorizedError';
}

/** 405 `method_not_allowed`: the path does not take the method (a write to a run's stream, say). */
export class MethodNotAllowedError extends WeirError {
  static override readonly code: string = 'method_not_allowed';
  override name = 'MethodNotAllowedError';
}

/** 403 `forbidden`: a Host the server does not answer to, or a write from a page of an origin not let in (--cors-origin). */
export class ForbiddenError extends WeirError {
  static override readonly code: string = 'forbidden';
  override name = 'ForbiddenError';
}

/** 415 `unsupported_media_type`: a body the endpoint does not take (the runs API takes application/json). */
export class UnsupportedMediaTypeError extends WeirError {
  static override readonly code: string = 'unsupported_media_type';
  override name = 'UnsupportedMediaTypeError';
}

/** 503 `busy`: a budget of the server is spent; try again after retryAfter seconds. */
export class BusyError extends UnavailableError {
  static override readonly code: string = 'busy';
  override name = 'BusyError';
  /** Seconds to wait before sending it again (Retry-After). */
  get retryAfter(): number | undefined {
    return this.intHeader('retry-after');
  }
}

/** 503 `store_closed`: the server's store is closed (it is stopping). */
export class StoreClosedError extends UnavailableError {
  static override readonly code: string = 'store_closed';
  override name = 'StoreClosedError';
}

/** 503 `engine_closed`: the server's engine is stopping. */
export class EngineClosedError extends UnavailableError {
  static override readonly code: string = 'engine_closed';
  override name = 'EngineClosedError';
}

/** 500 `internal`: a failure of the server (logged there), not of the request. */
export class InternalError extends WeirError {
  static override readonly code: string = 'internal';
  static override readonly retryable: boolean = true;
  override name = 'InternalError';
}

/** A class of this module: what errorFromReply picks from. */
export type WeirErrorClass = (new (message: string, init?: WeirErrorInit) => WeirError) & {
  readonly code: string;
  readonly retryable: boolean;
};

const classes: WeirErrorClass[] = [
  FencedError, StaleEpochError, InFlightError, ConflictError, GoneError, UnknownWorkflowError,
  WorldConflictError, RunExpiredError, TooEarlyError, RunNotFoundError, HookNotFoundError,
  StepNotFoundError, WaitNotFoundError, RunNotSupportedError, InvalidEventError, UnsignedError,
  NoDeliveryError, UnknownWriterError, NotFoundError, ChunkConflictError, KeyReusedError, GapError,
  ClosedError, WriterFinishedError, WriterModeError, RunConflictError, NotResumableError, HookInUseError, LimiterInUseError, LeaseLostError,
  ProducerGapError, StreamSeqError, TooLargeError, StreamFullError, QuotaError, ProducerEpochSeqError,
  InvalidError, InvalidNameError, BadRequestError, UnauthorizedError, MethodNotAllowedError, ForbiddenError,
  UnsupportedMediaTypeError, BusyError, StoreClosedError, EngineClosedError, InternalError,
];

/** Every wire code and its class: the server's table (api/errors.go), checked against it by the tests. */
export const CODES: Readonly<Record<string, WeirErrorClass>> = Object.freeze(
  Object.fromEntries(classes.map((c) => [c.code, c])),
);

// A reply with no (or an unknown) code, from an older server or a proxy.
const byStatus: Record<number, WeirErrorClass> = {
  400: BadRequestError,
  401: UnauthorizedError,
  403: ForbiddenError,
  404: NotFoundError,
  405: MethodNotAllowedError,
  410: GoneError,
  413: TooLargeError,
  415: UnsupportedMediaTypeError,
  429: BusyError,
  500: InternalError,
  502: UnavailableError,
  503: UnavailableError,
  504: UnavailableError,
  507: QuotaError,
};

/**
 * Returns the error a reply with an error status stands for: the class of
 * its Weir-Error code; without a known code, the class its status and
 * headers point to (a 409 with Stream-Closed is a ClosedError, a 403 with
 * Weir-Attempt a FencedError). The message is the body's first line, with
 * the request and the status, so a log line says it all.
 */
export function errorFromReply(
  status: number,
  headers: Headers | Readonly<Record<string, string>>,
  body: string,
  method = '',
  url = '',
): WeirError {
  const h = lowerHeaders(headers);
  const code = (h['weir-error'] ?? '').trim();
  let cls: WeirErrorClass | undefined = CODES[code];
  if (!cls) {
    if (status === 409 && (h['stream-closed'] ?? '').toLowerCase() === 'true') cls = ClosedError;
    else if (status === 409 && 'weir-expected-seq' in h) cls = GapError;
    else if (status === 403 && 'weir-attempt' in h) cls = FencedError;
    else cls = byStatus[status] ?? WeirError;
  }
  const line = body.trim().split(/\r?\n/, 1)[0]?.slice(0, 1000) || `HTTP ${status}`;
  const where = method ? `${method} ${pathOf(url)}: ` : '';
  const msg = `${where}${line} (HTTP ${status}${code ? ' ' + code : ''})`;
  const init: WeirErrorInit = { status, code, headers: h, method, url };
  if (cls === WeirError && status >= 500) init.retryable = true;
  return new cls(msg, init);
}

/** The path and query of a URL, for messages (the host is the caller's). */
export function pathOf(url: string): string {
  try {
    const u = new URL(url);
    return u.pathname + u.search;
  } catch {
    return url;
  }
}

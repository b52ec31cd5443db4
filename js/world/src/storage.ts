import { EntityConflictError } from '@workflow/errors';
import { EventSchema, HookSchema, StepSchema, WaitSchema, WorkflowRunSchema } from '@workflow/world';
import { decode, encode } from './codec';
import type { Config } from './config';
import { send, sendJSON, seg } from './http';
import type { Shared } from './shared';
import { ulid } from './ulid';

// runs, steps, events, hooks: each a call of weir's World API, its reply
// parsed with @workflow/world's schemas (dates become Dates, bytes
// Uint8Arrays), as world-local's are.

type Obj = Record<string, unknown>;

interface Pagination {
  limit?: number;
  cursor?: string | null;
  sortOrder?: 'asc' | 'desc';
}

interface ListParams {
  pagination?: Pagination;
  resolveData?: 'all' | 'none';
}

interface Page<T> {
  data: T[];
  cursor: string | null;
  hasMore: boolean;
}

const parseRun = (v: unknown) => WorkflowRunSchema.parse(v);
const parseStep = (v: unknown) => StepSchema.parse(v);
const parseHook = (v: unknown) => HookSchema.parse(v);
const parseWait = (v: unknown) => WaitSchema.parse(v);
const parseEvent = (v: unknown) => EventSchema.parse(v);

function pageOf<T>(text: string, parse: (v: unknown) => T): Page<T> {
  const p = decode<{ data: unknown[]; cursor: string | null; hasMore: boolean }>(text);
  return { data: p.data.map(parse), cursor: p.cursor ?? null, hasMore: Boolean(p.hasMore) };
}

function listQuery(p: ListParams | undefined): Record<string, string | number | undefined> {
  return {
    limit: p?.pagination?.limit,
    cursor: p?.pagination?.cursor ?? undefined,
    sortOrder: p?.pagination?.sortOrder,
    resolveData: p?.resolveData,
  };
}

/** The EventResult of an events.create, parsed. */
function parseResult(v: Obj): Obj {
  const out: Obj = {};
  if (v.event) out.event = parseEvent(v.event);
  if (v.run) out.run = parseRun(v.run);
  if (v.step) out.step = parseStep(v.step);
  if (v.hook) out.hook = parseHook(v.hook);
  if (v.wait) out.wait = parseWait(v.wait);
  if (Array.isArray(v.events)) {
    out.events = v.events.map(parseEvent);
    out.cursor = (v.cursor as string | undefined) ?? null;
    out.hasMore = Boolean(v.hasMore);
  }
  return out;
}

/** Events whose outcome commits or aborts a step's stream writes. */
const STEP_OUTCOMES = new Set(['step_completed', 'step_failed', 'step_retrying']);

/** The World's Storage on weir. */
export function createStorage(cfg: Config, shared: Shared) {
  const get = <T>(path: string, parse: (v: unknown) => T, query: Record<string, string | number | undefined> = {}, subject?: string) =>
    sendJSON(cfg, { method: 'GET', path, query, idempotent: true, ...(subject !== undefined && { subject }) }, (t) => parse(decode(t)));

  const events = {
    async create(runId: string | null, data: Obj, params?: { resolveData?: 'all' | 'none' }): Promise<Obj> {
      const type = String(data.eventType);
      let id = runId;
      if (id === null) {
        if (type !== 'run_created') throw new Error('@weirhq/world: events.create(null, …) is for run_created only');
        // Minted here, so that a retry cannot create a second run.
        id = ulid('wrun');
      }
      const correlationId = typeof data.correlationId === 'string' ? data.correlationId : undefined;
      if (STEP_OUTCOMES.has(type) && correlationId) {
        // v4 hands a step's stream writes over after its outcome: wait
        // for them, so that they land before the commit or abort.
        await shared.streams.barrier(id, correlationId);
      }
      const body = encode({
        eventType: type,
        ...(correlationId !== undefined && { correlationId }),
        ...(data.eventData !== undefined && { eventData: data.eventData }),
        ...(typeof data.specVersion === 'number' && { specVersion: data.specVersion }),
      });
      const query = { resolveData: params?.resolveData };
      let reply;
      try {
        // A retry after a lost reply meets a conflict (a step or a run
        // ended twice), which the runtime takes as done; only a payload
        // delivered to a hook would count twice.
        const idempotent = type !== 'hook_received';
        reply = await send(cfg, { method: 'POST', path: `world/runs/${seg(id)}/events`, query, json: body, idempotent, subject: id });
      } catch (err) {
        if (type === 'run_created' && runId === null && EntityConflictError.is(err)) {
          // A retry after a lost reply: the first try created the run.
          const run = await storage.runs.get(id, params);
          return { run };
        }
        throw err;
      }
      const out = parseResult(decode<Obj>(await reply.res.text()));
      if (type === 'step_started' && correlationId && out.step) {
        shared.streams.started(id, correlationId, Number((out.step as Obj).attempt));
      }
      return out;
    },
    get: (runId: string, eventId: string, params?: { resolveData?: 'all' | 'none' }) =>
      get(`world/runs/${seg(runId)}/events/${seg(eventId)}`, parseEvent, { resolveData: params?.resolveData }),
    list: (params: ListParams & { runId: string }) =>
      sendJSON(cfg, { method: 'GET', path: `world/runs/${seg(params.runId)}/events`, query: listQuery(params), idempotent: true, subject: params.runId }, (t) =>
        pageOf(t, parseEvent),
      ),
    listByCorrelationId: (params: ListParams & { correlationId: string; runId?: string }) =>
      sendJSON(
        cfg,
        { method: 'GET', path: 'world/events', query: { ...listQuery(params), correlationId: params.correlationId, runId: params.runId }, idempotent: true },
        (t) => pageOf(t, parseEvent),
      ),
  };

  const storage = {
    runs: {
      get: (id: string, params?: { resolveData?: 'all' | 'none' }) =>
        get(`world/runs/${seg(id)}`, parseRun, { resolveData: params?.resolveData }, id),
      list: (params?: ListParams & { workflowName?: string; status?: string }) =>
        sendJSON(
          cfg,
          { method: 'GET', path: 'world/runs', query: { ...listQuery(params), workflowName: params?.workflowName, status: params?.status }, idempotent: true },
          (t) => pageOf(t, parseRun),
        ),
    },
    steps: {
      get: (runId: string | undefined, stepId: string, params?: { resolveData?: 'all' | 'none' }) =>
        get(runId ? `world/runs/${seg(runId)}/steps/${seg(stepId)}` : `world/steps/${seg(stepId)}`, parseStep, { resolveData: params?.resolveData }),
      list: (params: ListParams & { runId: string }) =>
        sendJSON(cfg, { method: 'GET', path: `world/runs/${seg(params.runId)}/steps`, query: listQuery(params), idempotent: true, subject: params.runId }, (t) =>
          pageOf(t, parseStep),
        ),
    },
    events,
    hooks: {
      get: (hookId: string, params?: { resolveData?: 'all' | 'none' }) =>
        get(`world/hooks/${seg(hookId)}`, parseHook, { resolveData: params?.resolveData }, hookId),
      getByToken: (token: string, params?: { resolveData?: 'all' | 'none' }) =>
        get('world/hooks', parseHook, { token, resolveData: params?.resolveData }, token),
      list: (params: ListParams & { runId?: string }) =>
        sendJSON(cfg, { method: 'GET', path: 'world/hooks', query: { ...listQuery(params), runId: params?.runId }, idempotent: true }, (t) =>
          pageOf(t, parseHook),
        ),
    },
  };
  return storage;
}

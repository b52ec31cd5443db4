import { EntityConflictError } from '@workflow/errors';
import {
  EventSchema,
  HookSchema,
  StepSchema,
  WaitSchema,
  WorkflowRunSchema,
  type Event,
  type CreateEventRequest,
  type EventResult,
  type RunCreatedEventRequest,
  type GetStepParams,
  type GetWorkflowRunParams,
  type Hook,
  type ListEventsByCorrelationIdParams,
  type ListEventsParams,
  type ListHooksParams,
  type ListWorkflowRunsParams,
  type ListWorkflowRunStepsParams,
  type PaginatedResponse,
  type Step,
  type StepWithoutData,
  type Storage,
  type WorkflowRun,
  type WorkflowRunWithoutData,
} from '@workflow/world';
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

const parseRun = (v: unknown): WorkflowRun => WorkflowRunSchema.parse(v);
const parseStep = (v: unknown): Step => StepSchema.parse(v);
const parseHook = (v: unknown): Hook => HookSchema.parse(v);
const parseWait = (v: unknown) => WaitSchema.parse(v);
const parseEvent = (v: unknown): Event => EventSchema.parse(v);
// With resolveData none weir leaves the data out: undefined, as the types
// say.
const runWithoutData = (v: unknown): WorkflowRunWithoutData => ({ ...parseRun(v), input: undefined, output: undefined });
const stepWithoutData = (v: unknown): StepWithoutData => ({ ...parseStep(v), input: undefined, output: undefined });
const none = (p: { resolveData?: 'all' | 'none' } | undefined) => p?.resolveData === 'none';

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
function parseResult(v: Obj): EventResult {
  const out: EventResult = {};
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

  const events: Storage['events'] = {
    async create(runId: string | null, data: RunCreatedEventRequest | CreateEventRequest, params?: { resolveData?: 'all' | 'none' }): Promise<EventResult> {
      const type = String(data.eventType);
      let id = runId;
      if (id === null) {
        if (type !== 'run_created') throw new Error('@weirhq/world: events.create(null, …) is for run_created only');
        // Minted here, so that a retry cannot create a second run.
        id = ulid('wrun');
      }
      const correlationId = 'correlationId' in data && typeof data.correlationId === 'string' ? data.correlationId : undefined;
      if (STEP_OUTCOMES.has(type) && correlationId) {
        // v4 hands a step's stream writes over after its outcome: wait
        // for them, so that they land before the commit or abort.
        await shared.streams.barrier(id, correlationId);
      }
      const body = encode({
        eventType: type,
        ...(correlationId !== undefined && { correlationId }),
        ...('eventData' in data && data.eventData !== undefined && { eventData: data.eventData }),
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
          const run = await getRun(id, { resolveData: 'all' });
          return { run };
        }
        throw err;
      }
      const out = parseResult(decode<Obj>(await reply.res.text()));
      if (type === 'step_started' && correlationId && out.step) {
        shared.streams.started(id, correlationId, out.step.attempt);
      }
      return out;
    },
    get: (runId: string, eventId: string, params?: { resolveData?: 'all' | 'none' }) =>
      get(`world/runs/${seg(runId)}/events/${seg(eventId)}`, parseEvent, { resolveData: params?.resolveData }),
    list: (params: ListEventsParams): Promise<PaginatedResponse<Event>> =>
      sendJSON(cfg, { method: 'GET', path: `world/runs/${seg(params.runId)}/events`, query: listQuery(params), idempotent: true, subject: params.runId }, (t) =>
        pageOf(t, parseEvent),
      ),
    listByCorrelationId: (params: ListEventsByCorrelationIdParams & { runId?: string }): Promise<PaginatedResponse<Event>> =>
      sendJSON(
        cfg,
        { method: 'GET', path: 'world/events', query: { ...listQuery(params), correlationId: params.correlationId, runId: params.runId }, idempotent: true },
        (t) => pageOf(t, parseEvent),
      ),
  };

  // The World's overloads: with resolveData none, the data is undefined.
  function getRun(id: string, params: GetWorkflowRunParams & { resolveData: 'none' }): Promise<WorkflowRunWithoutData>;
  function getRun(id: string, params?: GetWorkflowRunParams & { resolveData?: 'all' }): Promise<WorkflowRun>;
  function getRun(id: string, params?: GetWorkflowRunParams): Promise<WorkflowRun | WorkflowRunWithoutData>;
  function getRun(id: string, params?: GetWorkflowRunParams): Promise<WorkflowRun | WorkflowRunWithoutData> {
    return get<WorkflowRun | WorkflowRunWithoutData>(`world/runs/${seg(id)}`, none(params) ? runWithoutData : parseRun, { resolveData: params?.resolveData }, id);
  }
  function listRuns(params: ListWorkflowRunsParams & { resolveData: 'none' }): Promise<PaginatedResponse<WorkflowRunWithoutData>>;
  function listRuns(params?: ListWorkflowRunsParams & { resolveData?: 'all' }): Promise<PaginatedResponse<WorkflowRun>>;
  function listRuns(params?: ListWorkflowRunsParams): Promise<PaginatedResponse<WorkflowRun | WorkflowRunWithoutData>>;
  function listRuns(params?: ListWorkflowRunsParams): Promise<PaginatedResponse<WorkflowRun | WorkflowRunWithoutData>> {
    const query = { ...listQuery(params), workflowName: params?.workflowName, status: params?.status };
    return sendJSON(cfg, { method: 'GET', path: 'world/runs', query, idempotent: true }, (t) =>
      pageOf<WorkflowRun | WorkflowRunWithoutData>(t, none(params) ? runWithoutData : parseRun),
    );
  }
  function getStep(runId: string | undefined, stepId: string, params: GetStepParams & { resolveData: 'none' }): Promise<StepWithoutData>;
  function getStep(runId: string | undefined, stepId: string, params?: GetStepParams & { resolveData?: 'all' }): Promise<Step>;
  function getStep(runId: string | undefined, stepId: string, params?: GetStepParams): Promise<Step | StepWithoutData>;
  function getStep(runId: string | undefined, stepId: string, params?: GetStepParams): Promise<Step | StepWithoutData> {
    const path = runId ? `world/runs/${seg(runId)}/steps/${seg(stepId)}` : `world/steps/${seg(stepId)}`;
    return get<Step | StepWithoutData>(path, none(params) ? stepWithoutData : parseStep, { resolveData: params?.resolveData });
  }
  function listSteps(params: ListWorkflowRunStepsParams & { resolveData: 'none' }): Promise<PaginatedResponse<StepWithoutData>>;
  function listSteps(params: ListWorkflowRunStepsParams & { resolveData?: 'all' }): Promise<PaginatedResponse<Step>>;
  function listSteps(params: ListWorkflowRunStepsParams): Promise<PaginatedResponse<Step | StepWithoutData>>;
  function listSteps(params: ListWorkflowRunStepsParams): Promise<PaginatedResponse<Step | StepWithoutData>> {
    return sendJSON(cfg, { method: 'GET', path: `world/runs/${seg(params.runId)}/steps`, query: listQuery(params), idempotent: true, subject: params.runId }, (t) =>
      pageOf<Step | StepWithoutData>(t, none(params) ? stepWithoutData : parseStep),
    );
  }

  const storage = {
    runs: { get: getRun, list: listRuns },
    steps: { get: getStep, list: listSteps },
    events,
    hooks: {
      get: (hookId: string, params?: { resolveData?: 'all' | 'none' }) =>
        get(`world/hooks/${seg(hookId)}`, parseHook, { resolveData: params?.resolveData }, hookId),
      getByToken: (token: string, params?: { resolveData?: 'all' | 'none' }) =>
        get('world/hooks', parseHook, { token, resolveData: params?.resolveData }, token),
      list: (params: ListHooksParams): Promise<PaginatedResponse<Hook>> =>
        sendJSON(cfg, { method: 'GET', path: 'world/hooks', query: { ...listQuery(params), runId: params?.runId }, idempotent: true }, (t) =>
          pageOf(t, parseHook),
        ),
    },
  } satisfies Storage;
  return storage;
}

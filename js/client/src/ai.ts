// @weirhq/client/ai: the AI SDK's chat on a weir stream, with rewinds
// applied. A stream of UI message chunks (what a Go step writes with package
// uistream, or a Vercel DurableAgent through @weirhq/world's route) is
// followed live; its visible chunks are folded into the assistant's
// UIMessage by the AI SDK's own readUIMessageStream, so the message is
// exactly the one useChat would build; and when a retried step's rewind
// voids chunks already shown, the message is rebuilt from the chunks that
// stay before anything else is shown.
//
// Why not a useChat transport: useChat folds the chunks a transport hands it
// into a message it owns, and (before ai 7's reset-step, and then only within
// one step) nothing in the UI message stream takes a part back. A rewind
// needs the message replaced, so WeirChat owns the messages and has
// useChat's API (sendMessage, regenerate, stop, resumeStream, clearError,
// setMessages; messages, status, error): @weirhq/client/react's useChat is
// useChat with another import. It speaks the server contract of
// @workflow/ai's WorkflowChatTransport too (a POST answered with the run's id
// in x-workflow-run-id, the stream at {api}/{runId}/stream), so an app moves
// over by serving that stream with worldStreamRoute.

import { readUIMessageStream, type FileUIPart, type UIMessage, type UIMessageChunk } from 'ai';
import { WeirError } from './errors.js';
import { follow, type Chunk, type FollowEvent, type FollowOptions, type Follower, type Snapshot } from './follow.js';

/** What a UIMessageFold reports: the assistant message as it stands (undefined: none yet). */
export type MessageListener = (message: UIMessage | undefined) => void;

/**
 * Folds the visible chunks of a followed stream of UI message chunks into
 * one UIMessage with the AI SDK's readUIMessageStream. Feed it each
 * FollowEvent with the follower's snapshot (follow's onEvent). Appended
 * chunks go on the message as they come; a rewind rebuilds it from the
 * snapshot's chunks, and until that rebuild is done nothing is reported, so
 * a listener never sees a voided chunk after the rewind arrived.
 */
export class UIMessageFold {
  #listener: MessageListener;
  #onError: (err: Error) => void;
  #gen = 0;
  #controller: ReadableStreamDefaultController<UIMessageChunk> | undefined;
  #message: UIMessage | undefined;
  #rebuilding = 0; // the generation being rebuilt, 0: none

  constructor(listener: MessageListener, onError?: (err: Error) => void) {
    this.#listener = listener;
    this.#onError = onError ?? (() => {});
  }

  /** The message as last reported. */
  get message(): UIMessage | undefined {
    return this.#message;
  }

  /** Applies one follower event; snapshot is the follower's snapshot after it. */
  apply(ev: FollowEvent, snapshot: Snapshot): void {
    switch (ev.type) {
      case 'append':
        if (this.#controller === undefined) {
          this.#restart(snapshot.chunks, false);
          return;
        }
        for (const c of ev.chunks) {
          const chunk = uiChunk(c);
          if (chunk !== undefined) this.#controller.enqueue(chunk);
        }
        return;
      case 'rewind':
        this.#restart(snapshot.chunks, true);
        return;
      case 'close':
        this.#controller?.close();
        this.#controller = undefined;
        return;
      default:
        return;
    }
  }

  /** Folds chunks from scratch, as if they were all that was ever shown. */
  reset(chunks: readonly Chunk[]): void {
    this.#restart(chunks, true);
  }

  /** Stops folding; nothing is reported after it. */
  stop(): void {
    this.#gen++;
    try {
      this.#controller?.close();
    } catch {
      // already closed
    }
    this.#controller = undefined;
  }

  #restart(chunks: readonly Chunk[], quiet: boolean): void {
    const gen = ++this.#gen;
    try {
      this.#controller?.close();
    } catch {
      // already closed
    }
    let controller!: ReadableStreamDefaultController<UIMessageChunk>;
    const stream = new ReadableStream<UIMessageChunk>({
      start(c) {
        controller = c;
      },
    });
    this.#controller = controller;
    for (const c of chunks) {
      const chunk = uiChunk(c);
      if (chunk !== undefined) controller.enqueue(chunk);
    }
    let latest: UIMessage | undefined;
    if (quiet) this.#rebuilding = gen;
    void (async () => {
      try {
        for await (const m of readUIMessageStream({ stream, terminateOnError: true })) {
          if (gen !== this.#gen) return;
          latest = m;
          if (this.#rebuilding !== gen) this.#report(m);
        }
      } catch (err) {
        if (gen === this.#gen) this.#onError(err instanceof Error ? err : new Error(String(err)));
      }
    })();
    if (quiet) {
      // readUIMessageStream folds what is queued in microtasks: by the next
      // task it has folded every chunk given here, and the message it
      // reports then is the rebuilt one.
      setTimeout(() => {
        if (gen !== this.#gen || this.#rebuilding !== gen) return;
        this.#rebuilding = 0;
        this.#report(latest);
      }, 0);
    }
  }

  #report(m: UIMessage | undefined): void {
    this.#message = m;
    this.#listener(m);
  }
}

/** A visible chunk's UI message chunk: its data, if it is an object with a type. */
function uiChunk(c: Chunk): UIMessageChunk | undefined {
  const d = c.data;
  if (typeof d === 'object' && d !== null && !(d instanceof Uint8Array) && typeof (d as { type?: unknown }).type === 'string') {
    return d as UIMessageChunk;
  }
  return undefined;
}

/**
 * The options of @workflow/ai's WorkflowChatTransport that weir's chat
 * takes, with their names and meanings there.
 */
export interface WorkflowChatTransportOptions {
  /** The endpoint a turn is POSTed to. Default "/api/chat". */
  api?: string;
  /** The fetch of the POST and of the stream's reads. Default the global one. */
  fetch?: typeof globalThis.fetch;
  /**
   * Called with the POST's reply once a turn started (its headers carry
   * x-workflow-run-id). Its body, the run's chunks without rewinds, is not
   * read: it is cancelled once this returns.
   */
  onChatSendMessage?: (response: Response, options: { trigger: StartRequest['trigger']; chatId: string; messageId?: string; messages: UIMessage[] }) => void | Promise<void>;
  /** Reconnects in a row that may fail before the turn fails (follow's maxReconnects). */
  maxConsecutiveErrors?: number;
}

/** WorkflowChatTransport's options weir's chat does not take: each changes what the transport reads or sends in a way weir's reads do not have. */
const transportRefused = ['prepareSendMessagesRequest', 'prepareReconnectToStreamRequest', 'initialStartIndex', 'onChatEnd'];

/**
 * @workflow/ai's WorkflowChatTransport, as weir's chat takes it: a page
 * that passes `transport: new WorkflowChatTransport({...})` to the AI SDK's
 * useChat moves onto weir by importing both useChat and this from
 * @weirhq/client/react, and nothing else changes. It carries its options:
 * the chat does the transport's work, reading the run's stream from weir
 * with rewinds applied (why not a real transport: see the top of this
 * file). Options it does not take are refused at construction, not
 * ignored.
 */
export class WorkflowChatTransport {
  readonly options: Readonly<WorkflowChatTransportOptions>;
  constructor(options: WorkflowChatTransportOptions = {}) {
    for (const k of transportRefused) {
      if (k in options) throw new TypeError(`WorkflowChatTransport: ${k} is not supported on weir (its chat reads the run's stream from weir): use WeirChat's start and streamUrl`);
    }
    this.options = { ...options };
  }
}

/** Where a chat turn's stream is: what the app's start endpoint answers. */
export interface StartedTurn {
  /** The URL of the turn's stream (an app route that serves it, see runstream), absolute or relative to the page. */
  stream: string;
  /** The run's id, if the app says. */
  runId?: string;
}

/** What WeirChat passes to start a turn. */
export interface StartRequest {
  chatId: string;
  /** The conversation the turn answers, the user's message last (a regenerate: up to the message regenerated). */
  messages: UIMessage[];
  /** useChat's names: a new message, or a message regenerated. */
  trigger: 'submit-message' | 'regenerate-message';
  /** The message regenerated (trigger regenerate-message). */
  messageId?: string;
  /** The options.body of sendMessage, if any. */
  body?: Record<string, unknown>;
  /** The options.headers of sendMessage, if any (the default start sends them). */
  headers?: Record<string, string>;
  /** The options.metadata of sendMessage, if any. */
  metadata?: unknown;
  signal: AbortSignal;
}

/** useChat's per-request options (sendMessage, regenerate, resumeStream). */
export interface ChatRequestOptions {
  /** Merged into the default start's JSON body. */
  body?: Record<string, unknown>;
  /** Sent with the default start's POST, after WeirChatOptions.headers. */
  headers?: Record<string, string>;
  /** Handed to start as is. */
  metadata?: unknown;
}

/**
 * What sendMessage takes, as useChat's does: the text of a user message
 * (with files), a whole message, or a string. A messageId names a user
 * message to replace: it and everything after it go.
 */
export type SendMessageInput =
  | string
  | { text: string; files?: FileUIPart[]; metadata?: unknown; messageId?: string }
  | { files: FileUIPart[]; metadata?: unknown; messageId?: string }
  | (Omit<UIMessage, 'id' | 'role'> & { id?: string; role?: UIMessage['role']; messageId?: string });

/** What onFinish gets: useChat's names. */
export interface ChatFinish {
  /** The turn's assistant message (empty parts if the stream had none). */
  message: UIMessage;
  /** Every message of the chat after the turn. */
  messages: UIMessage[];
  /** The turn was stopped (stop, or another turn began). */
  isAbort: boolean;
  /** The turn failed (status 'error'). */
  isError: boolean;
  /** The turn failed because the stream could not be read (a network error). */
  isDisconnect: boolean;
}

/** The state of a chat, as useChat names it. */
export type ChatStatus = 'ready' | 'submitted' | 'streaming' | 'error';

/** What a WeirChat shows: replaced as a whole on every change. */
export interface ChatSnapshot {
  messages: UIMessage[];
  status: ChatStatus;
  error: Error | undefined;
  /** How many rewinds the current turn's stream had (voided chunks dropped). */
  rewinds: number;
  /** The current (or last) turn's stream. */
  stream: StartedTurn | undefined;
}

/** How to run a chat. */
export interface WeirChatOptions {
  /** The chat's id. Default: made up. */
  id?: string;
  /** The messages it starts with. */
  messages?: UIMessage[];
  /**
   * Starts a turn and answers where its stream is. Default: POST to api
   * a JSON body {id, messages, trigger, messageId, ...body}, and read back
   * either {stream, runId} (JSON) or, as @workflow/ai's
   * WorkflowChatTransport does, the run's id in the x-workflow-run-id
   * header (the reply's body is not read): the stream is then streamUrl(runId).
   */
  start?: (req: StartRequest) => Promise<StartedTurn>;
  /** The endpoint the default start POSTs to. Default "/api/chat". */
  api?: string;
  /**
   * @workflow/ai's transport, as a useChat page passes it: its api, fetch,
   * maxConsecutiveErrors and onChatSendMessage, where this chat's own
   * options do not say.
   */
  transport?: WorkflowChatTransport;
  /**
   * Where the stream of a run (or, for resumeStream with no turn yet, of
   * the chat: its id) is. Default `${api}/${encodeURIComponent(id)}/stream`,
   * WorkflowChatTransport's.
   */
  streamUrl?: (id: string) => string;
  /** Headers of the default start's POST. */
  headers?: Record<string, string>;
  /** The stream's view: live (the default, rewinds applied) or committed. */
  view?: 'live' | 'committed';
  /** Follow options besides url, view and onEvent (a token, timeouts, fetch). */
  follow?: Omit<FollowOptions, 'url' | 'view' | 'onEvent' | 'signal'>;
  fetch?: typeof globalThis.fetch;
  /** Every event of the turn's follower, before the message is folded: to log or measure. */
  onFollowEvent?: (ev: FollowEvent, snapshot: Snapshot) => void;
  /** The turn ended: its stream closed, or it was stopped, or it failed (useChat's onFinish). */
  onFinish?: (finish: ChatFinish) => void;
  onError?: (err: Error) => void;
}

/** A turn being followed: its stream's follower and fold, and what it shows. */
interface Turn {
  abort: AbortController;
  follower?: Follower;
  fold?: UIMessageFold;
  /** The messages before the turn's answer. */
  base: UIMessage[];
  /** The answer as last shown. */
  message?: UIMessage;
}

/**
 * A chat whose assistant messages come from weir streams, rebuilt on every
 * rewind, with useChat's API. Framework-free: subscribe and snapshot back
 * React's useSyncExternalStore (see @weirhq/client/react's useChat).
 */
export class WeirChat {
  readonly id: string;
  #opts: WeirChatOptions;
  #snap: ChatSnapshot;
  #listeners = new Set<() => void>();
  #turn: Turn | undefined;

  constructor(opts: WeirChatOptions = {}) {
    const t = opts.transport?.options;
    if (t !== undefined) {
      opts = { ...opts };
      opts.api ??= t.api;
      opts.fetch ??= t.fetch;
      if (t.maxConsecutiveErrors !== undefined) opts.follow = { maxReconnects: t.maxConsecutiveErrors, ...opts.follow };
    }
    this.#opts = opts;
    this.id = opts.id ?? makeId('chat');
    this.#snap = { messages: [...(opts.messages ?? [])], status: 'ready', error: undefined, rewinds: 0, stream: undefined };
  }

  /** Calls listener after every change; returns the unsubscribe. */
  subscribe = (listener: () => void): (() => void) => {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  };

  /** What the chat shows now: the same object until something changes. */
  getSnapshot = (): ChatSnapshot => this.#snap;

  get messages(): UIMessage[] {
    return this.#snap.messages;
  }

  /** Replaces the messages (between turns), as useChat's setMessages: an array, or a function of the current ones. */
  setMessages(messages: UIMessage[] | ((current: UIMessage[]) => UIMessage[])): void {
    const next = typeof messages === 'function' ? messages(this.#snap.messages) : messages;
    this.#set({ messages: [...next] });
  }

  /** Leaves the error state: status 'ready', no error (useChat's clearError). */
  clearError(): void {
    if (this.#snap.status === 'error') this.#set({ status: 'ready', error: undefined });
  }

  /**
   * Sends the user's message and follows the assistant's answer until its
   * stream closes (useChat's sendMessage). With a messageId, that user
   * message is replaced and every message after it goes; with no message,
   * the messages as they are are sent. Resolves when the turn ends; a
   * failure sets status 'error' (and rejects too).
   */
  async sendMessage(message?: SendMessageInput, options?: ChatRequestOptions): Promise<void> {
    let base = this.#snap.messages;
    if (message !== undefined) {
      const user = toUserMessage(message);
      const replace = typeof message === 'string' ? undefined : message.messageId;
      if (replace === undefined) base = [...base, user];
      else {
        const i = base.findIndex((m) => m.id === replace);
        if (i < 0) throw new WeirError(`message ${replace} not found`);
        if (base[i]!.role !== 'user') throw new WeirError(`message ${replace} is not a user message`);
        base = [...base.slice(0, i), { ...user, id: replace }];
      }
    }
    await this.#startTurn(base, 'submit-message', undefined, options);
  }

  /**
   * Asks for the answer again (useChat's regenerate): the assistant message
   * messageId (default: the last message) and everything after it go, or,
   * if messageId is a user message, everything after it; then a turn is
   * started with trigger 'regenerate-message'.
   */
  async regenerate(options: { messageId?: string } & ChatRequestOptions = {}): Promise<void> {
    const { messageId, ...rest } = options;
    const msgs = this.#snap.messages;
    const i = messageId === undefined ? msgs.length - 1 : msgs.findIndex((m) => m.id === messageId);
    const m = msgs[i];
    if (m === undefined) throw new WeirError(messageId === undefined ? 'there is no message to regenerate' : `message ${messageId} not found`);
    const base = msgs.slice(0, m.role === 'assistant' ? i : i + 1);
    await this.#startTurn(base, 'regenerate-message', m.id, rest);
  }

  /**
   * Follows a turn's stream again (useChat's resumeStream): the current
   * turn's, else the last one's, else the chat's own
   * (streamUrl(chat id): the app's route finds the chat's run, as with
   * WorkflowChatTransport's reconnect). Its message replaces the assistant
   * message of the same id, or goes after the current ones. After a reload,
   * call it once on mount (useChat's resume: true).
   */
  async resumeStream(_options?: ChatRequestOptions): Promise<void> {
    const started = this.#snap.stream ?? { stream: this.#streamUrl(this.id) };
    await this.resume(started);
  }

  /** Follows a turn's stream that was started before (say, before a reload): its message replaces the assistant message of the same id, or goes after the current ones. */
  async resume(started: StartedTurn): Promise<void> {
    this.stop();
    const abort = new AbortController();
    const base = [...this.#snap.messages];
    this.#turn = { abort, base };
    this.#set({ status: 'submitted', error: undefined, rewinds: 0 });
    await this.#follow(started, abort, base);
  }

  /** Stops following the current turn (its run goes on); the message stays as shown. */
  stop(): void {
    const t = this.#turn;
    if (t === undefined) return;
    this.#turn = undefined;
    t.abort.abort();
    t.fold?.stop();
    t.follower?.cancel();
    if (this.#snap.status === 'submitted' || this.#snap.status === 'streaming') this.#set({ status: 'ready' });
    this.#finish(t, { isAbort: true, isError: false, isDisconnect: false });
  }

  async #startTurn(base: UIMessage[], trigger: StartRequest['trigger'], messageId: string | undefined, options: ChatRequestOptions | undefined): Promise<void> {
    this.stop();
    const abort = new AbortController();
    const t: Turn = { abort, base };
    this.#turn = t;
    this.#set({ messages: base, status: 'submitted', error: undefined, rewinds: 0, stream: undefined });
    let started: StartedTurn;
    try {
      const req: StartRequest = {
        chatId: this.id,
        messages: base,
        trigger,
        signal: abort.signal,
        ...(messageId !== undefined ? { messageId } : {}),
        ...(options?.body ? { body: options.body } : {}),
        ...(options?.headers ? { headers: options.headers } : {}),
        ...(options?.metadata !== undefined ? { metadata: options.metadata } : {}),
      };
      started = await (this.#opts.start ?? ((r) => this.#defaultStart(r)))(req);
    } catch (err) {
      if (abort.signal.aborted) return;
      this.#fail(t, err, false);
      throw err;
    }
    if (abort.signal.aborted) return;
    await this.#follow(started, abort, base);
  }

  async #follow(started: StartedTurn, abort: AbortController, base: UIMessage[]): Promise<void> {
    const t = this.#turn;
    if (t === undefined || t.abort !== abort) return;
    this.#set({ stream: started });
    const url = new URL(started.stream, globalThis.location?.href ?? 'http://localhost/').toString();
    let rewinds = 0;
    const fold = new UIMessageFold(
      (m) => {
        if (this.#turn !== t) return;
        t.message = m;
        this.#set({ messages: withAnswer(base, m), status: m === undefined ? this.#snap.status : 'streaming', rewinds });
      },
      (err) => {
        if (this.#turn === t) this.#fail(t, err, false);
      },
    );
    t.fold = fold;
    const fetchFn = this.#opts.fetch ?? this.#opts.follow?.fetch;
    const follower = follow({
      waitForStreamMs: 30_000,
      ...this.#opts.follow,
      ...(fetchFn ? { fetch: fetchFn } : {}),
      url,
      view: this.#opts.view ?? 'live',
      signal: abort.signal,
      onEvent: (ev, snap) => {
        if (this.#turn !== t) return;
        this.#opts.onFollowEvent?.(ev, snap);
        // Counted now, shown with the rebuilt message: a render between
        // the two would show the voided chunks with the new count.
        if (ev.type === 'rewind') rewinds++;
        fold.apply(ev, snap);
      },
    });
    t.follower = follower;
    try {
      await follower.done;
    } catch (err) {
      if (this.#turn === t && !abort.signal.aborted) {
        this.#fail(t, err, err instanceof TypeError);
        throw err;
      }
      return;
    }
    if (this.#turn !== t) return;
    // The fold reports the last chunk in a microtask or a task: the turn
    // ends once it did.
    await new Promise((r) => setTimeout(r, 0));
    if (this.#turn !== t) return;
    this.#turn = undefined;
    this.#set({ status: 'ready' });
    this.#finish(t, { isAbort: false, isError: false, isDisconnect: false });
  }

  async #defaultStart(r: StartRequest): Promise<StartedTurn> {
    const f = this.#opts.fetch ?? globalThis.fetch;
    const res = await f(this.#opts.api ?? '/api/chat', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', ...this.#opts.headers, ...r.headers },
      body: JSON.stringify({ id: r.chatId, messages: r.messages, trigger: r.trigger, messageId: r.messageId, ...r.body }),
      signal: r.signal,
    });
    const runId = res.headers.get('x-workflow-run-id');
    const json = /^application\/json\b/i.test(res.headers.get('content-type') ?? '');
    if (res.ok && runId && !json) {
      // WorkflowChatTransport's contract: the reply streams the run's
      // chunks as they come, with no rewinds; they are read from weir.
      try {
        await this.#opts.transport?.options.onChatSendMessage?.(res, {
          trigger: r.trigger,
          chatId: r.chatId,
          ...(r.messageId !== undefined ? { messageId: r.messageId } : {}),
          messages: r.messages,
        });
      } finally {
        await res.body?.cancel().catch(() => undefined);
      }
      return { stream: this.#streamUrl(runId), runId };
    }
    const text = await res.text();
    if (!res.ok) throw new WeirError(`start a turn: ${res.status} ${text.trim().slice(0, 300)}`, { status: res.status });
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      throw new WeirError(`start a turn: the answer is neither JSON nor has an x-workflow-run-id header: ${text.slice(0, 100)}`, { status: res.status });
    }
    if (typeof body !== 'object' || body === null) throw new WeirError('start a turn: the answer is not an object', { status: res.status });
    const stream = 'stream' in body && typeof body.stream === 'string' ? body.stream : undefined;
    const id = 'runId' in body && typeof body.runId === 'string' ? body.runId : (runId ?? undefined);
    if (stream !== undefined) return id === undefined ? { stream } : { stream, runId: id };
    if (id !== undefined) return { stream: this.#streamUrl(id), runId: id };
    throw new WeirError('start a turn: the answer has no "stream", no "runId" and no x-workflow-run-id header', { status: res.status });
  }

  #streamUrl(id: string): string {
    return this.#opts.streamUrl?.(id) ?? `${this.#opts.api ?? '/api/chat'}/${encodeURIComponent(id)}/stream`;
  }

  #fail(t: Turn, err: unknown, disconnect: boolean): void {
    const e = err instanceof Error ? err : new Error(String(err));
    if (this.#turn === t) this.#turn = undefined;
    t.fold?.stop();
    t.follower?.cancel();
    this.#set({ status: 'error', error: e });
    this.#opts.onError?.(e);
    this.#finish(t, { isAbort: false, isError: true, isDisconnect: disconnect });
  }

  #finish(t: Turn, how: Omit<ChatFinish, 'message' | 'messages'>): void {
    if (this.#opts.onFinish === undefined) return;
    const message = t.message ?? { id: makeId('msg'), role: 'assistant', parts: [] };
    this.#opts.onFinish({ message, messages: this.#snap.messages, ...how });
  }

  #set(p: Partial<ChatSnapshot>): void {
    this.#snap = { ...this.#snap, ...p };
    for (const l of this.#listeners) l();
  }
}

/** base with the turn's answer: in place of the assistant message of the same id (a resume), else last. */
function withAnswer(base: UIMessage[], m: UIMessage | undefined): UIMessage[] {
  if (m === undefined) return base;
  const i = base.findIndex((x) => x.id === m.id && x.role === 'assistant');
  return i < 0 ? [...base, m] : [...base.slice(0, i), m, ...base.slice(i + 1)];
}

/** The user message sendMessage sends. */
function toUserMessage(message: SendMessageInput): UIMessage {
  if (typeof message === 'string') return { id: makeId('msg'), role: 'user', parts: [{ type: 'text', text: message }] };
  if ('parts' in message) {
    const { messageId: _replaces, id, role, ...rest } = message;
    return { ...rest, id: id ?? makeId('msg'), role: role ?? 'user' };
  }
  const parts: UIMessage['parts'] = [...(message.files ?? [])];
  if ('text' in message) parts.push({ type: 'text', text: message.text });
  return { id: makeId('msg'), role: 'user', parts, ...(message.metadata !== undefined ? { metadata: message.metadata } : {}) };
}

let idCounter = 0;
function makeId(prefix: string): string {
  const rnd = globalThis.crypto?.randomUUID?.() ?? `${Date.now().toString(36)}-${(idCounter++).toString(36)}`;
  return `${prefix}-${rnd}`;
}

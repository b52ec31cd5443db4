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
// needs the message replaced, so WeirChat owns the messages and hands out
// the same shapes useChat does (UIMessage, status, error, sendMessage, stop).

import { readUIMessageStream, type UIMessage, type UIMessageChunk } from 'ai';
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
  messages: UIMessage[];
  /** The options.body of sendMessage, if any. */
  body?: Record<string, unknown>;
  signal: AbortSignal;
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
   * a JSON body {id, messages, ...body} and read {stream, runId} back.
   */
  start?: (req: StartRequest) => Promise<StartedTurn>;
  /** The endpoint the default start POSTs to. Default "/api/chat". */
  api?: string;
  /** Headers of the default start's POST. */
  headers?: Record<string, string>;
  /** The stream's view: live (the default, rewinds applied) or committed. */
  view?: 'live' | 'committed';
  /** Follow options besides url, view and onEvent (a token, timeouts, fetch). */
  follow?: Omit<FollowOptions, 'url' | 'view' | 'onEvent' | 'signal'>;
  fetch?: typeof globalThis.fetch;
  /** Every event of the turn's follower, before the message is folded: to log or measure. */
  onFollowEvent?: (ev: FollowEvent, snapshot: Snapshot) => void;
  /** The turn's message is done (the stream closed). */
  onFinish?: (message: UIMessage | undefined) => void;
  onError?: (err: Error) => void;
}

/**
 * A chat whose assistant messages come from weir streams, rebuilt on every
 * rewind. Framework-free: subscribe and snapshot back React's
 * useSyncExternalStore (see @weirhq/client/react's useWeirChat).
 */
export class WeirChat {
  readonly id: string;
  #opts: WeirChatOptions;
  #snap: ChatSnapshot;
  #listeners = new Set<() => void>();
  #turn: { abort: AbortController; follower?: Follower; fold?: UIMessageFold; base: UIMessage[] } | undefined;

  constructor(opts: WeirChatOptions = {}) {
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

  /** Replaces the messages (between turns). */
  setMessages(messages: UIMessage[]): void {
    this.#set({ messages: [...messages] });
  }

  /**
   * Sends the user's message and follows the assistant's answer until its
   * stream closes. Resolves then; a failure sets status 'error' (and
   * rejects too).
   */
  async sendMessage(message: string | { text: string } | UIMessage, options?: { body?: Record<string, unknown> }): Promise<void> {
    const user: UIMessage =
      typeof message === 'string'
        ? { id: makeId('msg'), role: 'user', parts: [{ type: 'text', text: message }] }
        : 'parts' in message
          ? message
          : { id: makeId('msg'), role: 'user', parts: [{ type: 'text', text: message.text }] };
    this.stop();
    const abort = new AbortController();
    const base = [...this.#snap.messages, user];
    this.#turn = { abort, base };
    this.#set({ messages: base, status: 'submitted', error: undefined, rewinds: 0, stream: undefined });
    let started: StartedTurn;
    try {
      const req: StartRequest = { chatId: this.id, messages: base, signal: abort.signal, ...(options?.body ? { body: options.body } : {}) };
      started = await (this.#opts.start ?? ((r) => this.#defaultStart(r)))(req);
    } catch (err) {
      if (abort.signal.aborted) return;
      this.#fail(err);
      throw err;
    }
    if (abort.signal.aborted) return;
    await this.#follow(started, abort, base);
  }

  /** Follows a turn's stream that was started before (say, before a reload): its message goes after the current ones. */
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
        this.#set({ messages: m === undefined ? base : [...base, m], status: m === undefined ? this.#snap.status : 'streaming', rewinds });
      },
      (err) => {
        if (this.#turn === t) this.#fail(err);
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
        this.#fail(err);
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
    this.#opts.onFinish?.(fold.message);
  }

  async #defaultStart(r: StartRequest): Promise<StartedTurn> {
    const f = this.#opts.fetch ?? globalThis.fetch;
    const res = await f(this.#opts.api ?? '/api/chat', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', ...this.#opts.headers },
      body: JSON.stringify({ id: r.chatId, messages: r.messages, ...r.body }),
      signal: r.signal,
    });
    const text = await res.text();
    if (!res.ok) throw new WeirError(`start a turn: ${res.status} ${text.trim().slice(0, 300)}`, { status: res.status });
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      throw new WeirError(`start a turn: the answer is not JSON: ${text.slice(0, 100)}`, { status: res.status });
    }
    if (typeof body !== 'object' || body === null || typeof (body as { stream?: unknown }).stream !== 'string') {
      throw new WeirError('start a turn: the answer has no "stream"', { status: res.status });
    }
    return body as StartedTurn;
  }

  #fail(err: unknown): void {
    const e = err instanceof Error ? err : new Error(String(err));
    this.#set({ status: 'error', error: e });
    this.#opts.onError?.(e);
  }

  #set(p: Partial<ChatSnapshot>): void {
    this.#snap = { ...this.#snap, ...p };
    for (const l of this.#listeners) l();
  }
}

let idCounter = 0;
function makeId(prefix: string): string {
  const rnd = globalThis.crypto?.randomUUID?.() ?? `${Date.now().toString(36)}-${(idCounter++).toString(36)}`;
  return `${prefix}-${rnd}`;
}

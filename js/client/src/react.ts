// @weirhq/client/react: React hooks over follow and WeirChat. Both render
// from an external store (useSyncExternalStore), so a render shows one
// consistent snapshot: never a voided chunk once its rewind arrived.

import { useEffect, useRef, useState, useSyncExternalStore } from 'react';
import { WeirChat, type ChatSnapshot, type WeirChatOptions } from './ai.js';

// A useChat page written for @workflow/ai's transport imports it from here
// with useChat: the one import that changes.
export { WorkflowChatTransport, type WorkflowChatTransportOptions } from './ai.js';
import { follow, type Chunk, type FollowOptions, type Follower, type Snapshot } from './follow.js';

/** What useFollow returns. */
export interface FollowState {
  /** The visible chunks, in offset order: committed ones and the surviving chunks of open attempts. */
  chunks: readonly Chunk[];
  /** The follower's snapshot (chunks, nextOffset, upToDate, closed). */
  snapshot: Snapshot;
  /** connecting: no reply yet; live: following; closed: the stream closed; error: it failed for good. */
  state: 'connecting' | 'live' | 'closed' | 'error';
  error: Error | undefined;
  /** Rewinds seen: chunks that were shown and then voided by a retry. */
  rewinds: number;
}

const empty: Snapshot = { chunks: [], nextOffset: '-1', upToDate: false, closed: false };

/**
 * Follows a stream while the component is mounted (or until the url
 * changes) and returns its visible chunks and state. Pass url undefined to
 * follow nothing yet.
 */
export function useFollow(url: string | undefined, options?: Omit<FollowOptions, 'url' | 'onEvent' | 'signal'>): FollowState {
  const [store] = useState(() => new FollowStore());
  const opts = useRef(options);
  opts.current = options;
  useEffect(() => {
    if (url === undefined) return;
    store.start({ ...opts.current, url });
    return () => store.stop();
  }, [url, store]);
  return useSyncExternalStore(store.subscribe, store.get, store.get);
}

class FollowStore {
  #state: FollowState = { chunks: [], snapshot: empty, state: 'connecting', error: undefined, rewinds: 0 };
  #listeners = new Set<() => void>();
  #follower: Follower | undefined;

  subscribe = (l: () => void): (() => void) => {
    this.#listeners.add(l);
    return () => this.#listeners.delete(l);
  };

  get = (): FollowState => this.#state;

  start(opts: FollowOptions): void {
    this.stop();
    this.#set({ chunks: [], snapshot: empty, state: 'connecting', error: undefined, rewinds: 0 });
    const f = follow({
      ...opts,
      onEvent: (ev, snap) => {
        if (this.#follower !== f) return;
        this.#set({
          chunks: snap.chunks,
          snapshot: snap,
          state: snap.closed ? 'closed' : 'live',
          rewinds: this.#state.rewinds + (ev.type === 'rewind' ? 1 : 0),
        });
      },
    });
    this.#follower = f;
    f.done.then(
      (snap) => {
        if (this.#follower === f && snap.closed) this.#set({ chunks: snap.chunks, snapshot: snap, state: 'closed' });
      },
      (err: unknown) => {
        if (this.#follower === f) this.#set({ state: 'error', error: err instanceof Error ? err : new Error(String(err)) });
      },
    );
  }

  stop(): void {
    const f = this.#follower;
    this.#follower = undefined;
    f?.cancel();
  }

  #set(p: Partial<FollowState>): void {
    this.#state = { ...this.#state, ...p };
    for (const l of this.#listeners) l();
  }
}

/**
 * What useChat returns: the AI SDK's useChat's names and shapes (id,
 * messages, status, error, sendMessage, regenerate, stop, resumeStream,
 * clearError, setMessages), plus weir's: the rewinds of the current turn,
 * its stream, and the chat itself.
 */
export interface UseChat extends ChatSnapshot {
  id: string;
  sendMessage: WeirChat['sendMessage'];
  regenerate: WeirChat['regenerate'];
  resumeStream: WeirChat['resumeStream'];
  /** Follows a given turn's stream (one the page kept across a reload). */
  resume: WeirChat['resume'];
  stop: () => Promise<void>;
  clearError: () => void;
  setMessages: WeirChat['setMessages'];
  chat: WeirChat;
}

/** What useChat takes: WeirChatOptions (useChat's id, messages, onFinish, onError, and where the stream is), resume, or a chat to share. */
export interface UseChatOptions extends WeirChatOptions {
  /** A chat to share between components (its options are its own). */
  chat?: WeirChat;
  /** Follow the chat's stream on mount (useChat's resume: after a reload, a turn still streaming is picked up). */
  resume?: boolean;
}

/**
 * The AI SDK's useChat on weir: the same names and shapes, so a page moves
 * over by importing useChat from here instead of '@ai-sdk/react'. The
 * assistant's messages stream from weir with rewinds applied: each token
 * rendered once, live, and a retried step's voided tokens gone from the page
 * as soon as its rewind arrives. The default start POSTs to api
 * ("/api/chat") and takes the run's stream from the answer: {stream} JSON,
 * or @workflow/ai's WorkflowChatTransport contract (x-workflow-run-id; the
 * stream at `${api}/${runId}/stream`, served by @weirhq/world's
 * worldStreamRoute). Options are read once, when the component mounts.
 */
export function useChat(options?: UseChatOptions): UseChat {
  const [chat] = useState(() => options?.chat ?? new WeirChat(options));
  const resume = useRef(options?.resume === true);
  useEffect(() => {
    if (resume.current) chat.resumeStream().catch(() => undefined);
    return () => chat.stop();
  }, [chat]);
  const snap = useSyncExternalStore(chat.subscribe, chat.getSnapshot, chat.getSnapshot);
  return {
    ...snap,
    id: chat.id,
    sendMessage: (m, o) => chat.sendMessage(m, o),
    regenerate: (o) => chat.regenerate(o),
    resumeStream: (o) => chat.resumeStream(o),
    resume: (s) => chat.resume(s),
    stop: async () => chat.stop(),
    clearError: () => chat.clearError(),
    setMessages: (ms) => chat.setMessages(ms),
    chat,
  };
}

/** What useWeirChat returns (useChat's). */
export type UseWeirChat = UseChat;

/** useChat under its first name. */
export const useWeirChat = useChat;

// @weirhq/client/react: React hooks over follow and WeirChat. Both render
// from an external store (useSyncExternalStore), so a render shows one
// consistent snapshot: never a voided chunk once its rewind arrived.

import { useEffect, useRef, useState, useSyncExternalStore } from 'react';
import { WeirChat, type ChatSnapshot, type WeirChatOptions } from './ai.js';
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

/** What useWeirChat returns: useChat's names, and the chat itself. */
export interface UseWeirChat extends ChatSnapshot {
  sendMessage: WeirChat['sendMessage'];
  resume: WeirChat['resume'];
  stop: () => void;
  setMessages: WeirChat['setMessages'];
  chat: WeirChat;
}

/**
 * A chat whose assistant messages stream from weir with rewinds applied:
 * useChat's shape (messages of UIMessage parts, status, error,
 * sendMessage, stop), each token rendered once, live, and a retried step's
 * voided tokens gone from the page as soon as its rewind arrives. Options
 * are read once, when the component mounts; pass chat to share one.
 */
export function useWeirChat(options?: WeirChatOptions & { chat?: WeirChat }): UseWeirChat {
  const [chat] = useState(() => options?.chat ?? new WeirChat(options));
  useEffect(() => () => chat.stop(), [chat]);
  const snap = useSyncExternalStore(chat.subscribe, chat.getSnapshot, chat.getSnapshot);
  return {
    ...snap,
    sendMessage: (m, o) => chat.sendMessage(m, o),
    resume: (s) => chat.resume(s),
    stop: () => chat.stop(),
    setMessages: (ms) => chat.setMessages(ms),
    chat,
  };
}

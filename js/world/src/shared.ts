import type { createStreams, StreamState } from './streams';
import { newStreamState } from './streams';

/** What storage needs of the streams: the barrier and the attempts. */
export interface Shared {
  streams: Pick<ReturnType<typeof createStreams>, 'barrier' | 'started'>;
}

const STATE = Symbol.for('@weirhq/world//state');

/**
 * The process's stream state. Core builds two World instances (getWorld
 * and getWorldHandlers): the delivery context set by one and the writes
 * made through the other must meet, so the state is module-global.
 */
export function streamState(): StreamState {
  const g = globalThis as Record<symbol, StreamState | undefined>;
  return (g[STATE] ??= newStreamState());
}

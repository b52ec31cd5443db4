// @weirhq/client: weir for browsers and Node over fetch. follow shows a
// stream with weir's rewinds applied; StreamWriter writes one exactly once;
// Client drives runs, hooks, messages and run events; every error reply is
// a class of its Weir-Error code; streamRoute serves a run's stream at an
// app's own route.

export { follow, runStreamUrl, type Chunk, type FollowEvent, type FollowOptions, type Follower, type Snapshot } from './follow.js';
export { streamRoute, runStreamPath, type RunStreamChoice, type StreamRouteOptions } from './route.js';
export { StreamWriter, MAX_BODY_BYTES, MAX_CHUNK_BYTES, MAX_REQUEST_CHUNKS, type Ack, type StreamWriterOptions } from './writer.js';
export {
  Client,
  MAX_EVENT_WAIT_MS,
  MAX_PAYLOAD_BYTES,
  type ClientOptions,
  type Hook,
  type LogEvent,
  type HookDelivery,
  type MessageSent,
  type Run,
  type RunEvent,
  type RunPage,
  type RunState,
  type RunStatus,
  type RunStream,
  type Started,
} from './client.js';
export { DEFAULT_URL, type Fetch, type TransportOptions } from './http.js';
export { formatOffset, parseOffset } from './ndjson.js';
export * from './errors.js';

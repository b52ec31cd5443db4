import { createHmac, timingSafeEqual } from 'node:crypto';
import { MessageId, ValidQueueName, type Queue } from '@workflow/world';
import { decode, encode } from './codec';
import { appUrl, type Config } from './config';
import { sendJSON } from './http';
import type { StreamState } from './streams';
import { ulid } from './ulid';

// The queue: queue() stores the message in weir, which POSTs it to this
// app's /.well-known/workflow/v1/flow or /step route, signed
// (package delivery in weir). createQueueHandler checks the signature and
// runs the runtime's handler inside this package's delivery context, so
// that the step's stream writes know their step.

/** How old a delivery's signature may be. */
export const MAX_SKEW_SECONDS = 300;

/**
 * Verifies a delivery's Weir-Signature: t=<unix>,v1=<hex HMAC-SHA256(secret,
 * t.queue.id.attempt.body)>, at most 5 minutes off now. Returns the reason
 * it is refused, or undefined.
 */
export function verifySignature(
  secret: string,
  header: string | null,
  queueName: string,
  messageId: string,
  attempt: number,
  body: Uint8Array,
  now: number = Date.now(),
): string | undefined {
  if (!header) return 'unsigned delivery';
  let t = '';
  let v1 = '';
  for (const part of header.split(',')) {
    const [k, v] = part.trim().split('=', 2);
    if (k === 't') t = v ?? '';
    if (k === 'v1') v1 = v ?? '';
  }
  const sec = Number(t);
  if (!/^\d+$/.test(t) || !/^[0-9a-f]{64}$/.test(v1)) return 'malformed signature';
  if (Math.abs(now / 1000 - sec) > MAX_SKEW_SECONDS) return 'stale signature';
  const want = sign(secret, t, queueName, messageId, attempt, body);
  if (!timingSafeEqual(Buffer.from(want, 'hex'), Buffer.from(v1, 'hex'))) return 'bad signature';
  return undefined;
}

/** The v1 MAC of a delivery, as weir's delivery.Sign computes it. */
export function sign(secret: string, t: string, queueName: string, messageId: string, attempt: number, body: Uint8Array): string {
  const h = createHmac('sha256', secret);
  h.update(`${t}.${queueName}.${messageId}.${attempt}.`);
  h.update(body);
  return h.digest('hex');
}

/**
 * The signature of a delivery target (this app's base URL), as weir's
 * delivery.SignTarget computes it: v1=<hex HMAC-SHA256(secret, "target." +
 * target)>. weir delivers only to targets signed with the World secret (or
 * to origins its operator allows with --world-target), so that a holder of
 * weir's token alone cannot make it POST anywhere.
 */
export function signTarget(secret: string, target: string): string {
  return 'v1=' + createHmac('sha256', secret).update('target.').update(target).digest('hex');
}

const refusedReasons = new Set<string>();

/**
 * Logs a delivery the app refused, the first time for each reason: weir
 * retries it (and warns in its own log), and the app's operator learns
 * here what to set. Later refusals of the same kind are not logged again.
 */
function refusedOnce(reason: string, hint: string): void {
  if (refusedReasons.has(reason)) return;
  refusedReasons.add(reason);
  console.error(`@weirhq/world: refused a delivery from weir (${reason}): ${hint}. weir retries it, then dead-letters it.`);
}

/** The runtime's delivery handler, as the World's Queue types it. */
type Handler = Parameters<Queue['createQueueHandler']>[1];

export function createQueue(cfg: Config, st: StreamState) {
  return {
    async getDeploymentId(): Promise<string> {
      return cfg.deploymentId;
    },

    async queue(
      queueName: string,
      message: unknown,
      opts?: { deploymentId?: string; idempotencyKey?: string; delaySeconds?: number },
    ): Promise<{ messageId: MessageId }> {
      // The id is minted here, so that a retry whose first reply was lost
      // finds its message rather than queueing a second.
      const messageId = ulid('msg');
      const target = appUrl(cfg);
      const body = encode({
        queueName,
        payload: message,
        target,
        ...(cfg.secret && { targetSignature: signTarget(cfg.secret, target) }),
        messageId,
        ...(opts?.idempotencyKey && { idempotencyKey: opts.idempotencyKey }),
        ...(opts?.delaySeconds && { delaySeconds: opts.delaySeconds }),
        deploymentId: opts?.deploymentId ?? cfg.deploymentId,
      });
      return sendJSON(cfg, { method: 'POST', path: 'world/queue', json: body, idempotent: true }, (t) => ({
        messageId: MessageId.parse((JSON.parse(t) as { messageId?: unknown }).messageId),
      }));
    },

    createQueueHandler(prefix: string, handler: Handler): (req: Request) => Promise<Response> {
      return async (req: Request) => {
        const queueName = req.headers.get('x-vqs-queue-name') ?? '';
        const messageId = req.headers.get('x-vqs-message-id') ?? '';
        const attempt = Number(req.headers.get('x-vqs-message-attempt') ?? '');
        if (!queueName || !messageId || !Number.isInteger(attempt) || attempt < 1) {
          return Response.json({ error: 'missing x-vqs-queue-name, x-vqs-message-id or x-vqs-message-attempt' }, { status: 400 });
        }
        const body = new Uint8Array(await req.arrayBuffer());
        if (!cfg.secret) {
          const error = 'WEIR_WORLD_SECRET is not set: deliveries cannot be verified';
          refusedOnce(error, "set WEIR_WORLD_SECRET to weir server's --world-secret");
          return Response.json({ error }, { status: 401 });
        }
        const refused = verifySignature(cfg.secret, req.headers.get('weir-signature'), queueName, messageId, attempt, body);
        if (refused) {
          refusedOnce(
            refused,
            refused === 'stale signature'
              ? "this machine's clock and weir's differ by more than 5 minutes"
              : "WEIR_WORLD_SECRET must be weir server's --world-secret (or its $WEIR_WORLD_SECRET)",
          );
          return Response.json({ error: refused }, { status: 401 });
        }
        if (!queueName.startsWith(prefix)) return Response.json({ error: 'Unhandled queue' }, { status: 400 });
        let message: Record<string, unknown>;
        try {
          message = decode(new TextDecoder().decode(body));
        } catch {
          return Response.json({ error: 'malformed body' }, { status: 400 });
        }
        const delivery = {
          runId: (message?.runId ?? message?.workflowRunId) as string | undefined,
          stepId: message?.stepId as string | undefined,
        };
        try {
          const meta = { attempt, queueName: ValidQueueName.parse(queueName), messageId: MessageId.parse(messageId) };
          const result = await st.delivery.run(delivery, () => handler(message, meta));
          if (result && typeof result.timeoutSeconds === 'number') return Response.json({ timeoutSeconds: result.timeoutSeconds });
          return Response.json({ ok: true });
        } catch (error) {
          return Response.json(String(error), { status: 500 });
        }
      };
    },
  };
}

import { Chain } from './chain';
import { chunkBytes, frame } from './codec';
import { resolveConfig, type Config } from './config';
import { send } from './http';

/** An acknowledged chunk: its offset, and what weir did with it. */
export interface Ack {
  offset: number;
  outcome: 'appended' | 'adopted' | 'retransmit';
}

/** Options of a StreamWriter. */
export interface StreamWriterOptions {
  /** The stream's path under /v1/stream/ (a standalone stream; created if missing). */
  path: string;
  /** The writer's id: the same across attempts (a job id, say). */
  writer: string;
  /** The attempt, from 1: a retry of the same work writes with a higher one. */
  attempt: number;
  /** The stream's content type. Default application/octet-stream. */
  contentType?: string;
  /** weir server's URL and token. Default $WEIR_URL and $WEIR_TOKEN. */
  url?: string;
  token?: string;
}

/**
 * StreamWriter writes one attempt of a writer to a weir stream, exactly
 * once: chunks are numbered from 0 in call order and sent one request after
 * the other, so a retried request is acknowledged rather than appended, and
 * a later attempt that writes the same chunks adopts them (its divergent
 * chunks abort the earlier attempt's from the first difference). Commit
 * makes the attempt's chunks part of the committed view, which Durable
 * Streams readers get by default; abort voids them. For any Node producer,
 * not only a Vercel Workflow app (docs/protocol.md, "weir's extension").
 */
export class StreamWriter {
  private readonly cfg: Config;
  private readonly chain = new Chain();
  private created: Promise<void> | undefined;

  constructor(private readonly opts: StreamWriterOptions) {
    if (!Number.isInteger(opts.attempt) || opts.attempt < 1) throw new Error('StreamWriter: attempt is an integer >= 1');
    this.cfg = resolveConfig({ ...(opts.url && { url: opts.url }), ...(opts.token && { token: opts.token }) });
  }

  private path(): string {
    return 'stream/' + this.opts.path.split('/').map(encodeURIComponent).join('/');
  }

  private ensure(): Promise<void> {
    this.created ??= send(this.cfg, {
      method: 'PUT',
      path: this.path(),
      headers: { 'content-type': this.opts.contentType ?? 'application/octet-stream' },
      idempotent: true,
    }).then(
      () => undefined,
      (err: unknown) => {
        // 409: it exists, with another configuration: writes will tell.
        if ((err as { status?: number }).status !== 409) throw err;
      },
    );
    return this.created;
  }

  /** Writes chunks after every earlier write; resolves with their acks. */
  async write(...chunks: (string | Uint8Array)[]): Promise<Ack[]> {
    await this.ensure();
    const acks: Ack[] = [];
    const bytes = chunks.map(chunkBytes).filter((c) => c.byteLength > 0);
    await this.chain.write(bytes, async (seq, batch) => {
      const { res } = await send(this.cfg, {
        method: 'POST',
        path: this.path(),
        headers: {
          'content-type': this.opts.contentType ?? 'application/octet-stream',
          'weir-writer': this.opts.writer,
          'weir-attempt': String(this.opts.attempt),
          'weir-seq': String(seq),
          'weir-framing': 'u32be',
        },
        body: frame(batch),
        idempotent: true,
      });
      acks.push(...((await res.json()) as { acks: Ack[] }).acks);
    });
    return acks;
  }

  /** Commits the attempt: after every write, its chunks join the committed view. */
  async commit(): Promise<void> {
    await this.finish('weir-commit');
  }

  /** Aborts the writer for good: its chunks never join the committed view. */
  async abort(): Promise<void> {
    await this.finish('weir-abort');
  }

  private async finish(header: string): Promise<void> {
    await this.ensure();
    await this.chain.settled();
    await send(this.cfg, {
      method: 'POST',
      path: this.path(),
      headers: { 'weir-writer': this.opts.writer, 'weir-attempt': String(this.opts.attempt), [header]: 'true' },
      idempotent: true,
    });
  }
}

package apply

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/weirhq/weir/store"
)

// MessageTx is what the message rule loads and saves: a narrow part of a
// backend's write transaction.
type MessageTx interface {
	// Run returns run id's lease and log position; store.ErrNotFound if
	// there is none.
	Run(id string) (*Run, error)
	// MessageKey returns what a message with key to run left, nil if none
	// (expired keys may be returned).
	MessageKey(run, key string) (*Key, error)
	// AddEvents appends evs (their Seq and At set) to run's log.
	AddEvents(run *Run, evs []store.Event) error
	// SaveRun applies c to run's row.
	SaveRun(run *Run, c *RunChange) error
	// SaveMessageKey stores what a message with key to run left.
	SaveMessageKey(run, key string, k *Key) error
	// Awaits returns what messages wake run while it is parked (nil:
	// every one), as its last release saved it.
	Awaits(run string) (*store.Awaits, error)
	InboxTx
}

// InboxTx keeps what a run's inbox holds: the messages and hook payloads
// clients put in its log, counted on the run's row so that a bound costs
// no scan of the log.
type InboxTx interface {
	// RunInbox returns how many messages and hook payloads run's log
	// holds, and their bytes.
	RunInbox(run string) (n, bytes int64, err error)
	// AddInbox counts n more of them, of bytes bytes in all, to run.
	AddInbox(run string, n, bytes int64) error
}

// checkInbox refuses a payload of size bytes past run's inbox bound
// (store.MaxRunMessages, store.MaxRunMessageBytes) with ErrQuota.
func checkInbox(tx InboxTx, run string, size int) error {
	n, bytes, err := tx.RunInbox(run)
	if err != nil {
		return err
	}
	if n+1 > store.MaxRunMessages || bytes+int64(size) > store.MaxRunMessageBytes {
		return fmt.Errorf("%w: run %s's log holds %d messages and hook payloads of %d bytes, the most a run takes is %d and %d bytes",
			store.ErrQuota, run, n, bytes, store.MaxRunMessages, store.MaxRunMessageBytes)
	}
	return nil
}

// SendMessage applies store.Store.SendMessage. p must be checked and have
// its defaults. Its checks (the run, the key, the run's end) all come
// before its first save; a message sent again with its key after the run
// ended still gets its first reply.
func SendMessage(tx MessageTx, p *store.SendMessageParams) (*store.MessageSent, error) {
	run, err := tx.Run(p.RunID)
	if err != nil {
		return nil, err
	}
	digest := p.RequestDigest
	if digest == nil {
		digest = []byte{}
	}
	if p.IdempotencyKey != "" {
		k, err := tx.MessageKey(run.ID, p.IdempotencyKey)
		if err != nil {
			return nil, err
		}
		if k != nil && k.ExpiresAt.After(p.Now) {
			if !bytes.Equal(k.Digest, digest) {
				return nil, fmt.Errorf("%w: key %q was a message with another topic or payload", store.ErrKeyReused, p.IdempotencyKey)
			}
			var res store.MessageSent
			if err := json.Unmarshal(k.Result, &res); err != nil {
				return nil, fmt.Errorf("run %s key %q: stored result: %w", run.ID, p.IdempotencyKey, err)
			}
			res.Duplicate = true
			return &res, nil
		}
	}
	if run.Status.Terminal() {
		return nil, fmt.Errorf("message to run %s: it ended (%s): %w", run.ID, run.Status, store.ErrGone)
	}
	if err := checkInbox(tx, run.ID, len(p.Payload)); err != nil {
		return nil, fmt.Errorf("message to run %s: %w", run.ID, err)
	}

	wake := false
	if run.Owner == "" {
		a, err := tx.Awaits(run.ID)
		if err != nil {
			return nil, err
		}
		wake = a.Wakes(p.Topic)
	}

	// Nothing can refuse the message from here on.
	seq := run.LastEvent + 1
	if err := tx.AddEvents(run, []store.Event{{Seq: seq, Type: store.EventMessageReceived, Name: p.Topic, Data: p.Payload, At: p.Now}}); err != nil {
		return nil, err
	}
	run.LastEvent = seq
	if err := tx.AddInbox(run.ID, 1, int64(len(p.Payload))); err != nil {
		return nil, err
	}
	// A parked run waiting for this topic is claimable at once; one
	// that waits for another, or for a timer, takes it at its next look
	// (its replay is not the sender's to cause). A leased one's worker
	// reads its log.
	if err := tx.SaveRun(run, &RunChange{Wake: wake, Now: p.Now}); err != nil {
		return nil, err
	}
	res := &store.MessageSent{RunID: run.ID, Topic: p.Topic, Seq: seq}
	if p.IdempotencyKey != "" {
		b, _ := json.Marshal(res)
		if err := tx.SaveMessageKey(run.ID, p.IdempotencyKey, &Key{Digest: digest, Result: b, ExpiresAt: p.Now.Add(p.KeyTTL)}); err != nil {
			return nil, err
		}
	}
	return res, nil
}

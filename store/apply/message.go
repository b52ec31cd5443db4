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

	// Nothing can refuse the message from here on.
	seq := run.LastEvent + 1
	if err := tx.AddEvents(run, []store.Event{{Seq: seq, Type: store.EventMessageReceived, Name: p.Topic, Data: p.Payload, At: p.Now}}); err != nil {
		return nil, err
	}
	run.LastEvent = seq
	// A parked run is claimable at once: it may be waiting for this (if
	// not, it parks again); a leased one's worker reads its log.
	if err := tx.SaveRun(run, &RunChange{Wake: run.Owner == "", Now: p.Now}); err != nil {
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

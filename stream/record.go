package stream

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// Kind is the kind of a record.
type Kind uint8

// The record kinds of semantics.md.
const (
	KindData   Kind = 1 // one chunk
	KindAbort  Kind = 2 // voids a writer's live records with seq >= FromSeq
	KindCommit Kind = 3 // commits a writer's live records with seq < Count
	KindClose  Kind = 4 // the stream ends
	// KindReopen follows a close: the stream goes on (a resumed run's
	// streams, store.Forks.ResumeRun). It voids nothing and commits
	// nothing.
	KindReopen Kind = 5
)

// String returns the kind's lower-case name.
func (k Kind) String() string {
	switch k {
	case KindData:
		return "data"
	case KindAbort:
		return "abort"
	case KindCommit:
		return "commit"
	case KindClose:
		return "close"
	case KindReopen:
		return "reopen"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// ParseKind is the inverse of Kind.String.
func ParseKind(s string) (Kind, bool) {
	for k := KindData; k <= KindReopen; k++ {
		if k.String() == s {
			return k, true
		}
	}
	return 0, false
}

// DigestSize is the size of a chunk digest in bytes.
const DigestSize = 16

// Digest identifies a chunk's bytes: the first 128 bits of their SHA-256.
type Digest [DigestSize]byte

// Sum returns the digest of b.
func Sum(b []byte) Digest {
	s := sha256.Sum256(b)
	var d Digest
	copy(d[:], s[:DigestSize])
	return d
}

// String returns the digest in hex.
func (d Digest) String() string { return hex.EncodeToString(d[:]) }

// Record is one entry of a stream's log.
//
// Seq is overloaded by kind, as the log format is: for data it is the chunk's
// seq, for an abort the first voided seq (fromSeq), for a commit the number of
// committed chunks (count). Use FromSeq and Count to read it by name.
type Record struct {
	Offset  int64
	Kind    Kind
	Writer  string // empty for an anonymous append and for close
	Attempt int64  // 0: committed at append
	Seq     int64
	Digest  Digest // data only
	Data    []byte // data only
}

// FromSeq is the first seq an abort record voids.
func (r *Record) FromSeq() int64 { return r.Seq }

// Count is the number of chunks a commit record commits.
func (r *Record) Count() int64 { return r.Seq }

// Autocommit reports whether a data record was committed when it was
// appended (attempt 0: anonymous, external producer, workflow code).
func (r *Record) Autocommit() bool { return r.Kind == KindData && r.Attempt == 0 }

// String is for tests and logs.
func (r Record) String() string {
	switch r.Kind {
	case KindData:
		return fmt.Sprintf("%d:data{%s a%d s%d %q}", r.Offset, r.Writer, r.Attempt, r.Seq, r.Data)
	case KindAbort:
		return fmt.Sprintf("%d:abort{%s a%d from %d}", r.Offset, r.Writer, r.Attempt, r.Seq)
	case KindCommit:
		return fmt.Sprintf("%d:commit{%s a%d count %d}", r.Offset, r.Writer, r.Attempt, r.Seq)
	}
	return fmt.Sprintf("%d:%s", r.Offset, r.Kind)
}

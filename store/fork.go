package store

import (
	"fmt"

	"github.com/weirhq/weir/stream"
)

// SubOffset finds the anchor of a fork's sub-offset in the source's data
// records from the fork offset on, for every backend: in bytes mode the first
// data record (the fork keeps its first N bytes), in records mode the N-th
// data record (the fork's copy ends after it).
type SubOffset struct {
	N       int64 // the sub-offset, >= 1
	Records bool  // count records (JSON streams), not bytes
	From    int64 // the fork offset
	seen    int64
}

// Push looks at the next decoded records of the source, in offset order.
// found reports the anchor rec and, in records mode, end, the offset after
// it. A bytes-mode anchor shorter than N is ErrInvalid.
func (s *SubOffset) Push(recs []stream.Record) (rec *stream.Record, end int64, found bool, err error) {
	for i := range recs {
		r := &recs[i]
		if r.Kind != stream.KindData {
			continue
		}
		if !s.Records {
			if int64(len(r.Data)) < s.N {
				return nil, 0, false, fmt.Errorf("%w: fork sub-offset %d is past the %d bytes of the record at offset %d", ErrInvalid, s.N, len(r.Data), r.Offset)
			}
			return r, 0, true, nil
		}
		if s.seen++; s.seen == s.N {
			return r, r.Offset + 1, true, nil
		}
	}
	return nil, 0, false, nil
}

// Missing is the error when the source's records ran out before the anchor.
func (s *SubOffset) Missing() error {
	if s.Records {
		return fmt.Errorf("%w: fork sub-offset %d is past the %d records after offset %d", ErrInvalid, s.N, s.seen, s.From)
	}
	return fmt.Errorf("%w: fork sub-offset %d: no data after offset %d", ErrInvalid, s.N, s.From)
}

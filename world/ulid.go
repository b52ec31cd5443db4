package world

import (
	"crypto/rand"
	"encoding/binary"
	"strings"
	"sync"
	"time"
)

// crockford is the ULID alphabet.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// ULIDs mints monotonic ULIDs: within one millisecond each is the previous
// plus one, so ids a process mints sort in the order it minted them, as
// the runtime's own ids do. The zero value is ready to use and safe for
// concurrent use.
type ULIDs struct {
	mu   sync.Mutex
	ms   uint64
	hi   uint16 // the 80-bit random part: hi (16 bits) and lo (64 bits)
	lo   uint64
	Time func() time.Time // nil: time.Now
}

// New returns prefix + "_" + a new ULID.
func (u *ULIDs) New(prefix string) string {
	u.mu.Lock()
	now := time.Now
	if u.Time != nil {
		now = u.Time
	}
	ms := uint64(now().UnixMilli())
	if ms > u.ms {
		var b [10]byte
		_, _ = rand.Read(b[:])
		u.ms, u.hi, u.lo = ms, binary.BigEndian.Uint16(b[:2]), binary.BigEndian.Uint64(b[2:])
		u.lo &^= 1 << 63 // room to count up within the millisecond
	} else {
		u.lo++
		if u.lo == 0 {
			u.hi++
		}
	}
	ms, hi, lo := u.ms, u.hi, u.lo
	u.mu.Unlock()
	return prefix + "_" + encodeULID(ms, hi, lo)
}

func encodeULID(ms uint64, hi uint16, lo uint64) string {
	var out [26]byte
	// 48 bits of time: 10 characters of 5 bits (the first holds 3).
	for i := 9; i >= 0; i-- {
		out[i] = crockford[ms&31]
		ms >>= 5
	}
	// 80 bits of randomness: 16 characters.
	for i := 25; i >= 10; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | uint64(hi&31)<<59
		hi >>= 5
	}
	return string(out[:])
}

// ULIDTime returns the time a prefixed ULID ("wrun_01…") encodes, and
// whether id is one.
func ULIDTime(id string) (time.Time, bool) {
	if i := strings.LastIndexByte(id, '_'); i >= 0 {
		id = id[i+1:]
	}
	if len(id) != 26 {
		return time.Time{}, false
	}
	var ms uint64
	for i := range 10 {
		c := strings.IndexByte(crockford, upper(id[i]))
		if c < 0 || i == 0 && c > 7 {
			return time.Time{}, false
		}
		ms = ms<<5 | uint64(c)
	}
	for i := 10; i < 26; i++ {
		if strings.IndexByte(crockford, upper(id[i])) < 0 {
			return time.Time{}, false
		}
	}
	return time.UnixMilli(int64(ms)).UTC(), true
}

func upper(c byte) byte {
	if c >= 'a' && c <= 'z' {
		return c - 'a' + 'A'
	}
	return c
}

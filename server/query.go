package server

import (
	"fmt"
	"math"

	"github.com/weirhq/weir/api"
)

// maxQueryDigits bounds the digits of an integer in a request's query (a
// page's limit, an event's seq, a World stream's index, either half of a
// stream offset): 19 hold every int64. strconv.Atoi and ParseInt take a
// '+' in front and any number of zeros, so "limit=+5" and "limit=000…05"
// were pages of five (red team, round fourteen): one spelling a number.
const maxQueryDigits = 19

// maxWorldPage is the largest limit of a World list, the queue's and a
// stream's chunks' (store.WorldListParams takes no more).
const maxWorldPage = 1000

// parseDigits reads s as a whole number written in ASCII digits alone,
// after one '-' if signed: no '+', no spaces, no underscores, at most
// maxQueryDigits digits, within int64. It reports false for anything else.
func parseDigits(s string, signed bool) (int64, bool) {
	neg := signed && len(s) > 1 && s[0] == '-'
	if neg {
		s = s[1:]
	}
	if s == "" || len(s) > maxQueryDigits {
		return 0, false
	}
	var n uint64 // 19 digits are under 10^19 < 2^64: no overflow here
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	switch {
	case neg && n <= 1<<63:
		return int64(-n), true // -2^63 included
	case !neg && n <= math.MaxInt64:
		return int64(n), true
	}
	return 0, false
}

// queryInt reads integer query parameter name's value v, from lo to hi,
// as parseDigits does (a '-' only where lo is negative): the one parser of
// every route's integer parameters. Anything else is api.ErrBadRequest
// (400 bad_request), the value quoted clipped.
func queryInt(name, v string, lo, hi int64) (int64, error) {
	n, ok := parseDigits(v, lo < 0)
	if !ok || n < lo || n > hi {
		return 0, fmt.Errorf("%w: %s=%q: want %s, in digits alone", api.ErrBadRequest, name, clip(v), span(lo, hi))
	}
	return n, nil
}

// queryCount is queryInt for a count that a route keeps as an int (a
// page's limit), from lo to hi.
func queryCount(name, v string, lo, hi int) (int, error) {
	n, err := queryInt(name, v, int64(lo), int64(hi))
	return int(n), err
}

// span says what queryInt takes, for its error.
func span(lo, hi int64) string {
	switch {
	case lo == math.MinInt64 && hi == math.MaxInt64:
		return "a whole number, a '-' before a negative one"
	case hi == math.MaxInt64:
		return fmt.Sprintf("a whole number, %d or more", lo)
	}
	return fmt.Sprintf("a whole number from %d to %d", lo, hi)
}

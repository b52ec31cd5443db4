package sqlrow

import (
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// Page builds a read page from stored batches by the page rule
// (store.ReadParams.Fits). It is what bounds a reader's memory: a batch is
// one append (up to store.MaxAppendBytes), a page about
// ReadParams.MaxBytes, and a page holds no reference to a batch. The data
// of the records taken together (a batch's, or a window's of one) are copied
// into one allocation of exactly their size, so a page's records share
// backing arrays that sum to the page's data bytes; what they were copied
// from (the driver's memory, valid until its next row) may be reused at
// once.
type Page struct {
	p       *store.ReadParams // with its defaults
	head    int64             // records at or past it are left out
	Records []stream.Record
	Bytes   int   // data bytes of Records
	Done    bool  // a record did not fit, or reached head: take no more
	Last    int64 // the last offset of the last batch Add took whole
	// Piece is set when the page is one piece of a record
	// (store.ReadParams.Pieces).
	Piece   *store.Piece
	scratch []stream.Record
}

// NewPage starts a page of p (which must have its defaults) that ends before
// head, the stream's next offset when read.
func NewPage(p *store.ReadParams, head int64) *Page {
	return &Page{p: p, head: head, Last: p.From - 1}
}

// noData is the data of an empty data record: not nil (as a decoded one),
// and pointing at no batch.
var noData = []byte{}

// Fits reports whether the record at offset off, of size data bytes, fits
// after the page's records and n more of bytes data bytes not yet taken.
func (pg *Page) Fits(off int64, n, bytes, size int) bool {
	return off < pg.head && pg.p.FitsSize(len(pg.Records)+n, pg.Bytes+bytes, size)
}

// Add adds the records of a whole batch whose first record has offset first,
// from the page's From on, while they fit; it sets Done once one does not.
// data is not retained.
func (pg *Page) Add(data []byte, first int64) error {
	if pg.Done {
		return nil
	}
	var err error
	pg.scratch, err = stream.DecodeBatch(pg.scratch[:0], data, first, pg.p.From)
	if err != nil {
		return err
	}
	n, size := 0, 0
	for i := range pg.scratch {
		r := &pg.scratch[i]
		if !pg.Fits(r.Offset, n, size, len(r.Data)) {
			pg.Done = true
			break
		}
		size += len(r.Data)
		n++
	}
	if n == len(pg.scratch) && n > 0 {
		pg.Last = pg.scratch[n-1].Offset
	}
	pg.Take(pg.scratch[:n])
	clear(pg.scratch[:cap(pg.scratch)]) // no reference to data past this call
	return nil
}

// Take appends recs, which fit, copying their data into one allocation of
// exactly its size: recs may alias memory the page must not keep.
func (pg *Page) Take(recs []stream.Record) {
	size := 0
	for i := range recs {
		size += len(recs[i].Data)
	}
	var buf []byte
	if size > 0 {
		buf = make([]byte, size)
	}
	off := 0
	for _, r := range recs {
		switch {
		case len(r.Data) > 0:
			k := copy(buf[off:], r.Data)
			r.Data = buf[off : off+k : off+k]
			off += k
		case r.Data != nil:
			r.Data = noData
		}
		pg.Records = append(pg.Records, r)
	}
	pg.Bytes += size
}

// TakeOwned appends r, which fits and whose data the page may keep (an
// allocation of exactly its size).
func (pg *Page) TakeOwned(r stream.Record) {
	pg.Records = append(pg.Records, r)
	pg.Bytes += len(r.Data)
}

// Params are the page's read.
func (pg *Page) Params() *store.ReadParams { return pg.p }

// Head is the stream's next offset the page ends before.
func (pg *Page) Head() int64 { return pg.head }

// Full reports whether no record can follow: Done, or Limit records.
func (pg *Page) Full() bool { return pg.Done || len(pg.Records) >= pg.p.Limit }

package query

import "time"

// Scope is whose data a read may see: one merchant, and for a worker key
// only what is assigned to its staff member.
type Scope struct {
	MerchantID string
	StaffID    string // non-empty for worker keys
}

// MaxDepth bounds what a list costs however large the merchant: numbered
// pages reach at most this many rows deep, and a list counts its matching
// rows up to this many. Past it, clients follow List.Next (keyset pages,
// each as cheap as the first), and List.TotalExact is false.
const MaxDepth = 10_000

// Page is one page of a list: Size rows, either page Number (1-based, at
// most MaxDepth rows deep) or, when After is set, the rows that follow
// After in the list's order, however deep.
type Page struct {
	Number int
	Size   int
	After  *Cursor
}

// Offset is the number of rows before a numbered page.
func (p Page) Offset() int { return (p.Number - 1) * p.Size }

// Cursor is a place in a list: the sort key of the row after which the next
// page starts. Order names the list's sort column; a cursor is valid only
// for a list sorted by that column. List, set by the port, names the list,
// filters and merchant the cursor was answered for, so that it is refused
// on any other: read there, its sort key would be a place in rows it was
// never a place of, and the page would leave out every row before it.
type Cursor struct {
	Order string
	At    time.Time
	ID    string
	List  string
}

// List is one page of results: the rows, how many match in all (counted up
// to MaxDepth: TotalExact is false when more match), and where the next
// page starts (nil on the last page).
type List[T any] struct {
	Items      []T
	Total      int
	TotalExact bool
	Page       int // 0 when the page followed a cursor
	PageSize   int
	Next       *Cursor
}

// Map returns l with each item mapped by of.
func Map[V, T any](l List[V], of func(V) T) List[T] {
	out := List[T]{Items: make([]T, len(l.Items)), Total: l.Total, TotalExact: l.TotalExact, Page: l.Page, PageSize: l.PageSize, Next: l.Next}
	for i, v := range l.Items {
		out.Items[i] = of(v)
	}
	return out
}

package query

// Scope is whose data a read may see: one merchant, and for a worker key
// only what is assigned to its staff member.
type Scope struct {
	MerchantID string
	StaffID    string // non-empty for worker keys
}

// Page is a 1-based page of a list.
type Page struct {
	Number int
	Size   int
}

// Offset is the number of rows before the page.
func (p Page) Offset() int { return (p.Number - 1) * p.Size }

// List is one page of results and the total number of matching rows.
type List[T any] struct {
	Items    []T
	Total    int
	Page     int
	PageSize int
}

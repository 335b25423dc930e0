// Package reference is the merchant's reference data: customers, staff
// members and catalog items. They are plain records, not event-sourced,
// that the aggregates point at. Each validates itself in Normalize.
package reference

import (
	"strings"
	"time"

	"hearth/domain/apperr"
	"hearth/domain/text"
)

// Customer is one customer of a merchant.
type Customer struct {
	ID         string
	MerchantID string
	Name       string
	Phone      string
	Email      string
	Address    string
	Notes      string
	CreatedAt  time.Time
	UpdatedAt  time.Time
	// ErasedAt is when the customer was erased (GDPR article 17): the
	// record keeps its id, and no personal data.
	ErasedAt *time.Time
}

// StaffMember is someone a merchant dispatches.
type StaffMember struct {
	ID         string
	MerchantID string
	Name       string
	Phone      string
	Active     bool
	CreatedAt  time.Time
	UpdatedAt  time.Time
	// ErasedAt is when the staff member was erased.
	ErasedAt *time.Time
}

// CatalogItem is a service a merchant sells.
type CatalogItem struct {
	ID             string
	MerchantID     string
	Name           string
	BasePriceCents int64
	Active         bool
	CreatedAt      time.Time
	UpdatedAt      time.Time
}

// Record is a reference type: a pointer to it validates and normalises
// itself, and says where it lives.
type Record[T any] interface {
	*T
	Normalize() error
	Key() *Key
	// Erased reports whether the record's person was erased: it then
	// takes no change.
	Erased() bool
}

// Key is what every record has: its id, its merchant and its times.
type Key struct {
	ID, MerchantID       *string
	CreatedAt, UpdatedAt *time.Time
}

func (c *Customer) Key() *Key {
	return &Key{ID: &c.ID, MerchantID: &c.MerchantID, CreatedAt: &c.CreatedAt, UpdatedAt: &c.UpdatedAt}
}

func (s *StaffMember) Key() *Key {
	return &Key{ID: &s.ID, MerchantID: &s.MerchantID, CreatedAt: &s.CreatedAt, UpdatedAt: &s.UpdatedAt}
}

func (c *Customer) Erased() bool    { return c.ErasedAt != nil }
func (s *StaffMember) Erased() bool { return s.ErasedAt != nil }
func (c *CatalogItem) Erased() bool { return false }

func (c *CatalogItem) Key() *Key {
	return &Key{ID: &c.ID, MerchantID: &c.MerchantID, CreatedAt: &c.CreatedAt, UpdatedAt: &c.UpdatedAt}
}

type checker struct{ apperr.Fields }

// text trims a field and checks it: required, at most max characters, and
// text (package text; multiline allows tab and line breaks).
func (c *checker) text(field string, v *string, max int, required, multiline bool) {
	*v = strings.TrimSpace(*v)
	switch n := len([]rune(*v)); {
	case required && n == 0:
		c.Add(field, "is required")
	case n > max:
		c.Add(field, "must be at most %d characters, got %d", max, n)
	case multiline:
		text.Lines(&c.Fields, field, *v)
	default:
		text.Line(&c.Fields, field, *v)
	}
}

// Normalize trims the fields and checks them.
func (c *Customer) Normalize() error {
	var ch checker
	ch.text("name", &c.Name, 200, true, false)
	ch.text("phone", &c.Phone, 50, false, false)
	ch.text("email", &c.Email, 254, false, false)
	ch.text("address", &c.Address, 500, false, true)
	ch.text("notes", &c.Notes, 2000, false, true)
	if c.Email != "" && !strings.Contains(c.Email, "@") {
		ch.Add("email", "must be an email address")
	}
	return ch.Err()
}

// Normalize trims the fields and checks them.
func (s *StaffMember) Normalize() error {
	var ch checker
	ch.text("name", &s.Name, 200, true, false)
	ch.text("phone", &s.Phone, 50, false, false)
	return ch.Err()
}

// Normalize trims the fields and checks them.
func (c *CatalogItem) Normalize() error {
	var ch checker
	ch.text("name", &c.Name, 200, true, false)
	if c.BasePriceCents < 0 {
		ch.Add("base_price_cents", "must be >= 0")
	}
	return ch.Err()
}

// Package customer is the customer reference data: a plain record, not
// event-sourced, that orders and service requests point at.
package customer

import (
	"strings"
	"time"

	"hearth/app/apperr"
)

// Customer is one customer of a merchant.
type Customer struct {
	ID         string    `json:"id"`
	MerchantID string    `json:"-"`
	Name       string    `json:"name"`
	Phone      string    `json:"phone"`
	Email      string    `json:"email"`
	Address    string    `json:"address"`
	Notes      string    `json:"notes"`
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
}

// Normalize trims the fields and checks them.
func (c *Customer) Normalize() error {
	for _, f := range []*string{&c.Name, &c.Phone, &c.Email, &c.Address} {
		*f = strings.TrimSpace(*f)
	}
	var errs apperr.Fields
	if c.Name == "" {
		errs.Add("name", "is required")
	}
	check := func(field, v string, max int) {
		if n := len([]rune(v)); n > max {
			errs.Add(field, "must be at most %d characters, got %d", max, n)
		}
	}
	check("name", c.Name, 200)
	check("phone", c.Phone, 50)
	check("email", c.Email, 254)
	check("address", c.Address, 500)
	check("notes", c.Notes, 2000)
	if c.Email != "" && !strings.Contains(c.Email, "@") {
		errs.Add("email", "must be an email address")
	}
	return errs.Err()
}

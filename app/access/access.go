// Package access describes who is calling (the merchant and role of an API
// key) and holds the admin's use cases of keys (Keys: create, list, revoke,
// rotate), which declare what they need of the key store (KeyStore).
package access

import "time"

// Role is what a key may do.
type Role string

const (
	// Operator has full access to the merchant's CRM data.
	Operator Role = "operator"
	// Worker is bound to one staff member and sees only its schedules and orders.
	Worker Role = "worker"
	// Admin runs platform operations under /admin and sees no CRM data.
	Admin Role = "admin"
)

// ParseRole checks a role name.
func ParseRole(s string) (Role, bool) {
	switch r := Role(s); r {
	case Operator, Worker, Admin:
		return r, true
	}
	return "", false
}

// Principal is an authenticated API key.
type Principal struct {
	KeyID string
	// MerchantID is the key's merchant; "" for an admin key, which is a
	// platform principal and belongs to no merchant.
	MerchantID string
	Role       Role
	StaffID    string // set for workers
	// ExpiresAt is when the key stops working; zero for a key that does
	// not expire.
	ExpiresAt time.Time
}

// Subject names the principal in events and change-log rows.
func (p Principal) Subject() string { return "key:" + p.KeyID }

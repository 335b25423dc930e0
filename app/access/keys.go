package access

import (
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"hearth/domain/apperr"
	"hearth/domain/event"
	"hearth/domain/uuid"
)

// Key is an API key as an admin sees it: never its secret or its hash.
// MerchantID and MerchantName are empty for admin keys (platform keys),
// StaffID for all but worker keys.
type Key struct {
	ID           string
	MerchantID   string
	MerchantName string
	Role         Role
	StaffID      string
	Name         string
	CreatedAt    time.Time
	LastUsedAt   *time.Time
	ExpiresAt    *time.Time
	RevokedAt    *time.Time
}

// NewKey is a key just created, with its secret: shown once, never stored.
type NewKey struct {
	Key
	Secret string
}

// Rotation is what rotating a key did: a new key with the old one's
// merchant, role, staff member, name and expiry, and the old key, now
// revoked or expiring at the end of the grace period.
type Rotation struct {
	NewKey
	Previous Key
}

// MaxGrace bounds how long a rotated key keeps working.
const MaxGrace = 30 * 24 * time.Hour

// maxText bounds a key's name and a merchant's name.
const maxText = 200

// KeySpec is a key to create. An operator or worker key names its merchant
// by MerchantID (an existing merchant) or MerchantName (created when
// missing), not both; an admin key names none.
type KeySpec struct {
	MerchantID   string
	MerchantName string
	Role         Role
	StaffID      string // worker keys only, and required for them
	Name         string
	ExpiresAt    *time.Time
}

// Check validates the spec and returns it in canonical form (trimmed
// names, lower-case ids, UTC microsecond expiry). Each error names its
// field: merchant_id, merchant, role, staff_id, name, expires_at.
func (s KeySpec) Check(now time.Time) (KeySpec, error) {
	var f apperr.Fields
	role, ok := ParseRole(string(s.Role))
	if !ok {
		f.Add("role", "must be operator, worker or admin, got %q", s.Role)
	}
	s.Role = role
	s.MerchantName = strings.TrimSpace(s.MerchantName)
	s.Name = strings.TrimSpace(s.Name)
	hasMerchant := s.MerchantID != "" || s.MerchantName != ""
	switch {
	case !ok:
	case role == Admin && hasMerchant:
		f.Add(cmpField(s.MerchantID != "", "merchant_id", "merchant"), "an admin key belongs to no merchant")
	case role != Admin && !hasMerchant:
		f.Add("merchant_id", "an %s key needs a merchant", role)
	case s.MerchantID != "" && s.MerchantName != "":
		f.Add("merchant", "give merchant_id or merchant (a name), not both")
	}
	s.MerchantID = canonicalID(&f, "merchant_id", s.MerchantID)
	if msg := checkText(s.MerchantName); msg != "" {
		f.Add("merchant", "%s", msg)
	}
	switch {
	case ok && role == Worker && s.StaffID == "":
		f.Add("staff_id", "is required for a worker key")
	case ok && role != Worker && s.StaffID != "":
		f.Add("staff_id", "only a worker key has a staff member")
	default:
		s.StaffID = canonicalID(&f, "staff_id", s.StaffID)
	}
	if msg := checkText(s.Name); msg != "" {
		f.Add("name", "%s", msg)
	}
	if s.ExpiresAt != nil {
		at := event.Instant(*s.ExpiresAt)
		if !at.After(now) {
			f.Add("expires_at", "must be in the future, got %s", at.Format(time.RFC3339))
		}
		s.ExpiresAt = &at
	}
	return s, f.Err()
}

// CheckGrace validates a rotation's grace period: 0 revokes the old key at
// once; otherwise it keeps working for that long, at least a microsecond
// and at most MaxGrace.
func CheckGrace(d time.Duration) error {
	switch {
	case d < 0:
		return apperr.Invalid("grace", "must not be negative, got %s", d)
	case d > 0 && d < time.Microsecond:
		// Postgres keeps microseconds: a shorter grace would be stored as
		// none, unlike what was asked for and what the audit entry says.
		return apperr.Invalid("grace", "must be 0 or at least 1µs, got %s", d)
	case d > MaxGrace:
		return apperr.Invalid("grace", "must be at most %s, got %s", MaxGrace, d)
	}
	return nil
}

// canonicalID returns an optional id in canonical form, or notes that it
// is not a UUID.
func canonicalID(f *apperr.Fields, field, id string) string {
	if id == "" {
		return ""
	}
	canonical, ok := uuid.Parse(id)
	if !ok {
		f.Add(field, "must be a UUID, got %q", id)
	}
	return canonical
}

func checkText(s string) string {
	switch {
	case len(s) > maxText:
		return "must be at most 200 bytes"
	case !utf8.ValidString(s):
		return "must be valid UTF-8"
	case strings.ContainsFunc(s, unicode.IsControl):
		return "must not contain control characters"
	}
	return ""
}

func cmpField(first bool, a, b string) string {
	if first {
		return a
	}
	return b
}
